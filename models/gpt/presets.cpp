#include "models/gpt/presets.h"

#include "kiln/core/error.h"

namespace kiln::models {

namespace {

GptConfig make(int64_t vocab, int64_t block, int64_t layers, int64_t heads, int64_t width) {
  GptConfig c;
  c.vocab_size = vocab;
  c.block_size = block;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_embd = width;
  c.dropout = 0.0;
  return c;
}

struct Preset {
  const char* name;
  GptConfig config;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = {
      {"gpt2", make(50257, 1024, 12, 12, 768)},
      {"gpt2-medium", make(50257, 1024, 24, 16, 1024)},
      {"gpt2-large", make(50257, 1024, 36, 20, 1280)},
      {"gpt2-xl", make(50257, 1024, 48, 25, 1600)},
      {"fortunes", make(2048, 128, 4, 4, 128)},
  };
  return table;
}

}  // namespace

GptConfig gpt_preset(const std::string& name) {
  for (const Preset& p : presets())
    if (name == p.name) return p.config;
  std::string names;
  for (const Preset& p : presets()) names += (names.empty() ? "" : ", ") + std::string(p.name);
  KILN_FAIL("unknown GPT preset '", name, "' (choose one of ", names, ")");
}

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : presets()) names.push_back(p.name);
  return names;
}

int64_t gpt_parameter_count(const GptConfig& c) {
  const int64_t d = c.n_embd;
  const int64_t per_block = 2 * 2 * d             // ln_1, ln_2
                            + d * 3 * d + 3 * d   // attn.c_attn
                            + d * d + d           // attn.c_proj
                            + d * 4 * d + 4 * d   // mlp.c_fc
                            + 4 * d * d + d;      // mlp.c_proj
  return c.vocab_size * d + c.block_size * d + c.n_layer * per_block + 2 * d;  // wte (tied), wpe, blocks, ln_f
}

std::vector<double> gpt_block_flops(const GptConfig& c) {
  const double d = double(c.n_embd), T = double(c.block_size), V = double(c.vocab_size);
  const double head = V * d + 2.0 * d;  // the tied output embedding and ln_f
  const double per_block = (double(gpt_parameter_count(c)) - head - T * d) / double(c.n_layer);
  std::vector<double> flops(size_t(c.n_layer), 6.0 * per_block + 12.0 * T * d);
  flops.back() += 6.0 * head;
  return flops;
}

}  // namespace kiln::models
