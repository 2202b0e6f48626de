// Collectives over Gloo's TCP transport, for a torchrun-style launch. The
// ranks meet at rank 0's TcpStore, publish their Gloo addresses there and
// connect to each other (a full mesh); split() builds a new mesh for each
// group under its own key prefix. Tensors go through host buffers as in
// mpi_communicator.cpp (staging.h). Every operation carries the
// communicator's timeout into Gloo, and a Gloo failure (a peer that closed
// its connection, or one that did not answer in time) becomes an error
// naming this rank and the operation, so a dead or hung peer ends the job
// instead of hanging it.
#include "kiln/distributed/gloo_transport.h"
#include "kiln/distributed/staging.h"

#ifdef KILN_HAVE_GLOO
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>

#include "kiln/distributed/tcp_store.h"
#endif

namespace kiln::distributed {

#ifdef KILN_HAVE_GLOO

namespace {

using std::chrono::milliseconds;

// Point-to-point messages use one slot outside the collectives' (Gloo's
// collectives put a prefix below 0x10 in the top byte). Messages between two
// ranks on one slot arrive in the order they were sent, as MPI's do.
constexpr uint64_t kPointToPointSlot = uint64_t('K') << 56;

// Gloo's view of the rendezvous.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(TcpStore& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override { store_.set(key, data); }
  std::vector<char> get(const std::string& key) override { return store_.get(key); }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys, store_.timeout()); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    store_.wait(keys, timeout);
  }

 private:
  TcpStore& store_;
};

// This machine's address on the route to MASTER_ADDR, which the other ranks
// can reach (a connected UDP socket sends nothing; the kernel just picks the
// interface). GLOO_SOCKET_IFNAME, PyTorch's variable, names one instead.
gloo::transport::tcp::attr device_attr(const std::string& master_addr, int master_port) {
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface && *iface) {
    attr.iface = iface;
    return attr;
  }
  attr.hostname = "127.0.0.1";
  addrinfo hints{}, *found = nullptr;
  hints.ai_socktype = SOCK_DGRAM;
  if (::getaddrinfo(master_addr.c_str(), std::to_string(master_port).c_str(), &hints, &found) != 0) return attr;
  const int fd = ::socket(found->ai_family, SOCK_DGRAM, 0);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  char host[NI_MAXHOST];
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
      ::getnameinfo(reinterpret_cast<sockaddr*>(&local), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) == 0)
    attr.hostname = host;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return attr;
}

template <typename T>
void sum_into(gloo::AllreduceOptions& opts, Tensor& host) {
  opts.setOutput(static_cast<T*>(host.data_ptr()), size_t(host.numel()));
  opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
}

uint8_t* bytes_of(const Tensor& host) { return static_cast<uint8_t*>(host.data_ptr()); }

class GlooCommunicator final : public Communicator {
 public:
  // Connects this rank of a group to the group's other ranks, meeting them
  // under `prefix` in the store.
  GlooCommunicator(std::shared_ptr<TcpStore> store, std::shared_ptr<gloo::transport::Device> device,
                   const std::string& prefix, int rank, int size, int world_rank, std::chrono::seconds timeout)
      : store_(std::move(store)), device_(std::move(device)), prefix_(prefix), rank_(rank), size_(size),
        world_rank_(world_rank) {
    set_timeout(timeout);
    context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context_->setTimeout(timeout);
    GlooStore gloo_store(*store_);
    gloo::rendezvous::PrefixStore prefixed(prefix_, gloo_store);
    guarded("connecting to the other ranks", 0, [&] { context_->connectFullMesh(prefixed, device_); });
    learn_peer_addresses();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  std::string transport() const override { return "gloo"; }

  ~GlooCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(queue_.mutex);
      queue_.stop = true;
    }
    queue_.changed.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  // Gloo's calls block, so the all-reduce goes to a worker thread: data
  // parallelism's buckets travel while backward goes on, as with MPI's
  // nonblocking calls. The worker runs them in order, and every other
  // operation first waits for those queued, so two threads never use the
  // connections at once.
  std::unique_ptr<Pending> start_all_reduce(Tensor& t, Reduce op) override {
    auto job = std::make_shared<AllReduceJob>();
    job->target = t;
    job->host = staged(t, true);
    job->op = op;
    {
      std::lock_guard<std::mutex> lock(queue_.mutex);
      if (!worker_.joinable()) worker_ = std::thread([this] { run_queued(); });
      queue_.jobs.push_back(job);
      ++queue_.unfinished;
    }
    queue_.changed.notify_all();
    return std::make_unique<PendingAllReduce>(*this, job);
  }

