#include "apps/recipes/recipe.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "apps/recipes/classify_finetune.h"
#include "apps/recipes/classify_recipe.h"
#include "apps/recipes/common.h"
#include "apps/recipes/gpt_recipe.h"
#include "apps/recipes/hf_inference.h"
#include "apps/recipes/image_recipe.h"
#include "apps/recipes/sft_recipe.h"
#include "apps/recipes/step_parts.h"
#include "apps/recipes/text_model.h"
#include "models/hf/hf_model.h"

namespace kiln::recipes {

const std::vector<std::unique_ptr<Recipe>>& recipe_table() {
  static const std::vector<std::unique_ptr<Recipe>> table = [] {
    std::vector<std::unique_ptr<Recipe>> t;
    t.push_back(make_fashion_mlp_recipe());
    t.push_back(make_fashion_cnn_recipe());
    t.push_back(make_fashion_fast_recipe());
    t.push_back(make_fortunes_gpt_recipe());
    t.push_back(make_fortunes_classify_recipe());
    t.push_back(make_sft_recipe());
    t.push_back(make_classify_finetune_recipe());
    return t;
  }();
  return table;
}

const char* model_kind_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::image_classifier: return "image-classifier";
    case ModelKind::language_model: return "language-model";
    case ModelKind::text_classifier: return "text-classifier";
    case ModelKind::text_embedder: return "text-embedder";
  }
  return "unknown";
}

std::vector<std::string> recipe_names() {
  std::vector<std::string> names;
  for (const auto& r : recipe_table()) names.push_back(r->name());
  return names;
}

bool is_image_recipe(const std::string& name) {
  for (const auto& r : recipe_table())
    if (r->name() == name) return r->kind() == ModelKind::image_classifier;
  return false;
}

std::string image_recipe_names() {
  std::string names;
  for (const auto& r : recipe_table())
    if (r->kind() == ModelKind::image_classifier) names += (names.empty() ? "" : ", ") + r->name();
  return names;
}

const Recipe& find_recipe(const std::string& name) {
  for (const auto& r : recipe_table())
    if (r->name() == name) return *r;
  std::string known;
  for (const auto& n : recipe_names()) known += (known.empty() ? "" : ", ") + n;
  KILN_FAIL("unknown recipe '", name, "' (choose one of ", known, ")");
}

std::string describe_recipes() {
  std::string out;
  for (const auto& r : recipe_table()) out += "  " + r->name() + ": " + r->summary() + "\n";
  return out;
}

StepParts Recipe::step_parts(const StepRequest&) const {
  KILN_FAIL("recipe '", name(), "' cannot describe its training step for kiln plan yet");
}

std::vector<std::string> Recipe::sample(const Checkpoint&, const std::string& dir, const SampleOptions&,
                                        Device) const {
  KILN_FAIL("kiln sample needs a language-model checkpoint; ", dir, " is from '", name(), "', a ",
            model_kind_name(kind()));
}

TrainResult train(const TrainOptions& o, const Log& log) {
  std::string name = o.recipe;
  if (name.empty() && o.resume) {
    // `kiln train --out DIR --resume`: the run directory says what it trains.
    auto latest = latest_checkpoint(o.out_dir.empty() ? "runs/fashion-mlp" : o.out_dir);
    if (latest) name = load_checkpoint_state(*latest).value("recipe", "");
  }
  const Recipe& recipe = find_recipe(name.empty() ? "fashion-mlp" : name);
  KILN_CHECK(o.target_accuracy == 0 || recipe.kind() == ModelKind::image_classifier, "--target-accuracy applies to ",
             "the image recipes (", image_recipe_names(), "); ", recipe.name(), " is a ", model_kind_name(recipe.kind()));
  KILN_CHECK(o.eval_every == 0 || o.target_accuracy > 0, "--eval-every says how often --target-accuracy tests; ",
             "give --target-accuracy too");
  return recipe.train(o, log);
}

namespace {
const Recipe& recipe_of(const Checkpoint& ck, const std::string& dir) {
  KILN_CHECK(ck.state.contains("recipe"), "checkpoint ", dir, " names no recipe in its state.json");
  return find_recipe(ck.state.at("recipe").get<std::string>());
}
}  // namespace

