// The rendezvous of a torchrun-style launch, as PyTorch's TCPStore: rank 0
// serves a small key-value table on MASTER_PORT, and every rank (rank 0 too)
// reads and writes it as a client of MASTER_ADDR:MASTER_PORT. Ranks publish
// how to reach them there and wait for each other's entries; no tensor goes
// through it.
//
// Every call gives up after the store's timeout with an error naming
// MASTER_ADDR:MASTER_PORT, so a rank that never starts ends the job instead
// of hanging it. The server trusts nothing from the wire: sizes are capped,
// a slow or silent client stalls no other, a client must show the job's token
// (when one is set), and a key once written is never replaced. The threat
// model is in docs/DISTRIBUTED.md.
#pragma once
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::distributed {

// Who may use the store, and where it listens.
struct StoreAccess {
  std::string token;         // every client must show it (KILN_RENDEZVOUS_TOKEN); empty: anyone may
  std::string bind_address;  // the server listens on this address only (KILN_RENDEZVOUS_BIND); empty: all
};

class TcpStore {
 public:
  // `serve`: this process (rank 0) listens on `port`. Connecting retries
  // until the timeout: rank 0 may start after the others.
  TcpStore(const std::string& host, int port, bool serve, std::chrono::milliseconds timeout,
           const StoreAccess& access = {});
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  // The value of `key`, waiting until some rank has set it.
  std::vector<char> get(const std::string& key);
  // Whether some rank has set `key`, without waiting.
  bool contains(const std::string& key);
  // The keys still unset once `timeout` has passed; empty as soon as all are set.
  std::vector<std::string> missing(std::vector<std::string> keys, std::chrono::milliseconds timeout);
  // Returns once every key is set.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // "MASTER_ADDR:MASTER_PORT" as given, for messages.
  const std::string& address() const { return address_; }

 private:
  class Server;
  // One request and its reply; false when the key is not set yet.
  bool try_get(const std::string& key, std::vector<char>* value);
  void wait_for_key(const std::string& key, std::chrono::milliseconds timeout, std::vector<char>* value);

  std::string address_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Server> server_;
  int socket_ = -1;
  std::mutex mutex_;  // one request at a time on the socket
};

}  // namespace kiln::distributed
