// f32 GEMM throughput of one CPU library on the models' shapes, for
// bench/gemm_libraries.sh, which builds this file once per library (the
// libraries export clashing BLAS symbols, so each gets its own binary) and
// prints them side by side. Prints one JSON line per shape.
//   gemm_libraries_<lib> THREADS
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#if defined(USE_OPENBLAS)
#include <cblas.h>
#define LIBRARY "openblas"
#elif defined(USE_DNNL)
#include <dnnl.h>
#define LIBRARY "onednn"
#elif defined(USE_BLIS)
#include <blis.h>
#define LIBRARY "blis"
#elif defined(USE_XSMM)
#include <libxsmm.h>
#define LIBRARY "libxsmm"
#elif defined(USE_DNNL_BF16)
#include <dnnl.hpp>
#include <map>
#define LIBRARY "onednn-bf16"
#endif

namespace {

struct Shape {
  const char* label;
  int M, N, K;
  bool ta, tb;  // operand stored transposed, as the models' GEMMs see them
};

// As bench/kiln_bench.cpp's matmul table: MLP batch 128, GPT 16x128 tokens, C = 128.
const Shape kShapes[] = {
    {"mlp fc1 fwd", 128, 512, 784, false, true},      {"mlp fc1 dW", 512, 784, 128, true, false},
    {"mlp fc2 fwd", 128, 256, 512, false, true},      {"mlp fc1 dX", 128, 784, 512, false, false},
    {"gpt c_attn fwd", 2048, 384, 128, false, true},  {"gpt mlp c_fc fwd", 2048, 512, 128, false, true},
    {"gpt mlp c_proj fwd", 2048, 128, 512, false, true}, {"gpt lm_head fwd", 2048, 2048, 128, false, true},
    {"gpt lm_head dX", 2048, 128, 2048, false, false}, {"gpt lm_head dW", 2048, 128, 2048, true, false},
    {"square 1024", 1024, 1024, 1024, false, false},  {"square 2048", 2048, 2048, 2048, false, false},
};

#if defined(USE_DNNL_BF16)
// oneDNN's bf16 matmul (bf16 operands, f32 result, f32 accumulation): the
// operands are rounded to bf16 once per shape, outside the timing, as bf16
// weights and activations would already be.
struct Bf16Gemm {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul product;
  dnnl::memory a, b;
};

void gemm_bf16(const Shape& s, const float* a, const float* b, float* c) {
  using dnnl::memory;
  using tag = memory::format_tag;
  static std::map<const Shape*, Bf16Gemm> cache;
  auto [it, fresh] = cache.try_emplace(&s);
  Bf16Gemm& g = it->second;
  const memory::desc a_f32({s.M, s.K}, memory::data_type::f32, s.ta ? tag::ba : tag::ab);
  const memory::desc b_f32({s.K, s.N}, memory::data_type::f32, s.tb ? tag::ba : tag::ab);
  const memory::desc c_f32({s.M, s.N}, memory::data_type::f32, tag::ab);
  if (fresh) {
    const memory::desc a_bf16({s.M, s.K}, memory::data_type::bf16, s.ta ? tag::ba : tag::ab);
    const memory::desc b_bf16({s.K, s.N}, memory::data_type::bf16, s.tb ? tag::ba : tag::ab);
    g.product = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_bf16, b_bf16, c_f32), g.engine));
    g.a = memory(a_bf16, g.engine);
    g.b = memory(b_bf16, g.engine);
    memory a_src(a_f32, g.engine, const_cast<float*>(a)), b_src(b_f32, g.engine, const_cast<float*>(b));
    dnnl::reorder(a_src, g.a).execute(g.stream, a_src, g.a);
    dnnl::reorder(b_src, g.b).execute(g.stream, b_src, g.b);
  }
  memory c_dst(c_f32, g.engine, c);
  g.product.execute(g.stream, {{DNNL_ARG_SRC, g.a}, {DNNL_ARG_WEIGHTS, g.b}, {DNNL_ARG_DST, c_dst}});
  g.stream.wait();
}
#endif

// Row-major C = op(A) @ op(B) through the library under test.
void gemm(const Shape& s, const float* a, const float* b, float* c) {
  const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N, ldc = s.N;
#if defined(USE_OPENBLAS)
  cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.M, s.N, s.K, 1.0f,
              a, lda, b, ldb, 0.0f, c, ldc);
#elif defined(USE_DNNL)
  dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.M, s.N, s.K, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
#elif defined(USE_BLIS)
  float one = 1.0f, zero = 0.0f;
  // BLIS takes row and column strides, so row-major needs no transposition trick.
  bli_sgemm(s.ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s.tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s.M, s.N, s.K, &one,
            const_cast<float*>(a), lda, 1, const_cast<float*>(b), ldb, 1, &zero, c, ldc, 1);
#elif defined(USE_XSMM)
  // Column-major: C^T = op(B)^T op(A)^T.
  const char tb = s.tb ? 'T' : 'N', ta = s.ta ? 'T' : 'N';
  const libxsmm_blasint m = s.N, n = s.M, k = s.K, l_b = ldb, l_a = lda, l_c = ldc;
  const float one = 1.0f, zero = 0.0f;
  libxsmm_sgemm_omp(&tb, &ta, &m, &n, &k, &one, b, &l_b, a, &l_a, &zero, c, &l_c);
#elif defined(USE_DNNL_BF16)
  gemm_bf16(s, a, b, c);
#endif
}

double seconds_per_call(const std::function<void()>& fn) {
  fn();  // warm up (JIT, thread pools)
  using Clock = std::chrono::steady_clock;
  int reps = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  do {
    fn();
    ++reps;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (elapsed < 0.5);
  return elapsed / reps;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
#if defined(USE_BLIS)
  bli_thread_set_num_threads(threads);
#elif defined(USE_OPENBLAS)
  openblas_set_num_threads(threads);
#endif
  for (const Shape& s : kShapes) {
    std::vector<float> a(size_t(s.M) * s.K), b(size_t(s.K) * s.N), c(size_t(s.M) * s.N);
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 13) * 0.01f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 7) * 0.02f;
    const double sec = seconds_per_call([&] { gemm(s, a.data(), b.data(), c.data()); });
    // The sum of C, so the script can check that every library computed the same product.
    double checksum = 0;
    for (float v : c) checksum += v;
    std::printf("{\"library\":\"%s\",\"threads\":%d,\"shape\":\"%s\",\"gflops\":%.1f,\"checksum\":%.6e}\n", LIBRARY,
                threads, s.label, 2.0 * s.M * s.N * s.K / sec / 1e9, checksum);
  }
}
