// The rendezvous store over TCP. Requests are tiny and rare (a few per rank
// at start-up and per split), so the server is one thread polling every
// connection, and a client waiting for a key asks again with a growing pause
// instead of holding a request open on the server. The server never waits on
// one client: each connection keeps its own buffers and the server reads and
// writes only what a socket has ready (store_protocol.h has the wire format).
#include "kiln/distributed/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <thread>

#include "kiln/core/error.h"
#include "kiln/distributed/store_protocol.h"

namespace kiln::distributed {

namespace {

namespace wire = store_protocol;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A client that has begun a request (or not yet said hello) and sends no more
// of it for this long is dropped, so it holds nothing for long.
constexpr auto kStalledClient = std::chrono::seconds(10);
// More connections than this are refused: a job has one per rank.
constexpr size_t kMaxConnections = 8192;

long seconds(milliseconds t) { return long((t.count() + 999) / 1000); }

int milliseconds_until(Clock::time_point deadline) {
  return int(std::clamp<long long>(
      std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count(), 0, 1000));
}

// Sends all of it by `deadline`; false when the peer has gone or is too slow.
bool write_all(int fd, const std::vector<char>& data, Clock::time_point deadline) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t sent = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);  // no SIGPIPE
    if (sent > 0) {
      done += size_t(sent);
      continue;
    }
    if (sent < 0 && errno != EINTR && errno != EAGAIN) return false;
    if (Clock::now() >= deadline) return false;
    pollfd pfd{fd, POLLOUT, 0};
    ::poll(&pfd, 1, milliseconds_until(deadline));
  }
  return true;
}

// Reads exactly n bytes by `deadline`; false when the peer closed, failed or
// was too slow.
bool read_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (Clock::now() >= deadline) return false;
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, milliseconds_until(deadline));
    if (ready < 0 && errno != EINTR) return false;
    if (ready <= 0) continue;
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return false;
    p += got;
    n -= size_t(got);
  }
  return true;
}

// A length-prefixed value from the server, refusing more than the protocol allows.
bool read_value(int fd, std::vector<char>* out, Clock::time_point deadline) {
  uint32_t net = 0;
  if (!read_all(fd, &net, 4, deadline)) return false;
  const uint32_t n = ntohl(net);
  if (n > wire::kMaxValueBytes) return false;
  out->resize(n);
  return n == 0 || read_all(fd, out->data(), n, deadline);
}

int open_listener(int family, const sockaddr* address, socklen_t length) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  const int on = 1, off = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // a finished job's TIME_WAIT does not block the port
  if (family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  if (::bind(fd, address, length) == 0 && ::listen(fd, 1024) == 0) return fd;
  const int error = errno;
  ::close(fd);
  return -error;
}

// A listening socket on `port` of `bind_address`, or of every interface
// (IPv6 and IPv4 where the machine has IPv6, else IPv4) when it is empty.
int listen_on(int port, const std::string& bind_address) {
  int result = -EADDRNOTAVAIL;
  if (bind_address.empty()) {
    sockaddr_in6 any6{};
    any6.sin6_family = AF_INET6;
    any6.sin6_addr = in6addr_any;
    any6.sin6_port = htons(uint16_t(port));
    result = open_listener(AF_INET6, reinterpret_cast<sockaddr*>(&any6), sizeof any6);
    if (result < 0 && result != -EADDRINUSE) {
      sockaddr_in any4{};
      any4.sin_family = AF_INET;
      any4.sin_addr.s_addr = htonl(INADDR_ANY);
      any4.sin_port = htons(uint16_t(port));
      result = open_listener(AF_INET, reinterpret_cast<sockaddr*>(&any4), sizeof any4);
    }
  } else {
    addrinfo hints{}, *found = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    const int rc = ::getaddrinfo(bind_address.c_str(), std::to_string(port).c_str(), &hints, &found);
    KILN_CHECK(rc == 0, "KILN_RENDEZVOUS_BIND='", bind_address, "' is not an address of this machine (",
               ::gai_strerror(rc), "): set it to one of rank 0's addresses, or unset it to listen on all");
    for (addrinfo* a = found; a && result < 0 && result != -EADDRINUSE; a = a->ai_next)
      result = open_listener(a->ai_family, a->ai_addr, a->ai_addrlen);
    ::freeaddrinfo(found);
  }
  if (result >= 0) return result;
  KILN_CHECK(result != -EADDRINUSE, "MASTER_PORT ", port, " is already in use on this machine (another job, or "
             "one still shutting down): choose another MASTER_PORT for this job");
  KILN_FAIL("rank 0 cannot listen on MASTER_PORT ", port, bind_address.empty() ? "" : " of " + bind_address, ": ",
            std::strerror(-result), " (ports below 1024 need root; choose another MASTER_PORT",
            bind_address.empty() ? "" : ", or a KILN_RENDEZVOUS_BIND this machine has", ")");
}

