#include "apps/recipes/hf_inference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <list>
#include <mutex>
#include <span>

#include "kiln/text/grammar/json_grammar.h"
#include "kiln/text/grammar/matcher.h"
#include "kiln/text/hf_tokenizer.h"
#include "kiln/text/stages.h"
#include "models/common/sampler_chain.h"
#include "models/hf/hf_chat.h"
#include "models/hf/hf_embedder.h"
#include "models/hf/hf_model.h"

namespace kiln::recipes {
namespace {

// A logit no draw can land on: masked out, or an end the text may not take.
constexpr float kNever = -std::numeric_limits<float>::infinity();

// A token's text, as a client sees it. A model's vocabulary may be padded
// past its tokenizer's: such ids have no text.
std::string token_text(const text::HfTokenizer& tokenizer, int32_t id) {
  return id < tokenizer.vocab_size() ? tokenizer.decode({id}, false) : "<unused " + std::to_string(id) + ">";
}

// Log-probabilities' names for the tokenizer's tokens: their text, and their bytes: the text's, but for a token
// that splits a character (its text U+FFFD), its own bytes, which say which piece it is (as llama-server's are).
TokenSpelling spelling_of(const text::HfTokenizer& tokenizer) {
  return {[&tokenizer](int32_t id) { return token_text(tokenizer, id); },
          [&tokenizer](int32_t id) {
            const std::string text = token_text(tokenizer, id);
            const bool split = id < tokenizer.vocab_size() && text.find("\xEF\xBF\xBD") != std::string::npos;
            return split ? tokenizer.token_bytes(id) : text;
          }};
}

// A completion of a Hugging Face language model: its cache, its sampler and
// the text decoded so far, a whole character at a time.
class HfCompletion final : public TextCompletion {
 public:
  // `stop_ids`: the tokens that end it (end of sequence, and a chat's end of
  // turn). `vocab`: each token's bytes, for a grammar (none for special
  // tokens and ids past the tokenizer, which a grammar never allows).
  // `masks`: the grammar's masks by state, shared by the completions of one grammar.
  // `kept`: special tokens whose text stays in the completion's (a tool-call format's).
  HfCompletion(const models::HfCausalLm& lm, const CompletionOptions& o, std::span<const int32_t> prompt,
               std::vector<int32_t> stop_ids, const text::TokenTrie* vocab, std::shared_ptr<text::MaskCache> masks,
               std::vector<int32_t> kept)
      : TextCompletion(o, lm.model->vocab_size()),
        lm_(lm),
        stop_ids_(std::move(stop_ids)),
        cache_(lm.model->new_cache()),
        gen_(o.seed),
        penalties_(o.sampling, lm.model->vocab_size(), prompt, lm.model->context_length()),
        stream_(lm.tokenizer),
        vocab_(vocab),
        masks_(std::move(masks)),
        kept_(std::move(kept)) {
    c_.prompt_tokens = int64_t(prompt.size());
    if (o.grammar && o.grammar_triggers.empty()) matcher_.emplace(o.grammar);
  }

