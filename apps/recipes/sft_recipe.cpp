#include "apps/recipes/sft_recipe.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "apps/recipes/common.h"
#include "apps/recipes/export.h"
#include "apps/recipes/gpt_recipe.h"
#include "apps/recipes/hf_inference.h"
#include "apps/recipes/sft_data.h"
#include "apps/recipes/sft_loader.h"
#include "apps/recipes/sft_model.h"
#include "apps/recipes/train_loop.h"
#include "kiln/distributed/world.h"
#include "kiln/nn/distillation.h"
#include "models/hf/families.h"
#include "models/hf/hf_chat.h"

namespace kiln::recipes {
namespace fs = std::filesystem;

namespace {

// A resumed run keeps its fine-tuning settings; a different one given again is refused.
template <typename T>
void same_as_saved(bool given, const T& value, const T& saved, const char* flag) {
  KILN_CHECK(!given || value == saved, flag, " differs from the resumed run's (a resumed run keeps its settings); drop ",
             flag, " to resume, or train into a new --out directory");
}

// The settings of a fresh run, from the options.
SftSettings fresh_settings(const TrainOptions& o, const std::string& out_dir, const Log& log) {
  KILN_CHECK(!o.init.empty(), "kiln train sft needs --init hf:DIR (a Hugging Face model folder) or --init RUN (a "
             "fortunes-gpt run) to fine-tune");
  KILN_CHECK(!o.data_file.empty(), "kiln train sft needs --data FILE.jsonl: one example a line, {\"text\": ...}, "
             "{\"prompt\": ..., \"completion\": ...} or {\"messages\": [...]}");
  SftSettings s;
  s.base = fine_tune_folder(o.init, out_dir, "base", log);
  if (!o.distill_from.empty()) {
    s.teacher = fine_tune_folder(o.distill_from, out_dir, "teacher", log);
    s.temperature = o.distill_temperature.value_or(2.0);
    s.alpha = o.distill_alpha.value_or(0.5);
    KILN_CHECK(s.temperature > 0, "--distill-temperature must be > 0");
  }
  KILN_CHECK(!s.teacher.empty() || (!o.distill_temperature && !o.distill_alpha), "--distill-temperature and "
             "--distill-alpha shape distillation; give the teacher with --distill-from");
  s.base_hash = models::hf_weights_hash(s.base);
  s.data = absolute_path(o.data_file);
  s.val = o.val_file.empty() ? "" : absolute_path(o.val_file);
  s.max_seq_len = o.max_seq_len.value_or(1024);
  s.chat_template = o.chat_template;
  s.packing = o.packing;
  const bool lora_options = o.lora_alpha || o.lora_dropout || o.lora_targets;
  KILN_CHECK(!lora_options || o.lora_rank || !o.lora_from.empty(), "--lora-alpha, --lora-dropout and --lora-targets "
             "shape LoRA adapters; give --lora-rank R too");
  if (!o.lora_from.empty()) {
    s.lora_from = absolute_path(o.lora_from);
    s.lora = read_peft_folder(s.lora_from).config;
    KILN_CHECK(!o.lora_rank || *o.lora_rank == s.lora->rank, "--lora-rank ", o.lora_rank.value_or(0),
               " differs from the rank of --lora-from's adapters (", s.lora->rank, ")");
    KILN_CHECK(!o.lora_alpha && !o.lora_targets, "--lora-alpha and --lora-targets come from --lora-from's "
               "adapter_config.json; drop them");
    if (o.lora_dropout) s.lora->dropout = *o.lora_dropout;  // as peft's config may be edited: no weight depends on it
  } else if (o.lora_rank) {
    nn::LoraConfig c;
    c.rank = *o.lora_rank;
    c.alpha = o.lora_alpha.value_or(2.0 * double(c.rank));
    c.dropout = o.lora_dropout.value_or(0.0);
    if (o.lora_targets) {
      c.targets = nn::parse_lora_targets(*o.lora_targets);
    } else {  // peft's defaults for the model type
      const std::string type = models::read_hf_config(s.base)["model_type"].get<std::string>();
      const models::CausalLmFamily* family = models::find_causal_lm_family(type);
      KILN_CHECK(family, s.base, " holds a ", type, " model, not a causal language model Kiln fine-tunes (",
                 models::supported_causal_lm_types(), ")");
      c.targets = family->lora_targets;
    }
    s.lora = c;
  }
  if (!o.quantize_base.empty()) {
    KILN_CHECK(s.lora, "--quantize-base quantizes the frozen base under LoRA adapters; give --lora-rank R too");
    parse_quant_format(o.quantize_base);  // a format it knows, or an error naming them
    const std::string type = models::read_hf_config(s.base)["model_type"].get<std::string>();
    KILN_CHECK(type != "gpt2", "--quantize-base trains the Llama family (llama, mistral, qwen2) so far; ", s.base,
               " is a gpt2 model");
    KILN_CHECK(!o.fit, "--fit does not plan a quantized base yet; choose --micro-batch yourself");
    s.quantize_base = o.quantize_base;
  }
  return s;
}

SftSettings resumed_settings(const TrainOptions& o, const nlohmann::json& state) {
  SftSettings s = SftSettings::from_json(state.value("sft", nlohmann::json()));
  same_as_saved(!o.init.empty() && models::hf_folder(o.init), o.init.empty() ? s.base : absolute_path(*models::hf_folder(o.init)),
                s.base, "--init");
  same_as_saved(!o.data_file.empty(), o.data_file.empty() ? s.data : absolute_path(o.data_file), s.data, "--data");
  same_as_saved(!o.val_file.empty(), o.val_file.empty() ? s.val : absolute_path(o.val_file), s.val, "--val");
  same_as_saved(o.max_seq_len.has_value(), o.max_seq_len.value_or(0), s.max_seq_len, "--max-seq-len");
  same_as_saved(o.packing, true, s.packing, "--packing");
  same_as_saved(o.lora_rank.has_value(), o.lora_rank.value_or(0), s.lora ? s.lora->rank : 0, "--lora-rank");
  same_as_saved(o.lora_alpha.has_value(), o.lora_alpha.value_or(0), s.lora ? s.lora->alpha : 0.0, "--lora-alpha");
  same_as_saved(o.lora_dropout.has_value(), o.lora_dropout.value_or(0), s.lora ? s.lora->dropout : 0.0,
                "--lora-dropout");
  same_as_saved(!o.quantize_base.empty(), o.quantize_base, s.quantize_base, "--quantize-base");
  same_as_saved(o.lora_targets.has_value(),
                o.lora_targets ? nn::parse_lora_targets(*o.lora_targets) : std::vector<std::string>(),
                s.lora ? s.lora->targets : std::vector<std::string>(), "--lora-targets");
  KILN_CHECK(o.distill_from.empty() || !s.teacher.empty(), "--distill-from: the resumed run trained without a "
             "teacher (a resumed run keeps its settings); drop it to resume, or train into a new --out directory");
  same_as_saved(o.distill_temperature.has_value(), o.distill_temperature.value_or(0), s.temperature,
                "--distill-temperature");
  same_as_saved(o.distill_alpha.has_value(), o.distill_alpha.value_or(0), s.alpha, "--distill-alpha");
  const std::string hash = models::hf_weights_hash(s.base);
  KILN_CHECK(hash == s.base_hash, "the base model ", s.base, " is not the one this run trained on (its weights hash ",
             hash, ", the run's ", s.base_hash, "); resuming against a different base is refused");
  return s;
}

// The folder's chat template, when it has one (a name given must work).
std::optional<text::ChatTemplate> chat_template_of(const SftSettings& s) {
  try {
    return models::load_hf_chat_template(s.base, s.chat_template);
  } catch (const Error&) {
    if (!s.chat_template.empty()) throw;
    return std::nullopt;
  }
}

// How the run encodes its examples with the model's tokenizer and template.
SftEncoding encoding_for(const models::HfCausalLm& lm, const std::optional<text::ChatTemplate>& chat,
                         const SftSettings& s) {
  SftEncoding enc;
  enc.tokenizer = &lm.tokenizer;
  enc.chat = chat ? &*chat : nullptr;
  if (!lm.eos_ids.empty()) enc.eos = lm.eos_ids.front();
  enc.max_seq_len = std::min(s.max_seq_len, lm.model->context_length());
  return enc;
}

// Mean nats per learned token over `examples`, in batches; no gradients.
double sft_validation_loss(models::LanguageModel& model, const std::vector<SftExample>& examples, int64_t batch,
                           int32_t pad, Device device, DType autocast) {
  NoGradGuard ng;
  amp::AutocastGuard guard(autocast);
  model.eval();
  double nats = 0;
  int64_t tokens = 0;
  for (size_t first = 0; first < examples.size(); first += size_t(batch)) {
    const size_t n = std::min(examples.size() - first, size_t(batch));
    const SftLoader::Batch b = sft_batch(examples, first, n, pad);
    nats += model.loss(b.x.to(device), b.y.to(device)).item() * double(b.tokens);
    tokens += b.tokens;
  }
  model.train();
  return nats / double(std::max<int64_t>(tokens, 1));
}

// The teacher, frozen: its vocabulary must be the student's, token for token.
models::HfCausalLm load_teacher(const std::string& folder, const models::HfCausalLm& student, DType dtype) {
  models::HfCausalLm teacher = models::load_hf_causal_lm(folder, dtype);
  const text::HfTokenizer &a = student.tokenizer, &b = teacher.tokenizer;
  bool same = a.vocab_size() == b.vocab_size() && teacher.model->vocab_size() == student.model->vocab_size();
  for (int32_t id = 0; same && id < int32_t(a.vocab_size()); ++id) same = a.id_to_token(id) == b.id_to_token(id);
  KILN_CHECK(same, "the teacher ", folder, " does not share the student's tokenizer (",
             a.vocab_size() == b.vocab_size() ? "other tokens under the same ids"
                                              : std::to_string(b.vocab_size()) + " tokens, not " + std::to_string(a.vocab_size()),
             "): distillation compares their distributions token by token; pick a teacher with the student's tokenizer");
  for (auto& [name, p] : teacher.model->named_parameters()) p.set_requires_grad(false);
  teacher.model->eval();
  return teacher;
}

// The student's distillation loss against the teacher over the learned targets.
Tensor distilled_loss(models::LanguageModel& student, models::LanguageModel& teacher, const Tensor& x, const Tensor& y,
                      const SftSettings& s) {
  Tensor teacher_logits;
  {
    NoGradGuard frozen;
    teacher_logits = teacher.forward(x);
  }
  return nn::distillation_loss(student.forward(x), teacher_logits, y, s.temperature, s.alpha).loss;
}

class SftRecipe final : public Recipe {
 public:
  std::string name() const override { return "sft"; }
  std::string summary() const override {
    return "fine-tune a Hugging Face language model (--init hf:DIR) on JSON Lines examples (--data), every weight "
           "or LoRA adapters (--lora-rank)";
  }
  ModelKind kind() const override { return ModelKind::language_model; }
  int64_t default_batch_size() const override { return 8; }

