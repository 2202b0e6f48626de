#include "apps/plan/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "apps/recipes/hf_training.h"
#include "apps/recipes/precision.h"
#include "apps/recipes/recipe.h"
#include "kiln/nn/init.h"
#include "kiln/core/error.h"
#include "kiln/cpu/runtime_defaults.h"

namespace kiln::plan {

namespace {

// Assumptions the output states. A forward + backward pass launches a few
// hundred kernels; each micro-batch pays their fixed cost again, which shows
// only where the GPU's work is shorter (launches are asynchronous).
constexpr double kLaunchSecondsPerLayerPass = 30 * 5e-6;  // ~30 kernels per layer, ~5 us each
// Host AdamW streams ~28 bytes per parameter (grad, master, m, v in; master,
// m, v out) through host memory at this rate.
constexpr double kHostBytesPerSecond = 40e9;
constexpr double kHostOptimizerBytesPerParam = 28;

bool is_hf(const PlanInput& in) { return !in.hf_config.is_null(); }
bool is_gpt(const PlanInput& in) { return !recipes::is_image_recipe(in.recipe) && !is_hf(in); }
// Language models train on sequences of block_size tokens.
bool is_text(const PlanInput& in) { return is_gpt(in) || is_hf(in); }

double items_per_example(const PlanInput& in) { return is_text(in) ? double(in.gpt.block_size) : 1.0; }

double hf_layers(const PlanInput& in) {
  return in.hf_config.value("num_hidden_layers", in.hf_config.value("n_layer", 0.0));
}

// The model's parameters, and those that train (LoRA: the adapters).
std::pair<int64_t, int64_t> hf_parameter_count(const PlanInput& in) {
  nn::MetaParametersGuard meta;  // built on meta: nothing is allocated
  recipes::StepRequest request;
  request.lora = in.lora;
  const auto model = recipes::hf_step_parts(in.hf_config, request, 1).model;
  int64_t trainable = 0;
  for (const auto& [name, p] : model->trainable_parameters()) trainable += p.numel();
  return {model->parameter_count(), trainable};
}

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.0f KiB", b / 1024.0);
  return buf;
}


// The GPU speed model used to rank strategies: the target GPU, or with only
// a byte budget an H100 (only the ratios between strategies matter then).
const GpuSpec& speed_model(const PlanInput& in, const std::vector<GpuSpec>& table) {
  return in.target.gpu ? *in.target.gpu : find_gpu(table, "H100-SXM");
}

// `trainable`: the parameters whose gradients and AdamW state a step makes
// (all but LoRA's frozen base, whose weight gradients are never computed).
void time_step(const PlanInput& in, const GpuSpec& gpu, int64_t parameters, int64_t trainable, Estimate& e) {
  const Strategy& s = e.strategy;
  const double examples = double(in.batch_size), tokens = examples * items_per_example(in);
  const double elem_bytes = s.precision == "fp32" ? 4.0 : 2.0;
  double peak_flops = gpu.matmul_flops(s.precision);
  if (peak_flops <= 0) peak_flops = gpu.matmul_flops("fp32");  // e.g. bf16 on a T4: fp32 speed (and flagged)
  const double rate = peak_flops * in.mfu;
  double train_flops = e.memory.flops > 0 ? e.memory.flops : 6.0 * double(parameters) * tokens;
  double recompute = 0;
  if (is_gpt(in)) {
    GptFlops f = gpt_flops(in.gpt, elem_bytes);
    if (e.memory.flops <= 0) train_flops = f.train_per_token * tokens;
    if (s.checkpointing == "blocks") recompute = f.recompute_per_token * tokens / rate;
    if (s.checkpointing == "selective") recompute = f.selective_bytes_per_token * tokens / gpu.bandwidth;
  } else {
    if (is_hf(in) && e.memory.flops <= 0) {
      // 6 FLOPs per parameter and token, plus attention's 12 per layer, token,
      // position and width (the scores and their product with the values).
      const double width = in.hf_config.value("hidden_size", in.hf_config.value("n_embd", 0.0));
      // A frozen weight skips its gradient: 4 FLOPs per parameter and token.
      train_flops = (4.0 * double(parameters) + 2.0 * double(trainable) +
                     12.0 * hf_layers(in) * double(in.gpt.block_size) * width) * tokens;
    }
    if (s.checkpointing == "blocks") recompute = train_flops / 3.0 / rate;  // one more forward
  }
  const double micro_steps = std::ceil(examples / double(s.micro_batch));
  const double layers = is_gpt(in) ? double(in.gpt.n_layer) + 2 : is_hf(in) ? hf_layers(in) + 2 : 6;
  // A budget without a GPU is a CPU run: no kernels to launch.
  const double launch = in.target.gpu ? micro_steps * layers * 2 * kLaunchSecondsPerLayerPass : 0;
  const double compute = train_flops / rate;
  e.recompute_seconds = recompute;
  if (s.offload) {
    // Gradients down and updated weights up, overlapped with compute (the
    // part longer than the compute shows); the host AdamW does not overlap.
    const double grad_bytes = double(trainable) * elem_bytes, weight_bytes = double(trainable) * elem_bytes;
    const double transfer = (grad_bytes + weight_bytes) / gpu.host_link;
    e.transfer_seconds = std::max(0.0, transfer - (compute + recompute));
    e.host_optimizer_seconds = double(trainable) * kHostOptimizerBytesPerParam / kHostBytesPerSecond;
  }
  e.flops = train_flops;
  e.step_seconds = std::max(compute + recompute, launch) + e.transfer_seconds + e.host_optimizer_seconds;
}

}  // namespace

