#include "kiln/distributed/store_protocol.h"

#include <arpa/inet.h>

#include <cstring>

namespace kiln::distributed::store_protocol {

namespace {

// Reads a u32 length and that many bytes at `at`, refusing more than `cap`.
// Returns the bytes' start, or nullptr when the buffer does not hold them yet
// (`*invalid` set when the length is over the cap).
const char* field(const char* data, size_t n, size_t* at, size_t cap, size_t* length, bool* invalid) {
  if (n - *at < 4) return nullptr;
  uint32_t net = 0;
  std::memcpy(&net, data + *at, 4);
  *length = ntohl(net);
  if (*length > cap) {
    *invalid = true;
    return nullptr;
  }
  if (n - *at - 4 < *length) return nullptr;
  const char* start = data + *at + 4;
  *at += 4 + *length;
  return start;
}

Parsed invalid(std::string why) {
  Parsed p;
  p.status = Parse::invalid;
  p.error = std::move(why);
  return p;
}

}  // namespace

Parsed parse_request(const char* data, size_t n, bool greeted) {
  Parsed p;
  if (n == 0) return p;
  const char op = data[0];
  if (!greeted && op != kHello) return invalid("a connection must open with a hello");
  if (greeted && op != kSet && op != kGet) return invalid("unknown request");
  size_t at = 1, length = 0;
  bool over = false;
  const size_t key_cap = op == kHello ? kMaxTokenBytes : kMaxKeyBytes;
  const char* key = field(data, n, &at, key_cap, &length, &over);
  if (over) return invalid(op == kHello ? "token too long" : "key too long");
  if (!key) return p;
  p.request.op = op;
  p.request.key.assign(key, length);
  if (op == kSet) {
    const char* value = field(data, n, &at, kMaxValueBytes, &length, &over);
    if (over) return invalid("value too long");
    if (!value) return p;
    p.request.value.assign(value, value + length);
  }
  p.status = Parse::complete;
  p.consumed = at;
  return p;
}

void append_u32(std::vector<char>& out, uint32_t v) {
  const uint32_t net = htonl(v);
  const char* b = reinterpret_cast<const char*>(&net);
  out.insert(out.end(), b, b + 4);
}

namespace {
// An op and its length-prefixed key: every request's start.
std::vector<char> encode(char op, const std::string& key) {
  std::vector<char> out;
  out.reserve(5 + key.size());
  out.push_back(op);
  append_u32(out, uint32_t(key.size()));
  out.insert(out.end(), key.begin(), key.end());
  return out;
}
}  // namespace

std::vector<char> encode_hello(const std::string& token) { return encode(kHello, token); }

std::vector<char> encode_set(const std::string& key, const std::vector<char>& value) {
  std::vector<char> out = encode(kSet, key);
  append_u32(out, uint32_t(value.size()));
  out.insert(out.end(), value.begin(), value.end());
  return out;
}

std::vector<char> encode_get(const std::string& key) { return encode(kGet, key); }

}  // namespace kiln::distributed::store_protocol
