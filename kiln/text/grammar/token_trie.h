// A vocabulary's tokens as a byte trie laid out in preorder, so that a
// grammar mask walks it front to back and skips a whole subtree (every
// token that starts the same way) where the grammar refuses its prefix:
// one step per distinct prefix instead of one per byte of every token.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::text {

class TokenTrie {
 public:
  // token_bytes[id]: the bytes token `id` stands for; empty for a token
  // the grammar never allows (special tokens).
  explicit TokenTrie(std::vector<std::string> token_bytes);

  struct Node {
    uint32_t subtree_end;  // the index just past this node's subtree
    int32_t token;         // a token whose bytes end here, or -1 (others: duplicates())
    uint16_t depth;        // 1 for a first byte
    uint8_t byte;
  };
  // Preorder: a node's children follow it, its subtree ends at subtree_end.
  const std::vector<Node>& nodes() const { return nodes_; }
  // Tokens with the same bytes as an earlier one: (node, token).
  const std::vector<std::pair<uint32_t, int32_t>>& duplicates() const { return duplicates_; }
  size_t max_depth() const { return max_depth_; }

  size_t size() const { return bytes_.size(); }
  const std::string& bytes(size_t id) const { return bytes_[id]; }

 private:
  std::vector<std::string> bytes_;
  std::vector<Node> nodes_;
  std::vector<std::pair<uint32_t, int32_t>> duplicates_;
  size_t max_depth_ = 0;
};

}  // namespace kiln::text
