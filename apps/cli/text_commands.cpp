#include "apps/cli/text_commands.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/cli/quantize_option.h"
#include "apps/recipes/recipe.h"
#include "apps/recipes/text_model.h"
#include "kiln/core/error.h"
#include "kiln/io/text_file.h"
#include "models/hf/hf_embedder.h"
#include "models/hf/hf_model.h"

namespace kiln::cli {
namespace {

struct TextInput {
  std::string model, text, file, device = "cpu", precision = "auto", quantize;
  bool json = false;
};

void add_text_options(CLI::App* cmd, TextInput& in) {
  cmd->add_option("model", in.model, "run directory, checkpoint, hf:DIR (a Hugging Face model folder) or gguf:FILE (a GGUF file)")->required();
  auto* text = cmd->add_option("--text", in.text, "the text");
  auto* file = cmd->add_option("--file", in.file, "read the text from this file");
  text->excludes(file);
  cmd->add_flag("--json", in.json, "print JSON");
  cmd->add_option("--device", in.device, "cpu, cuda or cuda:N");
  cmd->add_option("--precision", in.precision,
                  "hf:DIR and gguf:FILE weights: auto (the file's dtype: bf16 stays bf16), fp32 or bf16");
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
    // classifier, or a folder of tokenizer files alone); a GGUF file its metadata.
    const auto dir = models::hf_folder(in->model);
    if (dir && !models::is_gguf_file(*dir) && !std::filesystem::exists(*dir + "/tokenizer.json"))
      models::read_hf_config(*dir);  // says what is missing
    const auto ids = dir ? models::load_hf_tokenizer(*dir).encode(text_of(*in))
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
  add_quantize_option(cmd, in->quantize, "quantize the weights: int8, int8b, int4 or int4z");
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

std::function<int()> add_perplexity_command(CLI::App& app) {
  auto in = std::make_shared<TextInput>();
  auto ctx = std::make_shared<int64_t>(512), chunks = std::make_shared<int64_t>(0);
  auto* cmd = app.add_subcommand("perplexity", "the perplexity of a long text, computed as llama.cpp's "
                                               "llama-perplexity computes it (chunks of --ctx tokens, each scored on its second half)");
  add_text_options(cmd, *in);
  cmd->add_option("--ctx", *ctx, "tokens per chunk (llama-perplexity's -c)");
  cmd->add_option("--chunks", *chunks, "score at most this many chunks (0: all; llama-perplexity's --chunks)");
  add_quantize_option(cmd, in->quantize, "quantize the weights: int8, int8b, int4 or int4z");
  return [cmd, in, ctx, chunks]() -> int {
    if (!*cmd) return -1;
    auto m = recipes::load_text_model(in->model, Device::parse(in->device), in->precision, in->quantize);
    const auto p = recipes::chunked_perplexity(m, text_of(*in), *ctx, *chunks);
    if (in->json) {
      std::printf("%s\n", nlohmann::json{{"perplexity", p.perplexity}, {"standard_error", p.standard_error},
                                         {"chunks", p.chunks}, {"tokens_scored", p.tokens_scored},
                                         {"tokens", p.tokens}}.dump().c_str());
      return 0;
    }
    std::printf("perplexity: %.4f +/- %.5f over %lld chunks of %lld tokens (%lld tokens scored)\n", p.perplexity,
                p.standard_error, static_cast<long long>(p.chunks), static_cast<long long>(*ctx),
                static_cast<long long>(p.tokens_scored));
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

std::function<int()> add_embed_command(CLI::App& app) {
  struct EmbedInput {
    std::string model, file, device = "cpu", precision = "auto", prompt_name;
    std::vector<std::string> texts;
    bool json = false;
  };
  auto in = std::make_shared<EmbedInput>();
  auto* cmd = app.add_subcommand("embed", "sentence embeddings of texts, as sentence-transformers' encode() gives them");
  cmd->add_option("model", in->model,
                  "hf:DIR: a sentence-transformers folder, or a BERT-family encoder's; gguf:FILE: an embedding model's "
                  "GGUF file")
      ->required();
  auto* text = cmd->add_option("--text", in->texts, "a text (repeat for more)");
  auto* file = cmd->add_option("--file", in->file, "read the texts from this file, one per line");
  text->excludes(file);
  cmd->add_flag("--json", in->json, "print JSON: {\"dimensions\", \"embeddings\": [[...], ...]}");
  cmd->add_option("--prompt-name", in->prompt_name,
                  "put this prompt of the folder's config_sentence_transformers.json before every text, as "
                  "encode(prompt_name=...) does (EmbeddingGemma's query, document, ...)");
  cmd->add_option("--device", in->device, "cpu, cuda or cuda:N");
  cmd->add_option("--precision", in->precision, "weights: auto (the file's dtype), fp32 or bf16");
  return [cmd, in]() -> int {
    if (!*cmd) return -1;
    const auto dir = models::hf_folder(in->model);
    KILN_CHECK(dir,
               "kiln embed takes hf:DIR (a sentence-transformers or BERT-family folder) or gguf:FILE (an embedding "
               "model's), not ",
               in->model);
    std::vector<std::string> texts = in->texts;
    if (!in->file.empty()) {
      std::istringstream lines(read_text_file(in->file));
      for (std::string line; std::getline(lines, line);) texts.push_back(line);
    }
    KILN_CHECK(!texts.empty(), "kiln embed: no texts (give --text or --file)");
    auto e = models::load_hf_embedder(*dir, recipes::weights_dtype(in->precision));
    if (!in->prompt_name.empty()) models::use_prompt(e, in->prompt_name);
    e.encoder.model->to(Device::parse(in->device));
    const auto vectors = models::embed_texts(e, texts);
    if (in->json) {
      std::printf("%s\n", nlohmann::json{{"dimensions", e.dimensions()}, {"embeddings", vectors}}.dump().c_str());
      return 0;
    }
    for (const auto& v : vectors) {
      for (size_t i = 0; i < v.size(); ++i) std::printf("%s%.7g", i ? " " : "", double(v[i]));
      std::printf("\n");
    }
    return 0;
  };
}

}  // namespace kiln::cli
