// x86 intrinsics for Kiln's hand-written AVX-512 kernels (attention_bf16.cpp,
// maxpool2d.cpp). Each kernel is compiled for its instructions with a
// target attribute and chosen at run time, so one binary runs everywhere.
#pragma once
#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 warns inside its own AVX-512 headers (their _mm512_undefined_*
// placeholders) wherever these intrinsics inline: a false positive, silenced
// for those headers' lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define KILN_X86_INTRINSICS 1
#endif
