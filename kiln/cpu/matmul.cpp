// Batched matrix product through kiln/cpu/gemm.h (oneDNN for f32, OpenBLAS
// for f64). A transposed view of the last two dims is passed to GEMM as a
// transpose flag rather than copied; any other layout is made contiguous
// first. Bias and GELU are applied after the GEMM. bf16 operands are
// multiplied as they are where the CPU has bf16 instructions, and bf16 or
// f16 ones as a few rows against a weight-shaped operand on every CPU
// (few_rows_product.h), as are one or two f32 rows against an f32 weight
// (decoding); elsewhere they are widened to f32, a 2-D b as packed_gemm.h
// packs it. In
// batch-invariant mode f32 products run kiln/cpu/invariant_gemm.h instead.
#include <algorithm>
#include <optional>
#include <type_traits>
#include <vector>

#include "kiln/backend/batch_invariant.h"
#include "kiln/backend/factory.h"
#include "kiln/cpu/bf16_paths.h"
#include "kiln/cpu/cpu_backend.h"
#include "kiln/cpu/dispatch.h"
#include "kiln/cpu/few_rows_product.h"
#include "kiln/cpu/gemm.h"
#include "kiln/cpu/invariant_gemm.h"
#include "kiln/cpu/low_precision.h"
#include "kiln/cpu/packed_gemm.h"