  // Samples the next token from its logits (copied into buffers the
  // completion keeps, so a step allocates nothing for them).
  void take(std::span<const float> step_logits) {
    logits_.assign(step_logits.begin(), step_logits.end());
    const std::vector<float>& logits = logits_;
    row_ = logits_;
    std::vector<float>& row = row_;
    add_logit_bias(row);
    penalties_.apply(row);
    if (o_.ignore_eos)
      for (int32_t eos : lm_.eos_ids) row[size_t(eos)] = kNever;
    if (matcher_) {
      // The grammar's mask, before temperature, top-k and top-p: a token
      // only where its bytes keep the text matching, an end only where the
      // text is a whole match.
      const std::shared_ptr<const text::TokenSet> mask = masks_->allowed(*matcher_, *vocab_);
      const bool can_end = matcher_->can_end();
      stops_.clear();  // the ends' values, which the grammar's mask (of bytes) does not decide
      for (int32_t id : stop_ids_) stops_.push_back(size_t(id) < row.size() ? row[size_t(id)] : kNever);
      const bool any = ptrdiff_t(keep_only(*mask, row)) + end_where(can_end, row) > 0;
      if (!any) {  // nothing can follow (an end the model may not sample, or a vocabulary without the bytes)
        c_.finish_reason = can_end ? "stop" : "length";
        finished_ = true;
        c_.text = text_;
        return;
      }
    }
    const int32_t token = o_.sampler_chain.empty()
                              ? models::sample_token(row, o_.sampling, gen_)
                              : models::sample_chain(row, o_.sampler_chain, o_.sampling, chain_vocabulary(), gen_);
    if (!ends(token)) record_logprob(logits, token, spelling_of(lm_.tokenizer));
    if (matcher_ && !ends(token)) matcher_->accept(vocab_->bytes(size_t(token)));
    accept(token);
    if (!matcher_ && o_.grammar && !finished_) trigger_grammar();
  }
  int32_t last() const { return last_; }
  models::KvCache& cache() { return cache_; }
  // The prompt is in the cache: how much of it the prefix cache gave.
  void prompt_done() { c_.cached_tokens = cache_.adopted(); }
  bool context_full() const { return cache_.length() >= lm_.model->context_length(); }

 private:
  // Sets the logits of tokens outside `mask` to -inf (ids past it, a padded
  // vocabulary's, have no bytes): 32 tokens a word, branch-free so that it
  // vectorises. Returns how many are left to sample.
  static size_t keep_only(const text::TokenSet& mask, std::vector<float>& row) {
    const size_t covered = std::min(mask.size(), row.size()) / 32 * 32;
    const std::vector<uint64_t>& words = mask.words();
    size_t open = 0;
    for (size_t w = 0; w < covered / 32; ++w) {
      const uint32_t bits = uint32_t(words[w / 2] >> (32 * (w % 2)));
      float* r = row.data() + w * 32;
#pragma omp simd reduction(+ : open)
      for (uint32_t j = 0; j < 32; ++j) {
        r[j] = (bits >> j) & 1 ? r[j] : kNever;
        open += size_t(r[j] != kNever);
      }
    }
    for (size_t i = covered; i < row.size(); ++i) {
      if (!mask.contains(i)) row[i] = kNever;
      open += size_t(row[i] != kNever);
    }
    return open;
  }
  // The ends (stop_ids_, their logits kept in stops_) only where the text is
  // a whole match. Returns the change in how many are left to sample.
  ptrdiff_t end_where(bool can_end, std::vector<float>& row) const {
    ptrdiff_t change = 0;
    for (size_t k = 0; k < stop_ids_.size(); ++k) {
      if (size_t(stop_ids_[k]) >= row.size()) continue;
      float& stop = row[size_t(stop_ids_[k])];
      change -= stop != kNever;
      stop = can_end ? stops_[k] : kNever;
      change += stop != kNever;
    }
    return change;
  }
  bool ends(int32_t token) const { return std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end(); }
  // What llama.cpp's infill sampler reads: the ends, and a token's bytes (none for a special token, as its
  // token_to_piece gives them).
  models::InfillVocabulary chain_vocabulary() const {
    return {stop_ids_, [this](int32_t id) {
              return lm_.tokenizer.is_special(id) ? std::string() : lm_.tokenizer.token_bytes(id);
            }};
  }
  void accept(int32_t token) {
    last_ = token;
    penalties_.accept(token);
    ++sampled_;
    bool stopped_by_text = false;
    if (ends(token)) {
      c_.finish_reason = "stop";
      finished_ = true;
    } else {
      ++c_.completion_tokens;
      const size_t grown_from = text_.size();
      text_ += stream_.step(token);
      if (std::find(kept_.begin(), kept_.end(), token) != kept_.end()) text_ += lm_.tokenizer.token_bytes(token);
      stopped_by_text = cut_at_stop() || cut_at_limits(grown_from);
    }
    if (sampled_ >= o_.max_tokens || context_full()) finished_ = true;
    if (finished_ && !stopped_by_text) text_ += stream_.flush();
    if (finished_) c_.text = text_;
  }

