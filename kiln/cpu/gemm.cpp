#include "kiln/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/cpu/dnnl_context.h"
#include "kiln/cpu/isa.h"
#include "kiln/cpu/runtime_defaults.h"
#ifdef KILN_HAVE_DNNL
#include <array>
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <unordered_map>
#endif

namespace kiln::cpu {

namespace {

// Below this many multiply-adds a product runs on one thread: waking the
// others costs more than it saves. Measured (kiln_bench --model matmul, 2
// threads): the MLP's 128x10x256 head (0.3M) ran at 9 GFLOP/s on two threads
// against 68 on one; 128x256x512 (17M) gains from the second thread.
constexpr double kParallelMacs = 4e6;

// Runs fn with OpenMP parallel regions limited to one thread (oneDNN and
// OpenBLAS read the limit at each call).
template <typename Fn>
void on_one_thread(Fn&& fn) {
  const int threads = omp_get_max_threads();
  if (threads == 1) return fn();
  struct Restore {
    int threads;
    ~Restore() { omp_set_num_threads(threads); }
  } restore{threads};
  omp_set_num_threads(1);
  fn();
}

// The same when the product is small.
template <typename Fn>
void sized(int64_t m, int64_t n, int64_t k, Fn&& fn) {
  if (double(m) * double(n) * double(k) >= kParallelMacs) return fn();
  on_one_thread(fn);
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#ifdef KILN_HAVE_DNNL
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  KILN_CHECK(status == dnnl_success, "oneDNN sgemm failed (status ", int(status), ") for a ", m, "x", k, " @ ", k,
             "x", n, " product");
#else
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
#endif
}

#ifdef KILN_HAVE_DNNL
// A matmul primitive for one bf16 product geometry: strides carry the
// transposes and leading dimensions, output scales carry alpha and a sum
// post-op carries beta; the result is f32, or bf16 with an optional f32 bias.
using Bf16Key = std::array<int64_t, 13>;

// Its memory objects are made once too, and each call points them at its
// buffers: making three per call (and letting oneDNN allocate a scratchpad
// per call) was a tenth of a bf16 attention head's 128 x 128 x 32 products.
struct Bf16Product {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
  std::unordered_map<int, dnnl::memory> args;
  // The same arguments as the C API takes them, and the scratchpad's size:
  // the C++ API's execute() and scratchpad_desc() allocate on every call
  // (an array, a list of queries), which a decoding step would then do.
  std::vector<dnnl_exec_arg_t> exec_args;
  size_t scratchpad_bytes;
};

Bf16Product make_bf16_matmul(const Bf16Key& key, const dnnl::engine& engine) {
  const auto [ta, tb, m, n, k, lda, ldb, ldc, alpha_bits, beta_bits, c_bf16, has_bias, threads] = key;
  (void)threads;
  using dnnl::memory;
  const auto bf16 = memory::data_type::bf16, f32 = memory::data_type::f32;
  const memory::desc a({m, k}, bf16, ta ? memory::dims{1, lda} : memory::dims{lda, 1});
  const memory::desc b({k, n}, bf16, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
  const memory::desc c({m, n}, c_bf16 ? bf16 : f32, memory::dims{ldc, 1});
  float alpha, beta;
  std::memcpy(&alpha, &alpha_bits, sizeof alpha);
  std::memcpy(&beta, &beta_bits, sizeof beta);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::desc desc = has_bias ? dnnl::matmul::desc(a, b, memory::desc({1, n}, f32, memory::dims{n, 1}), c)
                                           : dnnl::matmul::desc(a, b, c);
  dnnl::matmul::primitive_desc pd(desc, attr, engine);
  std::unordered_map<int, dnnl::memory> args;
  const auto unbound = [&](const memory::desc& d) { return memory(d, engine, DNNL_MEMORY_NONE); };
  args.emplace(DNNL_ARG_SRC, unbound(pd.src_desc()));
  args.emplace(DNNL_ARG_WEIGHTS, unbound(pd.weights_desc()));
  args.emplace(DNNL_ARG_DST, unbound(pd.dst_desc()));
  if (has_bias) args.emplace(DNNL_ARG_BIAS, unbound(pd.bias_desc()));
  if (pd.scratchpad_desc().get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, unbound(pd.scratchpad_desc()));
  std::vector<dnnl_exec_arg_t> exec_args;
  for (const auto& [arg, memory] : args) exec_args.push_back({arg, memory.get()});
  return {pd, dnnl::matmul(pd), std::move(args), std::move(exec_args), pd.scratchpad_desc().get_size()};
}

constexpr size_t kMaxCachedBf16Products = 1024;  // per thread

// A thread's scratchpad for its bf16 products, grown to the largest one's
// need: one buffer per thread, not one per product geometry.
void* bf16_scratchpad(size_t bytes) {
  struct Buffer {
    void* p = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(p); }
  };
  static thread_local Buffer buffer;
  if (bytes > buffer.size) {
    std::free(buffer.p);
    buffer.size = (bytes + 4095) / 4096 * 4096;
    buffer.p = std::aligned_alloc(4096, buffer.size);
    KILN_CHECK(buffer.p, "gemm_bf16: out of memory for a ", buffer.size, "-byte scratchpad");
  }
  return buffer.p;
}
#endif

// Products big enough for several threads are cut into a grid that depends
// on the product's shape alone, never on the thread count: the larger of
// C's dimensions in blocks of at least kMinGridBlock rows or columns (at most
// kMaxGridBlocks of them), each a one-thread GEMM over the whole of K, taken
// by the threads in turn (or one after another on one thread, or inside a
// parallel region). Every element of C is then summed by the same call on
// the same operands whatever the thread count, so results are bitwise equal
// at 1, 2 or 3 threads on every instruction set. Cutting C into one part
// per thread is not: oneDNN's AVX2 sgemm sums an element in an order that
// depends on where the element falls in the call's C (a [1024, 128] x
// [128, 512] product cut in two rows of blocks differed from the whole in
// 1,815 of its 524,288 elements; its AVX-512 kernels happen not to), and
// oneDNN's own threading may split K.
constexpr int64_t kMinGridBlock = 128, kMaxGridBlocks = 48;

struct Grid {
  bool by_rows;
  int64_t extent, block, blocks;
};

Grid product_grid(int64_t m, int64_t n) {
  const bool by_rows = m > n;
  const int64_t extent = by_rows ? m : n;
  const int64_t spread = (extent + kMaxGridBlocks - 1) / kMaxGridBlocks;
  const int64_t block = std::max(kMinGridBlock, (spread + 15) / 16 * 16);
  return {by_rows, extent, block, (extent + block - 1) / block};
}

// run_block(begin, end, by_rows) for each block of the grid, over the pool
// unless this thread is already inside a parallel region.
template <typename RunBlock>
void for_grid_blocks(int64_t m, int64_t n, RunBlock&& run_block) {
  const Grid grid = product_grid(m, n);
  const auto run = [&](int64_t i) {
    const int64_t begin = i * grid.block, end = std::min(grid.extent, begin + grid.block);
    run_block(begin, end, grid.by_rows);
  };
  const int threads = omp_in_parallel() ? 1 : int(std::min<int64_t>(omp_get_max_threads(), grid.blocks));
  // One block, or one thread: each call still on one thread, or the library
  // would split it over the pool (and perhaps its K).
  if (threads == 1)
    return on_one_thread([&] {
      for (int64_t i = 0; i < grid.blocks; ++i) run(i);
    });
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < grid.blocks; ++i) run(i);
}

// Small products: one call on one thread. Others: the grid. A product of a
// few rows (decoding: one token per sequence) is bound by reading B, not by
// its arithmetic: once B is large enough, reading it on every core pays.
constexpr int64_t kFewRows = 8;
constexpr double kParallelOperandElements = 2.5e5;  // 1 MB of f32
bool gridded(int64_t m, int64_t n, int64_t k) {
  return double(m) * double(n) * double(k) >= kParallelMacs ||
         (m <= kFewRows && double(n) * double(k) >= kParallelOperandElements);
}

}  // namespace

