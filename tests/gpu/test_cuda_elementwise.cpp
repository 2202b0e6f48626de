// CUDA vs CPU: unary and binary elementwise ops, reductions and argmax, over
// f32/f64/bf16/f16, odd sizes, and transposed/sliced/expanded views.
#include "tests/gpu/cuda_test_util.h"

namespace kiln::cuda_test {
namespace {

const DType kFloatDtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

const char* unary_name(UnaryOp op) {
  static const char* names[] = {"neg",      "exp",        "log",        "sqrt",       "rsqrt",     "tanh",
                                "sigmoid",  "relu",       "gelu",       "gelu_erf",   "abs",       "square",
                                "reciprocal", "add_scalar", "mul_scalar", "pow_scalar"};
  return names[int(op)];
}

const char* binary_name(BinaryOp op) {
  static const char* names[] = {
      "add", "sub", "mul", "div",           "maximum",       "minimum",       "pow",
      "eq",  "gt",  "lt",  "relu_backward", "gelu_backward", "gelu_erf_backward", "tanh_backward", "sigmoid_backward"};
  return names[int(op)];
}

// Input range where the op is defined and well conditioned.
std::pair<double, double> unary_domain(UnaryOp op) {
  switch (op) {
    case UnaryOp::log:
    case UnaryOp::sqrt:
    case UnaryOp::rsqrt:
    case UnaryOp::pow_scalar:
      return {0.1, 3.0};
    case UnaryOp::reciprocal:
      return {0.5, 2.0};
    default:
      return {-3.0, 3.0};
  }
}

// The CPU reference for a GPU result computed from `x_host` (values already
// rounded to the test dtype), in f32 or f64.
Tensor cpu_unary(UnaryOp op, const Tensor& x_host, DType t, double scalar) {
  Tensor x = host_cast(x_host, ref_dtype(t));
  Tensor y = cpu_empty(x.shape(), x.dtype());
  cpu().unary(op, x, y, scalar);
  return y;
}

TEST(CudaBackendUnary, EveryOpMatchesTheCpu) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  const std::vector<std::pair<Shape, Layout>> cases = {{{1037}, Layout::contiguous},
                                                       {{1}, Layout::contiguous},
                                                       {{517}, Layout::sliced},
                                                       {{33, 17}, Layout::transposed},
                                                       {{4, 3, 70}, Layout::contiguous}};
  for (int o = 0; o <= int(UnaryOp::pow_scalar); ++o) {
    const UnaryOp op = UnaryOp(o);
    const double scalar = op == UnaryOp::pow_scalar ? 2.5 : 0.75;
    auto [lo, hi] = unary_domain(op);
    for (DType t : kFloatDtypes) {
      for (auto& [shape, layout] : cases) {
        Pair x = random_view(shape, t, layout, 100 + o, lo, hi);
        Tensor got = gpu_poisoned(shape, t);
        gpu().unary(op, x.dev, got, scalar);
        expect_close(got, cpu_unary(op, x.host, t, scalar), tol_for(t),
                     std::string("unary ") + unary_name(op) + " " + dtype_name(t) + " " + shape_str(shape) + " " +
                         layout_name(layout));
      }
    }
  }
}

TEST(CudaBackendUnary, StridedOutputAndMisalignedInput) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  // Input starts one element into its buffer: the contiguous path must not use 16-byte loads.
  Tensor hb = host_random({1 + 999}, DType::f32, 4);
  Tensor db = to_gpu(hb);
  Tensor x_host = hb.as_strided({999}, {1}, 1), x_dev = db.as_strided({999}, {1}, 1);
  Tensor base = gpu_poisoned({2 * 999}, DType::f32);
  Tensor out = base.as_strided({999}, {2}, 0);
  gpu().unary(UnaryOp::gelu, x_dev, out, 0.0);
  std::vector<double> all = host_values(to_host(base)),
                      want = host_values(cpu_unary(UnaryOp::gelu, x_host, DType::f32, 0));
  std::vector<double> even, odd;
  for (size_t i = 0; i < all.size(); ++i) (i % 2 == 0 ? even : odd).push_back(all[i]);
  expect_close_values(even, want, tol_for(DType::f32), "gelu into a strided output");
  for (double v : odd) EXPECT_TRUE(std::isnan(v)) << "unary wrote between the strided output's elements";
  // In place.
  Tensor y = to_gpu(hb);
  gpu().unary(UnaryOp::mul_scalar, y, y, -2.0);
  expect_close(y, cpu_unary(UnaryOp::mul_scalar, hb, DType::f32, -2.0), tol_for(DType::f32), "in-place mul_scalar");
}

