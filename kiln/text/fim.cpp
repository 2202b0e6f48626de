#include "kiln/text/fim.h"

#include <string>
#include <vector>

namespace kiln::text {

namespace {

// Each mark's spellings, as llama.cpp's loader (llama-vocab.cpp) looks for them.
struct Spellings {
  std::optional<int32_t> FimTokens::*mark;
  std::vector<std::string> texts;
};

const std::vector<Spellings>& spellings() {
  static const std::vector<Spellings> table = {
      {&FimTokens::prefix,
       {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>",
        "<|prefix|>"}},
      {&FimTokens::suffix,
       {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>",
        "<|suffix|>"}},
      {&FimTokens::middle,
       {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>",
        "<|middle|>"}},
      {&FimTokens::repo, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
      {&FimTokens::file_separator, {"<|file_sep|>"}},
  };
  return table;
}

}  // namespace

FimTokens fim_tokens(const HfTokenizer& tokenizer) {
  FimTokens out;
  for (const Spellings& s : spellings())
    for (const std::string& text : s.texts)
      if (!(out.*s.mark)) out.*s.mark = tokenizer.token_to_id(text);
  return out;
}

}  // namespace kiln::text
