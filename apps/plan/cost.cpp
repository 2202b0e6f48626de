#include "apps/plan/cost.h"

#include <algorithm>
#include <cmath>

namespace kiln::plan {

namespace {
constexpr double kBucketBytes = 25.0 * 1024 * 1024;  // GradientAverager's default
constexpr double kSecondsPerHop = 5e-6;              // a ring step's latency within a node
}  // namespace

GptFlops gpt_flops(const models::GptConfig& c, double elem_bytes) {
  const double d = double(c.n_embd), L = double(c.n_layer), T = double(c.block_size);
  const double n_blocks = L * 12.0 * d * d;
  GptFlops f;
  for (double block : models::gpt_block_flops(c)) f.train_per_token += block;
  f.recompute_per_token = 2.0 * n_blocks + 4.0 * L * T * d;
  // Per layer: two layernorms (read d, write d) and GELU (read 4d, write 4d).
  f.selective_bytes_per_token = L * (2.0 * 2.0 * d + 2.0 * 4.0 * d) * elem_bytes;
  return f;
}

RunCost run_cost(const GpuSpec& gpu, int gpus, double tokens, double seconds_per_token, double price_per_hour,
                 double kwh_price) {
  RunCost r;
  r.tokens = tokens;
  r.gpus = gpus;
  r.seconds_per_token = seconds_per_token;
  r.price_per_hour = price_per_hour;
  r.kwh_price = kwh_price;
  r.gpu_hours = tokens * seconds_per_token / 3600.0;
  r.hours = r.gpu_hours / double(gpus);
  r.rent_usd = r.gpu_hours * price_per_hour;
  r.electricity_usd = gpu.watts / 1000.0 * r.gpu_hours * kwh_price;
  r.own_usd = gpu.purchase_usd * gpus + r.electricity_usd;
  const double saved_per_hour = price_per_hour - gpu.watts / 1000.0 * kwh_price;
  r.break_even_gpu_hours = saved_per_hour > 0 ? gpu.purchase_usd / saved_per_hour : 0.0;
  return r;
}

DataParallel data_parallel(const GpuSpec& gpu, int gpus, double gradient_bytes, double step_seconds) {
  DataParallel dp;
  if (gpus <= 1 || gradient_bytes <= 0) return dp;
  const double n = double(gpus), buckets = std::ceil(gradient_bytes / kBucketBytes);
  dp.allreduce_seconds = 2 * (n - 1) / n * gradient_bytes / gpu.allreduce + buckets * 2 * (n - 1) * kSecondsPerHop;
  dp.exposed_seconds = std::max(0.0, dp.allreduce_seconds - 2.0 / 3.0 * step_seconds);
  dp.efficiency = step_seconds / (step_seconds + dp.exposed_seconds);
  return dp;
}

}  // namespace kiln::plan
