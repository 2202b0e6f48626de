// Attention over a paged KV cache (backend.h), and the row scatter that
// fills the pages.
//
// A work item is one query row and one key/value head: the query heads that
// share that head (grouped-query attention) read each key and value once.
// For each of them, in this order and no other:
//   s_j = scale * (q . k_j)              the dot's fused multiply-adds in d order
//   e_j = exp(s_j - max s),  l = sum e_j   (fast_exp, dispatch.h; summed in that order)
//   out = sum_j (e_j / l) v_j             (accumulated in that order)
// in f32 whatever the cache's dtype. A bf16 or f16 cache rounds where
// PyTorch's eager attention rounds (the product, the scaled scores, the
// probabilities and the output), so a bf16 model decodes as transformers'
// does. Nothing depends on the other rows
// or on the thread count, which is what makes batch-invariant serving
// (kiln/backend/batch_invariant.h) and prefix sharing give a sequence the
// same bits however it was batched. The products keep their sums in
// registers (AVX2), the exponentials are vectorised.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/low_precision.h"
#include "kiln/cpu/spin_pool.h"
#include "kiln/cpu/x86_intrinsics.h"

namespace kiln::cpu {

namespace {

// How a cache's elements read as f32 and f32 writes back.
// (vec8: eight of them widened in a register.)
struct F32 {
  using T = float;
  static float widen(float v) { return v; }
  static float narrow(float v) { return v; }
  static float round(float v) { return v; }
#ifdef KILN_X86_INTRINSICS
  static __m256 vec8(const float* p) { return _mm256_loadu_ps(p); }
#endif
};
struct Bf16 {
  using T = uint16_t;
  static float widen(uint16_t v) { return bf16_to_float(v); }
  static uint16_t narrow(float v) { return float_to_bf16(v); }
  static float round(float v) { return widen(narrow(v)); }
#ifdef KILN_X86_INTRINSICS
  static __m256 vec8(const uint16_t* p) { return widen_bf16x8(p); }
#endif
};
struct F16 {
  using T = uint16_t;
  static float widen(uint16_t v) { return f16_to_float(v); }
  static uint16_t narrow(float v) { return float_to_f16(v); }
  static float round(float v) { return widen(narrow(v)); }
#ifdef KILN_X86_INTRINSICS
  static __m256 vec8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
#endif
};

struct PagedShape {
  int64_t rows, heads, kv_heads, dim, pages, page_size, sequences, max_pages;
};

PagedShape check_paged(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& tables, const Tensor& spans,
                       const Tensor& out) {
  const char* op = "paged_attention";
  for (const Tensor* t : std::initializer_list<const Tensor*>{&q, &k, &v, &tables, &spans, &out}) {
    check_cpu(*t, op);
    check_contiguous(*t, op, "operand");
  }
  KILN_CHECK(q.dim() == 3 && k.dim() == 4 && v.dim() == 4 && out.shape() == q.shape() &&
                 k.shape() == (Shape{v.size(0), v.size(1), v.size(3), v.size(2)}),
             op, ": q and out must be [R, H, D], the keys [N, Hkv, D, P] and the values [N, Hkv, P, D], got q ",
             shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  KILN_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype() && out.dtype() == q.dtype() &&
                 (q.dtype() == DType::f32 || q.dtype() == DType::bf16 || q.dtype() == DType::f16),
             op, ": q, the pages and out must share one dtype, f32, bf16 or f16");
  KILN_CHECK(tables.dtype() == DType::i32 && tables.dim() == 2 && spans.dtype() == DType::i32 && spans.dim() == 2 &&
                 spans.size(1) == 3 && spans.size(0) == q.size(0),
             op, ": tables must be i32 [S, pages] and spans i32 [", q.size(0), ", 3]");
  const PagedShape s{q.size(0), q.size(1), v.size(1), q.size(2), v.size(0), v.size(2), tables.size(0), tables.size(1)};
  KILN_CHECK(v.size(3) == s.dim && s.kv_heads > 0 && s.heads % s.kv_heads == 0, op, ": ", s.heads,
             " query heads of size ", s.dim, " cannot share pages of ", s.kv_heads, " heads of size ", v.size(3));
  // Every page a span reaches is checked here, on one thread, before any is read.
  const int32_t* sp = spans.data<int32_t>();
  const int32_t* tp = tables.data<int32_t>();
  for (int64_t r = 0; r < s.rows; ++r) {
    const int64_t seq = sp[3 * r], lo = sp[3 * r + 1], hi = sp[3 * r + 2];
    KILN_CHECK(seq >= 0 && seq < s.sequences && lo >= 0 && lo <= hi && hi <= s.max_pages * s.page_size, op,
               ": row ", r, " spans positions [", lo, ", ", hi, ") of sequence ", seq, "; there are ", s.sequences,
               " sequences of at most ", s.max_pages * s.page_size, " positions");
    for (int64_t p = lo / s.page_size; p * s.page_size < hi; ++p) {
      const int64_t page = tp[seq * s.max_pages + p];
      KILN_CHECK(page >= 0 && page < s.pages, op, ": sequence ", seq, "'s page ", p, " is ", page,
                 ", outside the pool's ", s.pages);
    }
  }
  return s;
}

// Calls visit(page, first, count, offset) for the stretches of [lo, hi)
// that lie in one page of `table`: positions first .. first + count - 1 of
// the page, offset positions after lo.
template <typename Visit>
void each_page(const int32_t* table, int64_t page_size, int64_t lo, int64_t hi, Visit&& visit) {
  for (int64_t pos = lo; pos < hi;) {
    const int64_t first = pos % page_size, count = std::min(page_size - first, hi - pos);
    visit(int64_t(table[pos / page_size]), first, count, pos - lo);
    pos += count;
  }
}

constexpr int64_t kLanes = 16;

// out[t] = sum over d of a[d] * b[d * stride + t], for t < width, each sum a
// chain of fused multiply-adds in d order, one by one (a page's partial
// stretch; whole stretches of kLanes take scores_of_heads).
template <typename Codec, typename T = typename Codec::T>
void dots_down_columns(const float* a, const T* b, int64_t stride, int64_t n, int64_t width, float* out) {
  for (int64_t t = 0; t < width; ++t) {
    float sum = 0;
    for (int64_t d = 0; d < n; ++d) sum = std::fma(a[d], Codec::widen(b[d * stride + t]), sum);
    out[t] = sum;
  }
}

// The same for kLanes positions and H query heads at once (rows of `query`
// D apart, into rows of `scores` n apart): each key row is loaded once for
// the H heads, and the 2 H chains of multiply-adds run side by side in
// registers (one chain through memory per head was latency-bound).
template <typename Codec, int H, typename T = typename Codec::T>
void scores_of_heads(const float* query, int64_t D, const T* keys, int64_t stride, float* scores, int64_t n) {
#ifdef KILN_X86_INTRINSICS
  __m256 low[H], high[H];
  for (int h = 0; h < H; ++h) low[h] = high[h] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    const __m256 k0 = Codec::vec8(keys + d * stride), k1 = Codec::vec8(keys + d * stride + 8);
    for (int h = 0; h < H; ++h) {
      const __m256 qd = _mm256_set1_ps(query[h * D + d]);
      low[h] = _mm256_fmadd_ps(qd, k0, low[h]);
      high[h] = _mm256_fmadd_ps(qd, k1, high[h]);
    }
  }
  for (int h = 0; h < H; ++h) {
    _mm256_storeu_ps(scores + h * n, low[h]);
    _mm256_storeu_ps(scores + h * n + 8, high[h]);
  }
#else
  for (int h = 0; h < H; ++h) dots_down_columns<Codec>(query + h * D, keys, stride, D, kLanes, scores + h * n);
#endif
}

// acc[d] += sum over t < count of p[t] * values[t * D + d]: each element a
// chain of fused multiply-adds in t order, continuing acc's. 64 elements at
// a time in eight registers, then eight, then one by one.
template <typename Codec, typename T = typename Codec::T>
void accumulate_values(const float* p, const T* values, int64_t count, int64_t D, float* acc) {
  int64_t d = 0;
#ifdef KILN_X86_INTRINSICS
  auto block = [&]<int V>() {
    __m256 sums[V];
    for (int i = 0; i < V; ++i) sums[i] = _mm256_loadu_ps(acc + d + 8 * i);
    for (int64_t t = 0; t < count; ++t) {
      const __m256 pt = _mm256_set1_ps(p[t]);
      for (int i = 0; i < V; ++i) sums[i] = _mm256_fmadd_ps(pt, Codec::vec8(values + t * D + d + 8 * i), sums[i]);
    }
    for (int i = 0; i < V; ++i) _mm256_storeu_ps(acc + d + 8 * i, sums[i]);
  };
  for (; d + 64 <= D; d += 64) block.template operator()<8>();
  for (; d + 8 <= D; d += 8) block.template operator()<1>();
#endif
  for (; d < D; ++d)
    for (int64_t t = 0; t < count; ++t) acc[d] = std::fma(p[t], Codec::widen(values[t * D + d]), acc[d]);
}

// The largest of x[0 .. n) (a max is exact in any order; a NaN among them
// makes the softmax NaN either way).
inline float max_of(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
#ifdef KILN_X86_INTRINSICS
  __m256 lanes = _mm256_set1_ps(m);
  for (; i + 8 <= n; i += 8) lanes = _mm256_max_ps(lanes, _mm256_loadu_ps(x + i));
  float eight[8];
  _mm256_storeu_ps(eight, lanes);
  for (float e : eight) m = std::max(m, e);
#endif
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// Row r, key/value head g: its query heads g * group + j for j in [j0, j1)
// into out (each head's output is its own: a part of a group gives the
// same bits as the whole).
// A page's keys are [D, P] (positions innermost), so a page's scores fill
// vector lanes with no horizontal sums; its values are [P, D]. Every score
// is a sum over d in order, every output element a sum over the span's
// positions in order.
template <typename Codec, typename T = typename Codec::T>
void attend(const PagedShape& s, const T* q, const T* k, const T* v, const int32_t* tables, const int32_t* spans,
            T* out, float scale, float softcap, int64_t r, int64_t g, int64_t j0, int64_t j1,
            std::vector<float>& scratch) {
  const int64_t group = j1 - j0, first_head = g * (s.heads / s.kv_heads) + j0, D = s.dim, P = s.page_size;
  const int64_t seq = spans[3 * r], lo = spans[3 * r + 1], hi = spans[3 * r + 2], n = hi - lo;
  // Room for 4K positions of a group from the start, and twice the need past
  // it: each thread's scratch then grows a handful of times in a long
  // generation, not every few tokens (whichever thread takes the widest item).
  const size_t need = size_t(group * (n + 2 * D));
  if (scratch.capacity() < need) scratch.reserve(std::max(need * 2, size_t(group * (4096 + 2 * D))));
  scratch.resize(need);
  float* scores = scratch.data();    // [group, n]
  float* query = scores + group * n;  // [group, D]
  float* acc = query + group * D;     // [group, D]
  for (int64_t j = 0; j < group; ++j) {
    const T* qh = q + (r * s.heads + first_head + j) * D;
    for (int64_t d = 0; d < D; ++d) query[j * D + d] = Codec::widen(qh[d]);
  }
  const int32_t* table = tables + seq * s.max_pages;
  // The span's pages are scattered through the pool, and a hardware
  // prefetcher stops at each one: ask for all of them first (the row's
  // keys and values fit in L2 at any context a page table here reaches).
  each_page(table, P, lo, hi, [&](int64_t page, int64_t first, int64_t count, int64_t) {
    const char* key_page = reinterpret_cast<const char*>(k + (page * s.kv_heads + g) * D * P);
    const char* value_rows = reinterpret_cast<const char*>(v + ((page * s.kv_heads + g) * P + first) * D);
    for (int64_t b = 0; b < int64_t(D * P * sizeof(T)); b += 64) __builtin_prefetch(key_page + b);
    for (int64_t b = 0; b < int64_t(count * D * sizeof(T)); b += 64) __builtin_prefetch(value_rows + b);
  });
  each_page(table, P, lo, hi, [&](int64_t page, int64_t first, int64_t count, int64_t at) {
    const T* keys = k + (page * s.kv_heads + g) * D * P;  // [D, P]
    for (int64_t t = 0; t < count; t += kLanes) {
      const T* columns = keys + first + t;
      float* out = scores + at + t;
      if (count - t < kLanes) {
        for (int64_t j = 0; j < group; ++j)
          dots_down_columns<Codec>(query + j * D, columns, P, D, count - t, out + j * n);
        continue;
      }
      for (int64_t j = 0; j < group; j += 4) switch (std::min<int64_t>(4, group - j)) {
          case 4: scores_of_heads<Codec, 4>(query + j * D, D, columns, P, out + j * n, n); break;
          case 3: scores_of_heads<Codec, 3>(query + j * D, D, columns, P, out + j * n, n); break;
          case 2: scores_of_heads<Codec, 2>(query + j * D, D, columns, P, out + j * n, n); break;
          default: scores_of_heads<Codec, 1>(query + j * D, D, columns, P, out + j * n, n); break;
        }
    }
  });
  for (int64_t j = 0; j < group; ++j) {
    float* sj = scores + j * n;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) sj[i] = Codec::round(Codec::round(sj[i]) * scale);
    if (softcap > 0)  // rounded at each step, as transformers' eager attention computes it in the model's dtype
      for (int64_t i = 0; i < n; ++i) sj[i] = Codec::round(Codec::round(std::tanh(Codec::round(sj[i] / softcap))) * softcap);
    const float m = max_of(sj, n);
    float total = 0;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) sj[i] = fast_exp(sj[i] - m);
    for (int64_t i = 0; i < n; ++i) total += sj[i];
    const float inverse = 1.0f / total;
    for (int64_t i = 0; i < n; ++i) sj[i] = Codec::round(sj[i] * inverse);
  }
  std::fill(acc, acc + group * D, 0.0f);
  each_page(table, P, lo, hi, [&](int64_t page, int64_t first, int64_t count, int64_t at) {
    const T* values = v + ((page * s.kv_heads + g) * P + first) * D;  // [P, D] from row `first`
    for (int64_t j = 0; j < group; ++j) accumulate_values<Codec>(scores + j * n + at, values, count, D, acc + j * D);
  });
  for (int64_t j = 0; j < group; ++j) {
    T* oh = out + (r * s.heads + first_head + j) * D;
    for (int64_t d = 0; d < D; ++d) oh[d] = Codec::narrow(acc[j * D + d]);
  }
}

