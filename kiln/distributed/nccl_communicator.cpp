// Collectives on CUDA tensors over NCCL; host tensors keep the host
// transport (MPI or Gloo) that this communicator wraps. NCCL's communicator
// is made on the first device tensor (every rank reaches it at the same
// point: the code is the same on every rank): rank 0 draws the unique id
// and the host transport broadcasts it, as torch.distributed does through
// its store.
//
// NCCL runs on its own stream per communicator. Each operation waits for
// the compute stream's work so far (an event), and the compute stream waits
// for the operation's end (another event), so neither a gradient still being
// written nor a result still arriving can be read. The host then polls the
// end event until a deadline, watching NCCL's asynchronous errors: a peer
// that died or hangs aborts the communicator and ends with an error naming
// this rank, as over MPI.
#include "kiln/distributed/nccl_transport.h"

#ifdef KILN_HAVE_NCCL

#include <dlfcn.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "kiln/backend/factory.h"
#include "kiln/cuda/cuda_util.h"

namespace kiln::distributed {

namespace {

// NCCL is loaded when the first CUDA tensor needs it, not linked: a build
// for GPUs still starts (and trains on one GPU, or on the CPU) on a machine
// whose CUDA installation lacks NCCL, and says what is missing only if a
// collective on the GPU is asked for.
struct NcclApi {
#define KILN_NCCL_FN(name) decltype(&::name) name = nullptr;
  KILN_NCCL_FN(ncclGetErrorString)
  KILN_NCCL_FN(ncclGetUniqueId)
  KILN_NCCL_FN(ncclCommInitRank)
  KILN_NCCL_FN(ncclCommDestroy)
  KILN_NCCL_FN(ncclCommAbort)
  KILN_NCCL_FN(ncclCommGetAsyncError)
  KILN_NCCL_FN(ncclAllReduce)
  KILN_NCCL_FN(ncclBroadcast)
  KILN_NCCL_FN(ncclAllGather)
  KILN_NCCL_FN(ncclReduceScatter)
  KILN_NCCL_FN(ncclSend)
  KILN_NCCL_FN(ncclRecv)
  KILN_NCCL_FN(ncclGroupStart)
  KILN_NCCL_FN(ncclGroupEnd)
#undef KILN_NCCL_FN
};

const NcclApi& nccl() {
  static const NcclApi api = [] {
    void* lib = nullptr;
    for (const char* path : {"libnccl.so.2", "/usr/local/cuda/lib/libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"})
      if ((lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL))) break;
    KILN_CHECK(lib, "NCCL (libnccl.so.2) was not found; it carries CUDA tensors between ranks. Install it (the CUDA "
               "toolkit's NCCL, or Debian's libnccl2) or add its directory to LD_LIBRARY_PATH");
    NcclApi a;
#define KILN_NCCL_LOAD(name)                                                                 \
  a.name = reinterpret_cast<decltype(a.name)>(dlsym(lib, #name));                            \
  KILN_CHECK(a.name, "the NCCL that was found lacks " #name "; install NCCL 2.10 or newer");
    KILN_NCCL_LOAD(ncclGetErrorString)
    KILN_NCCL_LOAD(ncclGetUniqueId)
    KILN_NCCL_LOAD(ncclCommInitRank)
    KILN_NCCL_LOAD(ncclCommDestroy)
    KILN_NCCL_LOAD(ncclCommAbort)
    KILN_NCCL_LOAD(ncclCommGetAsyncError)
    KILN_NCCL_LOAD(ncclAllReduce)
    KILN_NCCL_LOAD(ncclBroadcast)
    KILN_NCCL_LOAD(ncclAllGather)
    KILN_NCCL_LOAD(ncclReduceScatter)
    KILN_NCCL_LOAD(ncclSend)
    KILN_NCCL_LOAD(ncclRecv)
    KILN_NCCL_LOAD(ncclGroupStart)
    KILN_NCCL_LOAD(ncclGroupEnd)
#undef KILN_NCCL_LOAD
    return a;
  }();
  return api;
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    default: KILN_FAIL("NCCL: no datatype for ", dtype_name(t));
  }
  return ncclUint8;
}

void check_nccl(ncclResult_t r, const std::string& what) {
  KILN_CHECK(r == ncclSuccess || r == ncclInProgress, "NCCL ", what, " failed: ", nccl().ncclGetErrorString(r),
             " (NCCL_DEBUG=WARN says more)");
}

// A contiguous tensor NCCL can work on in place: t itself, or a copy that
// goes back into t afterwards.
Tensor packed(const Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }
void unpack(const Tensor& p, Tensor& t) {
  if (p.impl_ptr() != t.impl_ptr()) copy_into(p, t);
}

class NcclCommunicator;

struct PendingNccl final : Pending {
  PendingNccl(NcclCommunicator& c, cudaEvent_t e, std::string w, Tensor t, Tensor p)
      : comm(c), done(e), what(std::move(w)), target(std::move(t)), staged(std::move(p)) {}
  void wait() override;
  NcclCommunicator& comm;
  cudaEvent_t done;
  std::string what;
  Tensor target, staged;
};

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::unique_ptr<Communicator> host) : host_(std::move(host)) {
    set_timeout(host_->timeout());
  }
  ~NcclCommunicator() override {
    if (!comm_) return;
    cuda::DeviceGuard g(device_);
    nccl().ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  int rank() const override { return host_->rank(); }
  int world_size() const override { return host_->world_size(); }
  // "mpi+nccl" where a GPU can carry tensors; "mpi" on a machine without one.
  std::string transport() const override { return host_->transport() + (cuda_is_available() ? "+nccl" : ""); }

  void set_timeout(std::chrono::seconds t) override {
    Communicator::set_timeout(t);
    host_->set_timeout(t);
  }

  // Host tensors take the host transport's own blocking call (MPI's fastest path).
  void all_reduce(Tensor& t, Reduce op) override {
    if (!on_gpu(t)) return host_->all_reduce(t, op);
    start_all_reduce(t, op)->wait();
  }

  std::unique_ptr<Pending> start_all_reduce(Tensor& t, Reduce op) override {
    if (!on_gpu(t)) return host_->start_all_reduce(t, op);
    Tensor p = packed(t);
    cudaEvent_t done = launch("all-reduce", p, [&](cudaStream_t s) {
      return nccl().ncclAllReduce(p.data_ptr(), p.data_ptr(), size_t(p.numel()), nccl_type(p.dtype()),
                           op == Reduce::avg ? ncclAvg : ncclSum, comm_, s);
    });
    return std::make_unique<PendingNccl>(*this, done, "all-reduce", t, p);
  }

  void broadcast(Tensor& t, int root) override {
    if (!on_gpu(t)) return host_->broadcast(t, root);
    Tensor p = packed(t);
    run("broadcast", p, [&](cudaStream_t s) {
      return nccl().ncclBroadcast(p.data_ptr(), p.data_ptr(), size_t(p.numel()), nccl_type(p.dtype()), root, comm_, s);
    });
    unpack(p, t);
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    if (!on_gpu(in) && !on_gpu(out)) return host_->all_gather(in, out);
    KILN_CHECK(out.numel() == in.numel() * world_size() && out.dtype() == in.dtype() && on_gpu(in) && on_gpu(out),
               "all_gather: out must hold ", world_size(), " x the input's ", in.numel(), " elements of ",
               dtype_name(in.dtype()), ", both on the GPU");
    Tensor pi = packed(in), po = packed(out);
    run("all-gather", po, [&](cudaStream_t s) {
      return nccl().ncclAllGather(pi.data_ptr(), po.data_ptr(), size_t(pi.numel()), nccl_type(pi.dtype()), comm_, s);
    });
    unpack(po, out);
  }

  void reduce_scatter(const Tensor& in, Tensor& out, Reduce op) override {
    if (!on_gpu(in) && !on_gpu(out)) return host_->reduce_scatter(in, out, op);
    KILN_CHECK(in.numel() == out.numel() * world_size() && out.dtype() == in.dtype() && on_gpu(in) && on_gpu(out),
               "reduce_scatter: the input must hold ", world_size(), " x the output's ", out.numel(),
               " elements of ", dtype_name(out.dtype()), ", both on the GPU");
    Tensor pi = packed(in), po = packed(out);
    run("reduce-scatter", po, [&](cudaStream_t s) {
      return nccl().ncclReduceScatter(pi.data_ptr(), po.data_ptr(), size_t(po.numel()), nccl_type(po.dtype()),
                               op == Reduce::avg ? ncclAvg : ncclSum, comm_, s);
    });
    unpack(po, out);
  }

  void send(const Tensor& t, int peer) override {
    if (!on_gpu(t)) return host_->send(t, peer);
    Tensor p = packed(t);
    run("send to rank " + std::to_string(peer), p, [&](cudaStream_t s) {
      return nccl().ncclSend(p.data_ptr(), size_t(p.numel()), nccl_type(p.dtype()), peer, comm_, s);
    });
  }

  void recv(Tensor& t, int peer) override {
    if (!on_gpu(t)) return host_->recv(t, peer);
    Tensor p = packed(t);
    run("receive from rank " + std::to_string(peer), p, [&](cudaStream_t s) {
      return nccl().ncclRecv(p.data_ptr(), size_t(p.numel()), nccl_type(p.dtype()), peer, comm_, s);
    });
    unpack(p, t);
  }

  void send_recv(const Tensor& out, int to, Tensor& in, int from) override {
    if (!on_gpu(out) && !on_gpu(in)) return host_->send_recv(out, to, in, from);
    KILN_CHECK(on_gpu(out) && on_gpu(in), "send_recv: both tensors must be on the GPU, or both on the host");
    Tensor po = packed(out), pi = packed(in);
    run("exchange with ranks " + std::to_string(to) + "/" + std::to_string(from), pi, [&](cudaStream_t s) {
      nccl().ncclGroupStart();
      nccl().ncclSend(po.data_ptr(), size_t(po.numel()), nccl_type(po.dtype()), to, comm_, s);
      nccl().ncclRecv(pi.data_ptr(), size_t(pi.numel()), nccl_type(pi.dtype()), from, comm_, s);
      return nccl().ncclGroupEnd();
    });
    unpack(pi, in);
  }

  void barrier() override { host_->barrier(); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    auto part = std::make_unique<NcclCommunicator>(host_->split(color, key));
    part->set_timeout(timeout());
    return part;
  }

  // Waits for `done` (the end of an operation on the NCCL stream) until the
  // deadline, then aborts the communicator with an error naming this rank.
  void wait(cudaEvent_t done, const std::string& what, size_t bytes) {
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    for (;;) {
      const cudaError_t e = cudaEventQuery(done);
      if (e == cudaSuccess) break;
      KILN_CHECK(e == cudaErrorNotReady, "NCCL ", what, ": ", cudaGetErrorString(e));
      ncclResult_t async = ncclSuccess;
      nccl().ncclCommGetAsyncError(comm_, &async);
      const bool late = std::chrono::steady_clock::now() > deadline;
      if (async != ncclSuccess || late) {
        nccl().ncclCommAbort(comm_);
        comm_ = nullptr;
        KILN_CHECK(!late, what, " (", bytes, " bytes) did not complete within ", timeout().count(),
                   " s; another rank has died or hangs. The last complete checkpoint is intact: restart the job with "
                   "--resume (raise --dist-timeout if the ranks are just slow)");
        check_nccl(async, what);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    cudaEventDestroy(done);
  }

 private:
  static bool on_gpu(const Tensor& t) { return t.device().type == DeviceType::cuda; }

  // The NCCL communicator on `device`, made on first use.
  void ensure(int device) {
    if (comm_) {
      KILN_CHECK(device == device_, "NCCL: this rank's communicator is on cuda:", device_, ", not cuda:", device,
                 "; keep each rank's tensors on one GPU (LOCAL_RANK picks it)");
      return;
    }
    ncclUniqueId id{};
    if (rank() == 0) check_nccl(nccl().ncclGetUniqueId(&id), "unique id");
    Tensor wire = Tensor::empty({int64_t(sizeof id)}, DType::u8);
    std::memcpy(wire.data_ptr(), &id, sizeof id);
    host_->broadcast(wire, 0);
    std::memcpy(&id, wire.data_ptr(), sizeof id);
    cuda::DeviceGuard g(device);
    check_nccl(nccl().ncclCommInitRank(&comm_, world_size(), id, rank()), "init");
    KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    device_ = device;
  }

  // Launches an operation on the NCCL stream after the compute stream's
  // work so far; the compute stream waits for its end. Returns the end event.
  template <typename Launch>
  cudaEvent_t launch(const std::string& what, const Tensor& t, Launch call) {
    ensure(t.device().index);
    cuda::DeviceGuard g(device_);
    cudaEvent_t ready, done;
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    KILN_CUDA_CHECK(cudaEventRecord(ready, cuda::stream_for(device_)));
    KILN_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    check_nccl(call(stream_), what);
    KILN_CUDA_CHECK(cudaEventRecord(done, stream_));
    KILN_CUDA_CHECK(cudaStreamWaitEvent(cuda::stream_for(device_), done, 0));
    cudaEventDestroy(ready);
    return done;
  }

  template <typename Launch>
  void run(const std::string& what, const Tensor& t, Launch call) {
    wait(launch(what, t, call), what, t.nbytes());
  }

  std::unique_ptr<Communicator> host_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int device_ = -1;
};

void PendingNccl::wait() {
  comm.wait(done, what, staged.nbytes());
  unpack(staged, target);
}

}  // namespace

std::unique_ptr<Communicator> with_nccl(std::unique_ptr<Communicator> host) {
  return std::make_unique<NcclCommunicator>(std::move(host));
}

}  // namespace kiln::distributed

#else  // built without NCCL: device tensors go through the host transport's host copies

namespace kiln::distributed {
std::unique_ptr<Communicator> with_nccl(std::unique_ptr<Communicator> host) { return host; }
}  // namespace kiln::distributed

#endif
