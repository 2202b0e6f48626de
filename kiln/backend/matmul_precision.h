// How the GPU multiplies f32 matrices, as PyTorch's
// torch.set_float32_matmul_precision: "high" (Kiln's default) runs them on
// tensor cores in TF32 (inputs rounded to a 10-bit mantissa, ~1e-3 relative
// error, several times faster); "highest" keeps every product in full f32.
// The CPU always multiplies in f32. bf16, f16 and f64 products are unchanged.
#pragma once
#include <string>

namespace kiln {

enum class Float32MatmulPrecision { highest, high };

Float32MatmulPrecision float32_matmul_precision();
void set_float32_matmul_precision(Float32MatmulPrecision precision);
// "highest" or "high"; anything else is an error naming both.
Float32MatmulPrecision parse_float32_matmul_precision(const std::string& name);

}  // namespace kiln
