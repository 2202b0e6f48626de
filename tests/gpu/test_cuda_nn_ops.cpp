// CUDA vs CPU: softmax, cross-entropy, layernorm, rms_norm, rotary, silu_mul,
// embedding, dropout and the optimizer steps, forward and backward.
#include <limits>

#include "kiln/autograd/ops.h"
#include "kiln/core/philox.h"
#include "tests/gpu/cuda_test_util.h"

namespace kiln::cuda_test {
namespace {

const DType kFloatDtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

TEST(CudaBackendSoftmax, ForwardAndBackwardMatchTheCpu) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  // C <= 1024 uses a warp per row, larger C a block per row.
  for (const Shape& shape : {Shape{5, 10}, Shape{2, 3, 7}, Shape{3, 1500}, Shape{1, 1}}) {
    for (DType t : kFloatDtypes) {
      for (bool log : {false, true}) {
        const DType rt = ref_dtype(t);
        Tensor x = host_random(shape, t, 10, -4, 4), dy = host_random(shape, t, 11);
        Tensor want = cpu_empty(shape, rt);
        cpu().softmax(host_cast(x, rt), want, log);
        Tensor got = gpu_poisoned(shape, t);
        gpu().softmax(to_gpu(x), got, log);
        const std::string what =
            std::string(log ? "log_softmax " : "softmax ") + dtype_name(t) + " " + shape_str(shape);
        expect_close(got, want, tol_for(t), what);
        // Backward from the same y on both sides (the GPU's y, rounded to t).
        Tensor y = to_host(got);
        Tensor want_dx = cpu_empty(shape, rt);
        cpu().softmax_backward(host_cast(y, rt), host_cast(dy, rt), want_dx, log);
        Tensor got_dx = gpu_poisoned(shape, t);
        gpu().softmax_backward(to_gpu(y), to_gpu(dy), got_dx, log);
        expect_close(got_dx, want_dx, tol_for(t), what + " backward");
      }
    }
  }
}

TEST(CudaBackendCrossEntropy, LossAndGradientWithIgnoredRows) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  const int64_t ignore = -100;
  // A warp per row up to C = 1024, a block beyond; f32 rows of a multiple of
  // 4 are read 16 bytes a lane; 50,304 is GPT-2's padded vocabulary.
  for (int64_t C : {int64_t(37), int64_t(1024), int64_t(1026), int64_t(5000), int64_t(50304)}) {
    for (DType t : kFloatDtypes) {
      for (DType tt : {DType::i32, DType::i64}) {
        const DType rt = ref_dtype(t);
        const int64_t N = 13;
        Tensor logits = host_random({N, C}, t, 20 + uint64_t(C), -3, 3);
        // Masked classes (-inf), first in a row, inside it, and last.
        for (int64_t at : {int64_t(1) * C, 1 * C + 3, 2 * C + C - 1, 5 * C + C / 2})
          write_element(logits.data_ptr(), t, at, -std::numeric_limits<double>::infinity());
        Tensor targets = host_random_ints({N}, tt, 21, 0, C);
        for (int64_t row : {1, 2, 5}) write_element(targets.data_ptr(), tt, row, 1.0);  // not a masked class
        write_element(targets.data_ptr(), tt, 4, double(ignore));
        write_element(targets.data_ptr(), tt, 9, double(ignore));
        const std::string what =
            std::string("cross_entropy ") + dtype_name(t) + " C=" + std::to_string(C) + " " + dtype_name(tt);
        Tensor want_loss = cpu_empty({N}, DType::f32), want_d = cpu_empty({N, C}, rt);
        cpu().cross_entropy(host_cast(logits, rt), targets, want_loss, want_d, 1.0f / 11, ignore);
        // Losses in f32, dlogits in a separate tensor.
        Tensor loss = gpu_poisoned({N}, DType::f32), d = gpu_poisoned({N, C}, t);
        gpu().cross_entropy(to_gpu(logits), to_gpu(targets), loss, d, 1.0f / 11, ignore);
        expect_close(loss, want_loss, tol_for(t == DType::f64 ? DType::f32 : t), what + " loss");
        expect_close(d, want_d, tol_for(t), what + " dlogits");
        // Losses in the logits' dtype, dlogits written over the logits.
        Tensor inplace = to_gpu(logits), loss_t = gpu_poisoned({N}, t);
        gpu().cross_entropy(inplace, to_gpu(targets), loss_t, inplace, 1.0f / 11, ignore);
        expect_close(loss_t, want_loss, tol_for(t == DType::f64 ? DType::f32 : t), what + " loss (logits dtype)");
        expect_close(inplace, want_d, tol_for(t), what + " dlogits in place");
        // The gradient rounded to bf16/f16 as it is written, beside f32 logits (autocast's head).
        for (DType narrow : {DType::bf16, DType::f16}) {
          if (t != DType::f32) break;
          Tensor loss_n = gpu_poisoned({N}, DType::f32), d_n = gpu_poisoned({N, C}, narrow);
          gpu().cross_entropy(to_gpu(logits), to_gpu(targets), loss_n, d_n, 1.0f / 11, ignore);
          expect_close(loss_n, want_loss, tol_for(t), what + " loss beside " + dtype_name(narrow) + " dlogits");
          expect_close(d_n, want_d, tol_for(narrow), what + " dlogits in " + dtype_name(narrow));
        }
        // No gradient wanted.
        Tensor none, loss_only = gpu_poisoned({N}, DType::f32);
        gpu().cross_entropy(to_gpu(logits), to_gpu(targets), loss_only, none, 1.0f, ignore);
        expect_close(loss_only, want_loss, tol_for(t == DType::f64 ? DType::f32 : t), what + " loss only");
      }
    }
  }
}

