#include "kiln/core/device.h"

#include "kiln/core/error.h"

namespace kiln {

std::string Device::str() const {
  if (is_cpu()) return index == 0 ? std::string("cpu") : "cpu:" + std::to_string(index);
  if (type == DeviceType::meta) return index == 0 ? std::string("meta") : "meta:" + std::to_string(index);
  return "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "meta") return meta();
  for (auto [prefix, type] : {std::pair{"cpu:", DeviceType::cpu}, std::pair{"meta:", DeviceType::meta}}) {
    const std::string p = prefix;
    if (s.rfind(p, 0) != 0) continue;
    try {
      size_t used = 0;
      int i = std::stoi(s.substr(p.size()), &used);
      if (used == s.size() - p.size() && i >= 0) return {type, i};
    } catch (const std::exception&) {
    }
  }
  if (s == "cuda" || s == "gpu") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      size_t used = 0;
      int i = std::stoi(s.substr(5), &used);
      if (used == s.size() - 5 && i >= 0) return cuda(i);
    } catch (const std::exception&) {
    }
  }
  KILN_FAIL("unknown device '", s, "' (expected cpu, cuda, cuda:N, cpu:N or meta)");
}

}  // namespace kiln