template <typename Codec, typename T = typename Codec::T>
void paged(const PagedShape& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& tables,
           const Tensor& spans, Tensor& out, float scale, float softcap) {
  const T* qp = static_cast<const T*>(q.data_ptr());
  const T* kp = static_cast<const T*>(k.data_ptr());
  const T* vp = static_cast<const T*>(v.data_ptr());
  T* op = static_cast<T*>(out.data_ptr());
  const int32_t* tp = tables.data<int32_t>();
  const int32_t* sp = spans.data<int32_t>();
  int64_t work = 0;
  for (int64_t r = 0; r < s.rows; ++r) work += (sp[3 * r + 2] - sp[3 * r + 1]) * s.heads * s.dim;
  // Decoding one stream has as few items as key/value heads (3 in SmolLM,
  // 2 threads: one thread would do twice the other's work); below two items
  // a thread, each head group is split.
  const int64_t group = s.heads / s.kv_heads, threads = work > 32768 ? get_num_threads() : 1;
  const int64_t per_part = group / std::min(group, (2 * threads + s.rows * s.kv_heads - 1) / (s.rows * s.kv_heads));
  const int64_t parts = (group + per_part - 1) / per_part, items = s.rows * s.kv_heads * parts;
  spin_parallel_for(items, int(threads), [&](int64_t item) {
    thread_local std::vector<float> scratch;
    const int64_t row = item / (s.kv_heads * parts), head = item / parts % s.kv_heads;
    const int64_t j0 = item % parts * per_part, j1 = std::min(group, j0 + per_part);
    simd_kernel([&] { attend<Codec>(s, qp, kp, vp, tp, sp, op, scale, softcap, row, head, j0, j1, scratch); });
  });
}

}  // namespace

