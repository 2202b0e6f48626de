// Collectives over OpenMPI. Host tensors go to MPI as they are (contiguous,
// in a type MPI can reduce); device tensors and 2-byte floats go through a
// host f32 copy. Blocking operations are MPI's blocking calls (its fastest
// algorithms) under a watchdog thread; the asynchronous all-reduce is the
// nonblocking call, polled with a deadline. Either way a dead or hung peer
// ends the job with an error naming this rank instead of hanging it.
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "kiln/backend/factory.h"
#include "kiln/distributed/mpi_transport.h"
#include "kiln/distributed/staging.h"

#ifdef KILN_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: the deprecated C++ bindings need another library
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace kiln::distributed {

#ifdef KILN_HAVE_MPI

namespace {

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  KILN_CHECK(false, "MPI ", what, " failed: ", std::string(text, size_t(len)));
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i64: return MPI_INT64_T;
    case DType::i32: return MPI_INT32_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;  // moved, never reduced
    default: KILN_CHECK(false, "MPI: no datatype for ", dtype_name(t));
  }
  return MPI_BYTE;
}

class MpiCommunicator;

struct PendingAllReduce final : Pending {
  PendingAllReduce(const MpiCommunicator& c, Tensor& t, Reduce o) : comm(c), target(t), op(o), host(staged(t, true)) {}
  void wait() override;
  const MpiCommunicator& comm;
  Tensor target;
  Reduce op;
  Tensor host;
  MPI_Request req = MPI_REQUEST_NULL;
};

