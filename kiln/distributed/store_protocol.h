// The rendezvous store's wire format (tcp_store.cpp), apart from its sockets
// so the parser can be fuzzed on its own (tests/fuzz/store_fuzzer.cpp).
//
// Integers in network byte order. A connection opens with a hello, then
// sends requests, each answered before the next:
//   hello: 'H' u32 length token      ->  'K' | 'X' (wrong token; closed)
//   set:   'S' u32 length key u32 length value  ->  'K' | 'T' (key taken)
//   get:   'G' u32 length key        ->  0 (not set yet) | 1 u32 length value
//
// The server trusts nothing it reads: lengths are capped before anything is
// allocated, so a request costs at most its cap in memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::distributed::store_protocol {

// Keys are short names; values are addresses and ids (a Gloo rank's value
// lists every peer's address, about 150 bytes per rank).
constexpr size_t kMaxKeyBytes = 1024;
constexpr size_t kMaxValueBytes = size_t(1) << 20;
constexpr size_t kMaxTokenBytes = 1024;

constexpr char kHello = 'H', kSet = 'S', kGet = 'G';
constexpr char kOk = 'K', kWrongToken = 'X', kKeyTaken = 'T';

struct Request {
  char op = 0;
  std::string key;  // the token, for a hello
  std::vector<char> value;
};

enum class Parse { incomplete, complete, invalid };

struct Parsed {
  Parse status = Parse::incomplete;
  size_t consumed = 0;  // bytes of the buffer the request took (complete only)
  Request request;
  std::string error;  // why it is invalid
};

// The first request in data[0, n). `greeted`: the connection has said hello,
// so a set or get may follow; before that only a hello may.
Parsed parse_request(const char* data, size_t n, bool greeted);

std::vector<char> encode_hello(const std::string& token);
std::vector<char> encode_set(const std::string& key, const std::vector<char>& value);
std::vector<char> encode_get(const std::string& key);
void append_u32(std::vector<char>& out, uint32_t v);

}  // namespace kiln::distributed::store_protocol
