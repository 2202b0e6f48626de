#include "apps/plan/fit.h"

#include "apps/plan/memory_probe.h"
#include "kiln/backend/backend.h"
#include "kiln/backend/gpu_info.h"
#include "kiln/core/units.h"
#include "kiln/io/checkpoint.h"
#include "apps/recipes/run_config.h"
#include "apps/recipes/sft_model.h"
#include "models/gpt/presets.h"
#include "models/hf/hf_model.h"

namespace kiln::plan {

namespace {

// The model's config as the run will build it: the resumed run's, or the
// preset (the recipe's own by default) with the overrides.
models::GptConfig planned_gpt(const recipes::TrainOptions& o, const std::optional<nlohmann::json>& saved) {
  if (saved && saved->contains("config")) return models::GptConfig::from_json(saved->at("config"));
  nlohmann::json j = models::gpt_preset(o.model_preset.empty() ? "fortunes" : o.model_preset).to_json();
  for (const auto& [field, value] : o.model_overrides) j[field] = value;
  return models::GptConfig::from_json(j);
}

// kiln train sft: the base's config.json, sequences of --max-seq-len (the
// longest a batch pads to), and its LoRA adapters.
void plan_fine_tune(const recipes::TrainOptions& o, const std::optional<nlohmann::json>& saved, PlanInput& in) {
  const recipes::SftSettings s = saved ? recipes::SftSettings::from_json(saved->value("sft", nlohmann::json()))
                                       : recipes::SftSettings{};
  const auto dir = models::hf_folder(o.init);
  KILN_CHECK(saved || dir, "--fit plans kiln train sft from the base's config.json: give --init hf:DIR");
  in.hf_config = models::read_hf_config(saved ? s.base : *dir);
  in.gpt.block_size = std::min<int64_t>(saved ? s.max_seq_len : o.max_seq_len.value_or(1024),
                                        in.hf_config.value("max_position_embeddings",
                                                           in.hf_config.value("n_positions", int64_t(1024))));
  if (saved && s.lora) in.lora = s.lora;
  if (!saved && (o.lora_rank || !o.lora_from.empty())) {
    nn::LoraConfig lora = o.lora_from.empty() ? nn::LoraConfig{} : recipes::read_peft_folder(o.lora_from).config;
    if (o.lora_rank) lora.rank = *o.lora_rank;
    if (o.lora_targets) lora.targets = nn::parse_lora_targets(*o.lora_targets);
    lora.dropout = o.lora_dropout.value_or(lora.dropout);  // its masks take memory too
    in.lora = lora;
  }
}

}  // namespace

void apply_fit(recipes::TrainOptions& o, const recipes::Log& log) {
  const Device device = o.device.value_or(Device::cpu());
  const std::optional<nlohmann::json> saved =
      recipes::saved_run_state(o, recipes::resolve_out_dir(o, o.recipe.empty() ? "fashion-mlp" : o.recipe));
  const std::string recipe_name = saved ? saved->value("recipe", "") : (o.recipe.empty() ? "fashion-mlp" : o.recipe);
  const recipes::Recipe& recipe = recipes::find_recipe(recipe_name);

  PlanInput in;
  in.recipe = recipe_name;
  if (recipe.kind() == recipes::ModelKind::language_model) in.gpt = planned_gpt(o, saved);
  if (recipe_name == "sft") plan_fine_tune(o, saved, in);
  in.batch_size = saved ? saved->value("batch_size", int64_t(0)) : o.batch_size.value_or(0);
  if (in.batch_size <= 0) in.batch_size = recipe.default_batch_size();
  in.precision = saved ? saved->value("precision", "fp32") : o.precision.value_or("fp32");
  if (device.is_cpu() && device.index == 0) in.offload = false;  // the host is the device: nothing to offload to
  if (o.memory_budget > 0) {
    in.target.memory_budget = o.memory_budget;
  } else if (device.is_cuda()) {
    KILN_CHECK(cuda_is_available(), "--fit --device ", device.str(), ": ", cuda_unavailable_reason());
    std::vector<GpuInfo> gpus = query_gpus(false);
    KILN_CHECK(device.index < int(gpus.size()), "--fit: no GPU ", device.str());
    GpuSpec spec = find_gpu(load_gpu_table(), "H100-SXM");  // its speeds only rank the strategies
    spec.name = gpus[size_t(device.index)].name;
    spec.memory_bytes = double(gpus[size_t(device.index)].memory_bytes);
    in.target.gpu = spec;
  } else {
    KILN_FAIL("--fit needs something to fit into: a --memory-budget, or a GPU (--device cuda)");
  }
  Plan plan = make_plan(in, device_probe(Device::meta()));
  KILN_CHECK(plan.best, "--fit: nothing fits ", format_bytes(double(in.target.capacity())), " on ", device.str(),
             " at batch ", in.batch_size, " in ", *in.precision, ":\n", plan.to_text());
  const Estimate& best = plan.estimates[*plan.best];
  o.micro_batch = best.strategy.micro_batch;
  if (recipe.kind() == recipes::ModelKind::language_model) o.checkpointing = best.strategy.checkpointing;
  o.offload = best.strategy.offload;
  log("--fit: " + best.strategy.str() + " (predicted peak " + format_bytes(double(best.memory.peak)) + " of " +
      format_bytes(double(in.target.capacity())) + " on " + device.str() + ")");
}

}  // namespace kiln::plan
