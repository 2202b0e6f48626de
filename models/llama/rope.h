// Rotary position frequencies, as transformers' ROPE_INIT_FUNCTIONS compute
// them (modeling_rope_utils.py) for each rope_type Kiln reads: default,
// llama3 (Llama 3.1+), linear, dynamic (NTK), yarn and longrope (Phi-3).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::models {

struct RopeScaling {
  std::string type = "default";
  double factor = 1;
  int64_t original_max_positions = 0;                 // llama3, yarn, longrope
  double low_freq_factor = 1, high_freq_factor = 4;    // llama3
  double beta_fast = 32, beta_slow = 1;               // yarn
  bool truncate = true;                               // yarn: round the ramp's ends outwards
  std::optional<double> attention_factor;             // yarn, longrope: cos and sin are scaled by it
  double mscale = 0, mscale_all_dim = 0;              // yarn (DeepSeek's form of the attention factor)
  std::vector<double> short_factor, long_factor;      // longrope, one per frequency
};

// YaRN's scale of cos and sin (transformers' get_mscale): 0.1 mscale
// ln(scale) + 1, or 1 for scale <= 1. With mscale 1 it is the default that
// transformers and llama.cpp apply when the config names no attention factor.
double yarn_mscale(double scale, double mscale);

struct RopeFrequencies {
  std::vector<float> inverse;     // head_dim / 2 frequencies
  double attention_scaling = 1;   // cos and sin are multiplied by it
};

// The frequencies of a forward pass whose furthest position is seq_len - 1
// (longrope switches to its long factors past original_max_positions;
// dynamic NTK changes nothing within max_positions, which Kiln never
// exceeds). theta: rope_theta.
RopeFrequencies rope_frequencies(const RopeScaling& s, double theta, int64_t head_dim, int64_t seq_len);

// Which of the (at most two) frequency sets a pass of seq_len picks: 1 for
// longrope's long factors, else 0.
int rope_variant(const RopeScaling& s, int64_t seq_len);

}  // namespace kiln::models
