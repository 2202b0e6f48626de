#include "apps/cli/text_commands.h"

#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/recipes/text_model.h"
#include "kiln/core/error.h"

namespace kiln::cli {
namespace {

struct TextInput {
  std::string model, text, file, device = "cpu";
  bool json = false;
};

void add_text_options(CLI::App* cmd, TextInput& in) {
  cmd->add_option("model", in.model, "run directory, checkpoint, or hf:DIR (a Hugging Face model folder)")->required();
  auto* text = cmd->add_option("--text", in.text, "the text");
  auto* file = cmd->add_option("--file", in.file, "read the text from this file");
  text->excludes(file);
  cmd->add_flag("--json", in.json, "print JSON");
  cmd->add_option("--device", in.device, "cpu, cuda or cuda:N");
}

std::string text_of(const TextInput& in) {
  if (in.file.empty()) return in.text;
  std::ifstream f(in.file, std::ios::binary);
  KILN_CHECK(f, "cannot read ", in.file);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

std::function<int()> add_tokenize_command(CLI::App& app) {
  auto in = std::make_shared<TextInput>();
  auto* cmd = app.add_subcommand("tokenize", "the token ids of a text, as the model's tokenizer(text) gives them");
  add_text_options(cmd, *in);
  return [cmd, in]() -> int {
    if (!*cmd) return -1;
    const auto m = recipes::load_text_model(in->model, Device::parse(in->device));
    const auto ids = m.encode(text_of(*in));
    if (in->json) {
      std::printf("%s\n", nlohmann::json{{"ids", ids}}.dump().c_str());
    } else {
      for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? " " : "", ids[i]);
      std::printf("\n");
    }
    return 0;
  };
}

std::function<int()> add_score_command(CLI::App& app) {
  auto in = std::make_shared<TextInput>();
  auto* cmd = app.add_subcommand("score", "each token's log-probability given the text before it, and the perplexity");
  add_text_options(cmd, *in);
  return [cmd, in]() -> int {
    if (!*cmd) return -1;
    auto m = recipes::load_text_model(in->model, Device::parse(in->device));
    const auto s = recipes::score_text(m, text_of(*in));
    if (in->json) {
      nlohmann::json lp = nlohmann::json::array();
      for (double v : s.logprobs) lp.push_back(std::isnan(v) ? nlohmann::json() : nlohmann::json(v));
      std::printf("%s\n", nlohmann::json{{"ids", s.ids}, {"logprobs", lp}, {"perplexity", s.perplexity}}.dump().c_str());
      return 0;
    }
    for (size_t t = 0; t < s.ids.size(); ++t) {
      const std::string piece = m.decode({s.ids[t]});
      if (t == 0) std::printf("%8d  %10s  %s\n", s.ids[t], "", piece.c_str());
      else std::printf("%8d  %10.4f  %s\n", s.ids[t], s.logprobs[t], piece.c_str());
    }
    std::printf("perplexity: %.4f over %zu tokens\n", s.perplexity, s.ids.size() - 1);
    return 0;
  };
}

}  // namespace kiln::cli
