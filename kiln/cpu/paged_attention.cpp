// Attention over a paged KV cache (backend.h), and the row scatter that
// fills the pages.
//
// A work item is one query row and one key/value head: the query heads that
// share that head (grouped-query attention) read each key and value once.
// For each of them, in this order and no other:
//   s_j = scale * (q . k_j)              j over the row's span, ascending
//   e_j = exp(s_j - max s),  l = sum e_j   (summed in that order)
//   out = sum_j (e_j / l) v_j             (accumulated in that order)
// in f32 whatever the cache's dtype. A bf16 or f16 cache rounds where
// PyTorch's eager attention rounds (the product, the scaled scores, the
// probabilities and the output), so a bf16 model decodes as transformers'
// does. Nothing depends on the other rows
// or on the thread count, which is what makes batch-invariant serving
// (kiln/backend/batch_invariant.h) and prefix sharing give a sequence the
// same bits however it was batched.
#include <cstring>
#include <vector>

#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/low_precision.h"

namespace kiln::cpu {

namespace {

// How a cache's elements read as f32 and f32 writes back.
struct F32 {
  using T = float;
  static float widen(float v) { return v; }
  static float narrow(float v) { return v; }
  static float round(float v) { return v; }
};
struct Bf16 {
  using T = uint16_t;
  static float widen(uint16_t v) { return bf16_to_float(v); }
  static uint16_t narrow(float v) { return float_to_bf16(v); }
  static float round(float v) { return widen(narrow(v)); }
};
struct F16 {
  using T = uint16_t;
  static float widen(uint16_t v) { return f16_to_float(v); }
  static uint16_t narrow(float v) { return float_to_f16(v); }
  static float round(float v) { return widen(narrow(v)); }
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
  KILN_CHECK(q.dim() == 3 && k.dim() == 4 && k.shape() == v.shape() && out.shape() == q.shape(), op,
             ": q and out must be [R, H, D] and the pages [N, P, Hkv, D], got q ", shape_str(q.shape()), ", k ",
             shape_str(k.shape()), ", v ", shape_str(v.shape()));
  KILN_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype() && out.dtype() == q.dtype() &&
                 (q.dtype() == DType::f32 || q.dtype() == DType::bf16 || q.dtype() == DType::f16),
             op, ": q, the pages and out must share one dtype, f32, bf16 or f16");
  KILN_CHECK(tables.dtype() == DType::i32 && tables.dim() == 2 && spans.dtype() == DType::i32 && spans.dim() == 2 &&
                 spans.size(1) == 3 && spans.size(0) == q.size(0),
             op, ": tables must be i32 [S, pages] and spans i32 [", q.size(0), ", 3]");
  const PagedShape s{q.size(0), q.size(1), k.size(2), q.size(2), k.size(0), k.size(1), tables.size(0), tables.size(1)};
  KILN_CHECK(k.size(3) == s.dim && s.kv_heads > 0 && s.heads % s.kv_heads == 0, op, ": ", s.heads,
             " query heads of size ", s.dim, " cannot share pages of ", s.kv_heads, " heads of size ", k.size(3));
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

// Row r, key/value head g: the `group` query heads g * group ... into out.
template <typename Codec, typename T = typename Codec::T>
void attend(const PagedShape& s, const T* q, const T* k, const T* v, const int32_t* tables, const int32_t* spans,
            T* out, float scale, int64_t r, int64_t g, std::vector<float>& scratch) {
  const int64_t group = s.heads / s.kv_heads, D = s.dim;
  const int64_t seq = spans[3 * r], lo = spans[3 * r + 1], hi = spans[3 * r + 2], n = hi - lo;
  scratch.resize(size_t(group * (n + 2 * D)));
  float* scores = scratch.data();    // [group, n]
  float* query = scores + group * n;  // [group, D]
  float* acc = query + group * D;     // [group, D]
  for (int64_t j = 0; j < group; ++j) {
    const T* qh = q + (r * s.heads + g * group + j) * D;
    for (int64_t d = 0; d < D; ++d) query[j * D + d] = Codec::widen(qh[d]);
  }
  const int32_t* table = tables + seq * s.max_pages;
  auto row_of = [&](const T* pages, int64_t pos) {
    return pages + ((int64_t(table[pos / s.page_size]) * s.page_size + pos % s.page_size) * s.kv_heads + g) * D;
  };
  for (int64_t i = 0; i < n; ++i) {
    const T* key = row_of(k, lo + i);
    for (int64_t j = 0; j < group; ++j) {
      const float* qj = query + j * D;
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < D; ++d) dot += qj[d] * Codec::widen(key[d]);
      scores[j * n + i] = Codec::round(Codec::round(dot) * scale);
    }
  }
  for (int64_t j = 0; j < group; ++j) {
    float* sj = scores + j * n;
    float m = -std::numeric_limits<float>::infinity(), total = 0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, sj[i]);
    for (int64_t i = 0; i < n; ++i) total += sj[i] = std::exp(sj[i] - m);
    const float inverse = 1.0f / total;
    for (int64_t i = 0; i < n; ++i) sj[i] = Codec::round(sj[i] * inverse);
  }
  std::fill(acc, acc + group * D, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const T* value = row_of(v, lo + i);
    for (int64_t j = 0; j < group; ++j) {
      const float p = scores[j * n + i];
      float* aj = acc + j * D;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) aj[d] += p * Codec::widen(value[d]);
    }
  }
  for (int64_t j = 0; j < group; ++j) {
    T* oh = out + (r * s.heads + g * group + j) * D;
    for (int64_t d = 0; d < D; ++d) oh[d] = Codec::narrow(acc[j * D + d]);
  }
}

