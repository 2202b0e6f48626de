// The rendezvous store of a torchrun-style launch (kiln/dist/tcp_store.h):
// values cross between clients, a reader waits for a later writer, and each
// way of failing says what to fix.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "kiln/core/error.h"
#include "kiln/dist/tcp_store.h"

using kiln::dist::TcpStore;
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
