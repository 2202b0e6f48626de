#include "apps/recipes/text_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "apps/recipes/common.h"
#include "apps/recipes/gpt_recipe.h"
#include "apps/recipes/sft_model.h"
#include "kiln/data/fortunes.h"
#include "kiln/data/splits.h"
#include "kiln/io/checkpoint.h"
#include "models/hf/hf_model.h"

namespace kiln::recipes {

std::optional<DType> weights_dtype(const std::string& precision) {
  if (precision == "auto") return std::nullopt;
  if (precision == "fp32") return DType::f32;
  if (precision == "bf16") return DType::bf16;
  KILN_FAIL("--precision must be auto (the weights' own dtype), fp32 or bf16, not '", precision, "'");
}

namespace {
TextModel quantized(TextModel m, const std::string& quantize) {
  if (!quantize.empty()) nn::quantize_weights(*m.model, parse_quant_format(quantize));
  return m;
}
}  // namespace

namespace {

TextModel hf_text_model(models::HfCausalLm loaded, Device device, const std::string& quantize) {
  auto lm = std::make_shared<models::HfCausalLm>(std::move(loaded));
  lm->model->to(device);
  TextModel out;
  out.model = lm->model;
  out.encode = [lm](const std::string& t) { return lm->tokenizer.encode(t); };
  out.decode = [lm](const std::vector<int32_t>& ids) { return lm->tokenizer.decode(ids); };
  out.stop_ids = lm->eos_ids;
  out.sampling_defaults = lm->sampling_defaults;
  return quantized(std::move(out), quantize);
}

}  // namespace

TextModel load_text_model(const std::string& spec, Device device, const std::string& weights,
                          const std::string& quantize) {
  if (auto dir = models::hf_folder(spec)) {
    models::HfCausalLm lm = models::load_hf_causal_lm(*dir, weights_dtype(weights));
    models::apply_store_defaults(spec, lm);
    return hf_text_model(std::move(lm), device, quantize);
  }
  const std::string ckdir = resolve_checkpoint(spec);
  const Checkpoint ck = load_checkpoint(ckdir);
  const std::string recipe = ck.state.value("recipe", std::string("?"));
  if (recipe == "sft") return hf_text_model(load_sft_checkpoint(ck, true), device, quantize);
  KILN_CHECK(recipe == "fortunes-gpt", spec, " holds a ", recipe, " run, not a language model");
  TextModel out;
  std::shared_ptr<models::Gpt> gpt = load_gpt(ck, device);
  gpt->eval();
  auto tok = std::make_shared<data::Tokenizer>(load_run_tokenizer(ckdir, ck));
  out.model = gpt;
  out.encode = [tok](const std::string& t) {
    std::vector<int32_t> ids{tok->end_of_text_id()};
    const auto text = tok->encode(t);
    ids.insert(ids.end(), text.begin(), text.end());
    return ids;
  };
  out.decode = [tok](const std::vector<int32_t>& ids) { return tok->decode(ids); };
  out.stop_ids = {tok->end_of_text_id()};
  return quantized(std::move(out), quantize);
}

ChunkedPerplexity chunked_perplexity(TextModel& m, const std::string& text, int64_t ctx, int64_t chunks) {
  KILN_CHECK(ctx >= 4 && ctx <= m.model->context_length(), "--ctx ", ctx, " is outside [4, the model's context of ",
             m.model->context_length(), "]");
  const std::vector<int32_t> bos = m.encode("");  // what the tokenizer puts before any text: BOS, or nothing
  const std::vector<int32_t> ids = m.encode(text);
  ChunkedPerplexity out;
  out.tokens = int64_t(ids.size());
  out.chunks = int64_t(ids.size()) / ctx;
  if (chunks > 0) out.chunks = std::min(out.chunks, chunks);
  KILN_CHECK(out.chunks > 0 && int64_t(ids.size()) >= 2 * ctx, "the text is ", ids.size(), " tokens; a context of ",
             ctx, " needs at least ", 2 * ctx, " (as llama-perplexity asks): give a longer text or a smaller --ctx");
  const int64_t first = ctx / 2;
  double nll = 0, nll2 = 0;
  for (int64_t c = 0; c < out.chunks; ++c) {
    std::vector<int32_t> chunk(ids.begin() + c * ctx, ids.begin() + (c + 1) * ctx);
    if (bos.size() == 1) chunk[0] = bos[0];
    const std::vector<float> all = models::next_token_log_probabilities(*m.model, chunk);
    const size_t V = all.size() / chunk.size();
    for (int64_t t = first; t + 1 < ctx; ++t) {
      const double lp = all[size_t(t) * V + size_t(chunk[size_t(t + 1)])];
      nll -= lp;
      nll2 += lp * lp;
      ++out.tokens_scored;
    }
  }
  nll /= double(out.tokens_scored);
  nll2 = nll2 / double(out.tokens_scored) - nll * nll;
  out.perplexity = std::exp(nll);
  out.standard_error = nll2 > 0 ? std::sqrt(nll2 / double(out.tokens_scored - 1)) * out.perplexity : 0;
  return out;
}

ScoredText score_text(TextModel& m, const std::string& text) {
  ScoredText out;
  out.ids = m.encode(text);
  KILN_CHECK(!out.ids.empty(), "the text encodes to no tokens, so there is nothing to score");
  KILN_CHECK(int64_t(out.ids.size()) <= m.model->context_length(), "the text is ", out.ids.size(),
             " tokens, more than the model's context of ", m.model->context_length(), "; score a shorter text");
  const std::vector<float> all = models::next_token_log_probabilities(*m.model, out.ids);
  const size_t V = all.size() / out.ids.size();
  out.logprobs.assign(out.ids.size(), std::numeric_limits<double>::quiet_NaN());
  double total = 0;
  for (size_t t = 1; t < out.ids.size(); ++t) total += out.logprobs[t] = all[(t - 1) * V + size_t(out.ids[t])];
  out.perplexity = out.ids.size() > 1 ? std::exp(-total / double(out.ids.size() - 1)) : 1.0;
  return out;
}

TextEval evaluate_on_fortunes(TextModel& m, const std::string& data_dir) {
  const std::vector<std::string> docs = data::load_fortunes(data_dir);
  TextEval e;
  double nats = 0, bytes = 0;
  for (int64_t i : data::split_documents(int64_t(docs.size())).validation) {
    const std::string& doc = docs[size_t(i)];
    std::vector<int32_t> ids = m.encode(doc);
    if (int64_t(ids.size()) > m.model->context_length()) ids.resize(size_t(m.model->context_length()));
    if (ids.size() < 2) continue;
    const std::vector<float> lp = models::next_token_log_probabilities(*m.model, ids);
    const size_t V = lp.size() / ids.size();
    for (size_t t = 1; t < ids.size(); ++t) nats -= lp[(t - 1) * V + size_t(ids[t])];
    e.tokens += int64_t(ids.size() - 1);
    // The bytes the scored tokens spell (all of the document unless it was cut).
    bytes += double(m.decode(std::vector<int32_t>(ids.begin() + 1, ids.end())).size());
    ++e.documents;
  }
  KILN_CHECK(e.tokens > 0 && bytes > 0, "no fortune of the validation split could be scored");
  e.nats_per_token = nats / double(e.tokens);
  e.bits_per_byte = nats / std::log(2.0) / bytes;
  return e;
}

}  // namespace kiln::recipes