// Bad input is found by the kernels and reported at the next synchronisation
// (the op itself does not wait for the GPU): once, with its message.
void expect_input_error_at_sync(const std::string& contains) {
  try {
    gpu().synchronize(0);
    ADD_FAILURE() << "no error at the synchronisation; expected one containing " << contains;
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find(contains), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(gpu().synchronize(0)) << "an input error is reported once";
}

TEST(CudaBackendCrossEntropy, OutOfRangeTargetThrowsAtTheNextSync) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  Tensor logits = to_gpu(host_random({4, 6}, DType::f32, 1));
  Tensor targets = to_gpu(host_from_values({1, 2, 6, 0}, {4}, DType::i64));
  Tensor loss = gpu_poisoned({4}, DType::f32), none;
  EXPECT_NO_THROW(gpu().cross_entropy(logits, targets, loss, none, 1.0f, -100));
  EXPECT_THROW(to_host(loss), kiln::Error) << "a copy to the host is a synchronisation";
  EXPECT_NO_THROW(to_host(loss)) << "reported once";
  gpu().cross_entropy(logits, targets, loss, none, 1.0f, -100);
  expect_input_error_at_sync("targets[2] is outside [0, 6)");
  Tensor good = to_gpu(host_from_values({1, 2, 5, 0}, {4}, DType::i64));
  gpu().cross_entropy(logits, good, loss, none, 1.0f, -100);
  EXPECT_NO_THROW(gpu().synchronize(0));
}

