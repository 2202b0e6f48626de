#include "kiln/core/units.h"

#include <cmath>
#include <cstdio>
#include <map>

#include "kiln/core/error.h"

namespace kiln {

size_t parse_bytes(const std::string& text) {
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  static const std::map<std::string, double> units = {
      {"", 1},        {"B", 1},       {"K", 1024.0},  {"KiB", 1024.0}, {"M", 1048576.0}, {"MiB", 1048576.0},
      {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"T", 1099511627776.0}, {"TiB", 1099511627776.0},
      {"kB", 1e3},    {"KB", 1e3},    {"MB", 1e6},    {"GB", 1e9},     {"TB", 1e12}};
  auto unit = used > 0 ? units.find(text.substr(used)) : units.end();
  KILN_CHECK(value >= 0 && std::isfinite(value) && unit != units.end(), "'", text,
             "' is not a size (examples: 2GiB, 512MiB, 1.5GB, 4096)");
  return size_t(std::llround(value * unit->second));
}

std::string format_bytes(double b) {
  char buf[32];
  const double kib = 1024.0, mib = kib * 1024, gib = mib * 1024;
  if (b >= gib) std::snprintf(buf, sizeof buf, "%.2f GiB", b / gib);
  else if (b >= mib) std::snprintf(buf, sizeof buf, "%.1f MiB", b / mib);
  else if (b >= kib) std::snprintf(buf, sizeof buf, "%.0f KiB", b / kib);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

}  // namespace kiln
