// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3"): a counter-based RNG. The i-th random number of a stream depends only on
// (seed, i), so the CPU and CUDA backends draw identical dropout masks and a
// resumed run continues the same stream from a saved offset.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln {

struct PhiloxOutput {
  uint32_t v[4];
};

KILN_HOST_DEVICE inline PhiloxOutput philox4x32_10(uint64_t seed, uint64_t counter) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = uint32_t(p1);
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = uint32_t(p0);
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) for element `index` of the stream (seed, offset): four
// elements share one Philox call.
KILN_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint64_t offset, uint64_t index) {
  uint64_t i = offset + index;
  PhiloxOutput r = philox4x32_10(seed, i >> 2);
  return float(r.v[i & 3] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace kiln
