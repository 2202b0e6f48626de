#include "kiln/text/grammar/token_trie.h"

#include <algorithm>
#include <numeric>

#include "kiln/core/error.h"

namespace kiln::text {

TokenTrie::TokenTrie(std::vector<std::string> token_bytes) : bytes_(std::move(token_bytes)) {
  std::vector<int32_t> order(bytes_.size());
  std::iota(order.begin(), order.end(), 0);
  std::erase_if(order, [&](int32_t id) { return bytes_[size_t(id)].empty(); });
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes_[size_t(a)] < bytes_[size_t(b)]; });
  // Sorted, each token adds the nodes past its common prefix with the one
  // before; `open` holds the path's nodes, closed (their subtree ended) as
  // a token leaves them.
  std::vector<uint32_t> open;
  const std::string* previous = nullptr;
  for (const int32_t id : order) {
    const std::string& b = bytes_[size_t(id)];
    KILN_CHECK(b.size() < 65536, "token ", id, " is longer than 65,535 bytes");
    size_t common = 0;
    if (previous)
      while (common < std::min(b.size(), previous->size()) && b[common] == (*previous)[common]) ++common;
    if (previous && common == b.size() && common == previous->size()) {
      duplicates_.emplace_back(open.back(), id);
      continue;
    }
    for (; open.size() > common; open.pop_back()) nodes_[open.back()].subtree_end = uint32_t(nodes_.size());
    for (size_t d = common; d < b.size(); ++d) {
      open.push_back(uint32_t(nodes_.size()));
      nodes_.push_back({0, -1, uint16_t(d + 1), uint8_t(b[d])});
    }
    nodes_[open.back()].token = id;
    max_depth_ = std::max(max_depth_, b.size());
    previous = &b;
  }
  for (; !open.empty(); open.pop_back()) nodes_[open.back()].subtree_end = uint32_t(nodes_.size());
}

}  // namespace kiln::text
