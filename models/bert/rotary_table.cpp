#include "models/bert/rotary_table.h"

#include <cmath>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::models {

std::pair<Tensor, Tensor> rotary_table(int64_t T, int64_t D, double theta, Device device) {
  std::vector<float> inverse(size_t(D / 2)), cos_v(size_t(T * D)), sin_v(cos_v.size());
  for (int64_t i = 0; i < D / 2; ++i) inverse[size_t(i)] = float(1.0 / std::pow(theta, double(2 * i) / double(D)));
  for (int64_t p = 0; p < T; ++p)
    for (int64_t i = 0; i < D; ++i) {
      cos_v[size_t(p * D + i)] = std::cos(float(p) * inverse[size_t(i % (D / 2))]);
      sin_v[size_t(p * D + i)] = std::sin(float(p) * inverse[size_t(i % (D / 2))]);
    }
  return {Tensor::from_vector(cos_v, {T, D}).to(device), Tensor::from_vector(sin_v, {T, D}).to(device)};
}

void check_rotary_heads(int64_t hidden, int64_t heads, const char* model) {
  KILN_CHECK(heads > 0 && hidden % heads == 0 && (hidden / heads) % 2 == 0, model, ": hidden size ", hidden,
             " does not split into ", heads, " heads of even width");
}

}  // namespace kiln::models
