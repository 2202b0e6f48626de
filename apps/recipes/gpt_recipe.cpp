// fortunes-gpt: a small GPT-2-style model trained on Debian's fortunes
// corpus with a SentencePiece BPE tokenizer. Reports validation loss in bits
// per byte (comparable across tokenizers) and prints a few samples.
#include "apps/recipes/gpt_recipe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>

#include "apps/recipes/common.h"
#include "apps/recipes/precision.h"
#include "apps/recipes/step_parts.h"
#include "apps/recipes/train_loop.h"
#include "kiln/data/fortunes.h"
#include "kiln/data/loader.h"
#include "kiln/data/splits.h"
#include "kiln/distributed/pipeline.h"
#include "kiln/distributed/world.h"
#include "kiln/io/atomic_file.h"
#include "models/common/sampler_chain.h"
#include "models/gpt/presets.h"

namespace kiln::recipes {

namespace {

// The fortunes preset with the tokenizer's vocabulary, or --preset, then
// the --n-layer ... overrides.
models::GptConfig fresh_config(const TrainOptions& o, int64_t tokenizer_vocab) {
  models::GptConfig c = models::gpt_preset(o.model_preset.empty() ? "fortunes" : o.model_preset);
  if (o.model_preset.empty()) c.vocab_size = tokenizer_vocab;
  nlohmann::json j = c.to_json();
  for (const auto& [field, value] : o.model_overrides) {
    KILN_CHECK(j.contains(field) && value > 0, "model override ", field, "=", value, " is not a positive GPT field");
    j[field] = value;
  }
  c = models::GptConfig::from_json(j);
  KILN_CHECK(c.vocab_size >= tokenizer_vocab, "--vocab-size ", c.vocab_size, " is smaller than the tokenizer's ",
             tokenizer_vocab, " tokens");
  return c;
}

// A resumed run keeps its model; a preset or override that differs is refused.
models::GptConfig resumed_config(const TrainOptions& o, const Checkpoint& ck, const std::string& dir) {
  const models::GptConfig saved = models::GptConfig::from_json(ck.state.at("config"));
  nlohmann::json want = saved.to_json();
  if (!o.model_preset.empty()) {
    nlohmann::json preset = models::gpt_preset(o.model_preset).to_json();
    for (const char* f : {"n_layer", "n_head", "n_embd", "block_size"}) want[f] = preset[f];
  }
  for (const auto& [field, value] : o.model_overrides) want[field] = value;
  KILN_CHECK(want == saved.to_json(), "the model given (", want.dump(), ") differs from the run's saved model ",
             saved.to_json().dump(), " in ", dir, ": a resumed run keeps its model. Drop --preset/--n-layer/... to "
             "resume, or train into a new --out directory.");
  return saved;
}

}  // namespace

int64_t validation_batch(int64_t micro_batch) {
  return micro_batch > 0 ? std::min(micro_batch, kValidationBatch) : kValidationBatch;
}

TextStream encode_documents(const data::Tokenizer& tok, const std::vector<std::string>& docs,
                            const std::vector<int64_t>& which) {
  std::vector<std::vector<int32_t>> encoded(docs.size());
  double bytes = 0;
  for (int64_t i : which) {
    encoded[size_t(i)] = tok.encode(docs[size_t(i)]);
    bytes += double(docs[size_t(i)].size()) + 1.0;  // +1: the separator
  }
  TextStream s;
  s.tokens = data::concat_with_separator(encoded, which, tok.end_of_text_id());
  s.bytes_per_token = bytes / double(std::max<size_t>(1, s.tokens.size()));
  return s;
}

TextStream fortunes_validation(const data::Tokenizer& tok, const std::string& data_dir) {
  std::vector<std::string> docs = data::load_fortunes(data_dir);
  return encode_documents(tok, docs, data::split_documents(int64_t(docs.size())).validation);
}

double validation_loss(models::Gpt& model, const std::vector<int32_t>& tokens, int64_t batch, Device device) {
  NoGradGuard ng;
  model.eval();
  data::TokenValidationIterator it(tokens, batch, model.config().block_size);
  // Weighted by tokens, so a short last batch counts as much as its tokens.
  double total = 0;
  int64_t scored = 0;
  while (auto b = it.next()) {
    total += model.loss(b->x.to(device), b->y.to(device)).item() * double(b->y.numel());
    scored += b->y.numel();
  }
  model.train();
  return scored ? total / double(scored) : 0.0;
}

data::Tokenizer fortunes_tokenizer(const std::vector<std::string>& docs, const std::vector<int64_t>& train,
                                   const std::string& cache_dir, int threads) {
  // Trained on the training split only, so validation text stays unseen.
  std::vector<std::string> train_docs;
  train_docs.reserve(train.size());
  for (int64_t i : train) train_docs.push_back(docs[size_t(i)]);
  data::TokenizerOptions to;
  to.vocab_size = 2048;
  to.cache_dir = cache_dir;
  to.corpus_name = "fortunes";
  to.num_threads = threads > 0 ? threads : 2;
  return data::Tokenizer::train_or_load(train_docs, to);
}

std::vector<std::string> sample_gpt(models::Gpt& model, const data::Tokenizer& tok, const std::string& prompt,
                                    int count, int64_t max_tokens, double temperature, int64_t top_k,
                                    Generator& gen) {
  model.eval();
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> ids{tok.end_of_text_id()};
    if (!prompt.empty()) {
      std::vector<int32_t> p = tok.encode(prompt);
      ids.insert(ids.end(), p.begin(), p.end());
    }
    const size_t prompt_len = ids.size();
    std::vector<int32_t> all = model.generate(ids, max_tokens, temperature, top_k, gen);
    std::vector<int32_t> fresh(all.begin() + long(prompt_len), all.end());
    // A sample ends at the first end-of-text.
    for (size_t j = 0; j < fresh.size(); ++j)
      if (fresh[j] == tok.end_of_text_id()) {
        fresh.resize(j);
        break;
      }
    out.push_back(prompt + tok.decode(fresh));
  }
  model.train();
  return out;
}