  void all_reduce(Tensor& t, Reduce op) override {
    drain();
    Tensor h = staged(t, true);
    sum_in_place(h, "all-reduce");
    if (op == Reduce::avg) divide_by_ranks(h, size_);
    write_back(h, t);
  }

  void broadcast(Tensor& t, int root) override {
    drain();
    check_peer(root);
    Tensor h = staged(t, false);
    if (h.nbytes() == 0) return;
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(bytes_of(h), h.nbytes());
    opts.setRoot(root);
    run_collective("broadcast", h.nbytes(), opts, [&] { gloo::broadcast(opts); });
    write_back(h, t);
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    drain();
    KILN_CHECK(out.numel() == in.numel() * size_ && out.dtype() == in.dtype(), "all_gather: out must hold ", size_,
               " x the input's ", in.numel(), " elements of ", dtype_name(in.dtype()));
    Tensor hi = staged(in, false), ho = staged(out, false);
    if (ho.nbytes() == 0) return;
    gloo::AllgatherOptions opts(context_);
    opts.setInput(bytes_of(hi), hi.nbytes());
    opts.setOutput(bytes_of(ho), ho.nbytes());
    run_collective("all-gather", ho.nbytes(), opts, [&] { gloo::allgather(opts); });
    write_back(ho, out);
  }

  // Gloo 0.5's reduce-scatter is an old-style algorithm object over whole
  // buffers, so this is an all-reduce of a copy of the input followed by
  // taking this rank's slice: twice reduce-scatter's traffic.
  void reduce_scatter(const Tensor& in, Tensor& out, Reduce op) override {
    drain();
    KILN_CHECK(in.numel() == out.numel() * size_ && out.dtype() == in.dtype(), "reduce_scatter: the input must hold ",
               size_, " x the output's ", out.numel(), " elements of ", dtype_name(out.dtype()));
    Tensor whole = staged_copy(in, true), mine = staged(out, true);
    sum_in_place(whole, "reduce-scatter");
    std::memcpy(mine.data_ptr(), bytes_of(whole) + size_t(rank_) * mine.nbytes(), mine.nbytes());
    if (op == Reduce::avg) divide_by_ranks(mine, size_);
    write_back(mine, out);
  }

  void send(const Tensor& t, int peer) override {
    drain();
    check_peer(peer);
    Tensor h = staged(t, false);
    if (h.nbytes() == 0) return;
    guarded("send to rank " + std::to_string(peer), h.nbytes(), [&] {
      auto buffer = context_->createUnboundBuffer(h.data_ptr(), h.nbytes());
      buffer->send(peer, kPointToPointSlot);
      buffer->waitSend(timeout_ms());
    });
  }

  void recv(Tensor& t, int peer) override {
    drain();
    check_peer(peer);
    Tensor h = staged(t, false);
    if (h.nbytes() == 0) return;
    guarded("receive from rank " + std::to_string(peer), h.nbytes(), [&] {
      auto buffer = context_->createUnboundBuffer(h.data_ptr(), h.nbytes());
      buffer->recv(peer, kPointToPointSlot);
      buffer->waitRecv(timeout_ms());
    });
    write_back(h, t);
  }

