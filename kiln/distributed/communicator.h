// Collectives on Kiln tensors across the ranks of a job. One interface,
// several transports: OpenMPI (mpi_communicator.cpp) or Gloo for a
// torchrun-style launch (gloo_communicator.cpp) for host tensors, and NCCL
// for device tensors. A single process is a world of one whose collectives are
// identities, so every caller runs the same code with or without a launcher.
//
// Every call blocks until its result is in place, and gives up after the
// world's timeout with an error naming this rank and the operation: a peer
// that died or hangs ends the job instead of hanging it.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::distributed {

enum class Reduce { sum, avg };

// A collective that may still be running: wait() completes it and puts the
// result in place. Until then its tensor must not be touched.
class Pending {
 public:
  virtual ~Pending() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string transport() const = 0;  // "single", "mpi", "gloo"; "+nccl" where GPUs carry device tensors

  // In place: every rank ends with the sum (or mean) of all ranks' `t`.
  virtual void all_reduce(Tensor& t, Reduce op) { start_all_reduce(t, op)->wait(); }
  // The same, returning while it runs: data parallelism launches a bucket's
  // all-reduce as soon as backward has filled it, and waits at the end.
  virtual std::unique_ptr<Pending> start_all_reduce(Tensor& t, Reduce op) = 0;
  // In place: every rank ends with root's `t`.
  virtual void broadcast(Tensor& t, int root) = 0;
  // out [world * n, ...] = every rank's in [n, ...], in rank order.
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // out [n, ...] = this rank's slice of the reduction of in [world * n, ...].
  virtual void reduce_scatter(const Tensor& in, Tensor& out, Reduce op) = 0;
  virtual void send(const Tensor& t, int peer) = 0;
  virtual void recv(Tensor& t, int peer) = 0;
  // Sends `out` to rank `to` while receiving `in` from rank `from`: two
  // neighbours that exchange at once (pipeline stages) cannot deadlock.
  virtual void send_recv(const Tensor& out, int to, Tensor& in, int from) = 0;
  virtual void barrier() = 0;
  // A communicator over the ranks that pass the same `color`, ranked by
  // `key` (MPI_Comm_split): the data-parallel replicas of one pipeline
  // stage, or the stages of one replica. Collective: every rank calls it.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Gives up on a collective after this long (--dist-timeout).
  virtual void set_timeout(std::chrono::seconds t) { timeout_ = t; }
  std::chrono::seconds timeout() const { return timeout_; }

 private:
  std::chrono::seconds timeout_{300};
};

// The world of one: collectives leave tensors as they are.
std::unique_ptr<Communicator> make_single_communicator();

}  // namespace kiln::distributed
