// A set of a vocabulary's token ids, a bit each: a grammar state's mask.
// A bit, not a byte: 19 KB for a 152K vocabulary instead of 152 KB, so a
// cache of the same memory keeps 8x the states, and a union of stacks'
// masks is a 64-bit word at a time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::text {

class TokenSet {
 public:
  explicit TokenSet(size_t size = 0) : size_(size), words_((size + 63) / 64, 0) {}

  size_t size() const { return size_; }
  bool contains(size_t id) const { return id < size_ && (words_[id / 64] >> (id % 64)) & 1; }
  void insert(size_t id) { words_[id / 64] |= uint64_t(1) << (id % 64); }
  // Both of one vocabulary (the same size).
  TokenSet& operator|=(const TokenSet& other) {
    for (size_t w = 0; w < words_.size(); ++w) words_[w] |= other.words_[w];
    return *this;
  }
  // Bit i % 64 of word i / 64 is token i.
  const std::vector<uint64_t>& words() const { return words_; }
  size_t bytes() const { return words_.size() * sizeof(uint64_t); }
  bool operator==(const TokenSet&) const = default;

 private:
  size_t size_;
  std::vector<uint64_t> words_;
};

}  // namespace kiln::text