data::Tokenizer load_run_tokenizer(const std::string& checkpoint_dir, const Checkpoint& ck) {
  auto run_dir = std::filesystem::path(checkpoint_dir).parent_path();
  return data::Tokenizer::load((run_dir / ck.state.value("tokenizer", "tokenizer.model")).string());
}

std::unique_ptr<models::Gpt> load_gpt(const Checkpoint& ck, Device device) {
  Generator init(0);
  auto model = std::make_unique<models::Gpt>(models::GptConfig::from_json(ck.state.at("config")), init,
                                             std::make_shared<Generator>(0));
  model->load_parameters(to_pairs(ck.model));
  model->to(device);
  return model;
}

namespace {

// A completion of the fortunes GPT in progress: its tokens, its KV cache
// and its own sampler. Text is handed out only once no stop string can still
// begin in it.
class GptCompletion final : public TextCompletion {
 public:
  GptCompletion(const data::Tokenizer& tok, const CompletionOptions& o, int64_t vocab, models::KvCache cache)
      : TextCompletion(o, vocab), tok_(tok), cache_(std::move(cache)), gen_(o.seed) {}
  friend class GptInference;  // it starts and advances completions in batches

  // The sampled token joins the text (or ends it).
  void accept(int32_t token) {
    tokens_.push_back(token);
    if (penalties_) penalties_->accept(token);
    ++sampled_;
    if (token == tok_.end_of_text_id()) {
      c_.finish_reason = "stop";
      finished_ = true;
    } else {
      fresh_.push_back(token);
      ++c_.completion_tokens;
      const size_t grown_from = text_.size();
      append_text();
      if (cut_at_stop() || cut_at_limits(grown_from)) cut_ = true;
    }
    if (sampled_ >= o_.max_tokens) finished_ = true;
    if (finished_ && !cut_ && read_ < fresh_.size()) text_ = tok_.decode(fresh_);  // a partial character at the end
    if (finished_) c_.text = text_;
  }
  // Decoding all the new tokens again for each one would cost O(n^2) over a
  // completion; instead (as TGI does) decode a short window twice, with and
  // without the new tokens, and append the difference once it is not a
  // partial UTF-8 character (SentencePiece decodes those as U+FFFD).
  void append_text() {
    auto decode = [&](size_t from, size_t to) {
      return tok_.decode(std::vector<int32_t>(fresh_.begin() + long(from), fresh_.begin() + long(to)));
    };
    const std::string before = decode(prefix_, read_), now = decode(prefix_, fresh_.size());
    if (now.compare(0, before.size(), before) != 0) {  // the window decodes differently alone: decode it all
      text_ = decode(0, fresh_.size());
    } else {
      if (now.size() == before.size() || now.ends_with("\xEF\xBF\xBD")) return;  // wait for the rest of a character
      text_ += now.substr(before.size());
    }
    prefix_ = read_;
    read_ = fresh_.size();
  }
  int32_t sample(std::vector<float> logits) {
    add_logit_bias(logits);
    if (penalties_) penalties_->apply(logits);
    if (o_.ignore_eos) logits[size_t(tok_.end_of_text_id())] = -std::numeric_limits<float>::infinity();
    if (o_.sampler_chain.empty()) return models::sample_token(logits, o_.sampling, gen_);
    const int32_t end = tok_.end_of_text_id();
    return models::sample_chain(logits, o_.sampler_chain, o_.sampling,
                                {std::span(&end, 1), [this](int32_t id) { return tok_.decode({id}); }}, gen_);
  }
  // The tokens to run through an empty cache: all, or once the context is
  // full the last block_size of them.
  std::vector<int64_t> window(int64_t block_size) const {
    const size_t start = tokens_.size() > size_t(block_size) ? tokens_.size() - size_t(block_size) : 0;
    return {tokens_.begin() + long(start), tokens_.end()};
  }