struct BinaryCase {
  Shape shape;
  Layout a, b;
};

TEST(CudaBackendBinary, EveryOpMatchesTheCpuWithBroadcastAndStrides) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  const std::vector<BinaryCase> cases = {{{1037}, Layout::contiguous, Layout::contiguous},
                                         {{13, 40}, Layout::contiguous, Layout::expanded},
                                         {{13, 40}, Layout::transposed, Layout::sliced},
                                         {{3, 5, 7}, Layout::expanded, Layout::transposed}};
  for (int o = 0; o <= int(BinaryOp::sigmoid_backward); ++o) {
    const BinaryOp op = BinaryOp(o);
    for (DType t : kFloatDtypes) {
      for (const BinaryCase& c : cases) {
        double alo = -2, ahi = 2, blo = -2, bhi = 2;
        if (op == BinaryOp::pow) alo = 0.5;
        if (op == BinaryOp::div) blo = 0.5;
        if (op == BinaryOp::tanh_backward || op == BinaryOp::sigmoid_backward) blo = -1, bhi = 1;
        Pair a = random_view(c.shape, t, c.a, 200 + o, alo, ahi);
        Pair b = random_view(c.shape, t, c.b, 300 + o, blo, bhi);
        if (op == BinaryOp::eq || op == BinaryOp::gt || op == BinaryOp::lt || op == BinaryOp::maximum) {
          // Few distinct values, so equal pairs occur.
          a = random_view(c.shape, t, c.a, 200 + o, 0, 1);
          b = random_view(c.shape, t, c.b, 200 + o, 0, 1);  // same seed: equal where layouts line up
        }
        Tensor ra = host_cast(a.host, ref_dtype(t)), rb = host_cast(b.host, ref_dtype(t));
        Tensor want = cpu_empty(c.shape, ref_dtype(t));
        cpu().binary(op, ra, rb, want);
        Tensor got = gpu_poisoned(c.shape, t);
        gpu().binary(op, a.dev, b.dev, got);
        expect_close(got, want, tol_for(t),
                     std::string("binary ") + binary_name(op) + " " + dtype_name(t) + " " + shape_str(c.shape) + " a " +
                         layout_name(c.a) + " b " + layout_name(c.b));
      }
    }
  }
}

// A bf16/f16 b beside f32 a and out is read as it is by add (autocast's
// residual adds): the bits of adding its f32 copy, on the vectorised path,
// misaligned, and broadcast through strides.
TEST(CudaBackendBinary, AddReadsANarrowOperandAsIs) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  const std::vector<BinaryCase> cases = {{{4099}, Layout::contiguous, Layout::contiguous},
                                         {{16, 768}, Layout::contiguous, Layout::contiguous},
                                         {{13, 40}, Layout::contiguous, Layout::expanded},
                                         {{13, 40}, Layout::transposed, Layout::sliced}};
  for (DType narrow : {DType::bf16, DType::f16}) {
    for (const BinaryCase& c : cases) {
      for (int64_t shift : {0, 1}) {
        const std::string what = std::string("add f32 + ") + dtype_name(narrow) + " " + shape_str(c.shape) + " a " +
                                 layout_name(c.a) + " b " + layout_name(c.b) + (shift ? " misaligned" : "");
        Pair a = random_view(c.shape, DType::f32, c.a, 400, -2, 2), b = random_view(c.shape, narrow, c.b, 401, -2, 2);
        Tensor bd = b.dev;
        if (shift) {  // the same values one element further into a fresh buffer
          if (!bd.is_contiguous()) continue;
          Tensor big = gpu_poisoned({bd.numel() + 1}, narrow);
          Tensor moved = big.slice(0, 1, bd.numel() + 1).view(c.shape);
          gpu().copy(bd, moved);
          bd = moved;
        }
        Tensor b32 = gpu_poisoned(c.shape, DType::f32), want = gpu_poisoned(c.shape, DType::f32);
        gpu().copy(bd, b32);
        gpu().binary(BinaryOp::add, a.dev, b32, want);
        Tensor got = gpu_poisoned(c.shape, DType::f32);
        gpu().binary(BinaryOp::add, a.dev, bd, got);
        expect_equal(got, to_host(want), what);
      }
    }
  }
}

