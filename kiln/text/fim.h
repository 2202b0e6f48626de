// Fill-in-the-middle tokens: what a code model's prompt puts around the
// text before and after the cursor (llama-server's /infill, editors'
// completions). Found by their spelling in the vocabulary, as llama.cpp's
// vocabulary loader finds them where a file does not name them: Qwen's
// <|fim_prefix|>, CodeLlama's <PRE>, DeepSeek's, StarCoder's and Granite's,
// and the repository-level marks of Qwen2.5-Coder (<|repo_name|>,
// <|file_sep|>).
#pragma once
#include <cstdint>
#include <optional>

#include "kiln/text/hf_tokenizer.h"

namespace kiln::text {

struct FimTokens {
  std::optional<int32_t> prefix, suffix, middle;  // all three, or no infill
  std::optional<int32_t> repo, file_separator;    // the repository-level pattern's, where the model has them
  bool usable() const { return prefix && suffix && middle; }
};

FimTokens fim_tokens(const HfTokenizer& tokenizer);

}  // namespace kiln::text
