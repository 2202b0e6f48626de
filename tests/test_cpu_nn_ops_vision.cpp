// CPU conv2d and maxpool2d against direct-loop float64 references (no
// im2col, no GEMM), and finite differences on the f64 ops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cpu_nn_test_util.h"
#include "kiln/backend/backend.h"

namespace kiln {
namespace {

using namespace test_nn;

struct ConvCase {
  int64_t N, Cin, H, W, Cout, KH, KW, SH, SW, PH, PW;
  bool bias;
  int64_t OH() const { return (H + 2 * PH - KH) / SH + 1; }
  int64_t OW() const { return (W + 2 * PW - KW) / SW + 1; }
  Conv2dArgs args() const { return {SH, SW, PH, PW}; }
  std::string str() const {
    return "N" + std::to_string(N) + " Cin" + std::to_string(Cin) + " " + std::to_string(H) + "x" +
           std::to_string(W) + " Cout" + std::to_string(Cout) + " k" + std::to_string(KH) + "x" +
           std::to_string(KW) + " s" + std::to_string(SH) + "x" + std::to_string(SW) + " p" + std::to_string(PH) +
           "x" + std::to_string(PW);
  }
};

struct ConvRef {
  std::vector<double> out, dx, dw, db;
};

// Direct convolution and its gradients for the upstream gradient g, by
// walking every (output, kernel tap) pair.
ConvRef ref_conv(const ConvCase& c, const std::vector<double>& x, const std::vector<double>& w,
                 const std::vector<double>& b, const std::vector<double>& g) {
  const int64_t OH = c.OH(), OW = c.OW();
  ConvRef r{std::vector<double>(c.N * c.Cout * OH * OW, 0.0), std::vector<double>(x.size(), 0.0),
            std::vector<double>(w.size(), 0.0), std::vector<double>(c.Cout, 0.0)};
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t co = 0; co < c.Cout; ++co)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t o = ((n * c.Cout + co) * OH + oh) * OW + ow;
          double acc = c.bias ? b[co] : 0.0;
          r.db[co] += g[o];
          for (int64_t ci = 0; ci < c.Cin; ++ci)
            for (int64_t kh = 0; kh < c.KH; ++kh)
              for (int64_t kw = 0; kw < c.KW; ++kw) {
                const int64_t ih = oh * c.SH - c.PH + kh, iw = ow * c.SW - c.PW + kw;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const int64_t xi = ((n * c.Cin + ci) * c.H + ih) * c.W + iw;
                const int64_t wi = ((co * c.Cin + ci) * c.KH + kh) * c.KW + kw;
                acc += x[xi] * w[wi];
                r.dx[xi] += g[o] * w[wi];
                r.dw[wi] += g[o] * x[xi];
              }
          r.out[o] = acc;
        }
  return r;
}

const std::vector<ConvCase> kConvCases = {
    {2, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, true},   // same padding
    {3, 2, 7, 6, 5, 3, 2, 2, 2, 0, 0, true},   // stride 2, rectangular kernel
    {1, 2, 9, 8, 3, 5, 5, 2, 3, 2, 1, false},  // big pad, uneven strides, no bias
    {2, 4, 5, 3, 2, 1, 1, 1, 1, 0, 0, true},   // 1x1
    {2, 1, 4, 4, 2, 3, 3, 1, 1, 2, 2, true},   // padding larger than needed: border outputs see only zeros
    {2, 2, 6, 7, 3, 5, 3, 1, 1, 2, 1, true},   // "same" with a rectangular kernel (contiguous im2col path)
    {1, 2, 2, 3, 2, 5, 3, 1, 1, 2, 1, true},   // "same" on a plane smaller than the kernel
    // The Fashion-MNIST CNN's convolutions: oneDNN picks blocked layouts for these.
    {3, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, true},
    {2, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, true},
    {2, 16, 9, 9, 48, 3, 3, 2, 2, 1, 1, false},  // strided, blocked
};