TEST(CudaBackendLayerNorm, ForwardAndBackwardMatchTheCpu) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  // Rows of a multiple of 16 bytes up to 1,024 f32 or bf16/f16 take the
  // register-row backward, each warp over several rows when N is large;
  // the rest (37, 2000, f64) the general kernels.
  for (const Shape& shape : {Shape{13, 37}, Shape{4, 768}, Shape{3, 2000}, Shape{257, 64}, Shape{2051, 768},
                             Shape{3001, 1024}, Shape{9, 520}}) {
    for (DType t : kFloatDtypes) {
      const DType rt = ref_dtype(t), st = t == DType::f64 ? DType::f64 : DType::f32;
      const int64_t N = shape[0], C = shape[1];
      Tensor x = host_random(shape, t, 30, -2, 3), w = host_random({C}, t, 31, 0.5, 1.5), b = host_random({C}, t, 32);
      Tensor dy = host_random(shape, t, 33);
      const std::string what = std::string("layernorm ") + dtype_name(t) + " " + shape_str(shape);
      Tensor y_ref = cpu_empty(shape, rt), mean_ref = cpu_empty({N}, rt), rstd_ref = cpu_empty({N}, rt);
      cpu().layernorm(host_cast(x, rt), host_cast(w, rt), host_cast(b, rt), 1e-5f, y_ref, mean_ref, rstd_ref);
      Tensor y = gpu_poisoned(shape, t), mean = gpu_poisoned({N}, st), rstd = gpu_poisoned({N}, st);
      Tensor xd = to_gpu(x), wd = to_gpu(w);
      gpu().layernorm(xd, wd, to_gpu(b), 1e-5f, y, mean, rstd);
      Tol tol = tol_for(t);
      if (t == DType::f32) tol = {1e-5, 1e-5};  // f32 sums on the GPU, f64 on the CPU
      expect_close(y, y_ref, tol, what + " y");
      expect_close(mean, mean_ref, t == DType::f64 ? tol : Tol{1e-5, 1e-5}, what + " mean");
      expect_close(rstd, rstd_ref, t == DType::f64 ? tol : Tol{1e-5, 1e-5}, what + " rstd");

      Tensor dx_ref = cpu_empty(shape, rt), dw_ref = cpu_empty({C}, rt), db_ref = cpu_empty({C}, rt);
      cpu().layernorm_backward(host_cast(dy, rt), host_cast(x, rt), host_cast(w, rt), mean_ref, rstd_ref, dx_ref,
                               dw_ref, db_ref);
      Tensor dx = gpu_poisoned(shape, t), dw = gpu_poisoned({C}, t), db = gpu_poisoned({C}, t);
      gpu().layernorm_backward(to_gpu(dy), xd, wd, mean, rstd, dx, dw, db);
      Tol sums = tol;  // dw/db add N terms
      sums.atol = std::max(sums.atol, (t == DType::f64 ? 1e-13 : 4e-7) * double(N));
      expect_close(dx, dx_ref, tol, what + " dx");
      expect_close(dw, dw_ref, sums, what + " dweight");
      expect_close(db, db_ref, sums, what + " dbias");

      // No weight, dx written over dy, and only one of the parameter sums.
      Tensor none, dx2_ref = cpu_empty(shape, rt), dw2_ref = cpu_empty({C}, rt), db2_ref = cpu_empty({C}, rt);
      Tensor ones = host_from_values(std::vector<double>(size_t(C), 1.0), {C}, rt);  // the CPU wants every tensor
      cpu().layernorm_backward(host_cast(dy, rt), host_cast(x, rt), ones, mean_ref, rstd_ref, dx2_ref, dw2_ref,
                               db2_ref);
      Tensor dy_then_dx = to_gpu(dy), db2 = gpu_poisoned({C}, t);
      gpu().layernorm_backward(dy_then_dx, xd, none, mean, rstd, dy_then_dx, none, db2);
      expect_close(dy_then_dx, dx2_ref, tol, what + " dx over dy, no weight");
      expect_close(db2, db2_ref, sums, what + " dbias alone");
    }
  }
}

// Autocast's lowered side (layer_norm_for_matmul): f32 rows with y and dy in
// bf16/f16. The same bits as the f32 output cast, and the f32 backward of
// dy's values, on both the register-row and the general backward.
TEST(CudaBackendLayerNorm, LoweredOutputAndGradientAreTheCastsBitForBit) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  for (const Shape& shape : {Shape{13, 37}, Shape{2051, 768}, Shape{9, 520}, Shape{3, 2000}}) {
    for (DType low : {DType::bf16, DType::f16}) {
      const int64_t N = shape[0], C = shape[1];
      const std::string what = std::string("layernorm f32 rows, ") + dtype_name(low) + " y/dy " + shape_str(shape);
      Tensor xd = to_gpu(host_random(shape, DType::f32, 40, -2, 3)), wd = to_gpu(host_random({C}, DType::f32, 41));
      Tensor bd = to_gpu(host_random({C}, DType::f32, 42));
      Tensor y32 = gpu_poisoned(shape, DType::f32), mean = gpu_poisoned({N}, DType::f32);
      Tensor rstd = gpu_poisoned({N}, DType::f32);
      gpu().layernorm(xd, wd, bd, 1e-5f, y32, mean, rstd);
      Tensor y = gpu_poisoned(shape, low), mean2 = gpu_poisoned({N}, DType::f32), rstd2 = gpu_poisoned({N}, DType::f32);
      gpu().layernorm(xd, wd, bd, 1e-5f, y, mean2, rstd2);
      Tensor y32_cast = gpu_poisoned(shape, low);
      gpu().copy(y32, y32_cast);
      expect_equal(y, to_host(y32_cast), what + " y");

      Tensor dy = to_gpu(host_random(shape, low, 43)), dy32 = gpu_poisoned(shape, DType::f32);
      gpu().copy(dy, dy32);
      Tensor dx = gpu_poisoned(shape, DType::f32), dw = gpu_poisoned({C}, DType::f32), db = gpu_poisoned({C}, DType::f32);
      gpu().layernorm_backward(dy, xd, wd, mean, rstd, dx, dw, db);
      Tensor dx32 = gpu_poisoned(shape, DType::f32), dw32 = gpu_poisoned({C}, DType::f32);
      Tensor db32 = gpu_poisoned({C}, DType::f32);
      gpu().layernorm_backward(dy32, xd, wd, mean, rstd, dx32, dw32, db32);
      expect_equal(dx, to_host(dx32), what + " dx");
      expect_equal(dw, to_host(dw32), what + " dweight");
      expect_equal(db, to_host(db32), what + " dbias");
    }
  }
  // Lowered only beside f32 rows.
  Tensor x16 = to_gpu(host_random({4, 64}, DType::f16, 44)), y = gpu_poisoned({4, 64}, DType::bf16);
  Tensor m = gpu_poisoned({4}, DType::f32), r = gpu_poisoned({4}, DType::f32), none;
  EXPECT_THROW(gpu().layernorm(x16, none, none, 1e-5f, y, m, r), kiln::Error);
}