std::string format_seconds(double s) {
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  else if (s >= 1) std::snprintf(buf, sizeof buf, "%.2f s", s);
  else std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  return buf;
}

std::string Strategy::str() const {
  std::string out = precision + ", checkpointing " + checkpointing + ", micro-batch " + std::to_string(micro_batch);
  return offload ? out + ", offload" : out;
}

size_t PlanTarget::capacity() const {
  if (memory_budget) return *memory_budget;
  // A CUDA context and the caching allocator's fragmentation take some of
  // the board's memory: plan for 95% of it, less 0.5 GiB.
  return gpu ? size_t(gpu->memory_bytes * 0.95 - 0.5 * 1024 * 1024 * 1024) : 0;
}

std::vector<Strategy> strategies_for(const PlanInput& in) {
  KILN_CHECK(in.batch_size > 0, "kiln plan: the batch size must be positive");
  std::vector<std::string> precisions = in.precision ? std::vector<std::string>{*in.precision}
                                                     : std::vector<std::string>{"fp32", "bf16", "fp16"};
  std::vector<std::string> checkpointing = in.checkpointing ? std::vector<std::string>{*in.checkpointing}
                                                            : std::vector<std::string>{"none", "selective", "blocks"};
  if (!is_text(in) && !in.checkpointing) checkpointing = {"none"};  // the image models have no blocks to checkpoint
  if (is_hf(in) && !in.checkpointing) checkpointing = {"none", "blocks"};  // the Llama family's modes
  std::vector<int64_t> micro;
  if (in.micro_batch) micro = {std::min(*in.micro_batch, in.batch_size)};
  else
    for (int64_t m = in.batch_size; m >= 1; m = m == 1 ? 0 : (m + 1) / 2) micro.push_back(m);
  std::vector<bool> offload = in.offload ? std::vector<bool>{*in.offload} : std::vector<bool>{false, true};
  std::vector<Strategy> out;
  for (const auto& p : precisions)
    for (const auto& c : checkpointing)
      for (int64_t m : micro)
        for (bool o : offload) out.push_back({p, c, m, o});
  return out;
}

