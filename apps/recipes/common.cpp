#include "apps/recipes/common.h"

#include "kiln/backend/backend.h"
#include "kiln/distributed/stage_optimizer.h"
#include "kiln/distributed/world.h"
#include "kiln/distributed/zero.h"
#include "kiln/optim/offload.h"

namespace kiln::recipes {

NamedTensors to_host(const nn::NamedTensors& tensors) {
  NamedTensors out;
  for (const auto& [name, t] : tensors) out.emplace_back(name, copy_to(t, Device::cpu(), t.dtype()));
  return out;
}

std::vector<std::pair<std::string, Tensor>> to_pairs(const std::map<std::string, Tensor>& m) {
  return {m.begin(), m.end()};
}

std::string resolve_checkpoint(const std::string& path) {
  namespace fs = std::filesystem;
  KILN_CHECK(fs::exists(path), "checkpoint or run directory '", path, "' does not exist");
  if (fs::exists(fs::path(path) / "state.json")) return path;
  auto latest = latest_checkpoint(path);
  KILN_CHECK(latest, "'", path, "' holds no complete checkpoint (train with `kiln train <recipe> --out ", path, "`)");
  return *latest;
}

std::unique_ptr<optim::Optimizer> place_model_and_optimizer(const RunConfig& config, Device device,
                                                             nn::Module& model, const optim::AdamWOptions& options,
                                                             Device host, const StagePlacement* stage) {
  if (!stage) model.to(device);
  KILN_CHECK(config.zero == 0 || config.zero == 1, "--zero ", config.zero, " is not supported: 0 (off) or 1 (shard "
             "the optimizer state)");
  if (stage) {
    KILN_CHECK(!config.offload, "--offload and --pipeline-stages do not combine yet: choose one");
    distributed::Pipeline& pipeline = *stage->pipeline;
    // Only the stage's own weights go to the device; the rest of the model
    // stays in host memory (rank 0 gathers checkpoints into it).
    nn::NamedTensors own;
    for (const std::string& name : stage->stage_params[size_t(pipeline.layout().stage)])
      for (auto [n, p] : model.named_parameters())
        if (n == name) {
          nn::move_tensor_in_place(p, device, p.dtype());
          own.emplace_back(n, p);
        }
    std::unique_ptr<optim::Optimizer> inner;
    if (config.zero == 1)
      inner = std::make_unique<distributed::ShardedAdamW>(own, config.lr, options, pipeline.replicas());
    else
      inner = std::make_unique<optim::AdamW>(own, config.lr, options);
    return std::make_unique<distributed::StageOptimizer>(model.named_parameters(), stage->stage_params, std::move(inner),
                                                  pipeline, distributed::world());
  }
  if (config.zero == 1) {
    KILN_CHECK(!config.offload, "--zero 1 and --offload do not combine yet: choose one");
    return std::make_unique<distributed::ShardedAdamW>(model.trainable_parameters(), config.lr, options,
                                                       distributed::world());
  }
  // Frozen parameters (LoRA's base) get no optimizer state.
  if (!config.offload) return std::make_unique<optim::AdamW>(model.trainable_parameters(), config.lr, options);
  auto opt = std::make_unique<optim::OffloadAdamW>(model.trainable_parameters(), config.lr, options, host);
  if (config.precision == "bf16") model.to(DType::bf16);  // after the master copy was taken in f32
  if (config.precision == "fp16") model.to(DType::f16);
  return opt;
}

std::string save_run(const std::string& out_dir, int64_t step, const nn::Module& model, const optim::Optimizer& opt,
                     const nlohmann::json& state) {
  // The optimizer's state first: on pipeline stages, gathering it also brings rank 0 the other stages' weights.
  const NamedTensors opt_state = to_host(opt.state());
  // A frozen base (LoRA) is not saved: its folder and hash are in the state.
  const nn::NamedTensors& weights = opt.master_weights() ? *opt.master_weights() : model.trainable_parameters();
  save_checkpoint(out_dir, step, to_host(weights), opt_state, state, /*keep_last=*/3);
  return (std::filesystem::path(out_dir) / checkpoint_dir_name(step)).string();
}

void restore_run(const RunStart& run, RunParts& parts, const Log& log) {
  if (!run.checkpoint) return;
  const Checkpoint& ck = *run.checkpoint;
  parts.model.load_trainable_parameters(to_pairs(ck.model));
  parts.opt.load_master_weights(to_pairs(ck.model));
  parts.opt.load_state(to_pairs(ck.optimizer), ck.state.value("optimizer_step", ck.step));
  parts.precision.load(ck.state, log);
  parts.set_loader_state(ck.state.at("loader").get<data::LoaderState>());
  parts.dropout_gen.set_state(ck.state.at("dropout_rng").at(0), ck.state.at("dropout_rng").at(1));
  log("resumed from " + run.checkpoint_dir + " at step " + std::to_string(ck.step) + " of " +
      std::to_string(run.config.total_steps));
}

nlohmann::json run_state(const RunStart& run, const RunParts& parts, int64_t step, double loss) {
  nlohmann::json j{{"step", step},
                   {"loader", parts.loader_state()},
                   {"dropout_rng", {parts.dropout_gen.seed(), parts.dropout_gen.offset()}},
                   {"train_loss", loss},
                   {"optimizer_step", parts.opt.step_count()},
                   {"device", run.device.str()},
                   {"threads", get_num_threads()}};
  run.config.save(j);
  parts.precision.save(j);
  return j;
}

}  // namespace kiln::recipes
