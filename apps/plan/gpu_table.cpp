#include "apps/plan/gpu_table.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/io/text_file.h"

namespace kiln::plan {

extern const char* const kBuiltinGpuTable;  // apps/plan/gpus.json, embedded by CMake

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

}  // namespace

double GpuSpec::matmul_flops(const std::string& precision) const {
  auto it = flops.find(precision == "fp32" ? "tf32" : precision);
  return it == flops.end() ? 0.0 : it->second;
}

std::vector<GpuSpec> parse_gpu_table(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    KILN_FAIL("GPU table ", source, " is not valid JSON: ", e.what());
  }
  KILN_CHECK(j.contains("gpus") && j["gpus"].is_array(), "GPU table ", source,
             " needs a \"gpus\" array (see apps/plan/gpus.json for the format)");
  std::vector<GpuSpec> out;
  for (const auto& g : j["gpus"]) {
    try {
      GpuSpec s;
      s.name = g.at("name");
      s.aliases = g.value("aliases", std::vector<std::string>{});
      s.memory_bytes = g.at("memory_gib").get<double>() * 1024.0 * 1024.0 * 1024.0;
      for (const auto& [k, v] : g.at("tflops").items()) s.flops[k] = v.get<double>() * 1e12;
      s.bandwidth = g.at("bandwidth_gbps").get<double>() * 1e9;
      s.host_link = g.value("host_link_gbps", 25.0) * 1e9;
      s.allreduce = g.value("allreduce_gbps", 20.0) * 1e9;
      s.watts = g.at("watts");
      s.rent_per_hour = g.value("rent_per_hour", 0.0);
      s.purchase_usd = g.value("purchase_usd", 0.0);
      KILN_CHECK(s.memory_bytes > 0, "memory_gib must be positive");
      out.push_back(std::move(s));
    } catch (const std::exception& e) {
      KILN_FAIL("GPU table ", source, ": entry ", g.dump(), " is invalid: ", e.what());
    }
  }
  return out;
}

std::vector<GpuSpec> load_gpu_table(const std::string& extra) {
  std::vector<GpuSpec> table = parse_gpu_table(kBuiltinGpuTable, "(built in)");
  if (extra.empty()) return table;
  for (GpuSpec& s : parse_gpu_table(read_text_file(extra), extra)) {
    auto same = std::find_if(table.begin(), table.end(), [&](const GpuSpec& t) { return lower(t.name) == lower(s.name); });
    if (same != table.end()) *same = std::move(s);
    else table.push_back(std::move(s));
  }
  return table;
}

const GpuSpec& find_gpu(const std::vector<GpuSpec>& table, const std::string& name) {
  const std::string want = lower(name);
  for (const GpuSpec& s : table) {
    if (lower(s.name) == want) return s;
    for (const auto& a : s.aliases)
      if (lower(a) == want) return s;
  }
  std::string names;
  for (const GpuSpec& s : table) names += (names.empty() ? "" : ", ") + s.name;
  KILN_FAIL("unknown GPU '", name, "' (known: ", names, "; add yours with --gpu-table FILE)");
}

}  // namespace kiln::plan
