// A load generator for kiln serve where wrk is not installed (the GPU
// machines have none of Debian's packages): C keep-alive HTTP/1.1
// connections on loopback, each sending the same POST again as soon as its
// answer is in, spread over T threads with one epoll loop each. Prints the
// line bench/serve/*.lua print under wrk:
//   RESULT rps=... p50_ms=... p99_ms=... errors=...
// errors counts answers other than 200 and broken connections.
//
//   bench_loadgen --url http://127.0.0.1:8080/v2/models/cnn/infer --body FILE
//                 [--header "Name: value"]... [--connections 64] [--threads 2] [--seconds 10]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1", path = "/";
  int port = 80, connections = 64, threads = 2;
  double seconds = 10;
  std::string request;  // the whole HTTP request, sent again and again
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "bench_loadgen: %s\n", message.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  std::string url, body, headers;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) die(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--url") url = value;
    else if (flag == "--body") {
      std::ifstream in(value, std::ios::binary);
      if (!in) die("cannot read --body " + value);
      body.assign(std::istreambuf_iterator<char>(in), {});
    } else if (flag == "--header") headers += value + "\r\n";
    else if (flag == "--connections") o.connections = std::stoi(value);
    else if (flag == "--threads") o.threads = std::stoi(value);
    else if (flag == "--seconds") o.seconds = std::stod(value);
    else die("unknown option " + flag);
  }
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) die("--url must be http://HOST:PORT/PATH");
  const size_t slash = url.find('/', scheme.size());
  const std::string authority = url.substr(scheme.size(), slash - scheme.size());
  o.path = slash == std::string::npos ? "/" : url.substr(slash);
  const size_t colon = authority.find(':');
  o.host = authority.substr(0, colon);
  if (colon != std::string::npos) o.port = std::stoi(authority.substr(colon + 1));
  if (o.connections < 1 || o.threads < 1 || o.seconds <= 0) die("--connections, --threads and --seconds must be > 0");
  o.threads = std::min(o.threads, o.connections);
  o.request = "POST " + o.path + " HTTP/1.1\r\nHost: " + authority + "\r\nContent-Length: " +
              std::to_string(body.size()) + "\r\n" + headers + "\r\n" + body;
  return o;
}

// One keep-alive connection: the request going out, then its answer coming in.
struct Connection {
  int fd = -1;
  size_t sent = 0;
  std::string in;
  Clock::time_point started;
};

int connect_to(const Options& o) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(o.port));
  if (fd < 0 || inet_pton(AF_INET, o.host.c_str(), &addr.sin_addr) != 1)
    die("cannot connect to " + o.host + " (an IPv4 address is needed)");
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    die("cannot connect to " + o.host + ":" + std::to_string(o.port) + ": " + std::strerror(errno));
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

// The length of a whole answer at the front of `in` (headers and
// Content-Length body), or 0 while it is incomplete; `status` its code.
size_t whole_answer(const std::string& in, int& status) {
  const size_t end = in.find("\r\n\r\n");
  if (end == std::string::npos) return 0;
  status = in.size() > 12 ? std::atoi(in.c_str() + 9) : 0;  // "HTTP/1.1 200"
  size_t length = 0;
  for (size_t at = in.find("\r\n"); at < end; at = in.find("\r\n", at + 2)) {
    std::string line = in.substr(at + 2, in.find("\r\n", at + 2) - at - 2);
    std::transform(line.begin(), line.end(), line.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (line.rfind("content-length:", 0) == 0) length = std::strtoull(line.c_str() + 15, nullptr, 10);
  }
  return in.size() >= end + 4 + length ? end + 4 + length : 0;
}

struct Tally {
  std::vector<double> latencies_ms;
  long errors = 0;
};

// Keeps `count` connections busy until `stop`. A connection waits for
// writability only while a request is part-sent (level-triggered EPOLLOUT
// would otherwise wake the loop all the time).
void drive(const Options& o, int count, const std::atomic<bool>& stop, Tally& tally) {
  const int ep = epoll_create1(0);
  std::vector<Connection> conns(static_cast<size_t>(count));
  auto watch = [&](size_t i, int op) {
    epoll_event ev{};
    ev.events = uint32_t(EPOLLIN) | (conns[i].sent < o.request.size() ? uint32_t(EPOLLOUT) : 0u);
    ev.data.u64 = i;
    epoll_ctl(ep, op, conns[i].fd, &ev);
  };
  // Sends what the socket takes; false if the connection broke.
  auto send_some = [&](Connection& c) {
    while (c.sent < o.request.size()) {
      const ssize_t n = ::send(c.fd, o.request.data() + c.sent, o.request.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) return false;
      c.sent += size_t(n);
    }
    return true;
  };
  auto broken = [&](Connection& c) {
    ++tally.errors;
    close(c.fd);
    c.fd = -1;
  };
  auto start = [&](size_t i, int op) {
    Connection& c = conns[i];
    c.sent = 0;
    c.in.clear();
    c.started = Clock::now();
    if (!send_some(c)) return broken(c);
    watch(i, op);
  };
  for (size_t i = 0; i < conns.size(); ++i) {
    conns[i].fd = connect_to(o);
    start(i, EPOLL_CTL_ADD);
  }
  std::vector<epoll_event> events(conns.size());
  std::vector<char> buf(1 << 16);
  while (!stop) {
    const int n = epoll_wait(ep, events.data(), int(events.size()), 50);
    for (int e = 0; e < n; ++e) {
      const size_t i = events[size_t(e)].data.u64;
      Connection& c = conns[i];
      if (c.fd < 0) continue;
      if (c.sent < o.request.size()) {
        if (!send_some(c)) {
          broken(c);
          continue;
        }
        if (c.sent == o.request.size()) watch(i, EPOLL_CTL_MOD);
      }
      if (!(events[size_t(e)].events & EPOLLIN)) continue;
      const ssize_t got = ::recv(c.fd, buf.data(), buf.size(), 0);
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (got <= 0) {
        broken(c);  // the server closed the connection
        continue;
      }
      c.in.append(buf.data(), size_t(got));
      int status = 0;
      if (whole_answer(c.in, status) == 0) continue;
      tally.latencies_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - c.started).count());
      if (status != 200) ++tally.errors;
      start(i, EPOLL_CTL_MOD);
    }
  }
  for (Connection& c : conns)
    if (c.fd >= 0) close(c.fd);
  close(ep);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::atomic<bool> stop{false};
  std::vector<Tally> tallies(size_t(o.threads));
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) {
    const int count = o.connections / o.threads + (t < o.connections % o.threads ? 1 : 0);
    threads.emplace_back(drive, std::cref(o), count, std::cref(stop), std::ref(tallies[size_t(t)]));
  }
  const auto began = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - began).count();
  std::vector<double> all;
  long errors = 0;
  for (const Tally& t : tallies) {
    all.insert(all.end(), t.latencies_ms.begin(), t.latencies_ms.end());
    errors += t.errors;
  }
  std::sort(all.begin(), all.end());
  auto percentile = [&](double p) { return all.empty() ? 0.0 : all[std::min(all.size() - 1, size_t(p * double(all.size())))]; };
  std::printf("RESULT rps=%.1f p50_ms=%.2f p99_ms=%.2f errors=%ld\n", double(all.size()) / seconds, percentile(0.50),
              percentile(0.99), errors);
  return 0;
}
