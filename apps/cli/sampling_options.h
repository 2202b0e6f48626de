// The sampling flags `kiln sample` and `kiln chat` share, named as
// llama.cpp's programs name them. A flag not given is left out, so the
// model's own defaults (generation_config.json, a GGUF file's
// general.sampling.*) apply before the command's.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "models/common/sampling.h"

namespace kiln::cli {

inline void add_sampling_options(CLI::App* cmd, models::SamplingFields& s, const std::string& temperature_default,
                                 const std::string& top_k_default) {
  cmd->add_option("--temperature", s.temperature,
                  "softmax temperature (0: greedy, always the most likely token; default: the model's, else " +
                      temperature_default + ")");
  cmd->add_option("--top-k", s.top_k,
                  "sample from the k most likely tokens (0: all; default: the model's, else " + top_k_default + ")");
  cmd->add_option("--top-p", s.top_p, "then from the nucleus of this mass (default: the model's, else 1: all)");
  cmd->add_option("--min-p", s.min_p,
                  "then from the tokens at least this many times as likely as the most likely (default: the model's, "
                  "else 0: off)");
  cmd->add_option("--repeat-penalty,--repetition-penalty", s.repetition_penalty,
                  "divide the positive logits of tokens already seen by this, multiply the negative ones (default: "
                  "the model's, else 1: off)");
  cmd->add_option("--repeat-last-n", s.repetition_window,
                  "the tokens --repeat-penalty looks back at (-1: all; default: the model's, else all for hf:DIR and "
                  "64 for gguf:FILE, as vLLM and llama.cpp)");
  cmd->add_option("--presence-penalty", s.presence_penalty,
                  "subtract this from the logits of tokens the reply holds already (OpenAI's; default 0)");
  cmd->add_option("--frequency-penalty", s.frequency_penalty,
                  "subtract this times their count from the logits of tokens the reply holds (OpenAI's; default 0)");
}

}  // namespace kiln::cli
