#include "kiln/backend/matmul_precision.h"

#include <atomic>

#include "kiln/core/error.h"

namespace kiln {

namespace {
std::atomic<Float32MatmulPrecision> g_precision{Float32MatmulPrecision::high};
}

Float32MatmulPrecision float32_matmul_precision() { return g_precision.load(std::memory_order_relaxed); }
void set_float32_matmul_precision(Float32MatmulPrecision precision) { g_precision = precision; }

Float32MatmulPrecision parse_float32_matmul_precision(const std::string& name) {
  if (name == "highest") return Float32MatmulPrecision::highest;
  if (name == "high") return Float32MatmulPrecision::high;
  KILN_FAIL("unknown f32 matmul precision '", name, "': use highest (full f32) or high (TF32 on the GPU)");
}

}  // namespace kiln
