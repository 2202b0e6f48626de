#include "kiln/io/text_file.h"

#include <fstream>
#include <sstream>

#include "kiln/core/error.h"

namespace kiln {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in, "cannot read ", path);
  std::ostringstream s;
  s << in.rdbuf();
  KILN_CHECK(!in.bad(), "cannot read ", path);
  return s.str();
}

nlohmann::json read_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    KILN_FAIL(path, " is not valid JSON: ", e.what());
  }
}

}  // namespace kiln
