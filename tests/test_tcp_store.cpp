// The rendezvous store of a torchrun-style launch (kiln/distributed/tcp_store.h):
// values cross between clients, a reader waits for a later writer, each way
// of failing says what to fix, and the server holds against a hostile wire.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <functional>
#include <thread>

#include "kiln/core/error.h"
#include "kiln/distributed/store_protocol.h"
#include "kiln/distributed/tcp_store.h"

using kiln::distributed::TcpStore;
using namespace std::chrono_literals;

namespace {

// A port nobody listens on right now.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TcpStore, ClientsShareValuesAndWaitForLaterOnes) {
  const int port = free_port();
  TcpStore server("127.0.0.1", port, true, 10s);
  TcpStore client("127.0.0.1", port, false, 10s);
  server.set("a", {'x', 'y'});
  EXPECT_EQ(client.get("a"), (std::vector<char>{'x', 'y'}));
  client.set("empty", {});
  EXPECT_TRUE(server.get("empty").empty());
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    client.set("b", {'1'});
  });
  EXPECT_EQ(server.get("b"), std::vector<char>{'1'});  // waits for it
  server.wait({"a", "b"}, 1s);
  later.join();
}

TEST(TcpStore, ClientStartedFirstRetriesUntilTheServerListens) {
  const int port = free_port();
  std::unique_ptr<TcpStore> server;
  std::thread late_server([&] {
    std::this_thread::sleep_for(300ms);
    server = std::make_unique<TcpStore>("127.0.0.1", port, true, 10s);
  });
  TcpStore client("127.0.0.1", port, false, 10s);
  late_server.join();
  client.set("k", {'v'});
  EXPECT_EQ(server->get("k"), std::vector<char>{'v'});
}

