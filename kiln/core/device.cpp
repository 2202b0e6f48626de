#include "kiln/core/device.h"

#include "kiln/core/error.h"

namespace kiln {

std::string Device::str() const {
  if (is_cpu()) return index == 0 ? std::string("cpu") : "cpu:" + std::to_string(index);
  return "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s.rfind("cpu:", 0) == 0) {
    try {
      size_t used = 0;
      int i = std::stoi(s.substr(4), &used);
      if (used == s.size() - 4 && i >= 0) return {DeviceType::cpu, i};
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
  KILN_FAIL("unknown device '", s, "' (expected cpu, cuda or cuda:N)");
}

}  // namespace kiln
