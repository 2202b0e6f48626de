// Sum/mean/max/min over any set of dims, and argmax. Each output element is
// accumulated in a fixed order (in double for f32), so results are bitwise
// reproducible whatever the thread count (a whole-tensor sum's chunks are
// vectorised, so its order follows the machine's vector width).
#include <algorithm>
#include <limits>
#include <vector>

#include "kiln/cpu/bf16_paths.h"
#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/low_precision.h"

namespace kiln::cpu {

namespace {

struct Accumulator {
  ReduceOp op;
  double value;
  explicit Accumulator(ReduceOp o) : op(o) {
    value = op == ReduceOp::max   ? -std::numeric_limits<double>::infinity()
            : op == ReduceOp::min ? std::numeric_limits<double>::infinity()
                                  : 0.0;
  }
  void add(double v) {
    if (op == ReduceOp::max) value = (v > value || std::isnan(v)) ? v : value;
    else if (op == ReduceOp::min) value = (v < value || std::isnan(v)) ? v : value;
    else value += v;
  }
};

}  // namespace

namespace {

// Sums over the leading dims of a contiguous [n_reduced, inner] tensor (bias
// gradients, batch sums): rows walked in order into a row of doubles, in
// column blocks over threads. load(p) reads one element as double; store
// writes one output from its double sum.
//
// A whole-tensor sum (inner == 1, such as a gradient's sum of squares for
// clipping) is not one serial chain of additions: fixed chunks are each
// summed by a vectorised double reduction, in parallel, and the chunks' sums
// added in order, so the result does not depend on the thread count.
template <typename In, typename Load, typename Store>
void leading_sum(const In* xp, int64_t n_reduced, int64_t inner, Load&& load, Store&& store) {
  if (inner == 1) {
    constexpr int64_t chunk = 4096;
    std::vector<double> partial(size_t((n_reduced + chunk - 1) / chunk));
#pragma omp parallel for schedule(static) if (n_reduced > 32768)
    for (int64_t c = 0; c < int64_t(partial.size()); ++c) {
      const int64_t i0 = c * chunk, i1 = std::min(n_reduced, i0 + chunk);
      double sum = 0.0;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = i0; i < i1; ++i) sum += load(xp[i]);
      partial[size_t(c)] = sum;
    }
    double total = 0.0;
    for (double p : partial) total += p;
    return store(0, total);
  }
  constexpr int64_t block = 256;
#pragma omp parallel for schedule(static) if (inner * n_reduced > 32768)
  for (int64_t j0 = 0; j0 < inner; j0 += block) {
    const int64_t j1 = std::min(inner, j0 + block);
    double acc[block] = {};
    for (int64_t i = 0; i < n_reduced; ++i) {
      const In* row = xp + i * inner + j0;
      for (int64_t j = 0; j < j1 - j0; ++j) acc[j] += load(row[j]);
    }
    for (int64_t j = j0; j < j1; ++j) store(j, acc[j - j0]);
  }
}

bool reduces_leading_dims(const Tensor& x, const Tensor& out) {
  if (!x.is_contiguous() || !out.is_contiguous() || x.dim() != out.dim()) return false;
  int d = 0;
  while (d < x.dim() && out.shape()[d] == 1 && x.shape()[d] != 1) ++d;
  if (d == 0) return false;
  for (int e = d; e < x.dim(); ++e)
    if (out.shape()[e] != x.shape()[e]) return false;
  return true;
}

}  // namespace

// bf16 sums over leading dims read bf16 directly: the same sums as staging,
// rounded the same way (double -> f32 -> bf16), without the copy.
bool reduce_runs_on_bf16(ReduceOp op, const Tensor& x, const Tensor& out) {
  return (op == ReduceOp::sum || op == ReduceOp::mean) && x.dtype() == DType::bf16 && out.dtype() == DType::bf16 &&
         reduces_leading_dims(x, out);
}