  void send_recv(const Tensor& out, int to, Tensor& in, int from) override {
    drain();
    check_peer(to);
    check_peer(from);
    KILN_CHECK((to == rank_) == (from == rank_), "send_recv: a rank exchanges with itself only both ways (to ", to,
               ", from ", from, ", this is rank ", rank_, ")");
    if (to == rank_) return copy_into(out, in);  // Gloo has no connection to itself
    Tensor ho = staged(out, false), hi = staged(in, false);
    guarded("exchange with ranks " + std::to_string(to) + "/" + std::to_string(from), ho.nbytes() + hi.nbytes(), [&] {
      // Both posted before either wait: neighbours that exchange at once
      // cannot deadlock.
      auto incoming = context_->createUnboundBuffer(hi.data_ptr(), hi.nbytes());
      auto outgoing = context_->createUnboundBuffer(ho.data_ptr(), ho.nbytes());
      if (hi.nbytes() > 0) incoming->recv(from, kPointToPointSlot);
      if (ho.nbytes() > 0) outgoing->send(to, kPointToPointSlot);
      if (ho.nbytes() > 0) outgoing->waitSend(timeout_ms());
      if (hi.nbytes() > 0) incoming->waitRecv(timeout_ms());
    });
    write_back(hi, in);
  }

  void barrier() override {
    drain();
    gloo::BarrierOptions opts(context_);
    run_collective("barrier", 0, opts, [&] { gloo::barrier(opts); });
  }

  // Every rank publishes its (color, key) under this split's number; each
  // then ranks the members of its own color by key (ties by rank, as MPI)
  // and meets them under a prefix of its own.
  std::unique_ptr<Communicator> split(int color, int key) override {
    drain();
    const std::string base = prefix_ + "/split" + std::to_string(splits_++);
    store_->set_timeout(timeout());
    const std::string mine = std::to_string(color) + " " + std::to_string(key);
    guarded("split", 0, [&] { store_->set(base + "/member" + std::to_string(rank_), {mine.begin(), mine.end()}); });
    std::vector<std::tuple<int, int>> members;  // (key, rank) of this color
    for (int r = 0; r < size_; ++r) {
      std::vector<char> theirs;
      guarded("split", 0, [&] { theirs = store_->get(base + "/member" + std::to_string(r)); });
      int their_color = 0, their_key = 0;
      std::sscanf(std::string(theirs.begin(), theirs.end()).c_str(), "%d %d", &their_color, &their_key);
      if (their_color == color) members.emplace_back(their_key, r);
    }
    std::sort(members.begin(), members.end());
    const int group_rank = int(std::find(members.begin(), members.end(), std::make_tuple(key, rank_)) - members.begin());
    return std::make_unique<GlooCommunicator>(store_, device_, base + "/color" + std::to_string(color), group_rank,
                                              int(members.size()), world_rank_, timeout());
  }

 private:
  void check_peer(int peer) const {
    KILN_CHECK(peer >= 0 && peer < size_, "rank ", peer, " does not exist in a job of ", size_, " ranks");
  }

  // Gloo's errors name the far end of the connection that failed by its
  // address only; every rank publishes the addresses of its ends so that an
  // error can name the rank instead.
  void learn_peer_addresses() {
    std::string mine = std::to_string(world_rank_);
    for (int i = 0; i < size_; ++i)
      if (i != rank_) mine.append(" ").append(context_->getPair(i)->address().str());
    const std::string key = prefix_ + "/addresses";
    guarded("connecting to the other ranks", 0, [&] {
      store_->set(key + std::to_string(rank_), {mine.begin(), mine.end()});
      for (int i = 0; i < size_; ++i) {
        if (i == rank_) continue;
        const std::vector<char> theirs = store_->get(key + std::to_string(i));
        std::istringstream words(std::string(theirs.begin(), theirs.end()));
        int their_world_rank = -1;
        words >> their_world_rank;
        for (std::string address; words >> address;)
          peer_addresses_.emplace_back(address.substr(0, address.find('$')), their_world_rank);  // '$': a sequence number
      }
    });
  }

