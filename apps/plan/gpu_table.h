// The GPU table `kiln plan` reads: memory, dense tensor-core FLOP/s per
// precision, bandwidth, host link, board power and indicative prices. It is
// data (apps/plan/gpus.json, built into the binary); `--gpu-table FILE` adds
// or replaces entries by name.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace kiln::plan {

struct GpuSpec {
  std::string name;
  std::vector<std::string> aliases;
  double memory_bytes = 0;
  std::map<std::string, double> flops;  // per second, by "bf16", "fp16", "tf32", "fp32"
  double bandwidth = 0;                  // device memory, bytes/s
  double host_link = 0;                  // to host memory, bytes/s per direction
  double allreduce = 0;                  // ring all-reduce bus bandwidth between GPUs of a node, bytes/s
  double watts = 0;
  double rent_per_hour = 0, purchase_usd = 0;

  // Dense FLOP/s of the matrix products for a training precision (fp32
  // trains on TF32 tensor cores, as Kiln's CUDA matmul does); 0 if the GPU
  // lacks that precision (a T4 has no bf16).
  double matmul_flops(const std::string& precision) const;
};

// The built-in table, then the entries of `extra_json_path` (if not empty).
std::vector<GpuSpec> load_gpu_table(const std::string& extra_json_path = "");
// Case-insensitive match on the name or an alias; throws listing the names.
const GpuSpec& find_gpu(const std::vector<GpuSpec>& table, const std::string& name);
// Parses the table format (see gpus.json); `source` names it in errors.
std::vector<GpuSpec> parse_gpu_table(const std::string& json_text, const std::string& source);

}  // namespace kiln::plan