void CpuBackend::reduce(ReduceOp op, const Tensor& x, Tensor& out) {
  if (reduce_runs_on_bf16(op, x, out)) {
    const int64_t inner = out.numel(), n_reduced = x.numel() / std::max<int64_t>(inner, 1);
    const double divide = op == ReduceOp::mean ? double(n_reduced) : 1.0;
    uint16_t* yp = bits16(out);
    return leading_sum(
        bits16(x), n_reduced, inner,
        [](uint16_t v) { return double(bf16_to_float(v)); },
        [&](int64_t j, double sum) { yp[j] = float_to_bf16(float(op == ReduceOp::mean ? sum / divide : sum)); });
  }
  // bf16/f16 otherwise: run the f32 kernel on staged copies (low_precision.h).
  if (any_low_precision({&x, &out}))
    return in_f32([&](F32Staging& s) { reduce(op, s.in(x), s.out(out)); });
  check_cpu(x, "reduce");
  KILN_CHECK(x.dim() == out.dim(), "reduce: output rank ", out.dim(), " differs from input rank ", x.dim());
  KILN_CHECK(out.is_contiguous(), "reduce: output must be contiguous");
  Shape reduced, kept;  // dims (inline: a decoding step's sums allocate nothing)
  int64_t n_reduced = 1;
  for (int d = 0; d < x.dim(); ++d) {
    if (out.shape()[d] == x.shape()[d]) {
      kept.push_back(d);
    } else {
      KILN_CHECK(out.shape()[d] == 1, "reduce: output shape ", shape_str(out.shape()), " does not match input ",
                 shape_str(x.shape()));
      reduced.push_back(d);
      n_reduced *= x.shape()[d];
    }
  }
  KILN_CHECK(n_reduced > 0 || op == ReduceOp::sum || op == ReduceOp::mean, "reduce: max/min of an empty tensor");
  const int64_t n_out = out.numel();
  dispatch_float(x.dtype(), "reduce", [&]<typename T>() {
    KILN_CHECK(out.dtype() == x.dtype(), "reduce: output dtype must match input");
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(out.data_ptr());
    auto finish = [&](double v) { return T(op == ReduceOp::mean ? v / double(n_reduced) : v); };

    // Reducing leading dims of a contiguous tensor (bias gradients, batch
    // sums): walk rows in order and accumulate into a row of doubles.
    const bool leading = reduces_leading_dims(x, out);
    if (leading && (op == ReduceOp::sum || op == ReduceOp::mean)) {
      // The additions of Accumulator without its per-element branch on `op`,
      // so the row loop vectorises (bias gradients took ~5% of a GPT step
      // through the generic path).
      return leading_sum(
          xp, n_reduced, n_out, [](T v) { return double(v); }, [&](int64_t j, double sum) { yp[j] = finish(sum); });
    }
    if (leading) {
      const int64_t inner = n_out;
      const int64_t block = 256;
#pragma omp parallel for schedule(static) if (inner * n_reduced > 32768)
      for (int64_t j0 = 0; j0 < inner; j0 += block) {
        const int64_t j1 = std::min(inner, j0 + block);
        std::vector<Accumulator> acc(j1 - j0, Accumulator(op));
        for (int64_t i = 0; i < n_reduced; ++i) {
          const T* row = xp + i * inner;
          for (int64_t j = j0; j < j1; ++j) acc[j - j0].add(double(row[j]));
        }
        for (int64_t j = j0; j < j1; ++j) yp[j] = finish(acc[j - j0].value);
      }
      return;
    }

    // General case: for each output element walk the reduced sub-space.
    Shape red_shape;
    Strides red_strides;
    for (int64_t d : reduced) {
      red_shape.push_back(x.shape()[d]);
      red_strides.push_back(x.strides()[d]);
    }
    for_each_if(n_out, n_out > 1 && n_out * n_reduced > 32768, [&](int64_t o) {
      int64_t base = 0, rem = o;
      for (int k = int(kept.size()) - 1; k >= 0; --k) {
        const int64_t d = kept[k];
        base += (rem % x.shape()[d]) * x.strides()[d];
        rem /= x.shape()[d];
      }
      Accumulator acc(op);
      const int r = int(red_shape.size());
      if (r == 1) {
        for (int64_t i = 0; i < red_shape[0]; ++i) acc.add(double(xp[base + i * red_strides[0]]));
      } else {
        std::vector<int64_t> idx(r, 0);
        for (int64_t i = 0; i < n_reduced; ++i) {
          int64_t off = base;
          for (int k = 0; k < r; ++k) off += idx[k] * red_strides[k];
          acc.add(double(xp[off]));
          for (int k = r - 1; k >= 0; --k) {
            if (++idx[k] < red_shape[k]) break;
            idx[k] = 0;
          }
        }
      }
      yp[o] = finish(acc.value);
    });
  });
}

void CpuBackend::argmax(const Tensor& x, int dim, Tensor& out) {
  // bf16/f16: run the f32 kernel on staged copies (low_precision.h).
  if (any_low_precision({&x})) return in_f32([&](F32Staging& s) { argmax(s.in(x), dim, out); });
  check_cpu(x, "argmax");
  dim = normalize_dim(dim, x.dim());
  KILN_CHECK(out.dtype() == DType::i64 && out.is_contiguous(), "argmax: output must be a contiguous i64 tensor");
  KILN_CHECK(x.shape()[dim] > 0, "argmax over an empty dim");
  Shape outer_shape;
  Strides outer_strides;
  for (int d = 0; d < x.dim(); ++d) {
    if (d == dim) continue;
    outer_shape.push_back(x.shape()[d]);
    outer_strides.push_back(x.strides()[d]);
  }
  KILN_CHECK(shape_numel(outer_shape) == out.numel(), "argmax: output has ", out.numel(), " elements, expected ",
             shape_numel(outer_shape));
  const int64_t n = x.shape()[dim], stride = x.strides()[dim];
  dispatch_float(x.dtype(), "argmax", [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.data_ptr());
    int64_t* yp = out.data<int64_t>();
    const int64_t n_out = out.numel();
    for_each_if(n_out, n_out * n > 32768, [&](int64_t o) {
      int64_t base = 0, rem = o;
      for (int k = int(outer_shape.size()) - 1; k >= 0; --k) {
        base += (rem % outer_shape[k]) * outer_strides[k];
        rem /= outer_shape[k];
      }
      int64_t best = 0;
      T best_v = xp[base];
      for (int64_t i = 1; i < n; ++i) {
        T v = xp[base + i * stride];
        if (v > best_v || (v != v && best_v == best_v)) {  // the first NaN is the max, as torch.argmax
          best_v = v;
          best = i;
        }
      }
      yp[o] = best;
    });
  });
}

}  // namespace kiln::cpu