  // A grammar waiting for its triggers: once the text holds one, the grammar
  // applies to the text from the first (what was written of it already included).
  void trigger_grammar() {
    if (trigger_search_from_ == std::string::npos) return;
    size_t from = trigger_search_from_;
    if (o_.reasoning) {
      const size_t answer = text::answer_start(*o_.reasoning, o_.reasoning_open, text_);
      if (answer == std::string::npos) return;
      from = std::max(from, answer);
    }
    size_t at = std::string::npos, longest = 0;
    for (const std::string& trigger : o_.grammar_triggers) {
      at = std::min(at, text_.find(trigger, from));
      longest = std::max(longest, trigger.size());
    }
    if (at == std::string::npos) {
      trigger_search_from_ = text_.size() >= longest ? text_.size() - longest + 1 : 0;
      return;
    }
    matcher_.emplace(o_.grammar);
    if (matcher_->accept(std::string_view(text_).substr(at))) return;
    // The token that completed the trigger went on off the grammar's text: the
    // answer goes on unconstrained (the calls' reader decides what it is).
    matcher_.reset();
    trigger_search_from_ = std::string::npos;
  }

  const models::HfCausalLm& lm_;
  std::vector<int32_t> stop_ids_;
  models::KvCache cache_;
  Generator gen_;
  models::TokenPenalties penalties_;
  text::DecodeStream stream_;
  const text::TokenTrie* vocab_;
  std::shared_ptr<text::MaskCache> masks_;
  std::optional<text::GrammarMatcher> matcher_;
  std::vector<int32_t> kept_;
  std::vector<float> logits_, row_;  // this step's logits, and those the sampler sees (masked)
  std::vector<float> stops_;         // the ends' logits this step
  size_t trigger_search_from_ = 0;
  int64_t sampled_ = 0;
  int32_t last_ = -1;
};

// Prompts joining together run as one padded batch; decoding steps for the
// whole batch at once (continuous batching: completions join and leave
// between steps).
class HfLanguageModelInference final : public InferenceModel {
 public:
  const nn::KvPool* kv_pool() const override { return lm_.model->kv_pool(); }
  models::SamplingFields sampling_defaults() const override { return lm_.sampling_defaults; }
  std::vector<std::string> default_stop() const override { return lm_.default_stop; }
  std::string default_system() const override { return lm_.default_system; }
  std::vector<int32_t> tokenize(const std::string& text, bool add_special, bool parse_special) override {
    return lm_.tokenizer.encode(text, add_special, parse_special);
  }
  text::FimTokens fim_tokens() const override { return text::fim_tokens(lm_.tokenizer); }
  std::string detokenize(const std::vector<int32_t>& ids) override {
    check_tokenizer_ids(ids);
    return lm_.tokenizer.decode(ids, /*skip_special_tokens=*/false);
  }
  int64_t context_length() const override { return lm_.model->context_length(); }
  nlohmann::json tokenizer_info() const override {
    auto text_or_null = [](const std::string& s) { return s.empty() ? nlohmann::json() : nlohmann::json(s); };
    // (without a chat template, the first of the ids generation ends at)
    const std::string eos = chat_ ? chat_->tokens.eos
                            : lm_.eos_ids.empty() ? std::string()
                                                  : token_text(lm_.tokenizer, lm_.eos_ids.front());
    return {{"tokenizer_class", "kiln"},
            {"eos_token", text_or_null(eos)},
            {"bos_token", chat_ ? text_or_null(chat_->tokens.bos) : nlohmann::json()},
            {"pad_token", nullptr},
            {"chat_template", chat_ ? text_or_null(chat_->source()) : nlohmann::json()},
            {"model_max_length", lm_.model->context_length()}};
  }
  std::vector<std::string> token_pieces(const std::vector<int32_t>& ids) override {
    check_tokenizer_ids(ids);
    text::DecodeStream stream(lm_.tokenizer, /*skip_special_tokens=*/false);
    std::vector<std::string> pieces;
    for (int32_t id : ids) pieces.push_back(stream.step(id));
    return pieces;
  }
  // `chat_template`: a family's name, or "" for the folder's own template.
  // A folder without one still completes text; only chat needs it.
  HfLanguageModelInference(models::HfCausalLm lm, const std::string& chat_template) : lm_(std::move(lm)) {
    try {
      chat_.emplace(models::load_hf_chat_template(lm_.dir, chat_template));
      if (!chat_->end_of_turn().empty()) {
        const auto id = lm_.tokenizer.token_to_id(chat_->end_of_turn());
        KILN_CHECK(id.has_value(), "chat template '", chat_->name(), "' ends a turn with ", chat_->end_of_turn(),
                   ", which is not a token of hf:", lm_.dir, "'s tokenizer; name the model's own family with "
                   "--chat-template NAME");
        end_of_turn_ = *id;
      } else if (const auto id = lm_.tokenizer.token_to_id(chat_->tokens.eos); id && chat_->is_jinja()) {
        // A template's turns end with the tokenizer's eos token (Qwen's <|im_end|>), which
        // generation_config.json may not list: a chat stops at it as llama-server does.
        end_of_turn_ = *id;
      }
    } catch (const Error& e) {
      if (!chat_template.empty()) throw;  // a template asked for by name must work
      chat_.reset();
      chat_error_ = e.what();
    }
    if (chat_) tool_format_ = text::detect_tool_call_format(*chat_);
    if (chat_) text_arguments_ = text::takes_text_arguments(*chat_);
    if (chat_) reasoning_format_ = text::detect_reasoning_format(*chat_);
    // The special tokens the formats' literals hold ([TOOL_CALLS], <|python_tag|>, <|START_THINKING|>...).
    if (tool_format_) tool_tokens_ = special_tokens_in(tool_format_->literals());
    if (reasoning_format_) reasoning_tokens_ = special_tokens_in(reasoning_format_->literals());
  }
  // The special tokens whose text stays in a completion's: its tool-call format's, and a chat's reasoning marks.
  std::vector<int32_t> kept_tokens(const CompletionOptions& o) const {
    std::vector<int32_t> kept = o.keep_tool_tokens ? tool_tokens_ : std::vector<int32_t>{};
    if (o.chat) kept.insert(kept.end(), reasoning_tokens_.begin(), reasoning_tokens_.end());
    return kept;
  }
  std::vector<int32_t> special_tokens_in(const std::vector<std::string>& literals) const {
    std::vector<int32_t> ids;
    for (const std::string& literal : literals)
      for (int32_t id : lm_.tokenizer.encode(literal, false))
        if (lm_.tokenizer.is_special(id) && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    return ids;
  }
  void check_tokenizer_ids(const std::vector<int32_t>& ids) const {
    for (int32_t id : ids)
      KILN_CHECK(id >= 0 && id < lm_.tokenizer.vocab_size(), "token id ", id, " is outside the tokenizer's ",
                 lm_.tokenizer.vocab_size(), " tokens");
  }
  const text::ToolCallFormat* tool_call_format() const override { return tool_format_; }
  const text::ReasoningFormat* reasoning_format() const override { return reasoning_format_; }
  std::string render_chat_json(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                               const nlohmann::ordered_json& kwargs) override {
    if (!chat_) KILN_FAIL(chat_error_);
    nlohmann::ordered_json extra = text::serving_variables(*chat_, tools);
    if (tool_format_)  // Llama 3.1's built-in tools are named to its template, as llama-server names them
      if (auto builtin = text::builtin_tools(*tool_format_, tools); !builtin.empty()) extra["builtin_tools"] = builtin;
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) extra[it.key()] = it.value();  // the request's own win
    return chat_->render_json(text::arguments_as_taken(messages, text_arguments_), tools, true, extra);
  }
  std::string render_chat(const std::vector<text::ChatMessage>& messages) override {
    if (!chat_) KILN_FAIL(chat_error_);
    return chat_->render(messages, true);
  }
  std::unique_ptr<PendingCompletion> start_completion(const std::string& prompt, const CompletionOptions& o) override {
    return std::move(start_completions({prompt}, {o}).front());
  }
  // The prompts run as one batch; each completion takes its first token from its row.
  std::vector<std::unique_ptr<PendingCompletion>> start_completions(const std::vector<std::string>& prompts,
                                                                    const std::vector<CompletionOptions>& options) override {
    KILN_CHECK(prompts.size() == options.size() && !prompts.empty(), "start_completions: ", prompts.size(),
               " prompts with ", options.size(), " options");
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::unique_ptr<HfCompletion>> started;
    std::vector<std::vector<int64_t>> ids;
    std::vector<models::KvCache*> caches;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const CompletionOptions& o = options[i];
      // A rendered chat spells its own special tokens; tokenizer(text) adds them to plain text.
      const std::vector<int32_t> encoded =
          o.prompt_ids.empty() ? lm_.tokenizer.encode(prompts[i], !o.chat) : o.prompt_ids;
      KILN_CHECK(!encoded.empty(), "the prompt encodes to no tokens");
      for (int32_t id : encoded)
        KILN_CHECK(id >= 0 && id < lm_.model->vocab_size(), "token id ", id, " is outside the model's ",
                   lm_.model->vocab_size(), " tokens");
      KILN_CHECK(int64_t(encoded.size()) < lm_.model->context_length(), "the prompt is ", encoded.size(),
                 " tokens, at or over the model's context of ", lm_.model->context_length(), "; shorten it");
      std::vector<int32_t> stop_ids = lm_.eos_ids;
      if (o.chat && end_of_turn_) stop_ids.push_back(*end_of_turn_);
      std::vector<int32_t> kept = kept_tokens(o);
      started.push_back(std::make_unique<HfCompletion>(
          lm_, o, encoded, std::move(stop_ids), o.grammar ? &vocab(kept) : nullptr, masks_for(o.grammar, kept), kept));
      ids.emplace_back(encoded.begin(), encoded.end());
      caches.push_back(&started.back()->cache());
    }
    const std::vector<float> all = lm_.model->forward_prompts(ids, caches).to_vector<float>();
    const size_t V = all.size() / started.size();
    std::vector<std::unique_ptr<PendingCompletion>> out;
    for (size_t b = 0; b < started.size(); ++b) {
      started[b]->prompt_done();
      started[b]->take(std::span(all).subspan(b * V, V));
      out.push_back(std::move(started[b]));
    }
    return out;
  }
  // One decoding step for every unfinished completion, in one forward pass.
  void advance_completions(const std::vector<PendingCompletion*>& batch) override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<HfCompletion*> running;
    std::vector<int32_t> tokens;
    std::vector<models::KvCache*> caches;
    for (PendingCompletion* p : batch) {
      auto* c = static_cast<HfCompletion*>(p);
      if (c->finished()) continue;
      running.push_back(c);
      tokens.push_back(c->last());
      caches.push_back(&c->cache());
    }
    if (running.empty()) return;
    const std::vector<float> all = lm_.model->forward_decode(tokens, caches).to_vector<float>();
    const size_t V = all.size() / running.size();
    for (size_t b = 0; b < running.size(); ++b)
      running[b]->take(std::span(all).subspan(b * V, V));
  }