Plan make_plan(const PlanInput& in, const MemoryProbe& probe) {
  KILN_CHECK(in.target.gpu || in.target.memory_budget, "kiln plan needs a target: --gpu NAME or --memory-budget SIZE");
  KILN_CHECK(in.mfu > 0 && in.mfu <= 1, "--mfu must be in (0, 1], got ", in.mfu);
  KILN_CHECK(in.gpus >= 1, "--gpus must be at least 1, got ", in.gpus);
  Plan plan;
  plan.input = in;
  plan.parameters = is_gpt(in) ? gpt_parameter_count(in.gpt) : 0;
  plan.trainable = plan.parameters;
  if (is_hf(in)) std::tie(plan.parameters, plan.trainable) = hf_parameter_count(in);
  plan.tokens_per_step = double(in.batch_size) * items_per_example(in);
  const std::vector<GpuSpec> table = load_gpu_table();
  const GpuSpec& gpu = speed_model(in, table);
  const size_t capacity = in.target.capacity();
  // A budget without a GPU is a CPU run, which takes the run's own fallback.
  const bool bf16_as_fp32 = !in.target.gpu && recipes::bf16_runs_in_fp32(Device::cpu());
  for (const Strategy& s : strategies_for(in)) {
    Estimate e;
    e.strategy = s;
    Strategy run = s;
    if (bf16_as_fp32 && s.precision == "bf16") run.precision = e.runs_as = "fp32";
    e.memory = probe(in, run);
    e.fits = e.memory.peak <= capacity;
    if (in.target.gpu && in.target.gpu->matmul_flops(s.precision) <= 0) e.fits = false;  // e.g. bf16 on a T4
    time_step(in, gpu, plan.parameters, plan.trainable, e);
    plan.estimates.push_back(e);
  }
  // A budget without a GPU is a CPU run, where only bf16 on a CPU with bf16
  // instructions is faster than fp32; elsewhere a low precision is chosen
  // only when nothing in fp32 fits (it still halves the activations).
  const auto slow_here = [&](const Estimate& e) {
    if (in.target.gpu || e.strategy.precision == "fp32") return false;
    return e.strategy.precision != "bf16" || !cpu_has_bf16_instructions();
  };
  for (size_t i = 0; i < plan.estimates.size(); ++i) {
    const Estimate& e = plan.estimates[i];
    if (!e.fits) continue;
    const auto rank = [&](const Estimate& x) { return std::pair(slow_here(x), x.step_seconds); };
    if (!plan.best || rank(e) < rank(plan.estimates[*plan.best])) plan.best = i;
  }
  if (in.target.gpu) {
    const Estimate& chosen = plan.chosen();
    plan.data_parallel = data_parallel(*in.target.gpu, in.gpus, double(chosen.memory.grads), chosen.step_seconds);
    if (in.tokens > 0)
      plan.cost = run_cost(*in.target.gpu, in.gpus, in.tokens, plan.gpu_seconds_per_token(),
                           in.price_per_hour.value_or(in.target.gpu->rent_per_hour), in.kwh_price);
  }
  return plan;
}

nlohmann::json to_json(const RunCost& cost) {
  return {{"tokens", cost.tokens},
          {"gpus", cost.gpus},
          {"hours", cost.hours},
          {"gpu_hours", cost.gpu_hours},
          {"rent_usd", cost.rent_usd},
          {"own_usd", cost.own_usd},
          {"electricity_usd", cost.electricity_usd},
          {"break_even_gpu_hours", cost.break_even_gpu_hours},
          {"price_per_hour", cost.price_per_hour},
          {"kwh_price", cost.kwh_price}};
}