TEST(CudaBackendRmsNorm, MatchesTheCpuInEveryDtype) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  // The CPU computes bf16/f16 rows directly, rounding where the GPU rounds.
  for (const Shape& shape : {Shape{13, 37}, Shape{1, 576}, Shape{9, 2048}, Shape{1000, 64}}) {
    for (DType t : kFloatDtypes) {
      for (bool plus_one : {false, true}) {
        const DType st = t == DType::f64 ? DType::f64 : DType::f32;
        const int64_t N = shape[0], C = shape[1];
        Tensor x = host_random(shape, t, 50, -2, 3), w = host_random({C}, t, 51, 0.5, 1.5);
        const std::string what = std::string("rms_norm ") + dtype_name(t) + " " + shape_str(shape) +
                                 (plus_one ? " plus one" : "");
        Tensor y_ref = cpu_empty(shape, t), rstd_ref = cpu_empty({N}, st);
        cpu().rms_norm(x, w, 1e-6f, plus_one, y_ref, rstd_ref);
        Tensor y = gpu_poisoned(shape, t), rstd = gpu_poisoned({N}, st);
        gpu().rms_norm(to_gpu(x), to_gpu(w), 1e-6f, plus_one, y, rstd);
        Tol tol = tol_for(t);
        if (t == DType::f32) tol = {1e-5, 1e-5};  // f32 sums on the GPU, f64 on the CPU
        expect_close(y, y_ref, tol, what + " y");
        expect_close(rstd, rstd_ref, t == DType::f64 ? tol : Tol{1e-5, 1e-5}, what + " rstd");
      }
    }
  }
}

TEST(CudaBackendRotary, GivesTheCpusBitsWithSharedAndPerRowTables) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  const int64_t B = 2, H = 3, T = 5, D = 10;
  for (DType t : kFloatDtypes) {
    for (int64_t R : {D, int64_t(6)}) {
      Tensor x = host_random({B, H, T, D}, t, 60, -3, 3);
      // [T, R] shared by every head and row (strides 0), and [B, 1, T, R] per row.
      for (const Shape& table : {Shape{1, 1, T, R}, Shape{B, 1, T, R}}) {
        Tensor c = host_random(table, t, 61), s = host_random(table, t, 62);
        const std::string what = std::string("rotary ") + dtype_name(t) + " R " + std::to_string(R) + " table " +
                                 shape_str(table);
        const Shape wide{B, H, T, R};
        Tensor y_ref = cpu_empty(x.shape(), t);
        cpu().rotary(x, kiln::expand(c, wide), kiln::expand(s, wide), y_ref);
        Tensor y = gpu_poisoned(x.shape(), t);
        gpu().rotary(to_gpu(x), kiln::expand(to_gpu(c), wide), kiln::expand(to_gpu(s), wide), y);
        expect_equal(y, y_ref, what);  // each product and the sum rounded once, on both
      }
    }
  }
}

TEST(CudaBackendSiluMul, MatchesTheCpuInEveryDtype) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  for (const Shape& shape : {Shape{1, 1536}, Shape{37, 129}}) {
    for (DType t : kFloatDtypes) {
      Tensor gate = host_random(shape, t, 70, -8, 8), up = host_random(shape, t, 71, -2, 2);
      const std::string what = std::string("silu_mul ") + dtype_name(t) + " " + shape_str(shape);
      Tensor out_ref = cpu_empty(shape, t);
      cpu().silu_mul(gate, up, out_ref);
      Tensor out = gpu_poisoned(shape, t);
      gpu().silu_mul(to_gpu(gate), to_gpu(up), out);
      expect_close(out, out_ref, tol_for(t), what);  // (the sigmoid's exp: fast_exp on the CPU, expf here)
    }
  }
}

