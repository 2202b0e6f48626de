#include "kiln/cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>

#include "kiln/core/error.h"

#ifndef KILN_CUDA_LIBRARY_DIR
#define KILN_CUDA_LIBRARY_DIR "/usr/local/cuda/lib64"
#endif
#define KILN_CUBLAS_STRING(x) #x
#define KILN_CUBLAS_NAME(x) KILN_CUBLAS_STRING(x)  // after the macros: "cublasCreate_v2"

namespace kiln::cuda {

namespace {

// libNAME.so.MAJOR from the loader's path (LD_LIBRARY_PATH, the cache), else
// from the toolkit the build found.
void* open_library(const std::string& name) {
  const std::string file = "lib" + name + ".so." + std::to_string(CUBLAS_VER_MAJOR);
  for (const std::string& path : {file, std::string(KILN_CUDA_LIBRARY_DIR) + "/" + file})
    if (void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) return lib;
  KILN_FAIL(file, " (CUDA's ", name, ", which runs Kiln's matrix products on the GPU) could not be loaded: ", dlerror(),
            ". Install the CUDA toolkit's ", name, " ", CUBLAS_VER_MAJOR, " or add its directory to LD_LIBRARY_PATH");
}

}  // namespace

const CublasApi& cublas() {
  static const CublasApi api = [] {
    void* lt = open_library("cublasLt");  // first: cuBLAS itself needs it
    void* blas = open_library("cublas");
    CublasApi a;
#define KILN_CUBLAS_LOAD(name)                                                                         \
  a.name = reinterpret_cast<decltype(a.name)>(dlsym(lt, KILN_CUBLAS_NAME(name)));                      \
  if (!a.name) a.name = reinterpret_cast<decltype(a.name)>(dlsym(blas, KILN_CUBLAS_NAME(name)));       \
  KILN_CHECK(a.name, "the cuBLAS that was loaded lacks ", KILN_CUBLAS_NAME(name), "; install cuBLAS ", \
             CUBLAS_VER_MAJOR, " (the version Kiln was built with)");
    KILN_CUBLAS_FUNCTIONS(KILN_CUBLAS_LOAD)
#undef KILN_CUBLAS_LOAD
    return a;
  }();
  return api;
}

}  // namespace kiln::cuda
