#include "apps/serve/infill_prompt.h"

#include <algorithm>

namespace kiln::serve {
namespace {

// What the tokenizer puts before a text (a bos), as llama-server adds it to an infill prompt.
std::vector<int32_t> added_before(recipes::InferenceModel& model) {
  const std::vector<int32_t> with = model.tokenize("x", true, true), bare = model.tokenize("x", false, true);
  const auto at = std::search(with.begin(), with.end(), bare.begin(), bare.end());
  return at == with.end() ? std::vector<int32_t>{} : std::vector<int32_t>(with.begin(), at);
}

}  // namespace

std::vector<int32_t> infill_prompt(recipes::InferenceModel& model, const text::FimTokens& fim, const InfillRequest& r) {
  constexpr int64_t kBatch = 2048;
  // The code and file names as text: a special token's spelling in them is not that token (llama-server's
  // parse_special false); the prompt's are those tokens.
  auto tokens = [&](const std::string& s) { return model.tokenize(s, false, false); };
  auto append = [](std::vector<int32_t>& to, const std::vector<int32_t>& more) {
    to.insert(to.end(), more.begin(), more.end());
  };
  std::vector<int32_t> extra;
  if (fim.repo) extra.push_back(*fim.repo), append(extra, tokens("myproject\n"));
  for (const InfillChunk& chunk : r.extra) {
    if (fim.file_separator) {
      extra.push_back(*fim.file_separator);
      append(extra, tokens(chunk.filename + "\n"));
    } else {
      append(extra, tokens("\n\n--- snippet ---\n\n"));
    }
    append(extra, tokens(chunk.text));
  }
  if (fim.file_separator) extra.push_back(*fim.file_separator), append(extra, tokens("filename\n"));
  std::vector<int32_t> prefix = tokens(r.prefix), suffix = tokens(r.suffix);
  const std::vector<int32_t> prompt = model.tokenize(r.prompts.empty() ? std::string() : r.prompts[0], false, true);
  const int64_t prefix_take = std::min<int64_t>(int64_t(prefix.size()), 3 * (kBatch / 4));
  const int64_t suffix_take =
      std::min<int64_t>(int64_t(suffix.size()), std::max<int64_t>(0, kBatch / 4 - (2 + int64_t(prompt.size()))));
  const int64_t extra_take =
      std::min<int64_t>(std::max<int64_t>(0, model.context_length() - kBatch - 2 * r.n_predict), int64_t(extra.size()));
  std::vector<int32_t> out(extra.end() - extra_take, extra.end());
  append(out, added_before(model));
  out.push_back(*fim.prefix);
  out.insert(out.end(), prefix.end() - prefix_take, prefix.end());
  append(out, prompt);
  out.push_back(*fim.suffix);
  out.insert(out.end(), suffix.begin(), suffix.begin() + suffix_take);
  out.push_back(*fim.middle);
  return out;
}

}  // namespace kiln::serve