TEST(CudaBackendEmbedding, GatherAndDeterministicScatterAdd) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  for (DType t : kFloatDtypes) {
    for (DType it : {DType::i32, DType::i64}) {
      const int64_t V = 50, C = 37;
      Tensor w = host_random({V, C}, t, 40);
      Tensor ids = host_random_ints({3, 41}, it, 41, 0, 7);  // few distinct ids: many repeats
      write_element(ids.data_ptr(), it, 5, double(V - 1));
      const std::string what = std::string("embedding ") + dtype_name(t) + " " + dtype_name(it);
      Tensor out_ref = cpu_empty({3, 41, C}, t);
      cpu().embedding(w, ids, out_ref);  // a gather works for every dtype on the CPU
      Tensor out = gpu_poisoned({3, 41, C}, t);
      gpu().embedding(to_gpu(w), to_gpu(ids), out);
      expect_equal(out, out_ref, what + " forward");

      const DType rt = ref_dtype(t);
      Tensor dout = host_random({3, 41, C}, t, 42), dw0 = host_random({V, C}, t, 43);
      Tensor dw_ref = host_cast(dw0, rt);
      cpu().embedding_backward(host_cast(dout, rt), ids, dw_ref);  // accumulates
      Tensor dw = to_gpu(dw0);
      gpu().embedding_backward(to_gpu(dout), to_gpu(ids), dw);
      Tol tol = tol_for(t);
      if (t == DType::f32) tol = {1e-5, 1e-5};
      expect_close(dw, dw_ref, tol, what + " backward");
      // Deterministic: a second run from the same start gives identical bits.
      Tensor dw2 = to_gpu(dw0);
      gpu().embedding_backward(to_gpu(dout), to_gpu(ids), dw2);
      expect_equal(dw2, to_host(dw), what + " backward is deterministic");
    }
  }
}

TEST(CudaBackendEmbedding, OutOfRangeIdsThrowAtTheNextSync) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  Tensor w = to_gpu(host_random({10, 4}, DType::f32, 1));
  Tensor bad = to_gpu(host_from_values({1, 10}, {2}, DType::i32)),
         neg = to_gpu(host_from_values({-1}, {1}, DType::i64));
  Tensor out = gpu_poisoned({2, 4}, DType::f32), out1 = gpu_poisoned({1, 4}, DType::f32);
  gpu().embedding(w, bad, out);
  expect_input_error_at_sync("embedding: ids[1] (flat index) is outside [0, 10)");
  gpu().embedding(w, neg, out1);
  expect_input_error_at_sync("embedding: ids[0]");
  Tensor dw = gpu_poisoned({10, 4}, DType::f32);
  gpu().embedding_backward(out, bad, dw);
  expect_input_error_at_sync("embedding_backward: ids[1]");
  Tensor good = to_gpu(host_from_values({1, 9}, {2}, DType::i32));
  gpu().embedding(w, good, out);
  EXPECT_NO_THROW(to_host(out));
}

TEST(CudaBackendDropout, SameMaskAsTheCpuAndPhilox) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  for (DType t : kFloatDtypes) {
    for (uint64_t offset : {uint64_t(0), uint64_t(3), uint64_t(1) << 33}) {
      for (float p : {0.0f, 0.1f, 0.5f, 1.0f}) {
        const int64_t n = 1001;
        Tensor got = gpu_poisoned({7, 143}, t);
        gpu().dropout_mask(got, p, 1234, offset);
        std::vector<double> g = host_values(to_host(got));
        // Independent reference: the Philox formula itself.
        const double scale = host_values(host_from_values({1.0 / (1.0 - double(p))}, {1}, t))[0];
        int mismatches = 0;
        for (int64_t i = 0; i < n; ++i) {
          const bool keep = philox_uniform(1234, offset, uint64_t(i)) >= p;
          const double want = keep ? scale : 0.0;
          if (keep ? std::abs(g[size_t(i)] - want) > 1e-6 * want : g[size_t(i)] != 0.0) ++mismatches;
        }
        EXPECT_EQ(mismatches, 0) << "dropout " << dtype_name(t) << " p=" << p << " offset=" << offset;
        if (t == DType::f32 || t == DType::f64) {
          Tensor want = cpu_empty({7, 143}, t);
          cpu().dropout_mask(want, p, 1234, offset);
          expect_close(got, want, tol_for(t), std::string("dropout vs cpu ") + dtype_name(t));
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln::cuda_test
