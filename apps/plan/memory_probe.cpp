#include "apps/plan/memory_probe.h"

#include "apps/recipes/common.h"
#include "apps/recipes/hf_training.h"
#include "apps/recipes/sft_model.h"
#include "apps/recipes/step_parts.h"
#include "apps/recipes/train_loop.h"
#include "kiln/meta/meta_backend.h"
#include "kiln/nn/init.h"

namespace kiln::plan {

std::string plan_recipe_name(const PlanInput& in) {
  return recipes::is_image_recipe(in.recipe) || !in.hf_config.is_null() ? in.recipe : "fortunes-gpt";
}

namespace {

// Token ids spread over the vocabulary, for a measured step: a mixture of
// experts routes them as a real batch is routed (over every expert), where a
// batch of one id would send every token to the same few (the meta device's
// routing spreads its tokens over every expert too: models/llama/moe.cpp).
Tensor spread_token_ids(const Shape& shape, const nlohmann::json& config) {
  const int64_t vocab = std::max<int64_t>(1, config.value("vocab_size", int64_t(1)));
  std::vector<int64_t> ids(size_t(shape_numel(shape)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 7919 + 13) % uint64_t(vocab));
  return Tensor::from_vector(ids, shape);
}

}  // namespace

StepMemory probe_step(const PlanInput& in, const Strategy& s, Device device) {
  const bool hf = !in.hf_config.is_null();
  const recipes::Recipe* recipe = hf ? nullptr : &recipes::find_recipe(plan_recipe_name(in));
  recipes::StepRequest request;
  if (recipe && recipe->kind() == recipes::ModelKind::language_model) request.model_config = in.gpt.to_json();
  request.checkpointing = s.checkpointing;
  request.lora = in.lora;
  if (in.lora) request.frozen_dtype = recipes::lora_base_dtype(s.precision);  // as kiln train sft keeps the base
  recipes::RunConfig config;
  config.precision = s.precision;
  config.offload = s.offload;
  config.lr = 1e-3;
  const bool meta = device.type == DeviceType::meta;
  const Device host = meta ? Device::meta(1) : Device::cpu();  // where offloaded state lives
  // A plan for a GPU models CUDA's choices; one for a budget alone, this CPU's.
  meta::ModelledDeviceScope modelled(in.target.gpu ? DeviceType::cuda : DeviceType::cpu);
  Allocator& allocator = allocator_for(device);
  Allocator& host_allocator = allocator_for(host);
  MemoryStats stats, host_stats;
  {
    std::optional<nn::MetaParametersGuard> no_init;
    if (meta) no_init.emplace();  // build the model on meta directly: no host memory, no initialisation
    recipes::StepParts step =
        hf ? recipes::hf_step_parts(in.hf_config, request, in.gpt.block_size) : recipe->step_parts(request);
    no_init.reset();
    std::unique_ptr<optim::Optimizer> opt =
        recipes::place_model_and_optimizer(config, device, *step.model, step.adamw, host);
    recipes::MixedPrecision precision(s.precision);
    recipes::LoopHooks hooks;
    hooks.loss = [&](const Tensor& x, const Tensor& y) { return step.loss(x.to(device), y.to(device)); };
    Shape xs = step.x_shape, ys = step.y_shape;
    xs.insert(xs.begin(), in.batch_size);
    ys.insert(ys.begin(), in.batch_size);
    recipes::Batch batch{zeros(xs, step.x_dtype), zeros(ys, step.y_dtype)};
    if (hf && !meta) batch.x = spread_token_ids(xs, in.hf_config);

    // One steady-state step: the weights and optimizer state exist, the
    // gradients do not (zero_grad frees them), the batch is loaded.
    allocator.reset_peak();
    host_allocator.reset_peak();
    opt->zero_grad();
    recipes::accumulate_gradients(batch, s.micro_batch, hooks, precision);
    if (precision.finish_step(opt->gradients(), 1, [](const std::string&) {})) opt->step();
    stats = allocator.stats();
    host_stats = host_allocator.stats();
  }
  StepMemory m;
  auto peak = [&](MemoryCategory c) { return stats.peak_by_category[size_t(c)]; };
  m.weights = peak(MemoryCategory::weights);
  m.grads = peak(MemoryCategory::grads);
  m.optimizer = peak(MemoryCategory::optimizer);
  m.activations = peak(MemoryCategory::activations);
  m.workspace = peak(MemoryCategory::workspace);
  m.other = peak(MemoryCategory::other);
  m.peak = stats.peak;
  if (s.offload && !(host == device)) m.host_peak = host_stats.peak;
  return m;
}

MemoryProbe device_probe(Device device) {
  return [device](const PlanInput& in, const Strategy& s) { return probe_step(in, s, device); };
}

}  // namespace kiln::plan