nlohmann::json Plan::to_json() const {
  auto memory_json = [](const StepMemory& m) {
    return nlohmann::json{{"weights", m.weights},       {"grads", m.grads},         {"optimizer", m.optimizer},
                          {"activations", m.activations}, {"workspace", m.workspace}, {"other", m.other},
                          {"peak", m.peak},             {"host_peak", m.host_peak}};
  };
  nlohmann::json j;
  j["recipe"] = input.recipe;
  if (parameters > 0) j["parameters"] = parameters;
  if (input.lora) j["lora"] = {{"rank", input.lora->rank}, {"trainable", trainable}};
  j["batch_size"] = input.batch_size;
  j["tokens_per_step"] = tokens_per_step;
  j["capacity_bytes"] = input.target.capacity();
  if (input.target.gpu) j["gpu"] = input.target.gpu->name;
  if (input.target.memory_budget) j["memory_budget"] = *input.target.memory_budget;
  j["mfu"] = input.mfu;
  j["estimates"] = nlohmann::json::array();
  for (const Estimate& e : estimates)
    j["estimates"].push_back({{"precision", e.strategy.precision},
                              {"runs_as", e.runs_as.empty() ? e.strategy.precision : e.runs_as},
                              {"checkpointing", e.strategy.checkpointing},
                              {"micro_batch", e.strategy.micro_batch},
                              {"offload", e.strategy.offload},
                              {"memory", memory_json(e.memory)},
                              {"fits", e.fits},
                              {"step_seconds", e.step_seconds},
                              {"recompute_seconds", e.recompute_seconds},
                              {"transfer_seconds", e.transfer_seconds},
                              {"host_optimizer_seconds", e.host_optimizer_seconds},
                              {"flops", e.flops}});
  j["best"] = best ? nlohmann::json(*best) : nlohmann::json(nullptr);
  if (input.gpus > 1)
    j["data_parallel"] = {{"gpus", input.gpus},
                          {"allreduce_seconds", data_parallel.allreduce_seconds},
                          {"exposed_seconds", data_parallel.exposed_seconds},
                          {"efficiency", data_parallel.efficiency}};
  if (cost) j["cost"] = plan::to_json(*cost);
  return j;
}

