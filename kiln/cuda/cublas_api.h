// cuBLAS and cuBLASLt, loaded the first time a GPU needs them rather than
// linked: their static initialisers cost every process that links them
// ~0.17 s of CPU at start (measured on the 2-core Zen 3: an empty test
// binary 0.37 s -> 0.04 s), a CPU-only run and `kiln --help` included.
// The calls keep their own names: cublas().cublasLtMatmul(...).
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

namespace kiln::cuda {

// Every entry point Kiln calls; cublas_v2.h's macros (cublasCreate ->
// cublasCreate_v2) name the symbols.
// clang-format off
#define KILN_CUBLAS_FUNCTIONS(X)                                                                 \
  X(cublasLtCreate) X(cublasLtMatmul) X(cublasLtMatmulAlgoGetHeuristic)                          \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)     \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                           \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatrixLayoutCreate)                          \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)                             \
  X(cublasCreate) X(cublasSetStream) X(cublasDgemmStridedBatched) X(cublasGetStatusString)
// clang-format on

struct CublasApi {
#define KILN_CUBLAS_MEMBER(name) decltype(&::name) name = nullptr;
  KILN_CUBLAS_FUNCTIONS(KILN_CUBLAS_MEMBER)
#undef KILN_CUBLAS_MEMBER
};

// Loads the libraries once (the toolkit's they were built against); throws
// kiln::Error naming what is missing and how to get it.
const CublasApi& cublas();

}  // namespace kiln::cuda
