// How the K-quant kernels (kquant_matmul.cpp, kquant_row_group.cpp) add a
// chunk's 16-bit pair sums, times their sub-block scales as 16-bit pairs, to
// int32 lanes: AVX2's vpmaddwd and an add, or AVX-512 VNNI's one vpdpwssd.
// The same integers either way.
#pragma once
#include "kiln/cpu/x86_intrinsics.h"

#ifdef KILN_X86_INTRINSICS
namespace kiln::cpu {

// Eight 32-bit values (each within int16) as 16-bit pairs (v | v << 16): what vpmaddwd multiplies both sums of a
// lane by, a sub-block's scale for the lane's two pair sums.
[[gnu::always_inline]] inline __m256i word_pairs(__m256i values) {
  return _mm256_blend_epi16(values, _mm256_slli_epi32(values, 16), 0xaa);
}

struct Avx2Lanes {
  [[gnu::always_inline]] static __m256i add_scaled(__m256i lanes, __m256i pairs, __m256i scales) {
    return _mm256_add_epi32(lanes, _mm256_madd_epi16(pairs, scales));
  }
};
struct Avx512Lanes {  // (inlined by its callers' flatten: always_inline would clash with their targets)
  [[gnu::target("avx512f,avx512vl,avx512bw,avx512vnni")]] static __m256i add_scaled(__m256i lanes, __m256i pairs,
                                                                                    __m256i scales) {
    return _mm256_dpwssd_epi32(lanes, pairs, scales);
  }
};

}  // namespace kiln::cpu
#endif
