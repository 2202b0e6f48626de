#include "apps/serve/precision.h"

#include "kiln/amp/autocast.h"
#include "kiln/autograd/ops.h"

namespace kiln::serve {

namespace {

class AutocastModel final : public recipes::InferenceModel {
 public:
  AutocastModel(std::unique_ptr<recipes::InferenceModel> inner, DType dtype) : inner_(std::move(inner)), dtype_(dtype) {}
  std::vector<std::string> labels() const override { return inner_->labels(); }
  Tensor classify_images(const Tensor& pixels) override {
    const auto scope = precision();
    return to_dtype(inner_->classify_images(pixels), DType::f32);
  }
  Tensor encode_texts(const std::vector<std::string>& texts) override { return inner_->encode_texts(texts); }
  std::optional<int64_t> pad_token() const override { return inner_->pad_token(); }
  Tensor classify_tokens(const Tensor& ids) override {
    const auto scope = precision();
    return to_dtype(inner_->classify_tokens(ids), DType::f32);
  }
  Relevance rerank(const std::string& query, const std::vector<std::string>& documents) override {
    const auto scope = precision();
    return inner_->rerank(query, documents);
  }
  Tensor embed_tokens(const Tensor& ids) override {
    const auto scope = precision();
    return to_dtype(inner_->embed_tokens(ids), DType::f32);
  }
  std::unique_ptr<recipes::PendingCompletion> start_completion(const std::string& prompt,
                                                               const recipes::CompletionOptions& options) override {
    const auto scope = precision();
    return inner_->start_completion(prompt, options);
  }
  std::vector<std::unique_ptr<recipes::PendingCompletion>> start_completions(
      const std::vector<std::string>& prompts, const std::vector<recipes::CompletionOptions>& options) override {
    const auto scope = precision();
    return inner_->start_completions(prompts, options);
  }
  void advance_completions(const std::vector<recipes::PendingCompletion*>& batch) override {
    const auto scope = precision();
    inner_->advance_completions(batch);
  }
  recipes::PromptScores score_prompt(const std::string& prompt, const std::optional<std::vector<int32_t>>& ids,
                                     int64_t top) override {
    const auto scope = precision();
    return inner_->score_prompt(prompt, ids, top);
  }
  const nn::KvPool* kv_pool() const override { return inner_->kv_pool(); }
  std::string render_chat(const std::vector<text::ChatMessage>& messages) override {
    return inner_->render_chat(messages);
  }
  std::string render_chat_json(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                               const nlohmann::ordered_json& kwargs) override {
    return inner_->render_chat_json(messages, tools, kwargs);
  }
  const text::ToolCallFormat* tool_call_format() const override { return inner_->tool_call_format(); }
  const text::ReasoningFormat* reasoning_format() const override { return inner_->reasoning_format(); }
  models::SamplingFields sampling_defaults() const override { return inner_->sampling_defaults(); }
  std::vector<std::string> default_stop() const override { return inner_->default_stop(); }
  std::string default_system() const override { return inner_->default_system(); }
  std::vector<int32_t> tokenize(const std::string& text, bool add_special, bool parse_special) override {
    return inner_->tokenize(text, add_special, parse_special);
  }
  std::string detokenize(const std::vector<int32_t>& ids) override { return inner_->detokenize(ids); }
  int64_t context_length() const override { return inner_->context_length(); }
  std::vector<std::string> token_pieces(const std::vector<int32_t>& ids) override { return inner_->token_pieces(ids); }
  nlohmann::json tokenizer_info() const override { return inner_->tokenizer_info(); }

 private:
  // Autocast on the calling thread, with this model's weight casts: the
  // weights are fixed while served, so each is cast once, not every call.
  struct Scope {
    amp::AutocastGuard autocast;
    amp::WeightCastCache::Scope casts;
  };
  Scope precision() { return {amp::AutocastGuard(dtype_), amp::WeightCastCache::Scope(casts_)}; }

  std::unique_ptr<recipes::InferenceModel> inner_;
  DType dtype_;
  amp::WeightCastCache casts_;
};

}  // namespace

std::unique_ptr<recipes::InferenceModel> with_autocast(std::unique_ptr<recipes::InferenceModel> model, DType dtype) {
  if (dtype == DType::f32) return model;
  return std::make_unique<AutocastModel>(std::move(model), dtype);
}

}  // namespace kiln::serve
