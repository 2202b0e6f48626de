// The memory read bandwidth the decoding benches measure their reads against.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <vector>

// What this machine's memory gives a read at this thread count: a sum over
// 1 GiB of 64-bit words, far past the caches, best of 3, in GB/s (integer
// sums vectorise and carry no dependency that would bound them below
// memory). Each line is asked for 4 KB ahead, as the decoding kernels ask
// for their weights: this VM's hardware prefetcher alone gets 16 GB/s at
// two threads, where the kernels read more than that.
inline double read_bandwidth_gbps() {
  std::vector<uint64_t> big(size_t(1) << 27, 1);
  constexpr int64_t kLine = 8, kAhead = 512;  // words: 64 bytes, 4 KB
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    const auto t = std::chrono::steady_clock::now();
    uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (int64_t line = 0; line < int64_t(big.size()) / kLine; ++line) {
      const uint64_t* p = big.data() + line * kLine;
      __builtin_prefetch(p + kAhead);
      uint64_t s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < kLine; ++i) s += p[i];
      sum += s;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    if (sum != big.size()) std::abort();
    best = std::max(best, double(big.size() * sizeof(uint64_t)) / s / 1e9);
  }
  return best;
}