  // "rank 3" when `message` names the address of rank 3's end of a
  // connection, else "another rank".
  std::string rank_named_in(const std::string& message) const {
    for (const auto& [address, world_rank] : peer_addresses_) {
      const size_t at = message.find(address), after = at + address.size();
      if (at != std::string::npos && (after == message.size() || !std::isdigit((unsigned char)message[after])))
        return "rank " + std::to_string(world_rank);
    }
    return "another rank";
  }

  milliseconds timeout_ms() const { return std::chrono::duration_cast<milliseconds>(timeout()); }

  void sum_in_place(Tensor& host, const char* what) {
    if (host.nbytes() == 0) return;
    gloo::AllreduceOptions opts(context_);
    switch (host.dtype()) {
      case DType::f32: sum_into<float>(opts, host); break;
      case DType::f64: sum_into<double>(opts, host); break;
      case DType::i64: sum_into<int64_t>(opts, host); break;
      case DType::i32: sum_into<int32_t>(opts, host); break;
      default: KILN_FAIL("Gloo: cannot reduce ", dtype_name(host.dtype()));
    }
    run_collective(what, host.nbytes(), opts, [&] { gloo::allreduce(opts); });
  }

  // A collective under its own tag (every rank of the group issues them in
  // the same order, so the tags agree) and the communicator's timeout.
  template <typename Options, typename Call>
  void run_collective(const std::string& what, size_t bytes, Options& opts, Call call) {
    opts.setTag(next_tag_++);
    opts.setTimeout(timeout_ms());
    guarded(what, bytes, call);
  }

  // Turns Gloo's exceptions (a closed connection, a timeout) into an error
  // the user can act on. Whoever prints it names the rank (rank_prefix()).
  template <typename Call>
  void guarded(const std::string& what, size_t bytes, Call call) {
    try {
      call();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      std::string culprit = rank_named_in(e.what());
      culprit[0] = char(std::toupper((unsigned char)culprit[0]));
      KILN_FAIL(what, " (", bytes, " bytes) did not complete: ", e.what(), ". ", culprit,
                " has died or hangs (the timeout is ", timeout().count(),
                " s). The last complete checkpoint is intact: restart the job with --resume (raise --dist-timeout "
                "if the ranks are just slow)");
    }
  }

  // An all-reduce handed to the worker; `done` once its result is in `host`.
  struct AllReduceJob {
    Tensor target, host;
    Reduce op = Reduce::sum;
    bool done = false;
    std::exception_ptr error;
  };

  struct PendingAllReduce final : Pending {
    PendingAllReduce(GlooCommunicator& c, std::shared_ptr<AllReduceJob> j) : comm(c), job(std::move(j)) {}
    void wait() override {
      {
        std::unique_lock<std::mutex> lock(comm.queue_.mutex);
        comm.queue_.changed.wait(lock, [&] { return job->done; });
      }
      if (job->error) std::rethrow_exception(job->error);
      write_back(job->host, job->target);
    }
    GlooCommunicator& comm;
    std::shared_ptr<AllReduceJob> job;
  };

  // The worker: runs queued all-reduces in order until the communicator goes.
  void run_queued() {
    for (;;) {
      std::shared_ptr<AllReduceJob> job;
      {
        std::unique_lock<std::mutex> lock(queue_.mutex);
        queue_.changed.wait(lock, [&] { return queue_.stop || !queue_.jobs.empty(); });
        if (queue_.jobs.empty()) return;
        job = queue_.jobs.front();
        queue_.jobs.pop_front();
      }
      try {
        sum_in_place(job->host, "all-reduce");
        if (job->op == Reduce::avg) divide_by_ranks(job->host, size_);
      } catch (...) {
        job->error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(queue_.mutex);
        job->done = true;
        --queue_.unfinished;
      }
      queue_.changed.notify_all();
    }
  }