class MpiCommunicator final : public Communicator {
 public:
  // `comm`: MPI_COMM_WORLD, or a split of it that this object frees.
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
    watchdog_ = std::thread([this] { watch(); });
  }
  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(watch_.mutex);
      watch_.stop = true;
    }
    watch_.wake.notify_all();
    watchdog_.join();
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  std::string transport() const override { return "mpi"; }

  std::unique_ptr<Pending> start_all_reduce(Tensor& t, Reduce op) override {
    auto p = std::make_unique<PendingAllReduce>(*this, t, op);
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, p->host.data_ptr(), int(p->host.numel()), mpi_type(p->host.dtype()),
                             MPI_SUM, comm_, &p->req), "all-reduce");
    return p;
  }

  void all_reduce(Tensor& t, Reduce op) override {
    Tensor h = staged(t, true);
    blocking("all-reduce", h.nbytes(), [&] {
      return MPI_Allreduce(MPI_IN_PLACE, h.data_ptr(), int(h.numel()), mpi_type(h.dtype()), MPI_SUM, comm_);
    });
    if (op == Reduce::avg) average(h);
    write_back(h, t);
  }

  void broadcast(Tensor& t, int root) override {
    check_peer(root);
    Tensor h = staged(t, false);
    blocking("broadcast", h.nbytes(),
             [&] { return MPI_Bcast(h.data_ptr(), int(h.numel()), mpi_type(h.dtype()), root, comm_); });
    write_back(h, t);
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    KILN_CHECK(out.numel() == in.numel() * size_ && out.dtype() == in.dtype(), "all_gather: out must hold ", size_,
               " x the input's ", in.numel(), " elements of ", dtype_name(in.dtype()));
    Tensor hi = staged(in, false), ho = staged(out, false);
    blocking("all-gather", ho.nbytes(), [&] {
      return MPI_Allgather(hi.data_ptr(), int(hi.numel()), mpi_type(hi.dtype()), ho.data_ptr(), int(hi.numel()),
                           mpi_type(ho.dtype()), comm_);
    });
    write_back(ho, out);
  }

  void reduce_scatter(const Tensor& in, Tensor& out, Reduce op) override {
    KILN_CHECK(in.numel() == out.numel() * size_ && out.dtype() == in.dtype(), "reduce_scatter: the input must hold ",
               size_, " x the output's ", out.numel(), " elements of ", dtype_name(out.dtype()));
    Tensor hi = staged(in, true), ho = staged(out, true);
    blocking("reduce-scatter", hi.nbytes(), [&] {
      return MPI_Reduce_scatter_block(hi.data_ptr(), ho.data_ptr(), int(ho.numel()), mpi_type(ho.dtype()), MPI_SUM,
                                      comm_);
    });
    if (op == Reduce::avg) average(ho);
    write_back(ho, out);
  }

  void send(const Tensor& t, int peer) override {
    check_peer(peer);
    Tensor h = staged(t, false);
    blocking("send to rank " + std::to_string(peer), h.nbytes(),
             [&] { return MPI_Send(h.data_ptr(), int(h.numel()), mpi_type(h.dtype()), peer, 0, comm_); });
  }

  void recv(Tensor& t, int peer) override {
    check_peer(peer);
    Tensor h = staged(t, false);
    blocking("receive from rank " + std::to_string(peer), h.nbytes(), [&] {
      return MPI_Recv(h.data_ptr(), int(h.numel()), mpi_type(h.dtype()), peer, 0, comm_, MPI_STATUS_IGNORE);
    });
    write_back(h, t);
  }

  void send_recv(const Tensor& out, int to, Tensor& in, int from) override {
    check_peer(to);
    check_peer(from);
    Tensor ho = staged(out, false), hi = staged(in, false);
    blocking("exchange with ranks " + std::to_string(to) + "/" + std::to_string(from), ho.nbytes() + hi.nbytes(),
             [&] {
               return MPI_Sendrecv(ho.data_ptr(), int(ho.numel()), mpi_type(ho.dtype()), to, 0, hi.data_ptr(),
                                   int(hi.numel()), mpi_type(hi.dtype()), from, 0, comm_, MPI_STATUS_IGNORE);
             });
    write_back(hi, in);
  }

  void barrier() override {
    blocking("barrier", 0, [this] { return MPI_Barrier(comm_); });
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm part = MPI_COMM_NULL;
    blocking("split", 0, [&] { return MPI_Comm_split(comm_, color, key, &part); });
    auto c = std::make_unique<MpiCommunicator>(part);
    c->set_timeout(timeout());
    return c;
  }

 private:
  friend struct PendingAllReduce;
  void check_peer(int peer) const {
    KILN_CHECK(peer >= 0 && peer < size_, "rank ", peer, " does not exist in a job of ", size_, " ranks");
  }

  void average(Tensor& h) const { divide_by_ranks(h, size_); }

  // Polls the request until it completes or the timeout passes. MPI moves a
  // nonblocking collective along only inside MPI_Test, so it polls without
  // pause (yielding the core: ranks may outnumber cores) for the first
  // second, and only then, for a slow or stuck peer, every millisecond.
  void wait(MPI_Request& req, const std::string& what, size_t bytes) const {
    const auto start = std::chrono::steady_clock::now(), deadline = start + timeout();
    for (;;) {
      int done = 0;
      check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what.c_str());
      if (done) return;
      if (std::chrono::steady_clock::now() > deadline) KILN_CHECK(false, timeout_message(what, bytes));
      const auto now = std::chrono::steady_clock::now();
      if (now - start < std::chrono::seconds(1))
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // A blocking MPI call (MPI's fastest path) under the watchdog.
  template <typename Call>
  void blocking(const std::string& what, size_t bytes, Call call) {
    {
      std::lock_guard<std::mutex> lock(watch_.mutex);
      watch_.what = what;
      watch_.bytes = bytes;
      watch_.started = std::chrono::steady_clock::now();
      watch_.busy = true;
    }
    const int code = call();
    {
      std::lock_guard<std::mutex> lock(watch_.mutex);
      watch_.busy = false;
    }
    check_mpi(code, what.c_str());
  }

  // Ends the job when a blocking call has waited past the timeout: it cannot
  // be interrupted, so the error is printed from here (as PyTorch's NCCL
  // watchdog does).
  void watch() {
    std::unique_lock<std::mutex> lock(watch_.mutex);
    while (!watch_.stop) {
      watch_.wake.wait_for(lock, std::chrono::milliseconds(100));
      if (!watch_.busy || std::chrono::steady_clock::now() - watch_.started < timeout()) continue;
      std::fprintf(stderr, "kiln: error: rank %d of %d: %s\n", world_rank_, world_size_,
                   timeout_message(watch_.what, watch_.bytes).c_str());
      abort_mpi(1);
    }
  }

  std::string timeout_message(const std::string& what, size_t bytes) const {
    return what + " (" + std::to_string(bytes) + " bytes) did not complete within " + std::to_string(timeout().count()) +
           " s; another rank has died or hangs. The last complete checkpoint is intact: restart the job with "
           "--resume (raise --dist-timeout if the ranks are just slow)";
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  int world_rank_ = 0, world_size_ = 1;  // errors name the job's ranks, also from a split
  struct Watch {
    std::mutex mutex;
    std::condition_variable wake;
    bool busy = false, stop = false;
    std::string what;
    size_t bytes = 0;
    std::chrono::steady_clock::time_point started;
  } watch_;
  std::thread watchdog_;
};

void PendingAllReduce::wait() {
  comm.wait(req, "all-reduce", host.nbytes());
  if (op == Reduce::avg) comm.average(host);
  write_back(host, target);
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "init");
  }
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
}

void finalize_mpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

void abort_mpi(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

#else  // built without MPI

std::unique_ptr<Communicator> make_mpi_communicator(int*, char***) {
  KILN_CHECK(false, "this process was started by mpirun, but Kiln was built without MPI. Install it "
             "(scripts/install_deps.sh, or apt-get install libopenmpi-dev openmpi-bin) and rebuild");
  return nullptr;
}
void finalize_mpi() {}
void abort_mpi(int exit_code) { std::_Exit(exit_code); }

#endif

}  // namespace kiln::distributed