  const data::Tokenizer& tok_;
  models::KvCache cache_;
  Generator gen_;
  std::vector<int32_t> tokens_;  // end of text, the prompt, then what was sampled
  std::vector<int32_t> fresh_;   // what was sampled
  std::optional<models::TokenPenalties> penalties_;  // once the prompt is known
  size_t prefix_ = 0, read_ = 0;  // fresh_[prefix_, read_) is decoded into text_'s end; [read_, ...) is not yet
  int64_t sampled_ = 0;
  bool cut_ = false;  // a stop string ended the text
};

// A fortunes GPT for kiln serve: completions a token at a time, any number
// of them advanced in one batched decode step.
class GptInference final : public InferenceModel {
 public:
  const nn::KvPool* kv_pool() const override { return model_->kv_pool(); }
  // A prompt starts with the end-of-text token, as every document did in training. (Its tokenizer reads every
  // text as text: parse_special changes nothing.)
  std::vector<int32_t> tokenize(const std::string& text, bool add_special, bool) override {
    std::vector<int32_t> ids = tok_.encode(text);
    if (add_special) ids.insert(ids.begin(), tok_.end_of_text_id());
    return ids;
  }
  std::string detokenize(const std::vector<int32_t>& ids) override { return tok_.decode(ids); }
  int64_t context_length() const override { return model_->config().block_size; }
  GptInference(std::unique_ptr<models::Gpt> model, data::Tokenizer tok)
      : model_(std::move(model)), tok_(std::move(tok)) {
    model_->eval();
  }

  std::unique_ptr<PendingCompletion> start_completion(const std::string& prompt, const CompletionOptions& o) override {
    return std::move(start_completions({prompt}, {o}).front());
  }

