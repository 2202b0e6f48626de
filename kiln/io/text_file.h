// A whole file read into a string (bytes as they are), or a kiln::Error
// naming the path.
#pragma once
#include <string>

namespace kiln {

std::string read_text_file(const std::string& path);

}  // namespace kiln
