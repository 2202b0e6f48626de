// x86 intrinsics for Kiln's hand-written kernels. AVX2 and FMA are the
// build's baseline (KILN_ARCH_FLAGS); an AVX-512 kernel (attention_bf16.cpp,
// maxpool2d.cpp) is compiled for its instructions with a target attribute
// and chosen at run time, so one binary runs everywhere.
#pragma once
#include <cstdint>

namespace kiln::cpu {
// How far ahead the decoding kernels ask for a weight row's bytes. A
// decoding step streams each weight once, and one core alone does not keep
// enough reads in flight for this VM's memory: asking 4 KB ahead took one
// thread's f32 decoding from 0.87x to 1.0x of oneDNN's SGEMM, and
// TinyLlama's Q4_K_M from 14.7 to 20-23 tokens/s at two threads (1 KB: 20.0, 8 KB: 21.2).
inline constexpr int64_t kWeightPrefetchBytes = 4096;
// Into L2 (prefetcht1), not L1: a line asked into L1 holds one of the core's
// few L1 fill buffers until memory answers, which bounds the reads in
// flight; the kernels' own loads then find the line in L2, a latency their
// out-of-order work covers. Past the caches (`kiln_quant_bench stream`, the
// two hints alternated in one process, 2 threads, Xeon with AMX), T1 over T0:
// Q4_K 1.10x, Q5_K 1.14x, Q6_K 1.25x, Q8_0 1.08x, Q4_0 1.0x; TinyLlama's
// decoding (kiln_hf_bench, 2 threads) Q4_K_M 1.12-1.18x, Q8_0 1.04x, BF16
// 1.05x, F32 0.98-1.05x (1 thread: Q4_K_M 1.13-1.16x).
inline constexpr int kWeightPrefetchLocality = 2;
// The 64-byte line kWeightPrefetchBytes past p.
inline void prefetch_ahead(const void* p) {
  __builtin_prefetch(static_cast<const char*>(p) + kWeightPrefetchBytes, 0, kWeightPrefetchLocality);
}
}  // namespace kiln::cpu
#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 warns inside its own AVX-512 headers (their _mm512_undefined_*
// placeholders) wherever these intrinsics inline: a false positive, silenced
// for those headers' lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define KILN_X86_INTRINSICS 1

namespace kiln::cpu {
// Eight bf16 values at p widened to f32 (bf16 is f32's upper half).
inline __m256 widen_bf16x8(const uint16_t* p) {
  const __m256i bits = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16));
}
}  // namespace kiln::cpu
#endif
