// Every collective of the communicator, run by each rank of
// `mpirun -np N kiln_dist_check` or `tests/distributed/launch_local.sh N
// kiln_dist_check` (torchrun-style, over Gloo); tests/dist_tests.cmake runs
// N = 2 and 4 both ways.
// Values depend on the rank, so a result that skipped a rank, or mixed two
// up, is caught. Exits non-zero with the failing check on any rank.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/backend/factory.h"
#include "kiln/core/error.h"
#include "kiln/distributed/world.h"

using namespace kiln;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "%sFAILED: %s\n", distributed::rank_prefix().c_str(), what.c_str());
  ++failures;
}

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

}  // namespace

int main(int argc, char** argv) {
  distributed::init_from_environment(&argc, &argv);
  distributed::Communicator& comm = distributed::world();
  const int r = comm.rank(), n = comm.world_size();
  check(n > 1, "started without a launcher (world of " + std::to_string(n) + ")");
  try {
    // all_reduce: sum and mean, f32, f64 and bf16 (reduced through f32), and a strided view.
    for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
      Tensor t = copy_to(Tensor::from_vector<float>({float(r), float(2 * r + 1), 4.f}, {3}), Device::cpu(), dt);
      comm.all_reduce(t, distributed::Reduce::sum);
      const float s = float(n * (n - 1) / 2);
      check(values(t) == std::vector<float>{s, 2 * s + float(n), 4.f * float(n)},
            std::string("all_reduce sum in ") + dtype_name(dt));
      Tensor m = copy_to(Tensor::from_vector<float>({float(r)}, {1}), Device::cpu(), dt);
      comm.all_reduce(m, distributed::Reduce::avg);
      check(std::abs(values(m)[0] - float(n - 1) / 2) < 1e-2f, std::string("all_reduce avg in ") + dtype_name(dt));
    }
    Tensor grid = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor column = grid.slice(1, 1, 2);  // strided
    comm.all_reduce(column, distributed::Reduce::sum);
    check(values(grid) == std::vector<float>{1, 2.f * float(n), 3, 4, 5.f * float(n), 6}, "all_reduce of a strided view");

    // broadcast from the last rank.
    Tensor b = Tensor::from_vector<float>({float(r), float(r)}, {2});
    comm.broadcast(b, n - 1);
    check(values(b) == std::vector<float>{float(n - 1), float(n - 1)}, "broadcast from the last rank");

    // all_gather: rank order.
    Tensor mine = Tensor::from_vector<float>({float(r), float(10 * r)}, {2});
    Tensor all = Tensor::empty({int64_t(2 * n)}, DType::f32);
    comm.all_gather(mine, all);
    std::vector<float> want;
    for (int i = 0; i < n; ++i) want.insert(want.end(), {float(i), float(10 * i)});
    check(values(all) == want, "all_gather in rank order");

    // reduce_scatter: rank i gets the sum of everyone's slice i.
    std::vector<float> in(size_t(2 * n));
    for (int i = 0; i < 2 * n; ++i) in[size_t(i)] = float(i + r);
    Tensor part = Tensor::empty({2}, DType::f32);
    comm.reduce_scatter(Tensor::from_vector(in, {int64_t(2 * n)}), part, distributed::Reduce::sum);
    const float ranks = float(n * (n - 1) / 2);
    check(values(part) == std::vector<float>{float(n * 2 * r) + ranks, float(n * (2 * r + 1)) + ranks},
          "reduce_scatter sum");

    // send/recv around a ring (even ranks send first, so no deadlock).
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    Tensor out = Tensor::from_vector<int64_t>({int64_t(r) * 100}, {1}), got = Tensor::empty({1}, DType::i64);
    if (r % 2 == 0) {
      comm.send(out, next);
      comm.recv(got, prev);
    } else {
      comm.recv(got, prev);
      comm.send(out, next);
    }
    check(got.to_vector<int64_t>()[0] == int64_t(prev) * 100, "send/recv around the ring");
    comm.barrier();

    // send_recv: everyone at once, to the next rank and from the previous one
    // (a ring of blocking sends would deadlock), with a large message.
    Tensor big_out = full({1 << 16}, float(r), DType::f32), big_in = Tensor::empty({1 << 16}, DType::f32);
    comm.send_recv(big_out, next, big_in, prev);
    check(values(big_in) == std::vector<float>(1 << 16, float(prev)), "send_recv around the ring");

    // split: even and odd ranks, each group ranked in reverse; a reduction
    // stays inside its group.
    auto group = comm.split(r % 2, -r);
    const int group_size = (n + 1 - r % 2) / 2;
    check(group->world_size() == group_size, "split: group size");
    check(group->rank() == group_size - 1 - r / 2, "split: rank by key");
    Tensor within = Tensor::from_vector<float>({float(r)}, {1});
    group->all_reduce(within, distributed::Reduce::sum);
    float group_sum = 0;
    for (int i = r % 2; i < n; i += 2) group_sum += float(i);
    check(values(within)[0] == group_sum, "all_reduce inside a split");

    bool refused = false;
    try {
      comm.send(out, n);
    } catch (const Error& e) {
      refused = std::string(e.what()).find("does not exist") != std::string::npos;
    }
    check(refused, "a send to a rank that does not exist is a clear error");
  } catch (const std::exception& e) {
    check(false, e.what());
  }
  if (failures == 0 && r == 0)
    std::printf("collectives: all checks passed on %d ranks over %s\n", n, comm.transport().c_str());
  return failures == 0 ? 0 : 1;
}
