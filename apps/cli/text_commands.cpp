#include "apps/cli/text_commands.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/cli/quantize_option.h"
#include "apps/recipes/recipe.h"
#include "apps/recipes/text_model.h"
#include "kiln/core/error.h"
#include "kiln/io/text_file.h"
#include "models/hf/hf_model.h"

namespace kiln::cli {
namespace {

struct TextInput {
  std::string model, text, file, device = "cpu", precision = "auto", quantize;
  bool json = false;
};

void add_text_options(CLI::App* cmd, TextInput& in) {
  cmd->add_option("model", in.model, "run directory, checkpoint, or hf:DIR (a Hugging Face model folder)")->required();
  auto* text = cmd->add_option("--text", in.text, "the text");
  auto* file = cmd->add_option("--file", in.file, "read the text from this file");
  text->excludes(file);
  cmd->add_flag("--json", in.json, "print JSON");
  cmd->add_option("--device", in.device, "cpu, cuda or cuda:N");
  cmd->add_option("--precision", in.precision,
                  "hf:DIR weights: auto (the file's dtype: bf16 stays bf16), fp32 or bf16");
}

std::string text_of(const TextInput& in) {
  if (in.file.empty()) return in.text;
  return read_text_file(in.file);
}

}  // namespace

std::function<int()> add_tokenize_command(CLI::App& app) {
  auto in = std::make_shared<TextInput>();
  auto* cmd = app.add_subcommand("tokenize", "the token ids of a text, as the model's tokenizer(text) gives them");
  add_text_options(cmd, *in);
  return [cmd, in]() -> int {
    if (!*cmd) return -1;
    // A Hugging Face folder needs only its tokenizer.json (language model,
    // classifier, or a folder of tokenizer files alone).
    const auto dir = models::hf_folder(in->model);
    if (dir && !std::filesystem::exists(*dir + "/tokenizer.json")) models::read_hf_config(*dir);  // says what is missing
    const auto ids = dir ? text::HfTokenizer::from_file(*dir + "/tokenizer.json").encode(text_of(*in))
                         : recipes::load_text_model(in->model, Device::parse(in->device)).encode(text_of(*in));
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
  add_quantize_option(cmd, in->quantize, "quantize the weights: int8, int4 or int4z");
  return [cmd, in]() -> int {
    if (!*cmd) return -1;
    auto m = recipes::load_text_model(in->model, Device::parse(in->device), in->precision, in->quantize);
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

namespace {

// The label probabilities of `text` under a hf:DIR classifier or a Kiln text-classifier run.
std::pair<std::vector<std::string>, std::vector<double>> classify(const std::string& spec, const std::string& text,
                                                                  Device device, const std::string& precision) {
  if (auto dir = models::hf_folder(spec)) {
    auto c = models::load_hf_classifier(*dir, recipes::weights_dtype(precision));
    c.model->to(device);
    return {c.labels, models::classify_text(c, text)};
  }
  auto loaded = recipes::load_for_inference(spec, device);
  KILN_CHECK(loaded.kind == recipes::ModelKind::text_classifier, spec, " is not a text classifier");
  const auto probs = loaded.model->classify_tokens(loaded.model->encode_texts({text})).to_vector<float>();
  return {loaded.model->labels(), std::vector<double>(probs.begin(), probs.end())};
}

}  // namespace

std::function<int()> add_classify_command(CLI::App& app) {
  auto in = std::make_shared<TextInput>();
  auto* cmd = app.add_subcommand("classify", "the label probabilities of a text under a classifier");
  add_text_options(cmd, *in);
  return [cmd, in]() -> int {
    if (!*cmd) return -1;
    const auto [labels, probs] = classify(in->model, text_of(*in), Device::parse(in->device), in->precision);
    KILN_CHECK(labels.size() == probs.size() && !probs.empty(), "the classifier gave ", probs.size(),
               " probabilities for ", labels.size(), " labels");
    const size_t best = size_t(std::max_element(probs.begin(), probs.end()) - probs.begin());
    if (in->json) {
      nlohmann::json by_label = nlohmann::json::object();
      for (size_t i = 0; i < labels.size(); ++i) by_label[labels[i]] = probs[i];
      std::printf("%s\n", nlohmann::json{{"label", labels[best]}, {"probs", by_label}}.dump().c_str());
      return 0;
    }
    std::printf("label: %s\n", labels[best].c_str());
    for (size_t i = 0; i < labels.size(); ++i) std::printf("  %-20s %.4f\n", labels[i].c_str(), probs[i]);
    return 0;
  };
}

}  // namespace kiln::cli