  PromptScores score_prompt(const std::string& prompt, const std::optional<std::vector<int32_t>>& given,
                            int64_t top) override {
    const std::vector<int32_t> ids = given ? *given : lm_.tokenizer.encode(prompt);
    KILN_CHECK(!ids.empty(), "the prompt encodes to no tokens");
    KILN_CHECK(int64_t(ids.size()) <= lm_.model->context_length(), "the prompt is ", ids.size(),
               " tokens, more than the model's context of ", lm_.model->context_length());
    for (int32_t id : ids)
      KILN_CHECK(id < lm_.model->vocab_size(), "token id ", id, " is outside the model's ", lm_.model->vocab_size(),
                 " tokens");
    auto text_of = [&](int32_t id) { return token_text(lm_.tokenizer, id); };
    std::vector<float> lp;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      lp = models::next_token_log_probabilities(*lm_.model, ids);
    }
    const size_t V = lp.size() / ids.size();
    PromptScores s;
    text::DecodeStream stream(lm_.tokenizer);  // the text as decoding gives it: special tokens add none
    for (size_t t = 0; t < ids.size(); ++t) {
      s.text_offset.push_back(int64_t(s.text.size()));
      if (ids[t] < lm_.tokenizer.vocab_size()) s.text += stream.step(ids[t]);
      s.tokens.push_back(text_of(ids[t]));
      if (t == 0) {
        s.token_logprobs.push_back(std::nullopt);
        s.top_logprobs.emplace_back();
        continue;
      }
      const float* row = lp.data() + (t - 1) * V;
      s.token_logprobs.push_back(row[ids[t]]);
      s.top_logprobs.push_back(most_likely(row, V, top, spelling_of(lm_.tokenizer)));
    }
    return s;
  }

 private:
  // Every token's bytes as a trie, made when a grammar first needs it:
  // special tokens get none, so a grammar never allows them, except those
  // whose text a completion keeps (`kept`: a tool-call format's, a chat's
  // reasoning marks), which its grammar may write.
  const text::TokenTrie& vocab(const std::vector<int32_t>& kept) {
    for (const auto& [ids, trie] : tries_)
      if (ids == kept) return trie;
    std::vector<std::string> bytes(size_t(lm_.tokenizer.vocab_size()));
    for (int32_t id = 0; id < int32_t(bytes.size()); ++id)
      if (!lm_.tokenizer.is_special(id)) bytes[size_t(id)] = lm_.tokenizer.token_bytes(id);
    for (int32_t id : kept) bytes[size_t(id)] = lm_.tokenizer.token_bytes(id);
    return tries_.emplace_back(kept, text::TokenTrie(std::move(bytes))).second;
  }

  // Masks are kept by grammar across requests: JSON mode's always, and
  // those of the last few other grammars (an application sends the same
  // schema or tools again and again). A cache is of one vocabulary trie:
  // requests that keep special tokens have their own.
  std::shared_ptr<text::MaskCache> masks_for(const std::shared_ptr<const text::Grammar>& grammar,
                                             const std::vector<int32_t>& kept) {
    if (!grammar) return nullptr;
    if (grammar == text::json_object_grammar() && kept.empty()) return json_masks_;
    std::string key;
    for (int32_t id : kept) key += std::to_string(id) + " ";
    key += "\n" + grammar->source;
    auto it = std::find_if(grammar_masks_.begin(), grammar_masks_.end(), [&](const auto& e) { return e.first == key; });
    if (it == grammar_masks_.end()) {
      grammar_masks_.emplace_front(key, std::make_shared<text::MaskCache>());
      if (grammar_masks_.size() > kGrammarsKept) grammar_masks_.pop_back();
    } else {
      grammar_masks_.splice(grammar_masks_.begin(), grammar_masks_, it);
    }
    return grammar_masks_.front().second;
  }
  static constexpr size_t kGrammarsKept = 4;

  models::HfCausalLm lm_;
  std::list<std::pair<std::vector<int32_t>, text::TokenTrie>> tries_;  // by the special tokens they hold
  const text::ToolCallFormat* tool_format_ = nullptr;
  bool text_arguments_ = false;       // the template takes a call's arguments as JSON text (Functionary 3.2's)
  std::vector<int32_t> tool_tokens_;  // the special tokens of the tool-call format
  const text::ReasoningFormat* reasoning_format_ = nullptr;
  std::vector<int32_t> reasoning_tokens_;  // the special tokens of its marks
  std::shared_ptr<text::MaskCache> json_masks_ = std::make_shared<text::MaskCache>();
  std::list<std::pair<std::string, std::shared_ptr<text::MaskCache>>> grammar_masks_;  // most recent first
  std::optional<text::ChatTemplate> chat_;
  std::string chat_error_;              // why there is no chat template
  std::optional<int32_t> end_of_turn_;  // the template's end of turn, when it is not the end of sequence
  std::mutex mutex_;  // the scheduler's thread and the scoring requests share the model
};

