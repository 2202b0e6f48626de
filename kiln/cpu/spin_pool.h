// Decoding's parallel loops on threads that stay awake between them.
//
// A decoding step is some two hundred short parallel loops (a product of a
// few hundred rows takes 10-50 us) with host code between them. OpenMP's
// idle threads spin ~30 us (Kiln's GOMP_SPINCOUNT, kiln/cpu/runtime_defaults)
// and then sleep, and a sleeping thread takes 30-70 us to wake on a virtual
// machine: a step pays that many times. Spinning longer in OpenMP (its
// setting is process-wide, read once) made decoding 1.2-1.3x faster on an
// idle machine but 2.3x slower beside one busy core, because every OpenMP
// loop ends in a barrier that waits for every thread of the team, including
// one the kernel has descheduled.
//
// This pool's threads spin for 50 us after their last chunk, then sleep;
// and a loop waits only for the chunks some thread has taken: a worker that
// has not started by the time the caller has taken the last chunk is not
// waited for (it finds nothing left). Chunks are taken one at a time, so
// each is computed by exactly one thread, whichever. SmolLM-135M's shape,
// Q4_0, 2 threads, against OpenMP: 1.07x the decoding tokens/s idle, 1.57x
// beside one busy core (docs/PERFORMANCE.md).
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kiln/backend/backend.h"

namespace kiln::cpu {

// A loop's body, by reference to the caller's lambda: a std::function would
// copy a lambda of more than two captures to the heap, and a decoding step
// runs hundreds of loops. The lambda outlives the loop (the call is synchronous).
class ChunkFn {
 public:
  template <typename Body>
    requires(!std::is_same_v<Body, ChunkFn>)
  ChunkFn(const Body& body)  // NOLINT: made from the lambda at the call
      : body_(&body), call_([](const void* b, int64_t i) { (*static_cast<const Body*>(b))(i); }) {}
  void operator()(int64_t i) const { call_(body_, i); }

 private:
  const void* body_;
  void (*call_)(const void*, int64_t);
};

// Calls chunk(i) once for each i in [0, chunks), on up to `threads` threads
// (the caller among them). From inside another parallel loop, or while
// another thread is using the pool, the caller runs them all.
void spin_parallel_for(int64_t chunks, int threads, const ChunkFn& chunk);

// The weight rows [0, N) of a product in chunks over the threads (one thread
// when `work`, M x N x K, is tiny): rows(n0, n1) for each chunk, so each
// output is one thread's alone. Decoding's small products (a 192 x 576 key
// projection) take the threads too: run on one, they leave the others idle
// long enough to fall asleep, and the next product pays their wake-up
// (SmolLM-135M's shape, Q4_0, 2 threads: 1.2x the tokens/s of a 256K-unit
// threshold). Each chunk but the last is a multiple of `align` rows.
template <typename Rows>
void for_row_chunks(int64_t N, int64_t work, const Rows& rows, int64_t align = 1) {
  const int threads = work < (int64_t(1) << 15) ? 1 : get_num_threads();
  const int64_t even = std::max<int64_t>(8, (N + threads * 4 - 1) / (threads * 4));
  const int64_t chunk = (even + align - 1) / align * align;
  spin_parallel_for((N + chunk - 1) / chunk, threads, [&](int64_t i) { rows(i * chunk, std::min(N, (i + 1) * chunk)); });
}

}  // namespace kiln::cpu