// One connection attempt that gives up at `deadline` (a blocking connect to
// an address where nothing answers would wait for the kernel's two minutes).
int connect_before(const addrinfo& a, Clock::time_point deadline, int* error) {
  const int fd = ::socket(a.ai_family, a.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a.ai_protocol);
  if (fd < 0) {
    *error = errno;
    return -1;
  }
  int rc = ::connect(fd, a.ai_addr, a.ai_addrlen);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd pfd{fd, POLLOUT, 0};
    while ((rc = ::poll(&pfd, 1, milliseconds_until(deadline))) == 0 && Clock::now() < deadline) {
    }
    int so_error = ETIMEDOUT;
    socklen_t length = sizeof so_error;
    if (rc > 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &length);
    errno = so_error;
    rc = so_error == 0 ? 0 : -1;
  }
  if (rc != 0) {
    *error = errno;
    ::close(fd);
    return -1;
  }
  const int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  return fd;
}

// A connection to host:port, retried until `deadline`.
int connect_to(const std::string& host, int port, Clock::time_point deadline, const std::string& address,
               milliseconds timeout) {
  int last_error = ECONNREFUSED;
  for (;;) {
    addrinfo hints{}, *found = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (rc != 0 && !(rc == EAI_AGAIN && Clock::now() < deadline))
      KILN_FAIL("MASTER_ADDR '", host, "' does not resolve to an address (", ::gai_strerror(rc),
                "): set it to rank 0's host name or IP address");
    for (addrinfo* a = found; a; a = a->ai_next) {
      if (const int fd = connect_before(*a, deadline, &last_error); fd >= 0) {
        ::freeaddrinfo(found);
        return fd;
      }
    }
    if (found) ::freeaddrinfo(found);
    if (Clock::now() >= deadline)
      KILN_FAIL("could not reach the rendezvous at ", address, " within ", seconds(timeout), " s (",
                std::strerror(last_error), "). Rank 0 serves it: check that rank 0 runs, that MASTER_ADDR is its "
                "address and MASTER_PORT the same on every rank, and that no firewall closes the port between the "
                "nodes (raise --dist-timeout if rank 0 starts late)");
    std::this_thread::sleep_for(milliseconds(100));
  }
}

bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char differ = 0;  // every byte compared: the time does not say where they part
  for (size_t i = 0; i < a.size(); ++i) differ |= static_cast<unsigned char>(a[i] ^ b[i]);
  return differ == 0;
}

}  // namespace

class TcpStore::Server {
 public:
  Server(int port, const StoreAccess& access) : token_(access.token), listener_(listen_on(port, access.bind_address)) {
    if (::pipe2(wake_, O_CLOEXEC) != 0) {
      ::close(listener_);
      KILN_FAIL("rendezvous server: cannot create a pipe: ", std::strerror(errno));
    }
    thread_ = std::thread([this] { run(); });
  }
  ~Server() {
    const char stop = 0;
    (void)!::write(wake_[1], &stop, 1);
    thread_.join();
    for (const Client& c : clients_) ::close(c.fd);
    ::close(wake_[0]);
    ::close(wake_[1]);
    ::close(listener_);
  }

 private:
  struct Client {
    int fd;
    std::vector<char> in, out;  // bytes of a request not complete yet; a reply not sent yet
    bool greeted = false, closing = false;
    Clock::time_point owes_since;  // since when it owes the rest of a request, or the reading of a reply
    bool idle() const { return greeted && in.empty() && out.empty(); }
  };

