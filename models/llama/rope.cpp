#include "models/llama/rope.h"

#include <algorithm>
#include <cmath>

namespace kiln::models {

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

namespace {

// base ** (2i / dim) for i < dim / 2, in f32 as torch computes it.
std::vector<float> powers(double theta, int64_t dim) {
  std::vector<float> p(size_t(dim / 2));
  for (size_t i = 0; i < p.size(); ++i) p[i] = std::pow(float(theta), float(2 * i) / float(dim));
  return p;
}

// Llama 3's scaling of the long wavelengths (_compute_llama3_parameters).
void scale_llama3(const RopeScaling& s, std::vector<float>& inv) {
  const double low_wavelen = double(s.original_max_positions) / s.low_freq_factor;
  const double high_wavelen = double(s.original_max_positions) / s.high_freq_factor;
  for (float& f : inv) {
    const double wavelen = 2 * M_PI / f;
    if (wavelen > low_wavelen) {
      f = float(f / s.factor);
    } else if (wavelen >= high_wavelen) {
      const double smooth = (double(s.original_max_positions) / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      f = float((1 - smooth) * f / s.factor + smooth * f);
    }
  }
}

// YaRN (_compute_yarn_parameters): each frequency between its interpolated
// (divided by factor) and extrapolated value, by a linear ramp over the
// dimensions whose wavelengths lie between beta_fast and beta_slow turns.
RopeFrequencies yarn(const RopeScaling& s, double theta, int64_t dim) {
  const std::vector<float> pos = powers(theta, dim);
  auto correction_dim = [&](double rotations) {
    return double(dim) * std::log(double(s.original_max_positions) / (rotations * 2 * M_PI)) / (2 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0), high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // as transformers, against a zero-width ramp
  RopeFrequencies r;
  for (size_t i = 0; i < pos.size(); ++i) {
    const float ramp = std::clamp((float(i) - float(low)) / (float(high) - float(low)), 0.0f, 1.0f);
    const float extrapolation = 1.0f - ramp;
    const float inv_extrapolation = 1.0f / pos[i], inv_interpolation = 1.0f / (float(s.factor) * pos[i]);
    r.inverse.push_back(inv_interpolation * (1.0f - extrapolation) + inv_extrapolation * extrapolation);
  }
  if (s.attention_factor) r.attention_scaling = *s.attention_factor;
  else if (s.mscale != 0 && s.mscale_all_dim != 0)
    r.attention_scaling = yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  else r.attention_scaling = yarn_mscale(s.factor, 1);
  return r;
}

// LongRoPE (_compute_longrope_parameters): per-frequency factors, the long
// set past the original context; the attention factor from the context's growth.
RopeFrequencies longrope(const RopeScaling& s, double theta, int64_t dim, int64_t seq_len) {
  const std::vector<double>& ext = seq_len > s.original_max_positions ? s.long_factor : s.short_factor;
  const std::vector<float> pos = powers(theta, dim);
  RopeFrequencies r;
  for (size_t i = 0; i < pos.size(); ++i) r.inverse.push_back(1.0f / (float(ext[i]) * pos[i]));
  const double grown = std::sqrt(1 + std::log(s.factor) / std::log(double(s.original_max_positions)));
  r.attention_scaling = s.attention_factor ? *s.attention_factor : s.factor <= 1 ? 1.0 : grown;
  return r;
}

}  // namespace

int rope_variant(const RopeScaling& s, int64_t seq_len) {
  return s.type == "longrope" && seq_len > s.original_max_positions ? 1 : 0;
}

RopeFrequencies rope_frequencies(const RopeScaling& s, double theta, int64_t head_dim, int64_t seq_len) {
  if (s.type == "yarn") return yarn(s, theta, head_dim);
  if (s.type == "longrope") return longrope(s, theta, head_dim, seq_len);
  RopeFrequencies r;
  for (float p : powers(theta, head_dim)) r.inverse.push_back(1.0f / p);
  if (s.type == "linear")
    for (float& f : r.inverse) f = float(f / s.factor);
  if (s.type == "llama3") scale_llama3(s, r.inverse);
  // "dynamic": NTK's base grows only past max_position_embeddings, which a
  // pass never reaches here (rope_rows refuses it): the default frequencies.
  return r;
}

}  // namespace kiln::models
