#include "apps/plan/gpu_choice.h"

#include <cstdio>
#include <map>

#include "kiln/core/units.h"

namespace kiln::plan {

namespace {

// What renting a token's share of the GPUs costs.
double rent_per_token(const Plan& p) {
  return p.gpu_seconds_per_token() / 3600.0 * p.input.price_per_hour.value_or(p.input.target.gpu->rent_per_hour);
}

std::string money(double usd) {
  char buf[32];
  std::snprintf(buf, sizeof buf, usd >= 100 ? "$%.0f" : "$%.2f", usd);
  return buf;
}

// "RTX-4090: $31 to rent, 52.1 h", or per million tokens without --tokens.
std::string pick(const Plan& p) {
  const std::string name = p.input.target.gpu->name;
  if (p.cost)
    return name + " (" + money(p.cost->rent_usd) + " to rent, " + format_seconds(p.cost->hours * 3600) + ")";
  return name + " (" + money(rent_per_token(p) * 1e6) + " to rent per million tokens, " +
         format_seconds(p.chosen().step_seconds) + " a step)";
}

}  // namespace

GpuChoice choose_gpu(const PlanInput& input, const std::vector<GpuSpec>& table, const MemoryProbe& probe) {
  std::map<std::string, StepMemory> probed;
  const MemoryProbe once = [&](const PlanInput& in, const Strategy& s) {
    auto [it, added] = probed.try_emplace(s.str());
    if (added) it->second = probe(in, s);
    return it->second;
  };
  GpuChoice choice;
  for (const GpuSpec& gpu : table) {
    PlanInput on_this = input;
    on_this.target.gpu = gpu;
    const Plan& p = choice.plans.emplace_back(make_plan(on_this, once));
    if (!p.best) continue;
    const size_t i = choice.plans.size() - 1;
    if (!choice.cheapest || rent_per_token(p) < rent_per_token(choice.plans[*choice.cheapest])) choice.cheapest = i;
    // Every row runs on as many GPUs, so the least GPU time is also the least wall time.
    if (!choice.fastest || p.gpu_seconds_per_token() < choice.plans[*choice.fastest].gpu_seconds_per_token())
      choice.fastest = i;
  }
  return choice;
}

nlohmann::json GpuChoice::to_json() const {
  nlohmann::json j;
  const PlanInput& in = plans.front().input;
  j["recipe"] = in.recipe;
  if (plans.front().parameters > 0) j["parameters"] = plans.front().parameters;
  j["batch_size"] = in.batch_size;
  j["mfu"] = in.mfu;
  j["gpus"] = in.gpus;
  j["choices"] = nlohmann::json::array();
  for (const Plan& p : plans) {
    nlohmann::json row = {{"gpu", p.input.target.gpu->name}, {"capacity_bytes", p.input.target.capacity()},
                          {"fits", bool(p.best)}};
    if (p.best) {
      const Estimate& e = p.chosen();
      row["strategy"] = {{"precision", e.strategy.precision},
                         {"checkpointing", e.strategy.checkpointing},
                         {"micro_batch", e.strategy.micro_batch},
                         {"offload", e.strategy.offload}};
      row["peak_bytes"] = e.memory.peak;
      row["step_seconds"] = e.step_seconds;
      row["rent_usd_per_million_tokens"] = rent_per_token(p) * 1e6;
      if (p.cost) row["cost"] = plan::to_json(*p.cost);
    }
    j["choices"].push_back(row);
  }
  j["cheapest"] = cheapest ? nlohmann::json(plans[*cheapest].input.target.gpu->name) : nlohmann::json(nullptr);
  j["fastest"] = fastest ? nlohmann::json(plans[*fastest].input.target.gpu->name) : nlohmann::json(nullptr);
  return j;
}

std::string GpuChoice::to_text() const {
  const Plan& first = plans.front();
  const PlanInput& in = first.input;
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%s, batch %lld: which GPU? Each row is the fastest plan that fits that GPU%s "
                "(MFU %.2f, stated; --mfu to change)\n\n",
                in.recipe.c_str(), (long long)in.batch_size,
                in.gpus > 1 ? (", on " + std::to_string(in.gpus) + " of them").c_str() : "", in.mfu);
  out += line;
  std::snprintf(line, sizeof line, "  %-10s %10s  %-44s %9s %9s %9s %9s\n", "GPU", "usable", "plan", "step",
                in.tokens > 0 ? "hours" : "", in.tokens > 0 ? "rent" : "$/Mtok", in.tokens > 0 ? "own" : "");
  out += line;
  for (size_t i = 0; i < plans.size(); ++i) {
    const Plan& p = plans[i];
    const std::string usable = format_bytes(double(p.input.target.capacity()));
    if (!p.best) {
      std::snprintf(line, sizeof line, "  %-10s %10s  does not fit\n", p.input.target.gpu->name.c_str(),
                    usable.c_str());
      out += line;
      continue;
    }
    const Estimate& e = p.chosen();
    const std::string hours = p.cost ? format_seconds(p.cost->hours * 3600) : "";
    const std::string rent = p.cost ? money(p.cost->rent_usd) : money(rent_per_token(p) * 1e6);
    const std::string own = p.cost ? money(p.cost->own_usd) : "";
    const std::string mark = cheapest == i && fastest == i ? "  <- cheapest and fastest"
                             : cheapest == i                ? "  <- cheapest"
                             : fastest == i                 ? "  <- fastest"
                                                            : "";
    std::snprintf(line, sizeof line, "  %-10s %10s  %-44s %9s %9s %9s %9s%s\n", p.input.target.gpu->name.c_str(),
                  usable.c_str(), e.strategy.str().c_str(), format_seconds(e.step_seconds).c_str(), hours.c_str(),
                  rent.c_str(), own.c_str(), mark.c_str());
    out += line;
  }
  if (!cheapest) {
    out += "\nno GPU in the table fits it: a smaller batch or model, or more GPUs with --zero / pipeline stages\n";
    return out;
  }
  out += "\nby cost: " + pick(plans[*cheapest]) + "\nby time: " + pick(plans[*fastest]) +
         "\nevery combination on one GPU: kiln plan ... --gpu NAME\n";
  return out;
}

}  // namespace kiln::plan
