// CUDA vs CPU: paged attention over a pool of pages (grouped-query heads,
// spans that start past 0 as a sliding window's do, pages out of order)
// and the row scatter that fills the pages.
#include "tests/gpu/cuda_test_util.h"

namespace kiln::cuda_test {
namespace {

TEST(CudaBackendPagedAttention, MatchesTheCpu) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  const int64_t pages = 7, P = 4, Hkv = 2, H = 6, D = 24;
  // Two sequences: pages {5, 0, 3} and {6, 2}; four query rows.
  const std::vector<int32_t> tables = {5, 0, 3, 6, 2, 0};
  const std::vector<int32_t> spans = {0, 0, 11, 0, 3, 9, 1, 0, 8, 1, 5, 6};
  const Tensor table = Tensor::from_vector(tables, {2, 3}), span = Tensor::from_vector(spans, {4, 3});
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor k = host_random({pages, Hkv, D, P}, t, 10), v = host_random({pages, Hkv, P, D}, t, 11);
    const Tensor q = host_random({4, H, D}, t, 12);
    for (float softcap : {0.0f, 0.5f}) {  // 0.5: small enough that the cap changes every score
      Tensor want = cpu_empty({4, H, D}, t);
      cpu().paged_attention(q, k, v, table, span, want, 0.2f, softcap);
      Tensor got = gpu_poisoned({4, H, D}, t);
      gpu().paged_attention(to_gpu(q), to_gpu(k), to_gpu(v), to_gpu(table), to_gpu(span), got, 0.2f, softcap);
      expect_close(got, want, tol_for(t),
                   std::string("paged attention ") + dtype_name(t) + " softcap " + std::to_string(softcap));
    }
  }
  // A page outside the pool is an error, not a read outside it.
  const Tensor k = host_random({pages, Hkv, D, P}, DType::f32, 1), v = host_random({pages, Hkv, P, D}, DType::f32, 2);
  Tensor out = gpu_poisoned({1, H, D}, DType::f32);
  // It is reported at the next synchronisation (the op does not wait for the GPU).
  gpu().paged_attention(to_gpu(host_random({1, H, D}, DType::f32, 3)), to_gpu(k), to_gpu(v),
                        to_gpu(Tensor::from_vector(std::vector<int32_t>{99}, {1, 1})),
                        to_gpu(Tensor::from_vector(std::vector<int32_t>{0, 0, 2}, {1, 3})), out, 1.0f, 0.0f);
  EXPECT_THROW(to_host(out), kiln::Error);
  EXPECT_NO_THROW(to_host(out)) << "reported once";
}

TEST(CudaBackendScatterRows, MatchesTheCpu) {
  if (!kiln::cuda_is_available()) GTEST_SKIP() << kiln::cuda_unavailable_reason();
  for (DType t : {DType::f32, DType::bf16}) {
    const Tensor src = host_random({3, 4}, t, 20);
    const Tensor offsets = Tensor::from_vector(std::vector<int64_t>{1, 40, 22}, {3});
    for (int64_t stride : {1, 5}) {
      Tensor want = host_random({64}, t, 21);
      Tensor got = to_gpu(want);
      cpu().scatter_rows(src, offsets, stride, want);
      gpu().scatter_rows(to_gpu(src), to_gpu(offsets), stride, got);
      expect_close(got, want, {0, 0}, std::string("scatter_rows ") + dtype_name(t));
    }
  }
  Tensor dst = to_gpu(host_random({8}, DType::f32, 3));
  const Tensor past_the_end = to_gpu(Tensor::from_vector(std::vector<int64_t>{6}, {1}));
  gpu().scatter_rows(to_gpu(host_random({1, 4}, DType::f32, 4)), past_the_end, 1, dst);
  EXPECT_THROW(to_host(dst), kiln::Error) << "a row past dst's end is reported at the next synchronisation";
}

}  // namespace
}  // namespace kiln::cuda_test