  // Waits until the worker has finished everything queued.
  void drain() {
    std::unique_lock<std::mutex> lock(queue_.mutex);
    queue_.changed.wait(lock, [&] { return queue_.unfinished == 0; });
  }

  struct Queue {
    std::mutex mutex;
    std::condition_variable changed;
    std::deque<std::shared_ptr<AllReduceJob>> jobs;
    int unfinished = 0;  // queued or running
    bool stop = false;
  } queue_;
  std::thread worker_;

  std::shared_ptr<TcpStore> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::string prefix_;
  int rank_, size_;
  int world_rank_;  // errors name the job's ranks, also from a split
  std::vector<std::pair<std::string, int>> peer_addresses_;  // a connection's far end -> that rank in the job
  std::shared_ptr<gloo::rendezvous::Context> context_;
  uint32_t next_tag_ = 0;
  int splits_ = 0;
};

}  // namespace

namespace {

// Every rank checks in before Gloo's own rendezvous and waits for all the
// others, so a job short of ranks ends with which ones never came.
void check_in(TcpStore& store, const TcpLaunch& launch) {
  const std::string prefix = "kiln/arrived/";
  std::vector<std::string> keys;
  for (int r = 0; r < launch.world_size; ++r) keys.push_back(prefix + std::to_string(r));
  store.set(keys[size_t(launch.rank)], {});
  const std::vector<std::string> missing =
      store.missing(keys, std::chrono::duration_cast<milliseconds>(launch.rendezvous_timeout));
  if (missing.empty()) return;
  std::string names;
  for (const std::string& k : missing) names += (names.empty() ? "" : ", ") + k.substr(prefix.size());
  KILN_FAIL(launch.world_size - int(missing.size()), " of ", launch.world_size, " ranks arrived at the rendezvous ",
            store.address(), " within ", launch.rendezvous_timeout.count(), " s; never arrived: rank",
            missing.size() > 1 ? "s " : " ", names, ". Check that every rank was launched with WORLD_SIZE=",
            launch.world_size, ", that MASTER_ADDR and MASTER_PORT are the same on every rank and name rank 0's "
            "machine, and that no firewall closes the port between the nodes (raise --dist-timeout if ranks start "
            "late)");
}

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(const TcpLaunch& launch) {
  if (launch.rank == 0 && launch.access.token.empty())
    std::fprintf(stderr, "kiln: warning: KILN_RENDEZVOUS_TOKEN is not set, so anyone who reaches MASTER_PORT during "
                         "the rendezvous can join it or write to it; set the same secret on every rank "
                         "(docs/DISTRIBUTED.md)\n");
  auto store = std::make_shared<TcpStore>(launch.master_addr, launch.master_port, launch.rank == 0,
                                          std::chrono::duration_cast<milliseconds>(launch.rendezvous_timeout),
                                          launch.access);
  check_in(*store, launch);
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(device_attr(launch.master_addr, launch.master_port));
  } catch (const std::exception& e) {
    KILN_FAIL("Gloo cannot open a TCP device (", e.what(), "): set GLOO_SOCKET_IFNAME to the network interface "
              "the ranks reach each other on");
  }
  return std::make_unique<GlooCommunicator>(store, device, "kiln", launch.rank, launch.world_size,
                                            launch.rank, launch.rendezvous_timeout);
}

#else  // built without Gloo

std::unique_ptr<Communicator> make_gloo_communicator(const TcpLaunch&) {
  KILN_FAIL("this process was started torchrun-style (RANK and WORLD_SIZE are set), but Kiln was built without "
            "Gloo. Install it (scripts/install_deps.sh, or apt-get install libgloo-dev) and rebuild");
}

#endif

}  // namespace kiln::distributed