std::string Plan::to_text() const {
  std::string out;
  char line[512];
  const std::string target = input.target.gpu ? input.target.gpu->name : "a memory budget";
  char count[96] = "";
  if (parameters >= 1000000) std::snprintf(count, sizeof count, ", %.1fM parameters", double(parameters) / 1e6);
  else if (parameters > 0) std::snprintf(count, sizeof count, ", %.1fk parameters", double(parameters) / 1e3);
  if (input.lora)
    std::snprintf(count + std::strlen(count), sizeof count - std::strlen(count), " (LoRA rank %lld trains %.1fM)",
                  (long long)input.lora->rank, double(trainable) / 1e6);
  std::snprintf(line, sizeof line, "%s, batch %lld%s, on %s (%s usable)\n", input.recipe.c_str(),
                (long long)input.batch_size, count, target.c_str(), human_bytes(double(input.target.capacity())).c_str());
  out += line;
  const Estimate& plain = estimates.front();
  std::snprintf(line, sizeof line,
                "\nplain %s%s training needs, at its peak:\n  weights %s, gradients %s, optimizer %s, activations %s, "
                "workspace %s -> peak %s: %s\n",
                plain.strategy.precision.c_str(), plain.runs_as.empty() ? "" : " (so fp32, on this CPU)",
                human_bytes(double(plain.memory.weights)).c_str(),
                human_bytes(double(plain.memory.grads)).c_str(), human_bytes(double(plain.memory.optimizer)).c_str(),
                human_bytes(double(plain.memory.activations)).c_str(),
                human_bytes(double(plain.memory.workspace)).c_str(), human_bytes(double(plain.memory.peak)).c_str(),
                plain.fits ? "fits" : "does NOT fit");
  out += line;
  out += "\nevery combination (peak on the device; predicted step time on " +
         speed_model(input, load_gpu_table()).name + " at MFU " + std::to_string(input.mfu).substr(0, 4) + "):\n";
  std::snprintf(line, sizeof line, "  %-5s %-9s %6s %-7s %11s %11s %11s %11s %10s  %s\n", "prec", "ckpt", "micro",
                "offload", "weights", "optimizer", "activations", "peak", "step", "");
  out += line;
  for (size_t i = 0; i < estimates.size(); ++i) {
    const Estimate& e = estimates[i];
    std::snprintf(line, sizeof line, "  %-5s %-9s %6lld %-7s %11s %11s %11s %11s %10s  %s\n",
                  e.strategy.precision.c_str(), e.strategy.checkpointing.c_str(), (long long)e.strategy.micro_batch,
                  e.strategy.offload ? "yes" : "no", human_bytes(double(e.memory.weights)).c_str(),
                  human_bytes(double(e.memory.optimizer)).c_str(), human_bytes(double(e.memory.activations)).c_str(),
                  human_bytes(double(e.memory.peak)).c_str(), format_seconds(e.step_seconds).c_str(),
                  best && *best == i ? "<- fastest that fits" : (e.fits ? "fits" : ""));
    out += line;
  }
  if (std::any_of(estimates.begin(), estimates.end(), [](const Estimate& e) { return !e.runs_as.empty(); }))
    out += "  (bf16 rows: this CPU has no bf16 instructions, so --precision bf16 trains in fp32; they are fp32's)\n";
  if (best) {
    const Estimate& b = estimates[*best];
    std::snprintf(line, sizeof line,
                  "\nplan: %s\n  peak %s of %s; step %s (recompute %s, offload transfers %s, host optimizer %s)\n"
                  "%s",
                  b.strategy.str().c_str(), human_bytes(double(b.memory.peak)).c_str(),
                  human_bytes(double(input.target.capacity())).c_str(), format_seconds(b.step_seconds).c_str(),
                  format_seconds(b.recompute_seconds).c_str(), format_seconds(b.transfer_seconds).c_str(),
                  format_seconds(b.host_optimizer_seconds).c_str(),
                  is_hf(input) ? "" : "  apply it: kiln train ... --fit\n");
    out += line;
    if (b.memory.host_peak > 0) {
      std::snprintf(line, sizeof line, "  host memory: %s (the offloaded fp32 weights, gradients and optimizer state)\n",
                    human_bytes(double(b.memory.host_peak)).c_str());
      out += line;
    }
  } else {
    out += "\nno combination fits: use a GPU with more memory, a smaller batch or model, or several GPUs\n";
  }
  const Estimate& chosen = this->chosen();
  if (input.gpus > 1 && input.target.gpu) {
    std::snprintf(line, sizeof line,
                  "\non %d GPUs, each with its own batch: the gradients' ring all-reduce (%s) takes %s a step, %s of "
                  "it not hidden behind backward: %.0f%% scaling efficiency\n",
                  input.gpus, human_bytes(double(chosen.memory.grads)).c_str(),
                  format_seconds(data_parallel.allreduce_seconds).c_str(),
                  format_seconds(data_parallel.exposed_seconds).c_str(), 100 * data_parallel.efficiency);
    out += line;
  }
  if (cost) {
    std::snprintf(line, sizeof line,
                  "\ncompute: %.3g GFLOP per token (the step's matrix products as the engine runs them; for a GPT "
                  "that is 6 N + 12 L T d, the formula of PaLM, nanoGPT and llm.c)\n",
                  chosen.flops / tokens_per_step / 1e9);
    out += line;
    std::snprintf(line, sizeof line,
                  "cost of %.3g tokens on %d x %s (MFU %.2f, stated; --mfu to change):\n"
                  "  time:  %.1f hours (%.1f GPU-hours)\n"
                  "  rent:  $%.0f at $%.2f per GPU-hour\n"
                  "  own:   $%.0f (purchase) + $%.0f electricity at $%.2f/kWh\n"
                  "  owning one GPU beats renting it after %.0f GPU-hours\n",
                  cost->tokens, cost->gpus, input.target.gpu->name.c_str(), input.mfu, cost->hours, cost->gpu_hours,
                  cost->rent_usd, cost->price_per_hour, cost->own_usd - cost->electricity_usd, cost->electricity_usd,
                  cost->kwh_price, cost->break_even_gpu_hours);
    out += line;
  }
  return out;
}

}  // namespace kiln::plan
