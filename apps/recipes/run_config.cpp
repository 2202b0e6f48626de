#include "apps/recipes/run_config.h"

#include <cmath>
#include <sstream>

#include "apps/recipes/precision.h"
#include "kiln/backend/backend.h"
#include "kiln/core/units.h"

namespace kiln::recipes {

void RunConfig::save(nlohmann::json& state) const {
  state["recipe"] = recipe;
  state["seed"] = seed;
  state["batch_size"] = batch_size;
  state["micro_batch"] = micro_batch;
  state["offload"] = offload;
  state["zero"] = zero;
  state["checkpointing"] = checkpointing;
  state["lr"] = lr;
  state["total_steps"] = total_steps;
  state["precision"] = precision;
  state["loss_scale"] = loss_scale;
}

RunConfig RunConfig::load(const nlohmann::json& state) {
  RunConfig c;
  c.recipe = state.at("recipe");
  c.seed = state.at("seed");
  c.batch_size = state.at("batch_size");
  c.micro_batch = state.value("micro_batch", int64_t(0));
  c.offload = state.value("offload", false);
  c.zero = state.value("zero", 0);
  c.checkpointing = state.value("checkpointing", "none");
  c.lr = state.at("lr");
  c.total_steps = state.at("total_steps");
  c.precision = state.value("precision", "fp32");
  c.loss_scale = state.value("loss_scale", 0.0);
  return c;
}

std::string resolve_out_dir(const TrainOptions& o, const std::string& recipe_name) {
  return o.out_dir.empty() ? "runs/" + recipe_name : o.out_dir;
}

std::optional<nlohmann::json> saved_run_state(const TrainOptions& o, const std::string& out_dir) {
  if (!o.resume) return std::nullopt;
  const auto latest = latest_checkpoint(out_dir);
  return latest ? std::optional(load_checkpoint_state(*latest)) : std::nullopt;
}

namespace {

template <typename T>
std::string text(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// A run-defining option given on a resume must equal its saved value.
template <typename T>
void require_saved(const std::optional<T>& given, const T& saved, const char* flag, const std::string& where) {
  if (!given || *given == saved) return;
  KILN_FAIL(flag, " ", text(*given), " differs from the run's saved ", flag, " ", text(saved), " in ", where,
            ": a resumed run keeps its settings. Drop ", flag, " to resume, or train into a new --out directory.");
}

int64_t steps_for_epochs(const RecipeDefaults& d, double epochs, int64_t batch_size) {
  return std::max<int64_t>(1, int64_t(std::llround(epochs * double(d.steps_per_epoch(batch_size)))));
}

int64_t total_from_options(const TrainOptions& o, const RecipeDefaults& d, int64_t batch_size,
                           const std::string& recipe) {
  if (o.steps && *o.steps > 0) return *o.steps;
  if (o.epochs && *o.epochs > 0) {
    KILN_CHECK(d.steps_per_epoch, "--epochs does not apply to ", recipe, "; give its length with --steps");
    return steps_for_epochs(d, *o.epochs, batch_size);
  }
  return 0;
}

RunConfig fresh_config(const TrainOptions& o, const std::string& recipe, const RecipeDefaults& d) {
  RunConfig c;
  c.recipe = recipe;
  c.seed = o.seed.value_or(1337);
  c.batch_size = o.batch_size.value_or(0) > 0 ? *o.batch_size : d.batch_size;
  c.micro_batch = o.micro_batch.value_or(0);
  c.offload = o.offload.value_or(false);
  c.zero = o.zero.value_or(0);
  c.checkpointing = o.checkpointing.value_or("none");
  c.lr = o.lr.value_or(0) > 0 ? *o.lr : d.lr;
  c.precision = o.precision.value_or("fp32");
  MixedPrecision check(c.precision);  // an unknown precision fails here, before any work
  c.loss_scale = o.loss_scale.value_or(0);
  c.total_steps = total_from_options(o, d, c.batch_size, recipe);
  if (c.total_steps == 0) c.total_steps = d.steps_per_epoch ? steps_for_epochs(d, d.epochs, c.batch_size) : d.steps;
  return c;
}

RunConfig resumed_config(const TrainOptions& o, const Checkpoint& ck, const std::string& dir,
                         const RecipeDefaults& d, const Log& log) {
  RunConfig c = RunConfig::load(ck.state);
  KILN_CHECK(o.recipe.empty() || o.recipe == c.recipe, "checkpoint ", dir, " is from recipe '", c.recipe,
             "', not '", o.recipe, "': resume it with `kiln train ", c.recipe, " --resume`, or train '", o.recipe,
             "' into a new --out directory");
  require_saved(o.seed, c.seed, "--seed", dir);
  require_saved(o.batch_size, c.batch_size, "--batch-size", dir);
  require_saved(o.lr, c.lr, "--lr", dir);
  require_saved(o.precision, c.precision, "--precision", dir);
  require_saved(o.loss_scale, c.loss_scale, "--loss-scale", dir);
  if (o.micro_batch && *o.micro_batch != c.micro_batch) {
    log("--micro-batch " + std::to_string(*o.micro_batch) + ": applied (was " + std::to_string(c.micro_batch) +
        "); the updates equal the saved setting's up to float rounding, not bit for bit");
    c.micro_batch = *o.micro_batch;
  }
  if (o.offload && *o.offload != c.offload) {
    log(std::string("--offload ") + (*o.offload ? "on" : "off") + ": applied; the updates equal the saved setting's "
        "up to float rounding, not bit for bit");
    c.offload = *o.offload;
  }
  if (o.zero && *o.zero != c.zero) {
    log("--zero " + std::to_string(*o.zero) + ": applied (was " + std::to_string(c.zero) + "); checkpoints hold "
        "the whole optimizer state either way");
    c.zero = *o.zero;
  }
  if (o.checkpointing && *o.checkpointing != c.checkpointing) {
    log("--checkpoint-activations " + *o.checkpointing + ": applied (was " + c.checkpointing +
        "); the gradients are the same");
    c.checkpointing = *o.checkpointing;
  }
  const int64_t total = total_from_options(o, d, c.batch_size, c.recipe);
  if (total > 0 && total != c.total_steps) {
    KILN_CHECK(total >= ck.step, "--steps ", total, " ends before the checkpoint's step ", ck.step, " in ", dir,
               "; give a total of at least ", ck.step);
    log("--steps " + std::to_string(total) + ": the run now ends at step " + std::to_string(total) + " (was " +
        std::to_string(c.total_steps) + "; the learning-rate schedule stretches to match)");
    c.total_steps = total;
  }
  return c;
}

}  // namespace

RunStart start_run(const TrainOptions& o, const std::string& recipe, const RecipeDefaults& d, const Log& log) {
  RunStart run;
  run.out_dir = resolve_out_dir(o, recipe);
  run.device = o.device.value_or(Device::cpu());
  set_num_threads(o.threads.value_or(0));


  std::optional<std::string> latest = o.resume ? latest_checkpoint(run.out_dir) : std::nullopt;
  if (o.resume && !latest) log("--resume: no checkpoint in " + run.out_dir + " yet, so this run starts from step 0");
  if (latest) {
    run.checkpoint = load_checkpoint(*latest);
    run.checkpoint_dir = *latest;
    run.config = resumed_config(o, *run.checkpoint, *latest, d, log);
    const nlohmann::json& st = run.checkpoint->state;
    const std::string saved_device = st.value("device", "cpu");
    if (saved_device != run.device.str())
      log("resuming on " + run.device.str() + "; the run was training on " + saved_device);
    const int saved_threads = st.value("threads", 0);
    if (run.device.is_cpu() && saved_threads > 0 && saved_threads != get_num_threads())
      log("resuming with " + std::to_string(get_num_threads()) + " CPU threads; the run used " +
          std::to_string(saved_threads) +
          " (matrix products, reductions and elementwise ops give the same bits at any thread count; oneDNN's "
          "convolution weight gradients are summed in a thread-dependent order, so a CNN's last bits can differ)");
  } else {
    run.config = fresh_config(o, recipe, d);
  }

  if (run.device.is_cuda()) {
    KILN_CHECK(cuda_is_available(), "--device ", run.device.str(), " was requested but CUDA is not available: ",
               cuda_unavailable_reason(), ". Run with --device cpu.");
    log("device: " + run.device.str());
  } else {
    std::string why = cuda_is_available() ? "" : "; no GPU: " + cuda_unavailable_reason();
    log("device: " + run.device.str() + (run.device.index > 0 ? " (simulated: host memory, own allocator; " : " (") +
        std::to_string(get_num_threads()) + " threads)" + why);
  }
  allocator_for(run.device).set_budget(o.memory_budget);
  if (o.memory_budget > 0)
    log("memory budget on " + run.device.str() + ": " + format_bytes(double(o.memory_budget)) + " (" +
        format_bytes(double(allocator_for(run.device).stats().current)) + " already in use)");
  return run;
}

}  // namespace kiln::recipes