TEST(CudaBackendBinary, RejectsMismatchedDtypes) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  Tensor a = gpu_poisoned({4}, DType::f32), b = gpu_poisoned({4}, DType::bf16), out = gpu_poisoned({4}, DType::f32);
  EXPECT_THROW(gpu().binary(BinaryOp::mul, a, b, out), kiln::Error);  // only add reads a narrow b
  EXPECT_THROW(gpu().binary(BinaryOp::add, b, a, out), kiln::Error);  // and only as b
  Tensor i = gpu_poisoned({4}, DType::i32);
  EXPECT_THROW(gpu().unary(UnaryOp::exp, i, i, 0.0), kiln::Error);
}

struct ReduceCase {
  Shape in, out;
  Layout layout;
};

TEST(CudaBackendReduce, EveryOpOverEveryDimSet) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  const std::vector<ReduceCase> cases = {
      {{7, 33, 5}, {1, 33, 5}, Layout::contiguous}, {{7, 33, 5}, {7, 1, 5}, Layout::contiguous},
      {{7, 33, 5}, {7, 33, 1}, Layout::contiguous}, {{7, 33, 5}, {1, 33, 1}, Layout::contiguous},
      {{7, 33, 5}, {1, 1, 1}, Layout::transposed},  {{9, 40}, {9, 1}, Layout::transposed},
      {{9, 40}, {1, 40}, Layout::sliced},           {{3, 70001}, {3, 1}, Layout::contiguous},
      {{70001, 3}, {1, 3}, Layout::contiguous},     {{200003}, {1}, Layout::contiguous},
      {{5, 1, 6}, {5, 1, 6}, Layout::contiguous},
      // Dense [R, M] -> [1, M] with 16-byte rows (bias gradients): 16 bytes a lane.
      {{16, 256, 96}, {1, 1, 96}, Layout::contiguous}, {{300, 1000}, {1, 1000}, Layout::contiguous}};
  const char* names[] = {"sum", "mean", "max", "min"};
  for (int o = 0; o <= int(ReduceOp::min); ++o) {
    for (DType t : kFloatDtypes) {
      for (const ReduceCase& c : cases) {
        Pair x = random_view(c.in, t, c.layout, 400 + o);
        const double reduced = double(shape_numel(c.in)) / double(shape_numel(c.out));
        Tensor want = cpu_empty(c.out, ref_dtype(t));
        cpu().reduce(ReduceOp(o), host_cast(x.host, ref_dtype(t)), want);
        Tensor got = gpu_poisoned(c.out, t);
        gpu().reduce(ReduceOp(o), x.dev, got);
        // Sums accumulate in f32 on the GPU and in f64 on the CPU: allow for
        // rounding that grows with the number of terms (a mean divides it back).
        Tol tol = tol_for(t);
        const double terms = ReduceOp(o) == ReduceOp::sum ? reduced : 1.0;
        if (ReduceOp(o) == ReduceOp::sum || ReduceOp(o) == ReduceOp::mean)
          tol.atol = std::max(tol.atol, (t == DType::f64 ? 1e-13 : 4e-7) * terms);
        expect_close(got, want, tol,
                     std::string("reduce ") + names[o] + " " + dtype_name(t) + " " + shape_str(c.in) + " -> " +
                         shape_str(c.out) + " " + layout_name(c.layout));
      }
    }
  }
}

TEST(CudaBackendArgmax, FirstMaximumAlongEachDim) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  for (DType t : {DType::f32, DType::bf16, DType::f64}) {
    for (Layout l : {Layout::contiguous, Layout::transposed}) {
      Pair x = random_view({7, 33, 45}, t, l, 500);
      for (int dim : {0, 1, 2, -1}) {
        Shape out_shape = x.host.shape();
        out_shape.erase(out_shape.begin() + (dim < 0 ? dim + 3 : dim));
        Tensor want = cpu_empty(out_shape, DType::i64);
        cpu().argmax(host_cast(x.host, ref_dtype(t)), dim, want);
        Tensor got = gpu_poisoned(out_shape, DType::i64);
        gpu().argmax(x.dev, dim, got);
        expect_equal(got, want,
                     std::string("argmax dim ") + std::to_string(dim) + " " + dtype_name(t) + " " + layout_name(l));
      }
    }
  }
  // Ties: every element equal -> index 0; a repeated maximum -> its first position.
  Tensor ties = host_from_values({1, 1, 1, 1, 0, 5, 2, 5, 5}, {3, 3}, DType::f32);
  Tensor got = gpu_poisoned({3}, DType::i64);
  gpu().argmax(to_gpu(ties), 1, got);
  expect_equal(got, host_from_values({0, 2, 1}, {3}, DType::i64), "argmax ties");
}

}  // namespace
}  // namespace kiln::cuda_test