void CpuBackend::paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const Tensor& tables,
                                 const Tensor& spans, Tensor& out, float scale, float softcap) {
  const PagedShape s = check_paged(q, k_pages, v_pages, tables, spans, out);
  if (q.dtype() == DType::f32) return paged<F32>(s, q, k_pages, v_pages, tables, spans, out, scale, softcap);
  if (q.dtype() == DType::bf16) return paged<Bf16>(s, q, k_pages, v_pages, tables, spans, out, scale, softcap);
  paged<F16>(s, q, k_pages, v_pages, tables, spans, out, scale, softcap);
}

void CpuBackend::scatter_rows(const Tensor& src, const Tensor& offsets, int64_t column_stride, Tensor& dst) {
  const char* op = "scatter_rows";
  for (const Tensor* t : std::initializer_list<const Tensor*>{&src, &offsets, &dst}) {
    check_cpu(*t, op);
    check_contiguous(*t, op, "operand");
  }
  KILN_CHECK(offsets.dtype() == DType::i64 && offsets.dim() == 1 && src.dim() == 2 && src.size(0) == offsets.size(0) &&
                 src.dtype() == dst.dtype() && column_stride >= 1,
             op, ": src [R, C], offsets i64 [R] and a column stride >= 1, src and dst in one dtype");
  const int64_t R = src.size(0), C = src.size(1), N = dst.numel();
  const int64_t* at = offsets.data<int64_t>();
  for (int64_t r = 0; r < R; ++r)
    KILN_CHECK(at[r] >= 0 && (C == 0 || at[r] + (C - 1) * column_stride < N), op, ": row ", r, " at offset ", at[r],
               " with stride ", column_stride, " runs outside the ", N, " elements of dst");
  // Elements move as raw bits of their size.
  auto move = [&]<typename E>() {
    const E* from = static_cast<const E*>(src.data_ptr());
    E* to = static_cast<E*>(dst.data_ptr());
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) to[at[r] + c * column_stride] = from[r * C + c];
  };
  switch (dtype_size(src.dtype())) {
    case 1: return move.operator()<uint8_t>();
    case 2: return move.operator()<uint16_t>();
    case 4: return move.operator()<uint32_t>();
    default: return move.operator()<uint64_t>();
  }
}

}  // namespace kiln::cpu