// Token rows padded with `pad` after each one -> ids [rows, longest].
Tensor padded_rows(const std::vector<std::vector<int32_t>>& rows, int64_t pad) {
  size_t longest = 1;
  for (const auto& r : rows) longest = std::max(longest, r.size());
  std::vector<int64_t> ids(rows.size() * longest, pad);
  for (size_t r = 0; r < rows.size(); ++r) std::copy(rows[r].begin(), rows[r].end(), ids.begin() + long(r * longest));
  return Tensor::from_vector(ids, {int64_t(rows.size()), int64_t(longest)});
}

class HfClassifierInference final : public InferenceModel {
 public:
  HfClassifierInference(models::HfClassifier c, Device device) : c_(std::move(c)), device_(device), pad_(c_.pad_id) {}
  std::vector<std::string> labels() const override { return c_.labels; }
  Tensor encode_texts(const std::vector<std::string>& texts) override {
    std::vector<std::vector<int32_t>> rows;
    for (const auto& t : texts) rows.push_back(c_.tokenizer.encode(t));
    return padded_rows(rows, pad_);
  }
  std::optional<int64_t> pad_token() const override { return pad_; }
  // The rows in one pass, each at its own length: its trailing padding is
  // masked from attention (the encoder attends both ways, so padding
  // attended to would change the answer).
  Tensor classify_tokens(const Tensor& ids) override {
    NoGradGuard ng;
    const std::vector<int64_t> lengths = unpadded_lengths(ids, pad_);
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    const Tensor kept = contiguous(slice(ids, 1, 0, longest)).to(device_);
    return softmax(to_dtype(c_.model->forward(kept, lengths), DType::f32), -1).to(Device::cpu());
  }
  Relevance rerank(const std::string& query, const std::vector<std::string>& documents) override {
    if (!c_.rerank_prompt.empty()) return rerank_by_prompt(query, documents);
    KILN_CHECK(c_.labels.size() == 1, "this classifier has ", c_.labels.size(),
               " labels; a reranker (a cross-encoder) scores a pair with one");
    NoGradGuard ng;
    int64_t most = 512;  // a cross-encoder's positions, where the model says
    if (const auto* bert = dynamic_cast<const models::BertClassifier*>(c_.model.get()))
      most = bert->config().max_positions - bert->config().position_offset;
    std::vector<std::vector<int32_t>> ids, types;
    std::vector<int64_t> lengths;
    Relevance out;
    for (const std::string& d : documents) {
      text::TokenPair p = c_.tokenizer.encode_pair(query, d, most);
      lengths.push_back(int64_t(p.ids.size()));
      out.tokens += int64_t(p.ids.size());
      ids.push_back(std::move(p.ids));
      types.push_back(std::move(p.types));
    }
    const Tensor logits =
        to_dtype(c_.model->forward(padded_rows(ids, pad_).to(device_), padded_rows(types, 0).to(device_), lengths),
                 DType::f32)
            .to(Device::cpu());
    for (float logit : logits.to_vector<float>()) out.scores.push_back(1.0 / (1.0 + std::exp(-double(logit))));
    return out;
  }
  // A GGUF reranker with a prompt (Qwen3-Reranker's), as llama-server runs it: the prompt with {query}, then
  // {document}, replaced, its special tokens read and none added; the score is the first label's probability
  // (softmax over the head's outputs: "yes" against "no").
  Relevance rerank_by_prompt(const std::string& query, const std::vector<std::string>& documents) {
    NoGradGuard ng;
    std::vector<std::vector<int32_t>> ids;
    std::vector<int64_t> lengths;
    Relevance out;
    for (const std::string& d : documents) {
      const std::string prompt =
          text::replace_all(text::replace_all(c_.rerank_prompt, "{query}", query), "{document}", d);
      ids.push_back(c_.tokenizer.encode(prompt, /*add_special_tokens=*/false));
      KILN_CHECK(!ids.back().empty(), "the reranker's prompt gave no tokens");
      lengths.push_back(int64_t(ids.back().size()));
      out.tokens += lengths.back();
    }
    const Tensor probs =
        softmax(to_dtype(c_.model->forward(padded_rows(ids, pad_).to(device_), lengths), DType::f32), -1)
            .to(Device::cpu());
    const int64_t labels = probs.size(1);
    const std::vector<float> p = probs.to_vector<float>();
    for (size_t i = 0; i < documents.size(); ++i) out.scores.push_back(p[i * size_t(labels)]);
    return out;
  }