  // The prompts run through their empty caches as one batch.
  std::vector<std::unique_ptr<PendingCompletion>> start_completions(const std::vector<std::string>& prompts,
                                                                    const std::vector<CompletionOptions>& options) override {
    KILN_CHECK(prompts.size() == options.size(), "start_completions: ", prompts.size(), " prompts with ",
               options.size(), " options");
    std::vector<std::unique_ptr<PendingCompletion>> started;
    std::vector<GptCompletion*> sampling;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const CompletionOptions& o = options[i];
      KILN_CHECK(o.max_tokens >= 0, "max_tokens must be >= 0, got ", o.max_tokens);
      KILN_CHECK(o.prompt_ids.empty(),
                 "token-id prompts are taken by Hugging Face and GGUF models; send this run text");
      KILN_CHECK(!o.grammar, "grammars (response_format, grammar) constrain Hugging Face and GGUF models; a "
                             "fortunes-gpt run's tokenizer is not supported");
      auto c = std::make_unique<GptCompletion>(tok_, o, model_->config().vocab_size, model_->new_cache());
      c->tokens_.push_back(tok_.end_of_text_id());
      const std::vector<int32_t> p = tok_.encode(prompts[i]);
      c->tokens_.insert(c->tokens_.end(), p.begin(), p.end());
      c->c_.prompt_tokens = int64_t(p.size());
      c->penalties_.emplace(o.sampling, model_->config().vocab_size, c->tokens_,
                            int64_t(c->tokens_.size()) + o.max_tokens);
      c->finished_ = o.max_tokens == 0;
      if (!c->finished_) sampling.push_back(c.get());
      started.push_back(std::move(c));
    }
    refill_and_sample(sampling);
    return started;
  }

  void advance_completions(const std::vector<PendingCompletion*>& batch) override {
    std::vector<GptCompletion*> step;
    std::vector<int32_t> last;
    std::vector<models::KvCache*> caches;
    for (PendingCompletion* p : batch) {
      auto* c = dynamic_cast<GptCompletion*>(p);
      KILN_CHECK(c != nullptr && &c->tok_ == &tok_, "advance_completions: a completion this model did not start");
      if (c->finished_) continue;
      if (c->cache_.length() >= model_->config().block_size) {
        refill_and_sample({c});  // the context is full: start the cache over (rare; one sequence alone)
        continue;
      }
      step.push_back(c);
      last.push_back(c->tokens_.back());
      caches.push_back(&c->cache_);
    }
    if (!step.empty()) sample_each(step, model_->forward_decode(last, caches));
  }

 private:
  // Runs each completion's window through its emptied cache, all in one
  // batch, and samples from each window's last position.
  void refill_and_sample(const std::vector<GptCompletion*>& completions) {
    if (completions.empty()) return;
    std::vector<std::vector<int64_t>> windows;
    std::vector<models::KvCache*> caches;
    for (GptCompletion* c : completions) {
      c->cache_.clear();
      windows.push_back(c->window(model_->config().block_size));
      caches.push_back(&c->cache_);
    }
    sample_each(completions, model_->forward_prompts(windows, caches));
  }
  // Each completion's next token, from its row of `logits` [B, vocab].
  void sample_each(const std::vector<GptCompletion*>& completions, const Tensor& logits) {
    const std::vector<float> all = logits.to_vector<float>();
    const size_t vocab = size_t(model_->config().vocab_size);
    for (size_t b = 0; b < completions.size(); ++b) {
      const std::vector<float> row(all.begin() + long(b * vocab), all.begin() + long((b + 1) * vocab));
      GptCompletion& c = *completions[b];
      const int32_t token = c.sample(row);
      if (token != tok_.end_of_text_id())
        c.record_logprob(
            row, token, {[&](int32_t id) { return tok_.decode({id}); }, [&](int32_t id) { return tok_.decode({id}); }});
      c.accept(token);
    }
  }

  std::unique_ptr<models::Gpt> model_;
  data::Tokenizer tok_;
};

class FortunesGptRecipe final : public Recipe {
 public:
  std::unique_ptr<InferenceModel> load_for_inference(const Checkpoint& ck, const std::string& dir,
                                                     Device device) const override {
    return std::make_unique<GptInference>(load_gpt(ck, device), load_run_tokenizer(dir, ck));
  }

  std::string name() const override { return "fortunes-gpt"; }
  std::string summary() const override {
    return "write fortune-cookie text (Debian's fortunes) with a small GPT-2-style model";
  }
  ModelKind kind() const override { return ModelKind::language_model; }
  int64_t default_batch_size() const override { return 16; }

