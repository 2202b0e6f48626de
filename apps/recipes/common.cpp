#include "apps/recipes/common.h"

#include "kiln/backend/backend.h"

namespace kiln::recipes {

NamedTensors to_host(const nn::NamedTensors& tensors) {
  NamedTensors out;
  for (const auto& [name, t] : tensors) out.emplace_back(name, copy_to(t, Device::cpu(), t.dtype()));
  return out;
}

std::vector<std::pair<std::string, Tensor>> to_pairs(const std::map<std::string, Tensor>& m) {
  return {m.begin(), m.end()};
}

std::string resolve_out_dir(const TrainOptions& o) { return o.out_dir.empty() ? "runs/" + o.recipe : o.out_dir; }

std::string resolve_checkpoint(const std::string& path) {
  namespace fs = std::filesystem;
  KILN_CHECK(fs::exists(path), "checkpoint or run directory '", path, "' does not exist");
  if (fs::exists(fs::path(path) / "state.json")) return path;
  auto latest = latest_checkpoint(path);
  KILN_CHECK(latest, "'", path, "' holds no complete checkpoint (train with `kiln train <recipe> --out ", path, "`)");
  return *latest;
}

std::string save_run(const std::string& out_dir, int64_t step, const nn::Module& model, const optim::Optimizer& opt,
                     const nlohmann::json& state) {
  save_checkpoint(out_dir, step, to_host(model.named_parameters()), to_host(opt.state()), state, /*keep_last=*/3);
  return (std::filesystem::path(out_dir) / checkpoint_dir_name(step)).string();
}

int64_t resume_run(const TrainOptions& o, const std::string& out_dir, RunParts& parts, const Log& log) {
  if (!o.resume) return 0;
  auto latest = latest_checkpoint(out_dir);
  if (!latest) {
    log("no checkpoint in " + out_dir + " yet: starting from scratch");
    return 0;
  }
  Checkpoint ck = load_checkpoint(*latest);
  KILN_CHECK(ck.state.value("recipe", "") == o.recipe, "checkpoint ", *latest, " is from recipe '",
             ck.state.value("recipe", ""), "', not '", o.recipe, "'");
  parts.model.load_parameters(to_pairs(ck.model));
  const int64_t start = ck.state.at("step");
  parts.opt.load_state(to_pairs(ck.optimizer), ck.state.value("optimizer_step", start));
  parts.precision.load(ck.state, log);
  parts.set_loader_state(ck.state.at("loader").get<data::LoaderState>());
  parts.dropout_gen.set_state(ck.state.at("dropout_rng").at(0), ck.state.at("dropout_rng").at(1));
  log("resumed from " + *latest + " at step " + std::to_string(start));
  return start;
}

nlohmann::json run_state(const TrainOptions& o, const RunParts& parts, int64_t step, int64_t total, double loss) {
  nlohmann::json j{{"recipe", o.recipe},
                   {"step", step},
                   {"total_steps", total},
                   {"loader", parts.loader_state()},
                   {"dropout_rng", {parts.dropout_gen.seed(), parts.dropout_gen.offset()}},
                   {"seed", o.seed},
                   {"train_loss", loss},
                   {"optimizer_step", parts.opt.step_count()}};
  parts.precision.save(j);
  return j;
}

void setup_runtime(const TrainOptions& o, const Log& log) {
  set_num_threads(o.threads);
  if (o.device.is_cuda()) {
    KILN_CHECK(cuda_is_available(), "--device ", o.device.str(), " was requested but CUDA is not available: ",
               cuda_unavailable_reason(), ". Run with --device cpu.");
  } else if (!cuda_is_available()) {
    log("device: cpu (" + std::to_string(get_num_threads()) + " threads); no GPU: " + cuda_unavailable_reason());
    return;
  }
  log("device: " + o.device.str() + (o.device.is_cpu() ? " (" + std::to_string(get_num_threads()) + " threads)" : ""));
}

}  // namespace kiln::recipes