  void run() {
    for (;;) {
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
      for (const Client& c : clients_) fds.push_back({c.fd, short(c.out.empty() ? POLLIN : POLLOUT), 0});
      if (::poll(fds.data(), fds.size(), 1000) < 0) continue;  // EINTR
      if (fds[0].revents) return;
      size_t i = 2;
      for (auto c = clients_.begin(); c != clients_.end(); ++i) {
        const bool keep = fds[i].revents == 0 ? !stalled(*c) : serve(*c, fds[i].revents);
        if (keep) {
          ++c;
        } else {
          ::close(c->fd);
          c = clients_.erase(c);
        }
      }
      if (fds[1].revents & POLLIN) accept_one();
    }
  }

  void accept_one() {
    const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    if (clients_.size() >= kMaxConnections) {
      ::close(fd);
      return;
    }
    const int on = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    clients_.push_back({fd, {}, {}, false, false, Clock::now()});
  }

  bool stalled(const Client& c) const { return !c.idle() && Clock::now() - c.owes_since > kStalledClient; }

  // Reads what arrived, answers what is complete and sends what the socket
  // takes; false when the client has gone, spoke nonsense or must go.
  bool serve(Client& c, short events) {
    if (events & POLLIN) {
      char chunk[64 * 1024];
      const ssize_t got = ::recv(c.fd, chunk, sizeof chunk, 0);
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) return false;
      if (got > 0) {
        if (c.idle()) c.owes_since = Clock::now();
        c.in.insert(c.in.end(), chunk, chunk + got);
      }
    } else if (!(events & POLLOUT)) {
      return false;  // an error or a hang-up
    }
    // One request at a time: the next is read once its reply has gone out
    // (a client that sends several without reading builds up nothing).
    while (!c.closing) {
      if (c.out.empty()) {
        const wire::Parsed p = wire::parse_request(c.in.data(), c.in.size(), c.greeted);
        if (p.status == wire::Parse::invalid) return false;
        if (p.status == wire::Parse::incomplete) break;
        c.in.erase(c.in.begin(), c.in.begin() + ptrdiff_t(p.consumed));
        answer(c, p.request);
      }
      const ssize_t sent = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (sent < 0 && errno != EINTR && errno != EAGAIN) return false;
      if (sent > 0) c.out.erase(c.out.begin(), c.out.begin() + sent);
      if (!c.out.empty()) break;  // the socket is full: wait until it takes more
    }
    if (c.closing) return false;  // its one-byte refusal went out above
    if (c.idle()) c.owes_since = Clock::time_point::max();
    return !stalled(c);
  }

  void answer(Client& c, const wire::Request& r) {
    if (r.op == wire::kHello) {
      c.greeted = same_token(r.key, token_);
      c.closing = !c.greeted;
      c.out.push_back(c.greeted ? wire::kOk : wire::kWrongToken);
    } else if (r.op == wire::kSet) {
      // A key is written once: a second writer is another job on this port,
      // or a rank started twice, and must not replace what the ranks read.
      const auto [it, added] = table_.try_emplace(r.key, r.value);
      c.out.push_back(added || it->second == r.value ? wire::kOk : wire::kKeyTaken);
    } else {
      const auto it = table_.find(r.key);
      c.out.push_back(it == table_.end() ? 0 : 1);
      if (it != table_.end()) {
        wire::append_u32(c.out, uint32_t(it->second.size()));
        c.out.insert(c.out.end(), it->second.begin(), it->second.end());
      }
    }
    c.owes_since = Clock::now();  // now it owes the reading of the reply
  }

  std::string token_;
  int listener_;
  int wake_[2] = {-1, -1};
  std::list<Client> clients_;
  std::map<std::string, std::vector<char>> table_;
  std::thread thread_;
};