  TrainResult train(const TrainOptions& o, const Log& log) const override {
    const std::string out_dir = resolve_out_dir(o, name());
    const std::optional<nlohmann::json> saved = saved_run_state(o, out_dir);
    const SftSettings s = saved ? resumed_settings(o, *saved) : fresh_settings(o, out_dir, log);

    // Under LoRA in bf16 or fp16 the frozen base is kept in that dtype (only
    // the f32 adapters train); a full fine-tune keeps f32 weights (autocast casts copies).
    const std::string precision = saved ? saved->value("precision", std::string("fp32")) : o.precision.value_or("fp32");
    const std::optional<DType> base_dtype = s.lora ? lora_base_dtype(precision) : DType::f32;
    KILN_CHECK(s.quantize_base.empty() || (precision == "fp32" && o.device.value_or(Device::cpu()).is_cpu()),
               "--quantize-base trains on the CPU in fp32 so far (quantized products have no CUDA kernels yet)");
    const uint64_t seed = saved ? saved->at("seed").get<uint64_t>() : o.seed.value_or(1337);
    auto dropout_gen = std::make_shared<Generator>(seed ^ 0xD0D0D0D0ull);
    std::vector<std::string> adapted;
    models::HfCausalLm lm = load_sft_model(s, base_dtype, seed, dropout_gen, &adapted);
    models::LanguageModel& model = *lm.model;

    std::optional<models::HfCausalLm> teacher;
    if (!s.teacher.empty()) {
      teacher.emplace(load_teacher(s.teacher, lm, precision == "bf16" ? DType::bf16 : DType::f32));
      log("distilling " + s.teacher + " (" + teacher->model_type + ", " + std::to_string(teacher->model->parameter_count()) +
          " parameters, frozen) into the model: temperature " + std::to_string(s.temperature) + ", alpha " +
          std::to_string(s.alpha));
    }

    const std::optional<text::ChatTemplate> chat = chat_template_of(s);
    const SftEncoding enc = encoding_for(lm, chat, s);
    const SftData train_data = read_sft_file(s.data, enc);
    const std::optional<SftData> val_data = s.val.empty() ? std::nullopt : std::optional(read_sft_file(s.val, enc));
    const int32_t pad = enc.eos.value_or(0);  // any id: padded positions are never attended to nor learned
    // Rows of one epoch: the examples, or with --packing their tokens in rows of max_seq_len.
    int64_t tokens = 0;
    for (const SftExample& e : train_data.examples) tokens += int64_t(e.ids.size());
    const int64_t pack_to = s.packing ? enc.max_seq_len : 0;
    const int64_t rows = pack_to > 0 ? (tokens + pack_to - 1) / pack_to : int64_t(train_data.examples.size());

    RecipeDefaults d;
    d.batch_size = std::min<int64_t>(default_batch_size(), rows);
    d.lr = s.lora ? 2e-4 : 2e-5;
    d.epochs = 1;
    d.steps_per_epoch = [rows](int64_t batch) { return std::max<int64_t>(1, rows / batch); };
    const RunStart run = start_run(o, name(), d, log);
    const RunConfig& c = run.config;
    KILN_CHECK(c.checkpointing != "selective", "the Llama family checkpoints activations by blocks (or none); use "
               "--checkpoint-activations blocks");
    model.set_activation_checkpointing(models::parse_activation_checkpointing(c.checkpointing));

    SftLoader loader(train_data.examples, c.batch_size, c.seed, pad, pack_to);
    optim::AdamWOptions adamw;
    adamw.weight_decay = 0.0;  // transformers' Trainer default
    std::unique_ptr<optim::Optimizer> optimizer = place_model_and_optimizer(c, run.device, model, adamw);
    MixedPrecision mixed(c.precision, c.loss_scale);
    RunParts parts{model, *optimizer, mixed, *dropout_gen, [&] { return loader.state(); },
                   [&](const data::LoaderState& st) { loader.set_state(st); }};
    restore_run(run, parts, log);

    int64_t trainable = 0, total = model.parameter_count();
    for (const auto& [n, p] : model.trainable_parameters()) trainable += p.numel();
    model.for_each_module([&](const std::string&, const nn::Module& m) {  // a quantized base's matrices count too
      if (const auto* w = dynamic_cast<const nn::WeightModule*>(&m); w && w->quantized)
        total += w->quantized->rows * w->quantized->cols;
    });
    char head[400];
    std::snprintf(head, sizeof head, "sft: %s (%s), %lld parameters%s, training %lld (%.2f%%)%s; %lld examples "
                  "(%lld cut to %lld tokens, %lld with nothing to learn left out%s), %lld steps of %lld",
                  s.base.c_str(), lm.model_type.c_str(), (long long)total,
                  s.quantize_base.empty() ? "" : (" (the base in " + s.quantize_base + ")").c_str(), (long long)trainable,
                  100.0 * double(trainable) / double(total),
                  s.lora ? (", LoRA rank " + std::to_string(s.lora->rank) + " on " + std::to_string(adapted.size()) +
                            " layers").c_str() : "",
                  (long long)train_data.examples.size(), (long long)train_data.truncated, (long long)enc.max_seq_len,
                  (long long)train_data.skipped,
                  pack_to > 0 ? (", packed into " + std::to_string(rows) + " rows").c_str() : "",
                  (long long)c.total_steps, (long long)c.batch_size);
    log(head);

    const int64_t val_batch = validation_batch(c.micro_batch);
    auto val_loss = [&] {
      return sft_validation_loss(model, val_data->examples, val_batch, pad, run.device, mixed.autocast_dtype());
    };
    TrainResult result;
    if (val_data && !run.checkpoint) log("validation loss before training: " + std::to_string(val_loss()) + " nats/token");

    LoopSettings settings;
    settings.warmup_steps = 0;
    settings.min_lr_ratio = 0.1;
    settings.clip_norm = 1.0;  // transformers' Trainer default (max_grad_norm)
    settings.unit = "ex";
    LoopHooks hooks;
    int64_t batch_tokens = 1;
    hooks.next_batch = [&] {
      SftLoader::Batch b = loader.next();
      batch_tokens = b.tokens;
      return Batch{b.x, b.y};
    };
    if (teacher) teacher->model->to(run.device);
    hooks.loss = [&](const Tensor& x, const Tensor& y) {
      return teacher ? distilled_loss(model, *teacher->model, x.to(run.device), y.to(run.device), s)
                     : model.loss(x.to(run.device), y.to(run.device));
    };
    // The step's loss is the mean over every learned token of the batch, as
    // transformers computes it for a whole batch: each micro-batch's and
    // each rank's mean weighs by its share of those tokens.
    const double world = double(distributed::world_size());
    hooks.weight = [&](const Tensor&, const Tensor& y) {
      return double(count_valid_targets(y)) * world / double(batch_tokens);
    };
    hooks.add_state = [&](nlohmann::json& state) { state["sft"] = s.to_json(); };
    RunRecord record(run.out_dir, run.step(), record_devices(run));
    const bool finished = run_training_loop(o, run, parts, settings, hooks, record, result, log);
    if (finished && val_data) {
      result.val_loss = val_loss();
      result.val_bits_per_byte = -1;
      record.eval(result.steps_done, {{"val_loss", result.val_loss}});
    }
    return result;
  }