TEST(CpuNnOpsConv2d, ForwardAndBackwardMatchReference) {
  for (const ConvCase& c : kConvCases) {
    const Shape xs = {c.N, c.Cin, c.H, c.W}, ws = {c.Cout, c.Cin, c.KH, c.KW}, os = {c.N, c.Cout, c.OH(), c.OW()};
    auto xv = random_values(shape_numel(xs), 30), wv = random_values(shape_numel(ws), 31);
    auto bv = random_values(c.Cout, 32), gv = random_values(shape_numel(os), 33);
    auto ref = ref_conv(c, xv, wv, bv, gv);
    Tensor x = make<float>(xv, xs), w = make<float>(wv, ws), b = c.bias ? make<float>(bv, {c.Cout}) : Tensor();
    Tensor out = poisoned(os);
    cpu().conv2d(x, w, b, out, c.args());
    expect_near_all(read<float>(out), ref.out, 1e-5, 1e-5, "out " + c.str());

    Tensor dx = poisoned(xs), dw = poisoned(ws), db = poisoned({c.Cout});
    cpu().conv2d_backward(make<float>(gv, os), x, w, dx, dw, db, c.args());
    expect_near_all(read<float>(dx), ref.dx, 1e-5, 1e-5, "dx " + c.str());
    expect_near_all(read<float>(dw), ref.dw, 1e-5, 1e-5, "dweight " + c.str());
    expect_near_all(read<float>(db), ref.db, 1e-5, 1e-5, "dbias " + c.str());

    // Gradients that are not needed are passed undefined.
    Tensor none, dw_only = poisoned(ws);
    cpu().conv2d_backward(make<float>(gv, os), x, w, none, dw_only, none, c.args());
    expect_near_all(read<float>(dw_only), ref.dw, 1e-5, 1e-5, "dweight alone " + c.str());
    Tensor dx_only = poisoned(xs);
    cpu().conv2d_backward(make<float>(gv, os), x, w, dx_only, none, none, c.args());
    expect_near_all(read<float>(dx_only), ref.dx, 1e-5, 1e-5, "dx alone " + c.str());
  }
}

TEST(CpuNnOpsConv2d, F64GradientsMatchFiniteDifferences) {
  const ConvCase c = {2, 2, 5, 4, 3, 3, 2, 2, 1, 1, 1, true};
  const Shape xs = {c.N, c.Cin, c.H, c.W}, ws = {c.Cout, c.Cin, c.KH, c.KW}, os = {c.N, c.Cout, c.OH(), c.OW()};
  Tensor x = make<double>(random_values(shape_numel(xs), 34), xs);
  Tensor w = make<double>(random_values(shape_numel(ws), 35), ws);
  Tensor b = make<double>(random_values(c.Cout, 36), {c.Cout});
  auto r = random_values(shape_numel(os), 37);
  auto loss = [&] {
    Tensor out = poisoned(os, DType::f64);
    cpu().conv2d(x, w, b, out, c.args());
    return dot(read<double>(out), r);
  };
  Tensor dx = poisoned(xs, DType::f64), dw = poisoned(ws, DType::f64), db = poisoned({c.Cout}, DType::f64);
  cpu().conv2d_backward(make<double>(r, os), x, w, dx, dw, db, c.args());
  expect_near_all(read<double>(dx), finite_diff(x, loss), 1e-7, 1e-6, "dx");
  expect_near_all(read<double>(dw), finite_diff(w, loss), 1e-7, 1e-6, "dweight");
  expect_near_all(read<double>(db), finite_diff(b, loss), 1e-7, 1e-6, "dbias");
}