EvalResult evaluate(const std::string& path, Device device, const Log& log, const std::string& precision,
                    const std::string& quantize) {
  if (models::hf_folder(path)) {
    KILN_CHECK(models::hf_model_kind(models::read_hf_config(*models::hf_folder(path))) == "causal", path,
               " is a classifier; kiln eval scores Hugging Face language models (classify texts with kiln classify)");
    TextModel m = load_text_model(path, device, precision, quantize);
    log("evaluating " + path + " on the fortunes validation split, each fortune on its own");
    const TextEval e = evaluate_on_fortunes(m);
    log(std::to_string(e.documents) + " fortunes, " + std::to_string(e.tokens) + " tokens scored");
    EvalResult r;
    r.loss = e.nats_per_token;
    r.bits_per_byte = e.bits_per_byte;
    return r;
  }
  KILN_CHECK(quantize.empty() && precision == "auto", "--quantize and --precision evaluate hf:DIR language models; "
             "export a run first (kiln export RUN --format hf --out DIR)");
  std::string dir = resolve_checkpoint(path);
  Checkpoint ck = load_checkpoint(dir);
  const Recipe& recipe = recipe_of(ck, dir);
  log("evaluating " + dir + " (" + recipe.name() + ", step " + std::to_string(ck.step) + ")");
  return recipe.evaluate(ck, dir, device, log);
}

LoadedModel load_for_inference(const std::string& path, Device device, const InferenceOptions& options) {
  if (models::hf_folder(path)) return load_hf_for_inference(path, device, options);
  KILN_CHECK(options.quantize.empty(), "--quantize serves hf:DIR language models; export a run first (kiln export "
             "RUN --format hf --out DIR)");
  std::string dir = resolve_checkpoint(path);
  Checkpoint ck = load_checkpoint(dir);
  const Recipe& recipe = recipe_of(ck, dir);
  return {recipe.name(), recipe.kind(), ck.step, recipe.load_for_inference(ck, dir, device)};
}

TextCompletion::TextCompletion(const CompletionOptions& o, int64_t vocab) : o_(o) {
  for (const auto& [token, bias] : o.logit_bias)
    KILN_CHECK(token < vocab, "logit_bias names token ", token, ", outside the model's ", vocab, " tokens");
  for (const auto& s : o.stop) hold_ = std::max(hold_, s.empty() ? 0 : s.size() - 1);
  c_.finish_reason = "length";
}

void TextCompletion::add_logit_bias(std::span<float> logits) const {
  for (const auto& [token, bias] : o_.logit_bias) logits[size_t(token)] += bias;
}

std::string TextCompletion::take_text() {
  const size_t ready = finished_ ? text_.size() : (text_.size() > hold_ ? text_.size() - hold_ : 0);
  if (ready <= sent_) return {};
  std::string piece = text_.substr(sent_, ready - sent_);
  sent_ = ready;
  return piece;
}

bool TextCompletion::cut_at_stop() {
  bool cut = false;
  for (const auto& s : o_.stop) {
    const size_t at = s.empty() ? std::string::npos : text_.find(s);
    if (at == std::string::npos) continue;
    text_.resize(at);
    c_.finish_reason = "stop";
    c_.stop_string = s;
    finished_ = cut = true;
  }
  return cut;
}

bool TextCompletion::cut_at_limits(size_t grown_from) {
  if (grown_from == 0 && first_token_ == std::chrono::steady_clock::time_point{})
    first_token_ = std::chrono::steady_clock::now();
  bool cut = false;
  if (had_line_end_ && o_.min_indent > 0) {  // (llama-server's order: the line before this token's line end)
    if (line_start_ > 0) {
      size_t at = line_start_;
      while (at < text_.size() && (text_[at] == ' ' || text_[at] == '\t')) ++at;
      if (at < text_.size() && int64_t(at - line_start_) < o_.min_indent) {
        text_.resize(at);
        c_.finish_reason = "length";
        finished_ = cut = true;
      }
    }
    const size_t next = text_.find('\n', line_start_);
    if (next != std::string::npos) line_start_ = next + 1;
  }
  if (grown_from < text_.size() && text_.find('\n', grown_from) != std::string::npos) {
    had_line_end_ = true;
    const auto generating = std::chrono::steady_clock::now() - first_token_;
    if (o_.max_predict_ms > 0 && generating > std::chrono::milliseconds(o_.max_predict_ms)) {
      c_.finish_reason = "length";
      finished_ = true;
    }
  }
  return cut;
}

