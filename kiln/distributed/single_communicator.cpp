// The world of one: what every collective means with a single rank.
#include "kiln/backend/factory.h"
#include "kiln/distributed/communicator.h"

namespace kiln::distributed {

namespace {

struct Done final : Pending {
  void wait() override {}
};

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string transport() const override { return "single"; }
  std::unique_ptr<Pending> start_all_reduce(Tensor&, Reduce) override { return std::make_unique<Done>(); }
  void broadcast(Tensor&, int root) override { check_peer(root); }
  void all_gather(const Tensor& in, Tensor& out) override { copy_into(in, out); }
  void reduce_scatter(const Tensor& in, Tensor& out, Reduce) override { copy_into(in, out); }
  void send(const Tensor&, int peer) override { check_peer(peer); }
  void recv(Tensor&, int peer) override { check_peer(peer); }
  void send_recv(const Tensor& out, int to, Tensor& in, int from) override {
    check_peer(to);
    check_peer(from);
    copy_into(out, in);  // to yourself
  }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<SingleCommunicator>(); }

 private:
  static void check_peer(int peer) {
    KILN_CHECK(peer == 0, "rank ", peer, " does not exist in a single-process run (launch with mpirun -np N, or torchrun-style: docs/DISTRIBUTED.md)");
  }
};

}  // namespace

std::unique_ptr<Communicator> make_single_communicator() { return std::make_unique<SingleCommunicator>(); }

}  // namespace kiln::distributed
