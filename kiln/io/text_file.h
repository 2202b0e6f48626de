// A whole file read into a string (bytes as they are), or a kiln::Error
// naming the path; and a JSON file parsed, or a kiln::Error naming it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace kiln {

std::string read_text_file(const std::string& path);
nlohmann::json read_json_file(const std::string& path);

}  // namespace kiln
