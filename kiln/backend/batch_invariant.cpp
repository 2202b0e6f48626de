#include "kiln/backend/batch_invariant.h"

#include <atomic>

namespace kiln {

namespace {
std::atomic<bool> g_batch_invariant{false};
}

bool batch_invariant() { return g_batch_invariant.load(std::memory_order_relaxed); }
void set_batch_invariant(bool on) { g_batch_invariant = on; }

}  // namespace kiln
