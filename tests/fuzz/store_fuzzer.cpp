// libFuzzer target: arbitrary bytes as what a client sends the rendezvous
// store (kiln/distributed/store_protocol.h). The contract: the parser never
// reads past the buffer, never accepts a length over its cap, consumes
// exactly the request it returns (encoding it again gives the same bytes),
// and says "incomplete" only for a prefix of something it could accept.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kiln/distributed/store_protocol.h"

namespace wire = kiln::distributed::store_protocol;

namespace {

std::vector<char> encode(const wire::Request& r) {
  if (r.op == wire::kHello) return wire::encode_hello(r.key);
  if (r.op == wire::kSet) return wire::encode_set(r.key, r.value);
  return wire::encode_get(r.key);
}

void check(const char* data, size_t size, bool greeted) {
  const wire::Parsed p = wire::parse_request(data, size, greeted);
  if (p.status != wire::Parse::complete) {
    if (p.consumed != 0 || (p.status == wire::Parse::invalid) == p.error.empty()) std::abort();
    return;
  }
  const wire::Request& r = p.request;
  if (p.consumed == 0 || p.consumed > size) std::abort();
  if ((r.op == wire::kHello) == greeted) std::abort();
  if (r.key.size() > (r.op == wire::kHello ? wire::kMaxTokenBytes : wire::kMaxKeyBytes)) std::abort();
  if (r.value.size() > wire::kMaxValueBytes || (r.op != wire::kSet && !r.value.empty())) std::abort();
  const std::vector<char> again = encode(r);
  if (again.size() != p.consumed || !std::equal(again.begin(), again.end(), data)) std::abort();
  // Every proper prefix is incomplete, never invalid: a request split across
  // packets is read the same as one sent whole.
  for (size_t cut = 0; cut < p.consumed; cut += 1 + cut / 8)
    if (wire::parse_request(data, cut, greeted).status != wire::Parse::incomplete) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  const char* data = reinterpret_cast<const char*>(bytes);
  check(data, size, false);
  check(data, size, true);
  return 0;
}