TcpStore::TcpStore(const std::string& host, int port, bool serve, milliseconds timeout, const StoreAccess& access)
    : address_(host + ":" + std::to_string(port)), timeout_(timeout) {
  KILN_CHECK(access.token.size() <= wire::kMaxTokenBytes, "KILN_RENDEZVOUS_TOKEN is longer than ",
             wire::kMaxTokenBytes, " bytes");
  if (serve) server_ = std::make_unique<Server>(port, access);
  const auto deadline = Clock::now() + timeout;
  socket_ = connect_to(host, port, deadline, address_, timeout);
  char reply = 0;
  const bool answered = write_all(socket_, wire::encode_hello(access.token), deadline) &&
                        read_all(socket_, &reply, 1, deadline);
  if (!answered || reply != wire::kOk) ::close(socket_);
  KILN_CHECK(answered, "the rendezvous at ", address_, " did not answer within ", seconds(timeout),
             " s: is something other than rank 0 of this job listening on MASTER_PORT?");
  KILN_CHECK(reply == wire::kOk, "the rendezvous at ", address_, " refused this rank: its KILN_RENDEZVOUS_TOKEN "
             "differs from rank 0's. Set the same token on every rank of the job");
}

TcpStore::~TcpStore() {
  if (socket_ >= 0) ::close(socket_);
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  KILN_CHECK(key.size() <= wire::kMaxKeyBytes && value.size() <= wire::kMaxValueBytes, "rendezvous key '", key,
             "' or its value (", value.size(), " bytes) is larger than the store takes");
  std::lock_guard<std::mutex> lock(mutex_);
  const auto deadline = Clock::now() + timeout_;
  char reply = 0;
  const bool ok = write_all(socket_, wire::encode_set(key, value), deadline) && read_all(socket_, &reply, 1, deadline);
  KILN_CHECK(ok, "the rendezvous at ", address_, " stopped answering (setting '", key,
             "'): rank 0, which serves it, has died or hangs");
  KILN_CHECK(reply != wire::kKeyTaken, "the rendezvous at ", address_, " already holds another value for '", key,
             "': another job uses the same MASTER_ADDR and MASTER_PORT, or two ranks were started with the same "
             "RANK");
  KILN_CHECK(reply == wire::kOk, "the rendezvous at ", address_, " answered nonsense (setting '", key, "')");
}

bool TcpStore::try_get(const std::string& key, std::vector<char>* value) {
  KILN_CHECK(key.size() <= wire::kMaxKeyBytes, "rendezvous key '", key, "' is longer than the store takes");
  std::lock_guard<std::mutex> lock(mutex_);
  const auto deadline = Clock::now() + timeout_;
  char found = 0;
  const bool ok = write_all(socket_, wire::encode_get(key), deadline) && read_all(socket_, &found, 1, deadline);
  std::vector<char> got;
  KILN_CHECK(ok && (!found || read_value(socket_, &got, deadline)), "the rendezvous at ", address_,
             " stopped answering (reading '", key, "'): rank 0, which serves it, has died or hangs");
  if (found && value) *value = std::move(got);
  return found;
}

bool TcpStore::contains(const std::string& key) { return try_get(key, nullptr); }

void TcpStore::wait_for_key(const std::string& key, milliseconds timeout, std::vector<char>* value) {
  const auto deadline = Clock::now() + timeout;
  milliseconds pause(1);
  while (!try_get(key, value)) {
    KILN_CHECK(Clock::now() < deadline, "waited ", seconds(timeout), " s at the rendezvous ", address_, " for '", key,
               "', which another rank publishes: a rank did not start or died while starting (every one of the "
               "WORLD_SIZE ranks must be launched, with the same MASTER_ADDR and MASTER_PORT)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(50));
  }
}

std::vector<char> TcpStore::get(const std::string& key) {
  std::vector<char> value;
  wait_for_key(key, timeout_, &value);
  return value;
}

std::vector<std::string> TcpStore::missing(std::vector<std::string> keys, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;  // one deadline for all of them
  for (milliseconds pause(1);; pause = std::min(pause * 2, milliseconds(50))) {
    std::erase_if(keys, [&](const std::string& key) { return try_get(key, nullptr); });
    if (keys.empty() || Clock::now() >= deadline) return keys;
    std::this_thread::sleep_for(pause);
  }
}

void TcpStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  const std::vector<std::string> left = missing(keys, timeout);
  KILN_CHECK(left.empty(), "waited ", seconds(timeout), " s at the rendezvous ", address_, " for '", left.front(),
             "', which another rank publishes: a rank did not start or died while starting (every one of the "
             "WORLD_SIZE ranks must be launched, with the same MASTER_ADDR and MASTER_PORT)");
}

}  // namespace kiln::distributed
