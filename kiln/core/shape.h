// Shapes and strides (in elements). Broadcasting follows NumPy/PyTorch rules.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
Strides contiguous_strides(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3, 4]"
// Normalises a possibly negative dim against rank; throws if out of range.
int normalize_dim(int64_t dim, int rank);
// The broadcast of a and b; throws naming both shapes if incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace kiln
