// All-reduce bus bandwidth: Kiln's communicator against a raw MPI_Allreduce
// loop on the same buffers, same ranks, interleaved (run under mpirun; see
// bench/distributed/scaling.sh). Bus bandwidth = 2 (N - 1) / N x bytes / time, the
// figure nccl-tests reports, comparable across rank counts.
#define OMPI_SKIP_MPICXX 1  // the C API only
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "kiln/backend/factory.h"
#include "kiln/distributed/world.h"

using namespace kiln;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double seconds_per_call(F f, int iterations) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) f();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iterations;
  MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // the slowest rank's time
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  distributed::init_from_environment(&argc, &argv);
  const int n = distributed::world_size();
  if (distributed::is_rank0())
    std::printf("| bytes | Kiln bus GB/s | raw MPI bus GB/s | Kiln / MPI |\n|---:|---:|---:|---:|\n");
  for (int64_t bytes = 4 << 10; bytes <= (int64_t(64) << 20); bytes *= 4) {
    const int64_t count = bytes / 4;
    Tensor t = zeros({count}, DType::f32, Device::cpu());
    std::vector<float> raw(size_t(count), 1.0f);
    const int iterations = int(std::clamp<int64_t>((int64_t(256) << 20) / bytes, 5, 2000));
    std::vector<double> kiln_s, mpi_s;
    for (int round = 0; round < 5; ++round) {  // interleaved rounds, medians
      kiln_s.push_back(seconds_per_call([&] { distributed::world().all_reduce(t, distributed::Reduce::sum); }, iterations));
      mpi_s.push_back(seconds_per_call(
          [&] { MPI_Allreduce(MPI_IN_PLACE, raw.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
          iterations));
    }
    const double factor = 2.0 * (n - 1) / n * double(bytes) / 1e9;
    const double k = factor / median(kiln_s), m = factor / median(mpi_s);
    if (distributed::is_rank0()) std::printf("| %lld | %.2f | %.2f | %.2f |\n", (long long)bytes, k, m, k / m);
  }
  return 0;
}
