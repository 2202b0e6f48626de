// Time and money for a training run, from FLOPs and a stated MFU.
//
// FLOPs per token (forward + backward) follow the PaLM / nanoGPT / llm.c
// convention: 6 N for the matrix products (N: parameters that multiply, i.e.
// all but the position embedding; the tied output projection counts), plus
// 12 L T d for attention scores and values; the meta device's count of the
// step's products gives the same. Activation checkpointing adds one more forward
// of the blocks (`blocks`: 2 N_blocks + 4 L T d per token) or re-runs only
// the cheap elementwise ops (`selective`, memory-bound: priced by bytes over
// the GPU's bandwidth). Time = FLOPs / (peak dense FLOP/s x MFU). The MFU is
// an assumption the output states (default 0.40, --mfu to change it).
// Kernel launches overlap the GPU's work, so they cost time only where a step
// is too small to hide them.
#pragma once
#include <cstdint>
#include <string>

#include "apps/plan/gpu_table.h"
#include "models/gpt/presets.h"

namespace kiln::plan {

struct GptFlops {
  double train_per_token = 0;      // forward + backward
  double recompute_per_token = 0;  // extra forward FLOPs for `blocks`
  double selective_bytes_per_token = 0;  // bytes re-read/written for `selective`
};
// `elem_bytes`: bytes per activation element (4 for fp32, 2 for bf16/fp16).
GptFlops gpt_flops(const models::GptConfig& c, double elem_bytes);
using models::gpt_parameter_count;

struct RunCost {
  double tokens = 0;
  int gpus = 1;
  double seconds_per_token = 0;  // on one GPU, for the chosen strategy
  double hours = 0;              // wall clock on `gpus` GPUs
  double gpu_hours = 0;
  double rent_usd = 0;           // gpu_hours x the hourly price
  double own_usd = 0;            // purchase of `gpus` GPUs + electricity for the run
  double electricity_usd = 0;
  double break_even_gpu_hours = 0;  // owning one GPU beats renting it after this many hours (0: never)
  double price_per_hour = 0, kwh_price = 0;
};

// `seconds_per_token`: on one of the `gpus`, communication included.
RunCost run_cost(const GpuSpec& gpu, int gpus, double tokens, double seconds_per_token, double price_per_hour,
                 double kwh_price);

// Data parallel over `gpus` in one node, each running the planned step on its
// own batch (weak scaling). The gradients' ring all-reduce, in Kiln's 25 MiB
// buckets, takes 2 (N-1)/N x bytes / the bus bandwidth plus 2 (N-1) hops of
// latency per bucket; backward (two thirds of the step) hides it, and what
// is left shows. The model of bench/distributed/scaling_model.py.
struct DataParallel {
  double allreduce_seconds = 0;  // per step
  double exposed_seconds = 0;    // of which not hidden behind backward
  double efficiency = 1;         // step / (step + exposed)
};
DataParallel data_parallel(const GpuSpec& gpu, int gpus, double gradient_bytes, double step_seconds);

}  // namespace kiln::plan
