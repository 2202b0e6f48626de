// cuBLAS is loaded at run time (kiln/cuda/cublas_api.h), so a missing or
// misspelt entry point would only show on a GPU: loading needs none, so
// every build with the CUDA backend checks it here.
#include <gtest/gtest.h>

#if KILN_WITH_CUDA
#include <string>

#include "kiln/cuda/cublas_api.h"

TEST(CublasApi, EveryEntryPointResolvesWithoutAGpu) {
  const kiln::cuda::CublasApi& api = kiln::cuda::cublas();
#define KILN_EXPECT_LOADED(name) EXPECT_NE(api.name, nullptr) << #name;
  KILN_CUBLAS_FUNCTIONS(KILN_EXPECT_LOADED)
#undef KILN_EXPECT_LOADED
  // The functions are the library's: a status's text needs no device.
  const std::string not_initialized = api.cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_NE(not_initialized.find("initialized"), std::string::npos) << not_initialized;
}
#endif