  EvalResult evaluate(const Checkpoint& ck, const std::string&, Device device, const Log& log) const override {
    models::HfCausalLm lm = load_sft_checkpoint(ck, true);
    lm.model->to(device);
    const SftSettings s = SftSettings::from_json(ck.state.at("sft"));
    const std::optional<text::ChatTemplate> chat = chat_template_of(s);
    const SftEncoding enc = encoding_for(lm, chat, s);
    const std::string file = s.val.empty() ? s.data : s.val;
    log("evaluating on " + file + (s.val.empty() ? " (the run had no --val; these are its training examples)" : ""));
    EvalResult r;
    r.loss = sft_validation_loss(*lm.model, read_sft_file(file, enc).examples, kValidationBatch, enc.eos.value_or(0),
                             device, DType::f32);
    return r;
  }

  std::unique_ptr<InferenceModel> load_for_inference(const Checkpoint& ck, const std::string&,
                                                     Device device) const override {
    models::HfCausalLm lm = load_sft_checkpoint(ck, true);
    lm.model->to(device);
    const std::string chat = SftSettings::from_json(ck.state.at("sft")).chat_template;
    return hf_language_model_inference(std::move(lm), chat);
  }
};

}  // namespace

std::unique_ptr<Recipe> make_sft_recipe() { return std::make_unique<SftRecipe>(); }

}  // namespace kiln::recipes