namespace kiln::cpu {

namespace {

// How a [rows, cols] matrix view can be handed to GEMM (row-major).
struct BlasMatrix {
  bool transposed = false;
  int64_t ld = 0;
};

bool as_blas_matrix(const Tensor& t, BlasMatrix& m) {
  const int r = t.dim();
  const int64_t rows = t.shape()[r - 2], cols = t.shape()[r - 1];
  const int64_t s_row = t.strides()[r - 2], s_col = t.strides()[r - 1];
  if ((s_col == 1 || cols == 1) && s_row >= std::max<int64_t>(cols, 1)) {
    m = {false, std::max<int64_t>(s_row, 1)};
    return true;
  }
  if ((s_row == 1 || rows == 1) && s_col >= std::max<int64_t>(rows, 1)) {
    m = {true, std::max<int64_t>(s_col, 1)};
    return true;
  }
  return false;
}

// The 16-bit float types the products below read as they are.
enum class Wide16 : uint8_t { bf16, f16 };
// Which of them t is, if one.
std::optional<Wide16> wide16(DType t) {
  if (t == DType::bf16) return Wide16::bf16;
  if (t == DType::f16) return Wide16::f16;
  return std::nullopt;
}
float widened(uint16_t v, Wide16 type) { return type == Wide16::bf16 ? bf16_to_float(v) : f16_to_float(v); }
uint16_t narrowed(float v, Wide16 type) { return type == Wide16::bf16 ? float_to_bf16(v) : float_to_f16(v); }

// Decoding's 16-bit products: a few rows of a against b = w^T, w's rows
// contiguous (a Linear's weight), read at 2 bytes by few_rows_times_bf16 / _f16.
bool few_rows_apply(int64_t M, const BlasMatrix& mb, Wide16 type) {
  const int64_t rows = type == Wide16::f16 ? kFewRowsF16 : bf16_gemm_available() ? kFewRowsBf16Native : kFewRowsBf16;
  return M <= rows && mb.transposed && !batch_invariant();
}

// c (f32 [M, N]) = alpha * a · b + beta * c, a's M x K block widened to f32 rows.
void few_rows_into_f32(int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* a, const BlasMatrix& ma,
                       const uint16_t* b, const BlasMatrix& mb, Wide16 type, float beta, float* c) {
  thread_local std::vector<float> rows;  // kept: decoding calls this hundreds of times a token
  rows.resize(size_t(M * K));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      rows[size_t(m * K + k)] = widened(ma.transposed ? a[k * ma.ld + m] : a[m * ma.ld + k], type);
  (type == Wide16::bf16 ? few_rows_times_bf16 : few_rows_times_f16)(M, N, K, alpha, rows.data(), K, b, mb.ld, beta, c,
                                                                     N);
}

// The same into a 16-bit c, rounded once after the optional f32 bias, as gemm_bf16 does.
void few_rows_into_16(int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* a, const BlasMatrix& ma,
                      const uint16_t* b, const BlasMatrix& mb, Wide16 type, float beta, uint16_t* c,
                      const float* bias) {
  thread_local std::vector<float> sums;
  sums.resize(size_t(M * N));
  if (beta != 0.0f)
    for (int64_t i = 0; i < M * N; ++i) sums[size_t(i)] = widened(c[i], type);
  few_rows_into_f32(M, N, K, alpha, a, ma, b, mb, type, beta, sums.data());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) c[m * N + n] = narrowed(sums[size_t(m * N + n)] + (bias ? bias[n] : 0.0f), type);
}

// After the GEMM, one parallel pass over the output rows: + bias, then GELU
// (keeping its input in args.pre_gelu for backward when asked).
template <typename T>
void epilogue(T* cp, int64_t rows, int64_t N, const T* bias, const Tensor& out, const MatmulArgs& args) {
  if (!bias && !args.gelu) return;
  T* pre = nullptr;
  if (args.gelu && args.pre_gelu.defined()) {
    KILN_CHECK(args.pre_gelu.shape() == out.shape() && args.pre_gelu.is_contiguous(),
               "matmul: pre_gelu must be contiguous and shaped like out");
    pre = static_cast<T*>(args.pre_gelu.data_ptr());
  }
  const bool gelu_on = args.gelu;
  auto finish_row = [&](int64_t row) {
    T* c = cp + row * N;
    if (bias) {
#pragma omp simd
      for (int64_t n = 0; n < N; ++n) c[n] += bias[n];
    }
    if (!gelu_on) return;
    if (pre) std::copy(c, c + N, pre + row * N);
#pragma omp simd
    for (int64_t n = 0; n < N; ++n) c[n] = gelu(c[n]);
  };
  for_each_if(rows, rows > 1 && rows * N > 32768, finish_row);
}

// The product proper. a and b share a dtype; out (and bias, pre_gelu) have
// it too, except that bf16 or f16 operands write an f32 out, or one of their
// own dtype with an f32 bias and no GELU (gemm_bf16, few_rows_into_16); f16
// operands only as a few rows.
void product(const Tensor& a_in, const Tensor& b_in, Tensor& out, const MatmulArgs& args) {
  check_cpu(a_in, "matmul");
  check_cpu(b_in, "matmul");
  KILN_CHECK(a_in.dim() >= 2 && b_in.dim() == a_in.dim() && out.dim() == a_in.dim(),
             "matmul: operands must have equal rank >= 2 (got ", shape_str(a_in.shape()), " and ",
             shape_str(b_in.shape()), ")");
  check_contiguous(out, "matmul", "out");
  const int r = a_in.dim();
  const int64_t M = a_in.shape()[r - 2], K = a_in.shape()[r - 1], N = b_in.shape()[r - 1];
  KILN_CHECK(b_in.shape()[r - 2] == K, "matmul: inner dims differ: ", shape_str(a_in.shape()), " @ ",
             shape_str(b_in.shape()));
  KILN_CHECK(out.shape()[r - 2] == M && out.shape()[r - 1] == N, "matmul: output shape ", shape_str(out.shape()),
             " is not [.., ", M, ", ", N, "]");
  Tensor a = a_in, b = b_in;
  BlasMatrix ma, mb;
  if (!as_blas_matrix(a, ma)) { a = copy_to(a, a.device(), a.dtype()); as_blas_matrix(a, ma); }
  if (!as_blas_matrix(b, mb)) { b = copy_to(b, b.device(), b.dtype()); as_blas_matrix(b, mb); }

  int64_t batch = 1;
  for (int d = 0; d < r - 2; ++d) {
    KILN_CHECK(a.shape()[d] == out.shape()[d] && b.shape()[d] == out.shape()[d],
               "matmul: batch dims must already be broadcast to the output's");
    batch *= out.shape()[d];
  }
  const std::optional<Wide16> wide = wide16(a.dtype());
  const bool bf16_operands = wide == Wide16::bf16;
  const bool out_16 = wide && out.dtype() == a.dtype() && !args.gelu;
  KILN_CHECK(b.dtype() == a.dtype() && (out_16 || out.dtype() == (wide ? DType::f32 : a.dtype())),
             "matmul: dtypes of a, b and out must match");
  const DType bias_dtype = wide ? DType::f32 : a.dtype();
  KILN_CHECK(!args.bias.defined() ||
                 (args.bias.numel() == N && args.bias.is_contiguous() && args.bias.dtype() == bias_dtype),
             "matmul: bias must be a contiguous [", N, "] tensor of dtype ", dtype_name(bias_dtype));
  // Calls fn(i, offset into a, offset into b) for each product of the batch.
  auto each_product = [&](auto&& fn) {
    if (M == 0 || N == 0) return;
    for (int64_t i = 0; i < batch; ++i) {
      int64_t oa = 0, ob = 0, rem = i;
      for (int d = r - 3; d >= 0; --d) {
        int64_t idx = rem % out.shape()[d];
        rem /= out.shape()[d];
        oa += idx * a.strides()[d];
        ob += idx * b.strides()[d];
      }
      fn(i, oa, ob);
    }
  };
  const uint16_t* a16 = bits16(a);
  const uint16_t* b16 = bits16(b);
  const bool few_rows = wide && few_rows_apply(M, mb, *wide);
  KILN_CHECK(few_rows || !wide || bf16_operands, "matmul: f16 operands are multiplied as a few rows only");
  const bool few_rows_f32 = a.dtype() == DType::f32 && M <= kFewRowsF32 && mb.transposed && !ma.transposed &&
                            !batch_invariant();
  if (out_16) {  // the bias goes into the product, before its one rounding
    const float* bias = args.bias.defined() ? args.bias.data<float>() : nullptr;
    uint16_t* c16 = bits16(out);
    return each_product([&](int64_t i, int64_t oa, int64_t ob) {
      if (few_rows)
        return few_rows_into_16(M, N, K, args.alpha, a16 + oa, ma, b16 + ob, mb, *wide, args.beta, c16 + i * M * N,
                                bias);
      gemm_bf16(ma.transposed, mb.transposed, M, N, K, args.alpha, a16 + oa, ma.ld, b16 + ob, mb.ld, args.beta,
                c16 + i * M * N, N, bias);
    });
  }
  dispatch_float(out.dtype(), "matmul", [&]<typename T>() {
    T* cp = static_cast<T*>(out.data_ptr());
    const T* bias = args.bias.defined() ? static_cast<const T*>(args.bias.data_ptr()) : nullptr;
    each_product([&](int64_t i, int64_t oa, int64_t ob) {
      if constexpr (std::is_same_v<T, float>) {
        if (few_rows)
          return few_rows_into_f32(M, N, K, args.alpha, a16 + oa, ma, b16 + ob, mb, *wide, args.beta, cp + i * M * N);
        if (bf16_operands)
          return gemm_bf16(ma.transposed, mb.transposed, M, N, K, args.alpha, a16 + oa, ma.ld, b16 + ob, mb.ld,
                           args.beta, cp + i * M * N, N);
      }
      if constexpr (std::is_same_v<T, float>) {
        if (few_rows_f32)
          return few_rows_times_f32(M, N, K, args.alpha, a.data<float>() + oa, ma.ld, b.data<float>() + ob, mb.ld,
                                    args.beta, cp + i * M * N, N);
        if (batch_invariant())
          return invariant_gemm(ma.transposed, mb.transposed, M, N, K, args.alpha, a.data<float>() + oa, ma.ld,
                                b.data<float>() + ob, mb.ld, args.beta, cp + i * M * N, N);
      }
      gemm(ma.transposed, mb.transposed, M, N, K, T(args.alpha), static_cast<const T*>(a.data_ptr()) + oa, ma.ld,
           static_cast<const T*>(b.data_ptr()) + ob, mb.ld, T(args.beta), cp + i * M * N, N);
    });
    epilogue(cp, batch * M, N, bias, out, args);
  });
}

// bf16 or f16 operands beyond a few rows on a CPU without fast products of
// theirs: a (activations) widened whole, b (a weight) widened as
// packed_gemm packs it. Two-dim only.
bool widens_while_packing(const Tensor& a, const Tensor& b) {
  BlasMatrix mb;
  return wide16(a.dtype()) && b.dtype() == a.dtype() && a.dim() == 2 && b.dim() == 2 && !batch_invariant() &&
         as_blas_matrix(b, mb);
}

void product_widening_while_packing(const Tensor& a32, const Tensor& b16, Tensor& out, const MatmulArgs& args) {
  KILN_CHECK(a32.dtype() == DType::f32 && out.dtype() == DType::f32 && a32.is_contiguous() && out.is_contiguous(),
             "matmul: a product widening b as it packs it takes a contiguous f32 a and out");
  const int64_t M = a32.size(0), K = a32.size(1), N = b16.size(1);
  KILN_CHECK(b16.size(0) == K && out.size(0) == M && out.size(1) == N, "matmul: ", shape_str(a32.shape()), " @ ",
             shape_str(b16.shape()), " into ", shape_str(out.shape()));
  BlasMatrix mb;
  as_blas_matrix(b16, mb);
  float* c = out.data<float>();
  const PackedSource type = b16.dtype() == DType::bf16 ? PackedSource::bf16 : PackedSource::f16;
  packed_gemm(M, N, K, args.alpha, a32.data<float>(), K, bits16(b16), type, mb.transposed, mb.ld, args.beta, c, N);
  epilogue(c, M, N, args.bias.defined() ? args.bias.data<float>() : nullptr, out, args);
}

}  // namespace