std::vector<TokenScore> most_likely(const float* log_probs, size_t vocab, int64_t top, const TokenSpelling& spelling) {
  std::vector<int32_t> order(vocab);
  for (size_t i = 0; i < vocab; ++i) order[i] = int32_t(i);
  const size_t k = std::min<size_t>(size_t(std::max<int64_t>(top, 0)), vocab);
  std::partial_sort(order.begin(), order.begin() + long(k), order.end(),
                    [&](int32_t a, int32_t b) { return log_probs[a] > log_probs[b]; });
  std::vector<TokenScore> best;
  for (size_t i = 0; i < k; ++i)
    best.push_back({order[i], spelling.text(order[i]), spelling.bytes(order[i]), log_probs[order[i]]});
  return best;
}

void TextCompletion::record_logprob(const std::vector<float>& logits, int32_t token, const TokenSpelling& spelling) {
  if (o_.logprobs < 0) return;
  float max = -std::numeric_limits<float>::infinity();
  for (float v : logits) max = std::max(max, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - max);
  const float log_sum = float(max + std::log(sum));
  std::vector<float> lp(logits.size());
  for (size_t i = 0; i < lp.size(); ++i) lp[i] = logits[i] - log_sum;
  c_.logprobs.push_back({{token, spelling.text(token), spelling.bytes(token), lp[size_t(token)]},
                         most_likely(lp.data(), lp.size(), o_.logprobs, spelling)});
}

Tensor InferenceModel::classify_images(const Tensor&) {
  KILN_FAIL("this model does not classify images");
}

Tensor InferenceModel::encode_texts(const std::vector<std::string>&) { KILN_FAIL("this model does not classify text"); }
Tensor InferenceModel::encode_embedding_texts(const std::vector<std::string>& texts, const EmbeddingInput& how) {
  KILN_CHECK(!how.prompt_name, "this model has no sentence-transformers prompts to pick from");
  KILN_CHECK(how.truncate, "this model cannot say whether a text is past its length: leave truncation on");
  return encode_texts(texts);
}
Tensor InferenceModel::classify_tokens(const Tensor&) { KILN_FAIL("this model does not classify text"); }
Tensor InferenceModel::embed_tokens(const Tensor&) { KILN_FAIL("this model does not embed text"); }

std::unique_ptr<PendingCompletion> InferenceModel::start_completion(const std::string&, const CompletionOptions&) {
  KILN_FAIL("this model does not generate text");
}
std::vector<std::unique_ptr<PendingCompletion>> InferenceModel::start_completions(
    const std::vector<std::string>& prompts, const std::vector<CompletionOptions>& options) {
  KILN_CHECK(prompts.size() == options.size(), "start_completions: ", prompts.size(), " prompts with ",
             options.size(), " options");
  std::vector<std::unique_ptr<PendingCompletion>> started;
  for (size_t i = 0; i < prompts.size(); ++i) started.push_back(start_completion(prompts[i], options[i]));
  return started;
}
void InferenceModel::advance_completions(const std::vector<PendingCompletion*>&) {
  KILN_FAIL("this model does not generate text");
}
PromptScores InferenceModel::score_prompt(const std::string&, const std::optional<std::vector<int32_t>>&, int64_t) {
  KILN_FAIL("this model does not score prompts (Hugging Face language models do)");
}
std::vector<int32_t> InferenceModel::tokenize(const std::string&, bool, bool) {
  KILN_FAIL("this model has no tokens to show (language models do)");
}
std::string InferenceModel::detokenize(const std::vector<int32_t>&) {
  KILN_FAIL("this model has no tokens to show (language models do)");
}
InferenceModel::Relevance InferenceModel::rerank(const std::string&, const std::vector<std::string>&) {
  KILN_FAIL("this model does not rerank (a cross-encoder does: a classifier with one label; and Qwen3-Reranker)");
}
int64_t InferenceModel::context_length() const { KILN_FAIL("this model has no context length (language models do)"); }
nlohmann::json InferenceModel::tokenizer_info() const {
  KILN_FAIL("this model has no tokenizer to describe (Hugging Face and GGUF language models do)");
}
std::vector<std::string> InferenceModel::token_pieces(const std::vector<int32_t>& ids) {
  constexpr size_t kContext = 8;  // tokens before: enough for a character's bytes, and a decoder's spacing
  std::vector<std::string> pieces;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto start = ids.begin() + long(i >= kContext ? i - kContext : 0);
    const std::string before = detokenize({start, ids.begin() + long(i)});
    const std::string with = detokenize({start, ids.begin() + long(i) + 1});
    pieces.push_back(with.starts_with(before) ? with.substr(before.size()) : with);
  }
  return pieces;
}
std::string InferenceModel::render_chat(const std::vector<text::ChatMessage>&) {
  KILN_FAIL("this model has no chat template (Hugging Face language models have one; Kiln's GPT runs continue text: "
            "use /v1/completions)");
}