// Images big enough (~1.2 MB of im2col columns each in f32, against 4 MB
// chunks) that the batch of 7 is processed as chunks of 3, 3 and 1: exercises
// the multi-image GEMM layout, the single-image path and dweight
// accumulating across chunks.
TEST(CpuNnOpsConv2d, ChunkedBatchMatchesReference) {
  const ConvCase c = {7, 8, 64, 64, 3, 3, 3, 1, 1, 1, 1, true};
  const Shape xs = {c.N, c.Cin, c.H, c.W}, ws = {c.Cout, c.Cin, c.KH, c.KW}, os = {c.N, c.Cout, c.OH(), c.OW()};
  auto xv = random_values(shape_numel(xs), 38), wv = random_values(shape_numel(ws), 39);
  auto bv = random_values(c.Cout, 40), gv = random_values(shape_numel(os), 41);
  auto ref = ref_conv(c, xv, wv, bv, gv);
  Tensor x = make<float>(xv, xs), w = make<float>(wv, ws), out = poisoned(os);
  cpu().conv2d(x, w, make<float>(bv, {c.Cout}), out, c.args());
  expect_near_all(read<float>(out), ref.out, 1e-4, 1e-5, "out");
  Tensor dx = poisoned(xs), dw = poisoned(ws), db = poisoned({c.Cout});
  cpu().conv2d_backward(make<float>(gv, os), x, w, dx, dw, db, c.args());
  expect_near_all(read<float>(dx), ref.dx, 1e-5, 1e-5, "dx");
  expect_near_all(read<float>(dw), ref.dw, 1e-3, 1e-4, "dweight");  // sums of 29k products in f32
  expect_near_all(read<float>(db), ref.db, 1e-3, 1e-4, "dbias");

  // Run to run, results are bitwise identical.
  Tensor out2 = poisoned(os), dx2 = poisoned(xs), dw2 = poisoned(ws), db2 = poisoned({c.Cout});
  cpu().conv2d(x, w, make<float>(bv, {c.Cout}), out2, c.args());
  cpu().conv2d_backward(make<float>(gv, os), x, w, dx2, dw2, db2, c.args());
  EXPECT_EQ(read<float>(out2), read<float>(out));
  EXPECT_EQ(read<float>(dx2), read<float>(dx));
  EXPECT_EQ(read<float>(dw2), read<float>(dw));
  EXPECT_EQ(read<float>(db2), read<float>(db));
}

TEST(CpuNnOpsConv2d, BadShapesThrow) {
  Tensor x = poisoned({1, 3, 5, 5}), w = poisoned({4, 2, 3, 3}), out = poisoned({1, 4, 3, 3});
  EXPECT_THROW(cpu().conv2d(x, w, Tensor(), out, {}), Error);  // channel mismatch
  Tensor w_big = poisoned({4, 3, 7, 7});
  EXPECT_THROW(cpu().conv2d(x, w_big, Tensor(), out, {}), Error);  // kernel larger than input
  Tensor w_ok = poisoned({4, 3, 3, 3}), wrong_out = poisoned({1, 4, 5, 5});
  EXPECT_THROW(cpu().conv2d(x, w_ok, Tensor(), wrong_out, {}), Error);
}

// ---------------------------------------------------------------- maxpool

struct PoolCase {
  int64_t N, C, H, W;
  Pool2dArgs a;
  int64_t OH() const { return (H - a.kernel_h) / a.stride_h + 1; }
  int64_t OW() const { return (W - a.kernel_w) / a.stride_w + 1; }
  Shape input() const { return {N, C, H, W}; }
  Shape output() const { return {N, C, OH(), OW()}; }
};
// 2x2 windows with stride 2 have their own kernels: 7-, 14- and 20-wide
// output rows (under, at and over one 16-lane step), odd sizes; 3x3 windows
// on 5x5 have 2x2 pooling's output shape, so backward tries the 2x2 kernel
// and must notice the positions outside its windows.
const PoolCase kPoolCases[] = {{2, 3, 5, 7, {2, 2, 2, 2}},   {1, 2, 7, 6, {3, 3, 2, 2}},   {2, 1, 6, 5, {2, 3, 1, 2}},
                               {3, 4, 28, 28, {2, 2, 2, 2}}, {2, 3, 14, 14, {2, 2, 2, 2}}, {1, 2, 9, 41, {2, 2, 2, 2}},
                               {2, 2, 5, 5, {3, 3, 2, 2}}};