 private:
  models::HfClassifier c_;
  Device device_;
  int64_t pad_;
};

// Rows travel to the batcher padded with an id no token has: a text may end in the model's own pad token
// (Qwen3-Embedding's eos pads and ends every text), which padding with it would cut off. embed_ids pads its
// batch itself.
class HfEmbedderInference final : public InferenceModel {
 public:
  explicit HfEmbedderInference(models::HfEmbedder e) : e_(std::move(e)) {}
  Tensor encode_texts(const std::vector<std::string>& texts) override { return encode_embedding_texts(texts, {}); }
  Tensor encode_embedding_texts(const std::vector<std::string>& texts, const EmbeddingInput& how) override {
    const std::string& prompt = how.prompt_name ? models::prompt_named(e_, *how.prompt_name) : e_.prompt;
    std::vector<std::vector<int32_t>> rows;
    for (size_t i = 0; i < texts.size(); ++i) {
      int64_t uncut = 0;
      rows.push_back(models::embedding_ids(e_, texts[i], prompt, &uncut));  // cut at max_seq_length
      if (!how.truncate && uncut > e_.max_tokens)
        throw TextTooLong("text " + std::to_string(i) + " is " + std::to_string(uncut) + " tokens, past the " +
                          std::to_string(e_.max_tokens) + " the model reads; shorten it, or ask for it cut (truncate)");
    }
    return padded_rows(rows, kNoToken);
  }
  std::optional<int64_t> pad_token() const override { return kNoToken; }
  Tensor embed_tokens(const Tensor& ids) override {
    const std::vector<int64_t> lengths = unpadded_lengths(ids, kNoToken), all = ids.to_vector<int64_t>();
    std::vector<std::vector<int32_t>> rows;
    for (size_t b = 0; b < lengths.size(); ++b) {
      const auto first = all.begin() + long(b * size_t(ids.size(1)));
      rows.emplace_back(first, first + lengths[b]);
    }
    return models::embed_ids(e_, rows);
  }

