#include "kiln/core/shape.h"

#include "kiln/core/error.h"

namespace kiln {

int64_t& Shape::at(size_t i) {
  KILN_CHECK(i < size_, "dimension ", i, " of a shape of rank ", size_);
  return data()[i];
}
int64_t Shape::at(size_t i) const {
  KILN_CHECK(i < size_, "dimension ", i, " of a shape of rank ", size_);
  return data()[i];
}

void Shape::reserve(size_t n) {
  if (n <= capacity()) return;
  auto grown = std::make_unique<int64_t[]>(n);
  std::copy(begin(), end(), grown.get());
  heap_ = std::move(grown);
  heap_capacity_ = n;
}

void Shape::resize(size_t n, int64_t value) {
  reserve(n);
  if (n > size_) std::fill(data() + size_, data() + n, value);
  size_ = n;
}

Shape::iterator Shape::insert(const_iterator at, int64_t d) {
  const size_t index = size_t(at - begin());
  push_back(d);
  std::rotate(begin() + index, end() - 1, end());
  return begin() + index;
}

Shape::iterator Shape::erase(const_iterator first, const_iterator last) {
  const size_t from = size_t(first - begin()), to = size_t(last - begin());
  std::copy(begin() + to, end(), begin() + from);
  size_ -= to - from;
  return begin() + from;
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Strides contiguous_strides(const Shape& s) {
  Strides st(s.size());
  int64_t acc = 1;
  for (int i = int(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int normalize_dim(int64_t dim, int rank) {
  int64_t d = dim < 0 ? dim + rank : dim;
  KILN_CHECK(d >= 0 && d < std::max(rank, 1), "dim ", dim, " is out of range for a tensor of rank ", rank);
  return int(d);
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, "shapes ", shape_str(a), " and ", shape_str(b),
               " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace kiln