bool CpuBackend::fast_bf16_to_f32_matmul() const { return bf16_gemm_available(); }

namespace {
// bf16 or f16 operands read as they are: bf16 on a CPU with fast bf16
// products, or a few rows against a weight (product() takes
// few_rows_into_*). (Not in batch-invariant mode: they are widened for the
// invariant f32 GEMM.)
bool multiplies_natively(const Tensor& a, const Tensor& b) {
  const std::optional<Wide16> wide = wide16(a.dtype());
  if (!wide || b.dtype() != a.dtype() || batch_invariant()) return false;
  BlasMatrix mb;
  return (wide == Wide16::bf16 && bf16_gemm_available()) ||
         (as_blas_matrix(b, mb) && few_rows_apply(a.size(-2), mb, *wide));
}
bool straight_into_16(const Tensor& a, const Tensor& b, const Tensor& out, const MatmulArgs& args) {
  return multiplies_natively(a, b) && out.dtype() == a.dtype() && !args.gelu;
}
}  // namespace

std::vector<const Tensor*> matmul_staged_operands(const Tensor& a, const Tensor& b, const Tensor& out,
                                                  const MatmulArgs& args) {
  if (!any_low_precision({&a, &b, &out, &args.bias, &args.pre_gelu})) return {};
  std::vector<const Tensor*> staged{&args.bias};
  if (straight_into_16(a, b, out, args)) return staged;
  staged.insert(staged.end(), {&args.pre_gelu, &out});
  if (multiplies_natively(a, b)) return staged;
  staged.push_back(&a);
  if (!widens_while_packing(a, b)) staged.push_back(&b);  // (packed into thread-local scratch)
  return staged;
}