std::string InferenceModel::render_chat_json(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                             const nlohmann::ordered_json& kwargs) {
  KILN_CHECK(tools.is_null(), "this model's chat takes no tools (a Hugging Face model's own Jinja template does)");
  KILN_CHECK(kwargs.empty(), "this model's chat template takes no variables (a Hugging Face model's own Jinja template does)");
  std::vector<text::ChatMessage> plain;
  for (const auto& m : messages) {
    KILN_CHECK(m.contains("content") && m["content"].is_string() && !m.contains("tool_calls") && m["role"] != "tool",
               "this model's chat takes text messages only (no tool calls or tool results)");
    plain.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return render_chat(plain);
}

Completion InferenceModel::complete(const std::string& prompt, const CompletionOptions& options,
                                    const std::function<void(const std::string&)>& on_text) {
  std::unique_ptr<PendingCompletion> c = start_completion(prompt, options);
  for (;;) {
    const std::string text = c->take_text();
    if (!text.empty() && on_text) on_text(text);
    if (c->finished()) return c->result();
    advance_completions({c.get()});
  }
}

std::vector<std::string> sample(const std::string& path, const SampleOptions& options, Device device) {
  // Hugging Face folders, quantized models, fine-tuned ones, --ignore-eos and
  // what a run's own sampler lacks (top-p, min-p, penalties) sample as a TextModel.
  auto through_text_model = [&] {
    TextModel m = load_text_model(path, device, options.precision, options.quantize);
    const models::Sampling sampling = models::resolve_sampling(options.sampling, m.sampling_defaults, kSampleFallback);
    Generator gen(options.seed);
    const std::vector<int32_t> prompt = m.encode(options.prompt);
    std::vector<std::string> out;
    for (int i = 0; i < options.count; ++i) {
      const std::vector<int32_t> none;
      auto all = models::generate(*m.model, prompt, options.max_tokens, sampling, gen,
                                  options.ignore_eos ? none : m.stop_ids, {}, options.ignore_eos ? m.stop_ids : none);
      if (all.size() > prompt.size() && std::find(m.stop_ids.begin(), m.stop_ids.end(), all.back()) != m.stop_ids.end())
        all.pop_back();
      // The continuation as decoding the whole text spells it (a SentencePiece "▁the" after the prompt is " the";
      // alone, decoding would strip its space).
      const std::string before = m.decode(prompt), whole = m.decode(all);
      out.push_back(options.prompt + (whole.starts_with(before)
                                          ? whole.substr(before.size())
                                          : m.decode(std::vector<int32_t>(all.begin() + long(prompt.size()), all.end()))));
    }
    return out;
  };
  const models::SamplingFields& s = options.sampling;
  const bool beyond_run_sampler =
      s.top_p || s.min_p || s.repetition_penalty || s.presence_penalty || s.frequency_penalty;
  if (models::hf_folder(path) || !options.quantize.empty() || options.ignore_eos || beyond_run_sampler)
    return through_text_model();
  std::string dir = resolve_checkpoint(path);
  Checkpoint ck = load_checkpoint(dir);
  const Recipe& recipe = recipe_of(ck, dir);
  if (!recipe.can_sample() && recipe.kind() == ModelKind::language_model) return through_text_model();
  return recipe.sample(ck, dir, options, device);
}

}  // namespace kiln::recipes
