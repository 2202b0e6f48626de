// --quantize, as every command that runs a language model takes it: one of
// kiln/core/quantized.h's formats, checked by CLI11 against their names.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "kiln/core/quantized.h"

namespace kiln::cli {

inline CLI::Option* add_quantize_option(CLI::App* cmd, std::string& format, const std::string& what) {
  return cmd->add_option("--quantize", format, what)->check(CLI::IsMember(quant_format_names()));
}

}  // namespace kiln::cli