bool bf16_gemm_available() {
#ifdef KILN_HAVE_DNNL
  // Whether oneDNN's bf16 product beats its f32 one, from what was measured
  // (docs/PERFORMANCE.md, bench/gemm_libraries.sh): AMD's AVX512-BF16 (Zen 4,
  // Zen 5) runs it at about twice the f32 speed, and AMX multiplies bf16
  // tiles; Intel's AVX512-BF16 without AMX (Cooper Lake, or a VM that hides
  // AMX) ran it at half the f32 speed. Decided by the CPU, not timed: a
  // timing at start-up, on a shared 2-core machine, flipped between runs, so
  // the same command trained with other products (and planned other memory)
  // from one run to the next.
  static const bool available = [] {
    if (!cpu_has_bf16_instructions()) return false;
    if (const char* forced = std::getenv("KILN_BF16_GEMM")) return std::string(forced) != "0";
    return isa_allows(Isa::amx) || cpu_is_amd();
  }();
  return available;
#else
  return false;
#endif
}

namespace {

// One oneDNN bf16 matmul over the whole of the given C, on this thread's
// share of the pool.
void bf16_call(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, void* c, bool c_bf16, int64_t ldc,
               const float* bias) {
#ifdef KILN_HAVE_DNNL
  dnnl::engine& engine = dnnl_engine();
  // One cache per thread: attention calls these products from inside its
  // parallel loop over heads, where a shared cache would need a lock.
  static thread_local std::map<Bf16Key, Bf16Product> cache;
  int32_t alpha_bits, beta_bits;
  std::memcpy(&alpha_bits, &alpha, sizeof alpha);
  std::memcpy(&beta_bits, &beta, sizeof beta);
  const Bf16Key key{trans_a, trans_b,   m,          n,        k, lda, ldb, ldc, alpha_bits, beta_bits,
                    c_bf16,  bias != nullptr, omp_get_max_threads()};
  auto it = cache.find(key);
  if (it == cache.end()) {
    // A server sees a new geometry per batch size and text length; past
    // this many, start over rather than keep every one made.
    if (cache.size() >= kMaxCachedBf16Products) cache.clear();
    it = cache.emplace(key, make_bf16_matmul(key, engine)).first;
  }
  Bf16Product& product = it->second;
  product.args.at(DNNL_ARG_SRC).set_data_handle(const_cast<uint16_t*>(a));
  product.args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<uint16_t*>(b));
  product.args.at(DNNL_ARG_DST).set_data_handle(c);
  if (bias) product.args.at(DNNL_ARG_BIAS).set_data_handle(const_cast<float*>(bias));
  if (auto pad = product.args.find(DNNL_ARG_SCRATCHPAD); pad != product.args.end())
    pad->second.set_data_handle(bf16_scratchpad(product.scratchpad_bytes));
  dnnl::stream& stream = dnnl_stream();
  KILN_CHECK(dnnl_primitive_execute(product.primitive.get(), stream.get(), int(product.exec_args.size()),
                                     product.exec_args.data()) == dnnl_success,
             "gemm_bf16: oneDNN could not run a ", m, "x", n, "x", k, " product");
  stream.wait();
#else
  (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb,
      (void)beta, (void)c, (void)c_bf16, (void)ldc, (void)bias;
  KILN_FAIL("gemm_bf16: this build has no oneDNN");
#endif
}

// The same over the grid of f32 products (brgemm matmuls, like sgemm, may
// split K over threads).
void bf16_product(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                  int64_t lda, const uint16_t* b, int64_t ldb, float beta, void* c, bool c_bf16, int64_t ldc,
                  const float* bias) {
  if (!gridded(m, n, k))
    return sized(m, n, k,
                 [&] { bf16_call(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, c_bf16, ldc, bias); });
  char* c_bytes = static_cast<char*>(c);
  const int64_t c_size = c_bf16 ? 2 : 4;
  for_grid_blocks(m, n, [&](int64_t begin, int64_t end, bool by_rows) {
    if (by_rows)
      bf16_call(trans_a, trans_b, end - begin, n, k, alpha, trans_a ? a + begin : a + begin * lda, lda, b, ldb, beta,
                c_bytes + begin * ldc * c_size, c_bf16, ldc, bias);
    else
      bf16_call(trans_a, trans_b, m, end - begin, k, alpha, a, lda, trans_b ? b + begin * ldb : b + begin, ldb, beta,
                c_bytes + begin * c_size, c_bf16, ldc, bias ? bias + begin : nullptr);
  });
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  bf16_product(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, false, ldc, nullptr);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, uint16_t* c, int64_t ldc, const float* bias) {
  bf16_product(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, true, ldc, bias);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (!gridded(m, n, k))
    return sized(m, n, k, [&] { sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); });
  for_grid_blocks(m, n, [&](int64_t begin, int64_t end, bool by_rows) {
    if (by_rows)
      sgemm(trans_a, trans_b, end - begin, n, k, alpha, trans_a ? a + begin : a + begin * lda, lda, b, ldb, beta,
            c + begin * ldc, ldc);
    else
      sgemm(trans_a, trans_b, m, end - begin, k, alpha, a, lda, trans_b ? b + begin * ldb : b + begin, ldb, beta,
            c + begin, ldc);
  });
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  sized(m, n, k, [&] {
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k,
                alpha, a, lda, b, ldb, beta, c, ldc);
  });
}

const char* f32_gemm_library() {
#ifdef KILN_HAVE_DNNL
  return "oneDNN";
#else
  return "OpenBLAS";
#endif
}

}  // namespace kiln::cpu
