// Settings the libraries Kiln runs on read once, when they are loaded,
// before main() runs: the only way to change their defaults is to set the
// variables and re-execute the program (once; a user's own values win).
//
//  * OMP_WAIT_POLICY=PASSIVE. libgomp's default makes idle OpenMP threads
//    spin after each parallel region; on a busy or small machine (CI's 2
//    cores, a data-loading thread beside the workers) that steals the cores
//    the work needs: a training step ran 25x slower under load. Passive
//    waiting costs a few microseconds per region.
//  * GOMP_SPINCOUNT=2000 beside it (when neither is set): a brief spin,
//    tens of microseconds, before sleeping catches the next parallel region
//    of the same step. Measured on Zen 4 at 2 threads: the MLP and GPT steps
//    about 5% faster, and no loss beside a process that keeps one core busy;
//    20000 spins gained more on a quiet machine (MLP +15%) but made training
//    1.8x slower beside the busy process.
//  * OPENBLAS_CORETYPE. OpenBLAS picks its kernels from the CPU's model;
//    a model it does not know (a virtual machine's "Intel Xeon Processor",
//    a CPU newer than the library) falls back to Prescott's SSE3 kernels.
//    Measured on this project's AVX-512 machine: 33 GFLOP/s instead of 160
//    for a square fp32 GEMM on one core. When that happens, Kiln names the
//    kernel family the CPU's features support (SkylakeX for AVX-512,
//    Haswell for AVX2).
#pragma once

namespace kiln {

// Call first thing in main(): sets what is unset and re-executes the
// program with the same arguments, or returns if nothing needs changing.
void apply_runtime_defaults(char** argv);

// The OpenBLAS kernel family for this CPU when OpenBLAS fell back to a
// generic one, or nullptr when its own choice stands.
const char* openblas_core_override();

// Whether the CPU has bf16 instructions (AVX512-BF16 or AMX-BF16), which
// `--precision bf16` on the CPU asks for. KILN_CPU_BF16=0 or 1 overrides the
// answer (tests use it to see what a CPU without them does).
bool cpu_has_bf16_instructions();

}  // namespace kiln
