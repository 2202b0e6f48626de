// The rendezvous store over TCP. Requests are tiny and rare (a few per rank
// at start-up and per split), so the server is one thread polling every
// connection, and a client waiting for a key asks again with a growing pause
// instead of holding a request open on the server.
//
// Wire format, integers in network byte order:
//   set: 'S' u32 key-length key u32 value-length value  ->  'K'
//   get: 'G' u32 key-length key  ->  0 (not set yet) | 1 u32 value-length value
#include "kiln/dist/tcp_store.h"

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
#include <map>
#include <thread>

#include "kiln/core/error.h"

namespace kiln::dist {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kSet = 'S', kGet = 'G', kSetDone = 'K';

long seconds(milliseconds t) { return long((t.count() + 999) / 1000); }

// Sends all of it; false when the peer has gone.
bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);  // a closed peer is an error, not SIGPIPE
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    p += sent;
    n -= size_t(sent);
  }
  return true;
}

// Reads exactly n bytes by `deadline`; false when the peer closed, failed or
// was too slow.
bool read_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, int(std::min<long long>(left, 1000)));
    if (ready < 0 && errno != EINTR) return false;
    if (ready <= 0) continue;
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= size_t(got);
  }
  return true;
}

void append_u32(std::vector<char>& out, uint32_t v) {
  const uint32_t net = htonl(v);
  const char* b = reinterpret_cast<const char*>(&net);
  out.insert(out.end(), b, b + 4);
}

bool read_u32(int fd, uint32_t* v, Clock::time_point deadline) {
  uint32_t net = 0;
  if (!read_all(fd, &net, 4, deadline)) return false;
  *v = ntohl(net);
  return true;
}

bool read_bytes(int fd, std::vector<char>* out, Clock::time_point deadline) {
  uint32_t n = 0;
  if (!read_u32(fd, &n, deadline)) return false;
  out->resize(n);
  return n == 0 || read_all(fd, out->data(), n, deadline);
}

// A listening socket on `port` of every interface (IPv6 and IPv4 where the
// machine has IPv6, else IPv4).
int listen_on(int port) {
  int last_error = 0;
  for (int family : {AF_INET6, AF_INET}) {
    const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_error = errno;
      continue;
    }
    const int on = 1, off = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // a finished job's TIME_WAIT does not block the port
    int bound;
    if (family == AF_INET6) {
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(uint16_t(port));
      bound = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(uint16_t(port));
      bound = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (bound == 0 && ::listen(fd, 1024) == 0) return fd;
    last_error = errno;
    ::close(fd);
    KILN_CHECK(last_error != EADDRINUSE, "MASTER_PORT ", port, " is already in use on this machine (another job, or "
               "one still shutting down): choose another MASTER_PORT for this job");
  }
  KILN_FAIL("rank 0 cannot listen on MASTER_PORT ", port, ": ", std::strerror(last_error),
            " (ports below 1024 need root; choose another MASTER_PORT)");
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
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        last_error = errno;
        continue;
      }
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        const int on = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
        ::freeaddrinfo(found);
        return fd;
      }
      last_error = errno;
      ::close(fd);
    }
    if (found) ::freeaddrinfo(found);
    if (Clock::now() >= deadline)
      KILN_FAIL("could not reach the rendezvous at ", address, " within ", seconds(timeout), " s (",
                std::strerror(last_error), "). Rank 0 serves it: check that rank 0 runs, with the same MASTER_ADDR "
                "and MASTER_PORT, and that the port is open between the nodes");
    std::this_thread::sleep_for(milliseconds(100));
  }
}

}  // namespace

class TcpStore::Server {
 public:
  explicit Server(int port) : listener_(listen_on(port)) {
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
    ::close(wake_[0]);
    ::close(wake_[1]);
    ::close(listener_);
  }

 private:
  void run() {
    std::vector<int> clients;
    for (;;) {
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
      for (int c : clients) fds.push_back({c, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;  // EINTR
      if (fds[0].revents) break;
      if (fds[1].revents & POLLIN) {
        const int c = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) clients.push_back(c);
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        if (!serve_one(fds[i].fd)) {
          ::close(fds[i].fd);
          clients.erase(std::find(clients.begin(), clients.end(), fds[i].fd));
        }
      }
    }
    for (int c : clients) ::close(c);
  }

  // Answers one request; false when the client has gone (or spoke nonsense).
  bool serve_one(int fd) {
    // A client writes each request at once, so its rest follows promptly.
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    char op = 0;
    std::vector<char> key_bytes;
    if (!read_all(fd, &op, 1, deadline) || !read_bytes(fd, &key_bytes, deadline)) return false;
    const std::string key(key_bytes.begin(), key_bytes.end());
    if (op == kSet) {
      std::vector<char> value;
      if (!read_bytes(fd, &value, deadline)) return false;
      table_[key] = std::move(value);
      return write_all(fd, &kSetDone, 1);
    }
    if (op != kGet) return false;
    std::vector<char> reply;
    const auto it = table_.find(key);
    reply.push_back(it == table_.end() ? 0 : 1);
    if (it != table_.end()) {
      append_u32(reply, uint32_t(it->second.size()));
      reply.insert(reply.end(), it->second.begin(), it->second.end());
    }
    return write_all(fd, reply.data(), reply.size());
  }

  int listener_;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::map<std::string, std::vector<char>> table_;
};

TcpStore::TcpStore(const std::string& host, int port, bool serve, milliseconds timeout)
    : address_(host + ":" + std::to_string(port)), timeout_(timeout) {
  if (serve) server_ = std::make_unique<Server>(port);
  socket_ = connect_to(host, port, Clock::now() + timeout, address_, timeout);
}

TcpStore::~TcpStore() {
  if (socket_ >= 0) ::close(socket_);
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  std::vector<char> request{kSet};
  append_u32(request, uint32_t(key.size()));
  request.insert(request.end(), key.begin(), key.end());
  append_u32(request, uint32_t(value.size()));
  request.insert(request.end(), value.begin(), value.end());
  std::lock_guard<std::mutex> lock(mutex_);
  char done = 0;
  const bool ok = write_all(socket_, request.data(), request.size()) &&
                  read_all(socket_, &done, 1, Clock::now() + timeout_) && done == kSetDone;
  KILN_CHECK(ok, "the rendezvous at ", address_, " stopped answering (setting '", key,
             "'): rank 0, which serves it, has died or hangs");
}

bool TcpStore::try_get(const std::string& key, std::vector<char>* value) {
  std::vector<char> request{kGet};
  append_u32(request, uint32_t(key.size()));
  request.insert(request.end(), key.begin(), key.end());
  std::lock_guard<std::mutex> lock(mutex_);
  const auto deadline = Clock::now() + timeout_;
  char found = 0;
  const bool ok = write_all(socket_, request.data(), request.size()) && read_all(socket_, &found, 1, deadline);
  std::vector<char> got;
  KILN_CHECK(ok && (!found || read_bytes(socket_, &got, deadline)), "the rendezvous at ", address_,
             " stopped answering (reading '", key, "'): rank 0, which serves it, has died or hangs");
  if (found && value) *value = std::move(got);
  return found;
}

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

void TcpStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;  // one deadline for all of them
  for (const auto& key : keys)
    wait_for_key(key, std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(deadline - Clock::now())),
                 nullptr);
}

}  // namespace kiln::dist