 private:
  static constexpr int64_t kNoToken = -1;
  models::HfEmbedder e_;
};

}  // namespace

std::vector<int64_t> unpadded_lengths(const Tensor& ids, int64_t pad) {
  const int64_t B = ids.size(0), T = ids.size(1);
  const std::vector<int64_t> all = ids.to_vector<int64_t>();
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = T;
    while (n > 1 && all[size_t(b * T + n - 1)] == pad) --n;
    lengths.push_back(n);
  }
  return lengths;
}

LoadedModel load_hf_for_inference(const std::string& spec, Device device, const InferenceOptions& options) {
  const std::string dir = models::hf_folder(spec).value_or(spec);
  const nlohmann::json config = models::read_hf_config(dir);
  // What the load line names: the family, and whether it came from a GGUF file.
  const std::string source = (models::is_gguf_file(dir) ? "gguf:" : "hf:") + config["model_type"].get<std::string>();
  const std::string kind = models::hf_folder_kind(dir, config);
  if (kind == "classifier") {
    auto c = models::load_hf_classifier(dir);
    c.model->to(device);
    return {source, ModelKind::text_classifier, 0, std::make_unique<HfClassifierInference>(std::move(c), device)};
  }
  if (kind == "embedder") {
    auto e = models::load_hf_embedder(dir);
    e.encoder.model->to(device);
    return {source, ModelKind::text_embedder, 0, std::make_unique<HfEmbedderInference>(std::move(e))};
  }
  auto lm = models::load_hf_causal_lm(dir);
  models::apply_store_defaults(spec, lm);
  lm.model->to(device);
  if (!options.quantize.empty()) nn::quantize_weights(*lm.model, parse_quant_format(options.quantize));
  return {source, ModelKind::language_model, 0,
          std::make_unique<HfLanguageModelInference>(std::move(lm), options.chat_template)};
}

std::unique_ptr<InferenceModel> hf_language_model_inference(models::HfCausalLm lm, const std::string& chat_template) {
  return std::make_unique<HfLanguageModelInference>(std::move(lm), chat_template);
}

}  // namespace kiln::recipes