TEST(TcpStore, FailuresSayWhatToFix) {
  const int port = free_port();
  TcpStore server("127.0.0.1", port, true, 1s);
  const std::string missing = error_of([&] { server.get("never"); });
  EXPECT_NE(missing.find("waited 1 s at the rendezvous 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << missing;
  const std::string in_use = error_of([&] { TcpStore("127.0.0.1", port, true, 1s); });
  EXPECT_NE(in_use.find("MASTER_PORT " + std::to_string(port) + " is already in use"), std::string::npos) << in_use;
  const std::string unreachable = error_of([&] { TcpStore("127.0.0.1", free_port(), false, 1s); });
  EXPECT_NE(unreachable.find("could not reach the rendezvous at 127.0.0.1:"), std::string::npos) << unreachable;
  const std::string unknown = error_of([&] { TcpStore("no-such-host.invalid", port, false, 1s); });
  EXPECT_NE(unknown.find("MASTER_ADDR 'no-such-host.invalid' does not resolve"), std::string::npos) << unknown;
}

namespace {

// A raw connection to the store on 127.0.0.1:port, for speaking out of turn.
int raw_connection(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

void send_bytes(int fd, const std::vector<char>& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
}

// Whether the server closed `fd` within 15 s (a read sees the end); it drops
// a stalled client after 10.
bool closed_by_server(int fd) {
  timeval limit{15, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  char buffer[16];
  ssize_t got;
  while ((got = ::recv(fd, buffer, sizeof buffer, 0)) > 0) {
  }
  return got == 0 || (got < 0 && errno == ECONNRESET);
}

long resident_bytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * ::sysconf(_SC_PAGESIZE);
}

std::vector<char> hello() { return kiln::distributed::store_protocol::encode_hello(""); }

}  // namespace

// One 5-byte packet claiming a 4 GiB value used to make rank 0 allocate it.
TEST(TcpStore, ALengthOverTheCapIsRefusedWithoutAllocating) {
  const int port = free_port();
  TcpStore server("127.0.0.1", port, true, 5s);
  const long before = resident_bytes();
  const int fd = raw_connection(port);
  std::vector<char> request = hello();
  request.push_back('S');
  for (char c : {'\xff', '\xff', '\xff', '\xf0'}) request.push_back(c);
  send_bytes(fd, request);
  EXPECT_TRUE(closed_by_server(fd));
  ::close(fd);
  EXPECT_LT(resident_bytes() - before, 64l << 20);
  server.set("still", {'1'});  // and it still serves
  EXPECT_EQ(server.get("still"), std::vector<char>{'1'});
}

// A client that sends half a request used to stall every other rank's
// requests for 10 s; the others' timeout here is 2 s.
TEST(TcpStore, AHalfSentRequestStallsNoOtherClient) {
  const int port = free_port();
  TcpStore server("127.0.0.1", port, true, 2s);
  const int fd = raw_connection(port);
  std::vector<char> request = hello();
  for (char c : {'S', '\0', '\0', '\0', '\x08', 'h', 'a'}) request.push_back(c);
  send_bytes(fd, request);
  TcpStore client("127.0.0.1", port, false, 2s);
  for (const char* key : {"k0", "k1", "k2"}) {
    client.set(key, {'v'});
    EXPECT_EQ(server.get(key), std::vector<char>{'v'});
  }
  EXPECT_TRUE(closed_by_server(fd));  // and the half request is dropped after a while
  ::close(fd);
}

TEST(TcpStore, AClientWithoutTheJobsTokenIsRefused) {
  const int port = free_port();
  TcpStore server("127.0.0.1", port, true, 2s, {.token = "s3cret", .bind_address = ""});
  const std::string wrong = error_of([&] { TcpStore("127.0.0.1", port, false, 2s, {.token = "guess", .bind_address = ""}); });
  EXPECT_NE(wrong.find("refused this rank: its KILN_RENDEZVOUS_TOKEN differs"), std::string::npos) << wrong;
  // Speaking without a hello: closed, and nothing written.
  const int fd = raw_connection(port);
  send_bytes(fd, kiln::distributed::store_protocol::encode_set("kiln/arrived/1", {}));
  EXPECT_TRUE(closed_by_server(fd));
  ::close(fd);
  EXPECT_FALSE(server.contains("kiln/arrived/1"));
  TcpStore right("127.0.0.1", port, false, 2s, {.token = "s3cret", .bind_address = ""});
  right.set("a", {'1'});
  EXPECT_EQ(server.get("a"), std::vector<char>{'1'});
}

TEST(TcpStore, AKeyOnceWrittenIsNeverReplaced) {
  const int port = free_port();
  TcpStore server("127.0.0.1", port, true, 2s);
  TcpStore other("127.0.0.1", port, false, 2s);
  server.set("nccl-id", {'a'});
  other.set("nccl-id", {'a'});  // the same value again is harmless
  const std::string taken = error_of([&] { other.set("nccl-id", {'b'}); });
  EXPECT_NE(taken.find("already holds another value for 'nccl-id'"), std::string::npos) << taken;
  EXPECT_EQ(server.get("nccl-id"), std::vector<char>{'a'});
}

// KILN_RENDEZVOUS_BIND: listening on one loopback address, not the others.
TEST(TcpStore, TheServerListensOnlyOnTheChosenAddress) {
  const int port = free_port();
  TcpStore server("127.0.0.2", port, true, 2s, {.token = "", .bind_address = "127.0.0.2"});
  TcpStore near("127.0.0.2", port, false, 2s);
  near.set("x", {'1'});
  const std::string elsewhere = error_of([&] { TcpStore("127.0.0.1", port, false, 1s); });
  EXPECT_NE(elsewhere.find("could not reach the rendezvous at 127.0.0.1:"), std::string::npos) << elsewhere;
  const std::string bad = error_of([&] { TcpStore("127.0.0.1", free_port(), true, 1s, {.token = "", .bind_address = "no-such-host.invalid"}); });
  EXPECT_NE(bad.find("KILN_RENDEZVOUS_BIND='no-such-host.invalid'"), std::string::npos) << bad;
}
