// The x86 instruction sets Kiln's CPU code dispatches on, and the cap a user
// or the test suite puts on them, as oneDNN's ONEDNN_MAX_CPU_ISA and
// PyTorch's ATEN_CPU_CAPABILITY do. KILN_MAX_ISA=avx2 makes an AVX-512
// machine run every path an AVX2-only CPU runs: Kiln's own kernels (the
// AVX-512 loops, pooling and bf16 attention kernels), oneDNN (the variable
// sets ONEDNN_MAX_CPU_ISA, unless the user set it) and OpenBLAS (through
// OPENBLAS_CORETYPE). So the suite tests every path on whatever machine
// runs it, and a user can see what a path costs.
//
// The build's baseline is x86-64-v3 (AVX2 and FMA, KILN_ARCH_FLAGS): Kiln
// does not run below it.
#pragma once
#include <string>

namespace kiln::cpu {

// In order: each level includes the one before it.
enum class Isa : int {
  avx2 = 0,         // x86-64-v3: AVX2, FMA (Haswell, Zen 1-3, Alder Lake)
  avx512 = 1,       // x86-64-v4: AVX-512 F, BW, VL, DQ, CD (Skylake-SP)
  avx512_bf16 = 2,  // and AVX512-BF16 (Cooper Lake, Zen 4 and later)
  amx = 3,          // and AMX-BF16 (Sapphire Rapids and later)
};

// What this CPU has.
Isa detected_isa();
// What Kiln dispatches to: detected_isa(), lowered by KILN_MAX_ISA. A
// value that names no level, or one above the CPU's, is an error.
Isa max_isa();
inline bool isa_allows(Isa needed) { return int(max_isa()) >= int(needed); }
// Whether the CPU is AMD's: choices measured per vendor follow it (oneDNN's
// bf16 products, the few-rows kernels' software prefetch).
bool cpu_is_amd();

const char* isa_name(Isa isa);  // "avx2", "avx512", ...
// The KILN_MAX_ISA value in force ("" when unset).
std::string isa_cap_setting();
// The oneDNN and OpenBLAS settings that apply the same cap to those
// libraries: ONEDNN_MAX_CPU_ISA and OPENBLAS_CORETYPE values.
const char* onednn_isa_name(Isa isa);
const char* openblas_core_name(Isa isa);
// The instruction set oneDNN dispatches up to, as it reports it
// (ONEDNN_MAX_CPU_ISA's spelling), for kiln info.
std::string onednn_dispatch_isa();

}  // namespace kiln::cpu
