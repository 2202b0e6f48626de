// Embedding lookup (a row gather) and its backward (a row scatter-add).
//
// Ids are validated on one thread before any parallel loop: an exception must
// not escape an OpenMP region, and a bad id must never read or write outside
// the table.
//
// Backward is deterministic: positions are grouped by id with a stable sort,
// and each group (one row of dweight) is summed in the order the positions
// appear, exactly as a serial loop would. Groups are independent, so they run
// in parallel without atomics.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "kiln/cpu/bf16_paths.h"
#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/low_precision.h"

namespace kiln::cpu {

namespace {

constexpr int64_t kParallelElements = 32768;

void check_ids(const char* op, const Tensor& ids, int64_t V) {
  check_cpu(ids, op);
  check_contiguous(ids, op, "ids");
  KILN_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, op, ": ids must be i32 or i64, got ",
             dtype_name(ids.dtype()));
  const int64_t n = ids.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = load_index(ids, i);
    KILN_CHECK(id >= 0 && id < V, op, ": id ", id, " at position ", i, " is outside the vocabulary [0, ", V,
               "); check the tokenizer's vocab size against the model's vocab_size = ", V);
  }
}

// The [..., C] shape that ids [...] gather into.
Shape gathered_shape(const Tensor& ids, int64_t C) {
  Shape s = ids.shape();
  s.push_back(C);
  return s;
}

void check_table(const char* op, const Tensor& table, const char* what) {
  check_cpu(table, op);
  check_contiguous(table, op, what);
  KILN_CHECK(table.dim() == 2, op, ": ", what, " must be [V, C], got ", shape_str(table.shape()));
}

}  // namespace

bool embedding_gathers_stored_rows(const Tensor& weight, const Tensor& out) { return weight.dtype() == out.dtype(); }

void CpuBackend::embedding(const Tensor& weight, const Tensor& ids, Tensor& out) {
  // A gather is a copy of rows: a bf16/f16 table into an output of its own
  // dtype needs no f32 staging (which would widen the whole table per call).
  if (!embedding_gathers_stored_rows(weight, out) && any_low_precision({&weight, &out}))
    return in_f32([&](F32Staging& s) { embedding(s.in(weight), ids, s.out(out)); });
  const char* op = "embedding";
  check_table(op, weight, "weight");
  const int64_t V = weight.size(0), C = weight.size(1);
  check_cpu(out, op);
  check_contiguous(out, op, "out");
  KILN_CHECK(out.shape() == gathered_shape(ids, C), op, ": out must be ", shape_str(gathered_shape(ids, C)),
             " for ids ", shape_str(ids.shape()), " and weight ", shape_str(weight.shape()), ", got ",
             shape_str(out.shape()));
  KILN_CHECK(out.dtype() == weight.dtype(), op, ": out is ", dtype_name(out.dtype()), " but weight is ",
             dtype_name(weight.dtype()));
  check_ids(op, ids, V);
  const int64_t n = ids.numel();
  const size_t row_bytes = size_t(C) * weight.element_size();
  const char* w = static_cast<const char*>(weight.data_ptr());
  char* o = static_cast<char*>(out.data_ptr());
  // A gather is a copy, so it works for every dtype, not only f32/f64.
  for_each_if(n, n > 1 && n * C > kParallelElements,
              [&](int64_t i) { std::memcpy(o + i * row_bytes, w + load_index(ids, i) * row_bytes, row_bytes); });
}

void CpuBackend::embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dweight) {
  // bf16/f16: run the f32 kernel on staged copies (low_precision.h).
  if (any_low_precision({&dout, &dweight}))  // dweight accumulates (+=)
    return in_f32([&](F32Staging& s) { embedding_backward(s.in(dout), ids, s.out(dweight, true)); });
  const char* op = "embedding_backward";
  check_table(op, dweight, "dweight");
  const int64_t V = dweight.size(0), C = dweight.size(1);
  check_cpu(dout, op);
  check_contiguous(dout, op, "dout");
  KILN_CHECK(dout.shape() == gathered_shape(ids, C), op, ": dout must be ", shape_str(gathered_shape(ids, C)),
             " for ids ", shape_str(ids.shape()), " and dweight ", shape_str(dweight.shape()), ", got ",
             shape_str(dout.shape()));
  KILN_CHECK(dout.dtype() == dweight.dtype(), op, ": dout is ", dtype_name(dout.dtype()), " but dweight is ",
             dtype_name(dweight.dtype()));
  check_ids(op, ids, V);
  const int64_t n = ids.numel();
  if (n == 0 || C == 0) return;

  dispatch_float(dweight.dtype(), op, [&]<typename T>() {
    const T* g = dout.data<T>();
    T* dw = dweight.data<T>();
    if (n * C <= kParallelElements) {
      for (int64_t i = 0; i < n; ++i) {
        T* row = dw + load_index(ids, i) * C;
        const T* src = g + i * C;
        for (int64_t c = 0; c < C; ++c) row[c] += src[c];
      }
      return;
    }
    // Positions grouped by id, in their original order within each group.
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t(0));
    std::vector<int64_t> id_of(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) id_of[size_t(i)] = load_index(ids, i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return id_of[size_t(a)] < id_of[size_t(b)]; });
    std::vector<int64_t> group_start;
    for (int64_t k = 0; k < n; ++k)
      if (k == 0 || id_of[size_t(order[size_t(k)])] != id_of[size_t(order[size_t(k - 1)])])
        group_start.push_back(k);
    group_start.push_back(n);
    const int64_t groups = int64_t(group_start.size()) - 1;
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t gi = 0; gi < groups; ++gi) {
      const int64_t first = group_start[size_t(gi)], last = group_start[size_t(gi + 1)];
      T* row = dw + id_of[size_t(order[size_t(first)])] * C;
      for (int64_t k = first; k < last; ++k) {
        const T* src = g + order[size_t(k)] * C;
        for (int64_t c = 0; c < C; ++c) row[c] += src[c];
      }
    }
  });
}

}  // namespace kiln::cpu
