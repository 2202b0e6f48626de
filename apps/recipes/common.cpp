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
