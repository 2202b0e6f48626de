// fortunes-gpt: a small GPT-2-style model trained on Debian's fortunes
// corpus with a SentencePiece BPE tokenizer. Reports validation loss in bits
// per byte (comparable across tokenizers) and prints a few samples.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "apps/recipes/common.h"
#include "apps/recipes/gpt_recipe.h"
#include "apps/recipes/precision.h"
#include "apps/recipes/progress.h"
#include "kiln/data/fortunes.h"
#include "kiln/data/loader.h"
#include "kiln/data/splits.h"
#include "kiln/io/atomic_file.h"

namespace kiln::recipes {

namespace {

models::GptConfig fortunes_config(int64_t vocab) {
  models::GptConfig c;
  c.vocab_size = vocab;
  c.block_size = 128;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 128;
  c.dropout = 0.0;
  return c;
}

struct TextData {
  data::Tokenizer tokenizer;
  std::vector<int32_t> train_tokens;
  TextStream validation;
};

TextData load_text(const TrainOptions& o) {
  std::vector<std::string> docs = data::load_fortunes(o.data_dir);
  data::Split split = data::split_documents(int64_t(docs.size()));
  data::Tokenizer tok = fortunes_tokenizer(docs, split.train, o.cache_dir, o.threads);
  return {tok, encode_documents(tok, docs, split.train).tokens, encode_documents(tok, docs, split.validation)};
}

}  // namespace

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
  double total = 0;
  int64_t batches = 0;
  while (auto b = it.next()) {
    total += model.loss(b->x.to(device), b->y.to(device)).item();
    ++batches;
  }
  model.train();
  return batches ? total / double(batches) : 0.0;
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

TrainResult train_gpt(const TrainOptions& o, const Log& log) {
  setup_runtime(o, log);
  const std::string out_dir = resolve_out_dir(o);
  TextData text = load_text(o);
  const models::GptConfig config = fortunes_config(text.tokenizer.vocab_size());
  const int64_t batch = o.batch_size > 0 ? o.batch_size : 16;
  const int64_t total = o.steps > 0 ? o.steps : 800;
  const double max_lr = o.lr > 0 ? o.lr : 2e-3;

  std::filesystem::create_directories(out_dir);
  write_file_atomic((std::filesystem::path(out_dir) / "tokenizer.model").string(),
                    text.tokenizer.serialized_model());
  data::TokenLoaderOptions lo;
  lo.batch_size = batch;
  lo.block_size = config.block_size;
  lo.seed = o.seed;
  data::TokenLoader loader(text.train_tokens, lo);

  auto dropout_gen = std::make_shared<Generator>(o.seed ^ 0xD0D0D0D0ull);
  Generator init(o.seed);
  models::Gpt model(config, init, dropout_gen);
  model.to(o.device);
  optim::AdamWOptions ao;
  ao.beta2 = 0.95;
  ao.weight_decay = 0.1;
  ao.decay_matrices_only = true;
  optim::AdamW opt(model.named_parameters(), max_lr, ao);
  MixedPrecision precision(o.precision, o.loss_scale);

  RunParts parts{model, opt, precision, *dropout_gen, [&] { return loader.state(); },
                 [&](const data::LoaderState& st) { loader.set_state(st); }};
  const int64_t start = resume_run(o, out_dir, parts, log);
  char head[256];
  std::snprintf(head, sizeof head,
                "%s: %lld parameters (%lld layers, %lld heads, %lld wide, context %lld), vocab %lld, "
                "%zu training tokens, %lld steps of %lldx%lld tokens",
                o.recipe.c_str(), (long long)model.parameter_count(), (long long)config.n_layer,
                (long long)config.n_head, (long long)config.n_embd, (long long)config.block_size,
                (long long)config.vocab_size, text.train_tokens.size(), (long long)total, (long long)batch,
                (long long)config.block_size);
  log(head);

  auto state_json = [&](int64_t step, double loss) {
    nlohmann::json j = run_state(o, parts, step, total, loss);
    j["batch_size"] = batch;
    j["lr"] = max_lr;
    j["config"] = config.to_json();
    j["tokenizer"] = "tokenizer.model";
    return j;
  };

  TrainResult result;
  ProgressBar bar(total, start, "tok", o.progress);
  const int64_t warmup = std::min<int64_t>(50, total / 10);
  double loss_value = 0;
  int64_t step = start;
  for (; step < total; ++step) {
    data::TokenBatch b = loader.next();
    Tensor loss;
    {
      amp::AutocastGuard autocast(precision.autocast_dtype());  // fp32: off
      loss = model.loss(b.x.to(o.device), b.y.to(o.device));
    }
    opt.zero_grad();
    const bool finite = precision.backward(loss, model.parameters(), step + 1, log);  // fp16 may skip
    opt.lr = optim::warmup_cosine_lr(step, warmup, total, max_lr, max_lr * 0.1);
    if (finite) {
      optim::clip_grad_norm(model.parameters(), 1.0);  // on the unscaled gradients
      opt.step();
    }
    loss_value = loss.item();
    KILN_CHECK(std::isfinite(loss_value), "training diverged at step ", step + 1, " (loss ", loss_value,
               "); lower the learning rate with --lr");
    bar.update(step, loss_value, batch * config.block_size);
    const bool stop_now = o.stop_after > 0 && step + 1 - start >= o.stop_after;
    const bool periodic = o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0;
    if (periodic || stop_now) result.checkpoint = save_run(out_dir, step + 1, model, opt, state_json(step + 1, loss_value));
    if (stop_now) {
      ++step;
      break;
    }
  }
  bar.finish();
  result.steps_done = step;
  result.skipped_steps = precision.skipped_steps();
  result.final_train_loss = loss_value;
  result.items_per_second = bar.items_per_second();
  result.seconds = bar.elapsed_seconds();
  if (step >= total) {
    result.checkpoint = save_run(out_dir, step, model, opt, state_json(step, loss_value));
    result.val_loss = validation_loss(model, text.validation.tokens, batch, o.device);
    result.val_bits_per_byte = result.val_loss / std::log(2.0) / text.validation.bytes_per_token;
    Generator sample_gen(o.seed + 7);
    result.samples = sample_gpt(model, text.tokenizer, "", 3, 48, 0.8, 40, sample_gen);
  }
  return result;
}

}  // namespace kiln::recipes