template <typename Codec, typename T = typename Codec::T>
void paged(const PagedShape& s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& tables,
           const Tensor& spans, Tensor& out, float scale) {
  const T* qp = static_cast<const T*>(q.data_ptr());
  const T* kp = static_cast<const T*>(k.data_ptr());
  const T* vp = static_cast<const T*>(v.data_ptr());
  T* op = static_cast<T*>(out.data_ptr());
  const int32_t* tp = tables.data<int32_t>();
  const int32_t* sp = spans.data<int32_t>();
  const int64_t items = s.rows * s.kv_heads;
  int64_t work = 0;
  for (int64_t r = 0; r < s.rows; ++r) work += (sp[3 * r + 2] - sp[3 * r + 1]) * s.heads * s.dim;
#pragma omp parallel if (items > 1 && work > 32768)
  {
    std::vector<float> scratch;
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item)
      simd_kernel([&] { attend<Codec>(s, qp, kp, vp, tp, sp, op, scale, item / s.kv_heads, item % s.kv_heads, scratch); });
  }
}

}  // namespace

void CpuBackend::paged_attention(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages, const Tensor& tables,
                                 const Tensor& spans, Tensor& out, float scale) {
  const PagedShape s = check_paged(q, k_pages, v_pages, tables, spans, out);
  if (q.dtype() == DType::f32) return paged<F32>(s, q, k_pages, v_pages, tables, spans, out, scale);
  if (q.dtype() == DType::bf16) return paged<Bf16>(s, q, k_pages, v_pages, tables, spans, out, scale);
  paged<F16>(s, q, k_pages, v_pages, tables, spans, out, scale);
}

void CpuBackend::index_copy_rows(const Tensor& src, const Tensor& index, Tensor& dst) {
  const char* op = "index_copy_rows";
  for (const Tensor* t : std::initializer_list<const Tensor*>{&src, &index, &dst}) {
    check_cpu(*t, op);
    check_contiguous(*t, op, "operand");
  }
  KILN_CHECK(index.dtype() == DType::i32 && index.dim() == 1 && src.dim() >= 1 && src.size(0) == index.size(0) &&
                 dst.dim() >= 1 && src.dtype() == dst.dtype(),
             op, ": src [R, ...] and index i32 [R] must agree, and src and dst share a dtype");
  const int64_t R = src.size(0), N = dst.size(0);
  const int64_t row = R == 0 ? 0 : src.numel() / R;
  KILN_CHECK(N == 0 || dst.numel() / N == row, op, ": rows of ", row, " elements do not fit rows of ",
             N == 0 ? 0 : dst.numel() / N);
  const int32_t* ip = index.data<int32_t>();
  for (int64_t r = 0; r < R; ++r)
    KILN_CHECK(ip[r] >= 0 && ip[r] < N, op, ": index ", ip[r], " at ", r, " is outside [0, ", N, ")");
  const size_t bytes = size_t(row) * dtype_size(src.dtype());
  const auto* from = static_cast<const char*>(src.data_ptr());
  auto* to = static_cast<char*>(dst.data_ptr());
  for (int64_t r = 0; r < R; ++r) std::memcpy(to + size_t(ip[r]) * bytes, from + size_t(r) * bytes, bytes);
}

}  // namespace kiln::cpu