TEST(CpuNnOpsMaxPool2d, ForwardAndBackwardMatchReference) {
  for (const PoolCase& p : kPoolCases) {
    const int64_t OH = p.OH(), OW = p.OW();
    const Shape xs = p.input(), os = p.output();
    auto xv = random_values(shape_numel(xs), 42), gv = random_values(shape_numel(os), 43);
    std::vector<double> out_ref(shape_numel(os)), dx_ref(xv.size(), 0.0);
    std::vector<int32_t> idx_ref(out_ref.size());
    for (int64_t pl = 0; pl < p.N * p.C; ++pl)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double best = -INFINITY;
          int32_t at = -1;
          for (int64_t kh = 0; kh < p.a.kernel_h; ++kh)
            for (int64_t kw = 0; kw < p.a.kernel_w; ++kw) {
              const int64_t h = oh * p.a.stride_h + kh, w = ow * p.a.stride_w + kw;
              const double v = xv[pl * p.H * p.W + h * p.W + w];
              if (v > best) best = v, at = int32_t(h * p.W + w);
            }
          const int64_t o = (pl * OH + oh) * OW + ow;
          out_ref[o] = double(float(best));
          idx_ref[o] = at;
          dx_ref[pl * p.H * p.W + at] += gv[o];
        }
    Tensor out = poisoned(os), idx = Tensor::empty(os, DType::i32), dx = poisoned(xs);
    cpu().maxpool2d(make<float>(xv, xs), out, idx, p.a);
    expect_near_all(read<float>(out), out_ref, 0, 0, "maxpool out");
    const int32_t* ip = idx.data<int32_t>();
    ASSERT_EQ(std::vector<int32_t>(ip, ip + idx.numel()), idx_ref);
    cpu().maxpool2d_backward(make<float>(gv, os), idx, dx);
    expect_near_all(read<float>(dx), dx_ref, 1e-6, 1e-6, "maxpool dx");
  }
}

// bf16 planes: 2x2, stride-2 windows are pooled on their bf16 bits (AVX-512),
// others widened to f32; either way the same values, positions and
// gradients as the f32 op on the same (bf16-rounded) numbers, NaN included.
TEST(CpuNnOpsMaxPool2d, Bf16MatchesF32OnTheSameValues) {
  for (const PoolCase& p : kPoolCases) {
    const Shape xs = p.input(), os = p.output();
    const std::string what = shape_str(xs) + " kernel " + std::to_string(p.a.kernel_h);
    std::vector<double> xv = random_values(shape_numel(xs), 44);
    xv[3] = NAN;  // in the first window row: its output is NaN, pointing at it
    Tensor x16 = make<float>(xv, xs).to(DType::bf16), x32 = x16.to(DType::f32);
    Tensor g16 = make<float>(random_values(shape_numel(os), 45), os).to(DType::bf16), g32 = g16.to(DType::f32);
    Tensor out16 = Tensor::empty(os, DType::bf16), idx16 = Tensor::empty(os, DType::i32);
    Tensor out32 = poisoned(os), idx32 = Tensor::empty(os, DType::i32);
    cpu().maxpool2d(x16, out16, idx16, p.a);
    cpu().maxpool2d(x32, out32, idx32, p.a);
    const std::vector<float> got = out16.to(DType::f32).to_vector<float>(), want = out32.to_vector<float>();
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_TRUE(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))) << what << " out " << i;
    ASSERT_EQ(idx16.to_vector<int32_t>(), idx32.to_vector<int32_t>()) << what;
    Tensor dx16 = Tensor::empty(xs, DType::bf16), dx32 = poisoned(xs);
    cpu().maxpool2d_backward(g16, idx16, dx16);
    cpu().maxpool2d_backward(g32, idx32, dx32);
    EXPECT_EQ(dx16.to(DType::f32).to_vector<float>(), dx32.to(DType::bf16).to(DType::f32).to_vector<float>())
        << what;
  }
}

TEST(CpuNnOpsMaxPool2d, TiesPickFirstAndNaNPropagates) {
  Tensor x = make<float>({1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}, {1, 1, 4, 4});
  x.data<float>()[10] = std::numeric_limits<float>::quiet_NaN();
  Tensor out = poisoned({1, 1, 2, 2}), idx = Tensor::empty({1, 1, 2, 2}, DType::i32);
  cpu().maxpool2d(x, out, idx, {2, 2, 2, 2});
  const int32_t* ip = idx.data<int32_t>();
  EXPECT_EQ(ip[0], 0);
  EXPECT_EQ(ip[1], 2);
  EXPECT_EQ(ip[2], 12);  // the first 3 in its window
  EXPECT_EQ(ip[3], 10);  // the NaN
  EXPECT_TRUE(std::isnan(out.data<float>()[3]));
}

TEST(CpuNnOpsMaxPool2d, BadIndicesThrow) {
  Tensor idx = Tensor::from_vector<int32_t>({0, 3, 99, 1}, {1, 1, 2, 2}), dx = poisoned({1, 1, 4, 4});
  EXPECT_THROW(cpu().maxpool2d_backward(poisoned({1, 1, 2, 2}), idx, dx), Error);
}

}  // namespace
}  // namespace kiln
