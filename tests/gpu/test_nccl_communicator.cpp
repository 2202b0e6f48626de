// The NCCL transport with one rank on one GPU: every operation on CUDA
// tensors gives what the world of one gives (the non-distributed path), and
// host tensors still go through the host transport. Several GPUs need a
// multi-GPU machine (docs/DISTRIBUTED.md).
#include <gtest/gtest.h>

#include "kiln/backend/factory.h"
#include "kiln/distributed/nccl_transport.h"

namespace kiln {
namespace {

std::vector<float> values(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

TEST(NcclCommunicator, OneRankOnOneGpuMatchesTheWorldOfOne) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto comm = distributed::with_nccl(distributed::make_single_communicator());
#ifndef KILN_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL: device tensors go through host copies";
#endif
  EXPECT_EQ(comm->transport(), "single+nccl");
  const Device gpu = Device::cuda();
  const std::vector<float> v{1.5f, -2.f, 3.25f, 4.f};
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor t = copy_to(Tensor::from_vector(v, {4}), gpu, dt);
    comm->all_reduce(t, distributed::Reduce::sum);
    EXPECT_EQ(values(t.to(DType::f32)), v) << dtype_name(dt);
    comm->all_reduce(t, distributed::Reduce::avg);
    EXPECT_EQ(values(t.to(DType::f32)), v) << dtype_name(dt);
  }
  Tensor grid = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).to(gpu);
  Tensor column = grid.slice(1, 1, 2);  // strided: packed and unpacked
  comm->start_all_reduce(column, distributed::Reduce::sum)->wait();
  EXPECT_EQ(values(grid), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  Tensor b = Tensor::from_vector(v, {4}).to(gpu);
  comm->broadcast(b, 0);
  EXPECT_EQ(values(b), v);
  Tensor all = Tensor::empty({4}, DType::f32, gpu), part = Tensor::empty({4}, DType::f32, gpu);
  comm->all_gather(b, all);
  comm->reduce_scatter(b, part, distributed::Reduce::sum);
  EXPECT_EQ(values(all), v);
  EXPECT_EQ(values(part), v);
  Tensor got = Tensor::empty({4}, DType::f32, gpu);
  comm->send_recv(b, 0, got, 0);
  EXPECT_EQ(values(got), v);
  // Host tensors take the host transport.
  Tensor host = Tensor::from_vector(v, {4});
  comm->all_reduce(host, distributed::Reduce::sum);
  EXPECT_EQ(values(host), v);
}

}  // namespace
}  // namespace kiln