  StepParts step_parts(const StepRequest& request) const override {
    KILN_CHECK(!request.model_config.is_null(), "fortunes-gpt: the step needs the model's config");
    StepParts p;
    p.dropout_gen = std::make_shared<Generator>(request.seed ^ 0xD0D0D0D0ull);
    Generator init(request.seed);
    const models::GptConfig config = models::GptConfig::from_json(request.model_config);
    auto model = std::make_shared<models::Gpt>(config, init, p.dropout_gen);
    model->set_activation_checkpointing(models::parse_activation_checkpointing(request.checkpointing));
    p.model = model;
    p.adamw.beta2 = 0.95;
    p.adamw.weight_decay = 0.1;
    p.adamw.decay_matrices_only = true;
    p.loss = [model](const Tensor& x, const Tensor& y) { return model->loss(x, y); };
    p.x_shape = p.y_shape = {config.block_size};
    p.x_dtype = DType::i64;
    return p;
  }
  bool can_sample() const override { return true; }

  TrainResult train(const TrainOptions& o, const Log& log) const override {
    RecipeDefaults d;
    d.batch_size = default_batch_size();
    d.steps = 800;
    d.lr = 2e-3;
    const RunStart run = start_run(o, name(), d, log);
    const RunConfig& c = run.config;
    std::vector<std::string> docs = data::load_fortunes(o.data_dir);
    data::Split split = data::split_documents(int64_t(docs.size()));
    // A resumed run keeps the tokenizer it was trained with.
    std::optional<data::Tokenizer> trained;  // rank 0 fills the tokenizer cache; the other ranks then read it
    distributed::rank0_first([&] {
      trained.emplace(run.checkpoint ? load_run_tokenizer(run.checkpoint_dir, *run.checkpoint)
                                     : fortunes_tokenizer(docs, split.train, o.cache_dir, o.threads.value_or(0)));
    });
    const data::Tokenizer& tok = *trained;
    const std::vector<int32_t> train_tokens = encode_documents(tok, docs, split.train).tokens;
    const TextStream validation = encode_documents(tok, docs, split.validation);
    const models::GptConfig config = run.checkpoint ? resumed_config(o, *run.checkpoint, run.checkpoint_dir)
                                                    : fresh_config(o, tok.vocab_size());

    std::filesystem::create_directories(run.out_dir);
    if (distributed::is_rank0())
      write_file_atomic((std::filesystem::path(run.out_dir) / "tokenizer.model").string(), tok.serialized_model());
    data::TokenLoaderOptions lo;
    lo.batch_size = c.batch_size;
    lo.block_size = config.block_size;
    lo.seed = c.seed;
    data::TokenLoader loader(train_tokens, lo);

    StepRequest request;
    request.seed = c.seed;
    request.model_config = config.to_json();
    request.checkpointing = c.checkpointing;
    StepParts step = step_parts(request);
    models::Gpt& model = static_cast<models::Gpt&>(*step.model);
    std::shared_ptr<Generator> dropout_gen = step.dropout_gen;
    // --pipeline-stages: blocks split over the ranks, balanced by kiln plan's FLOPs per block.
    std::unique_ptr<distributed::Pipeline> pipeline;
    std::vector<int64_t> bounds;
    StagePlacement placement;
    if (o.pipeline_stages > 1) {
      pipeline = std::make_unique<distributed::Pipeline>(distributed::world(), o.pipeline_stages);
      bounds = distributed::balance_stages(models::gpt_block_flops(config), o.pipeline_stages);
      std::string split;
      for (int s = 0; s < o.pipeline_stages; ++s) {
        placement.stage_params.push_back(model.stage_parameter_names(bounds[size_t(s)], bounds[size_t(s) + 1]));
        split += " [" + std::to_string(bounds[size_t(s)]) + ", " + std::to_string(bounds[size_t(s) + 1]) + ")";
      }
      placement.pipeline = pipeline.get();
      log("pipeline stages (blocks, balanced by FLOPs; the first holds the embeddings, the last the head):" + split);
    }
    std::unique_ptr<optim::Optimizer> optimizer =
        place_model_and_optimizer(c, run.device, model, step.adamw, Device::cpu(), pipeline ? &placement : nullptr);
    optim::Optimizer& opt = *optimizer;
    MixedPrecision precision(c.precision, c.loss_scale);
    RunParts parts{model, opt, precision, *dropout_gen, [&] { return loader.state(); },
                   [&](const data::LoaderState& st) { loader.set_state(st); }};
    restore_run(run, parts, log);
    char head[256];
    std::snprintf(head, sizeof head,
                  "%s: %lld parameters (%lld layers, %lld heads, %lld wide, context %lld), vocab %lld, "
                  "%zu training tokens, %lld steps of %lldx%lld tokens",
                  name().c_str(), (long long)model.parameter_count(), (long long)config.n_layer,
                  (long long)config.n_head, (long long)config.n_embd, (long long)config.block_size,
                  (long long)config.vocab_size, train_tokens.size(), (long long)c.total_steps,
                  (long long)c.batch_size, (long long)config.block_size);
    log(head);

    LoopSettings settings;
    settings.warmup_steps = std::min<int64_t>(50, c.total_steps / 10);
    settings.min_lr_ratio = 0.1;
    settings.clip_norm = 1.0;
    settings.unit = "tok";
    settings.items_per_example = config.block_size;
    LoopHooks hooks;
    hooks.next_batch = [&] {
      data::TokenBatch b = loader.next();
      return Batch{b.x, b.y};
    };
    hooks.loss = [&](const Tensor& x, const Tensor& y) { return step.loss(x.to(run.device), y.to(run.device)); };
    hooks.add_state = [&](nlohmann::json& state) {
      state["config"] = config.to_json();
      state["tokenizer"] = "tokenizer.model";
    };
    if (pipeline) {
      const int s = pipeline->layout().stage;
      const int64_t first = bounds[size_t(s)], last = bounds[size_t(s) + 1];
      PipelineStage& stage = hooks.stage;
      stage.pipeline = pipeline.get();
      stage.forward = [&, first, last](const Tensor& in, const Tensor& targets) {
        return model.stage_forward(in.to(run.device), targets.to(run.device), first, last);
      };
      stage.activation_shape = [&](int64_t rows) { return Shape{rows, config.block_size, config.n_embd}; };
      for (const auto& [name, p] : model.named_parameters()) {
        const auto& mine = placement.stage_params[size_t(s)];
        if (std::find(mine.begin(), mine.end(), name) == mine.end()) continue;
        stage.params.push_back(p);
        if (name.starts_with("transformer.wte.")) stage.tied.push_back(p);
      }
    }
    RunRecord record(run.out_dir, run.step(), record_devices(run));
    TrainResult result;
    const bool finished = run_training_loop(o, run, parts, settings, hooks, record, result, log);
    if (pipeline) {  // rank 0 alone holds the whole model (its last checkpoint gathered it) and evaluates it
      if (!distributed::is_rank0()) return result;
      model.to(run.device);
    }
    if (finished) {
      result.val_loss = validation_loss(model, validation.tokens, validation_batch(c.micro_batch), run.device);
      result.val_bits_per_byte = result.val_loss / std::log(2.0) / validation.bytes_per_token;
      record.eval(result.steps_done, {{"val_loss", result.val_loss}, {"val_bits_per_byte", result.val_bits_per_byte}});
      Generator sample_gen(c.seed + 7);
      result.samples = sample_gpt(model, tok, "", 3, 48, 0.8, 40, sample_gen);
    }
    return result;
  }

  EvalResult evaluate(const Checkpoint& ck, const std::string& dir, Device device, const Log&) const override {
    auto model = load_gpt(ck, device);
    TextStream val = fortunes_validation(load_run_tokenizer(dir, ck));
    EvalResult r;
    r.loss = validation_loss(*model, val.tokens, validation_batch(ck.state.value("micro_batch", int64_t(0))), device);
    r.bits_per_byte = r.loss / std::log(2.0) / val.bytes_per_token;
    return r;
  }

  std::vector<std::string> sample(const Checkpoint& ck, const std::string& dir, const SampleOptions& so,
                                  Device device) const override {
    auto model = load_gpt(ck, device);
    Generator gen(so.seed);
    const models::Sampling s = models::resolve_sampling(so.sampling, {}, kSampleFallback);
    return sample_gpt(*model, load_run_tokenizer(dir, ck), so.prompt, so.count, so.max_tokens, s.temperature, s.top_k,
                      gen);
  }
};

}  // namespace

std::unique_ptr<Recipe> make_fortunes_gpt_recipe() { return std::make_unique<FortunesGptRecipe>(); }

}  // namespace kiln::recipes
