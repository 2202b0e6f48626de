// Shapes and strides (in elements). Broadcasting follows NumPy/PyTorch rules.
#pragma once
#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

// A list of dimensions (or strides), held inline up to kInlineRank of them:
// every tensor head and view carries two, and a decoding step makes
// thousands of views, so they must not each cost a heap allocation. Used as
// std::vector<int64_t> was (it converts to and from one).
class Shape {
 public:
  static constexpr size_t kInlineRank = 6;
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(size_t n, int64_t value = 0) { resize(n, value); }
  template <std::input_iterator It>
  Shape(It first, It last) {
    assign(first, last);
  }
  Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }  // NOLINT: as the vector it was
  Shape(const Shape& other) { assign(other.begin(), other.end()); }
  Shape(Shape&& other) noexcept { take(other); }
  Shape& operator=(const Shape& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  Shape& operator=(Shape&& other) noexcept {
    if (this != &other) take(other);
    return *this;
  }
  Shape& operator=(std::initializer_list<int64_t> dims) {
    assign(dims.begin(), dims.end());
    return *this;
  }
  operator std::vector<int64_t>() const { return {begin(), end()}; }  // NOLINT: as the vector it was

  template <std::input_iterator It>
  void assign(It first, It last) {
    clear();
    for (; first != last; ++first) push_back(int64_t(*first));
  }
  void assign(size_t n, int64_t value) {
    clear();
    resize(n, value);
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return heap_ ? heap_capacity_ : kInlineRank; }
  int64_t* data() { return heap_ ? heap_.get() : inline_; }
  const int64_t* data() const { return heap_ ? heap_.get() : inline_; }
  int64_t& operator[](size_t i) { return data()[i]; }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t& at(size_t i);
  int64_t at(size_t i) const;
  int64_t& front() { return data()[0]; }
  int64_t front() const { return data()[0]; }
  int64_t& back() { return data()[size_ - 1]; }
  int64_t back() const { return data()[size_ - 1]; }
  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  const_iterator cbegin() const { return begin(); }
  const_iterator cend() const { return end(); }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }

  void reserve(size_t n);
  void clear() { size_ = 0; }
  void push_back(int64_t d) {
    if (size_ == capacity()) reserve(2 * size_);
    data()[size_++] = d;
  }
  void emplace_back(int64_t d) { push_back(d); }
  void pop_back() { --size_; }
  void resize(size_t n, int64_t value = 0);
  iterator insert(const_iterator at, int64_t d);
  template <std::input_iterator It>
  iterator insert(const_iterator at, It first, It last) {
    const size_t index = size_t(at - begin());
    const Shape tail(begin() + index, end());
    size_ = index;
    for (; first != last; ++first) push_back(int64_t(*first));
    for (int64_t d : tail) push_back(d);
    return begin() + index;
  }
  iterator insert(const_iterator at, std::initializer_list<int64_t> dims) {
    return insert(at, dims.begin(), dims.end());
  }
  iterator insert(const_iterator at, size_t n, int64_t value) {
    const size_t index = size_t(at - begin());
    for (size_t i = 0; i < n; ++i) insert(begin() + index, value);
    return begin() + index;
  }
  iterator erase(const_iterator at) { return erase(at, at + 1); }
  iterator erase(const_iterator first, const_iterator last);

  friend bool operator==(const Shape& a, const Shape& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
  friend std::strong_ordering operator<=>(const Shape& a, const Shape& b) {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  void take(Shape& other) noexcept {
    size_ = other.size_;
    heap_ = std::move(other.heap_);
    heap_capacity_ = other.heap_capacity_;
    if (!heap_) std::copy(other.inline_, other.inline_ + size_, inline_);
    other.size_ = 0;
  }

  size_t size_ = 0;
  int64_t inline_[kInlineRank];
  std::unique_ptr<int64_t[]> heap_;  // past kInlineRank dimensions
  size_t heap_capacity_ = 0;
};

using Strides = Shape;

int64_t shape_numel(const Shape& s);
Strides contiguous_strides(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3, 4]"
// Normalises a possibly negative dim against rank; throws if out of range.
int normalize_dim(int64_t dim, int rank);
// The broadcast of a and b; throws naming both shapes if incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace kiln