void CpuBackend::matmul(const Tensor& a_in, const Tensor& b_in, Tensor& out, const MatmulArgs& args) {
  if (!any_low_precision({&a_in, &b_in, &out, &args.bias, &args.pre_gelu})) return product(a_in, b_in, out, args);
  // bf16/f16: the product and its epilogue in f32 on staged copies
  // (low_precision.h), except that operands stay as they are where the CPU
  // multiplies them natively (gemm_bf16: twice the f32 GEMM's speed; a few
  // rows), and that a weight is widened as it is packed.
  // (matmul_staged_operands says the same, for the meta device.)
  const bool native = multiplies_natively(a_in, b_in);
  in_f32([&](F32Staging& s) {
    MatmulArgs f32_args = args;
    f32_args.bias = s.in(args.bias);
    if (straight_into_16(a_in, b_in, out, args)) return product(a_in, b_in, out, f32_args);
    f32_args.pre_gelu = s.out(args.pre_gelu);
    Tensor& f32_out = s.out(out, /*accumulate=*/args.beta != 0.0f);
    if (native)
      product(a_in, b_in, f32_out, f32_args);
    else if (widens_while_packing(a_in, b_in))
      product_widening_while_packing(s.in(a_in), b_in, f32_out, f32_args);
    else
      product(s.in(a_in), s.in(b_in), f32_out, f32_args);
  });
}

}  // namespace kiln::cpu
