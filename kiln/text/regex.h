// A compiled PCRE2 pattern in UTF mode with Unicode properties (\p{L},
// \p{N}, \s as Unicode spaces) and look-ahead: what the pre-tokenizer
// patterns of GPT-2, Llama 3 and Qwen need, and std::regex lacks.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace kiln::text {

class Regex {
 public:
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Byte ranges [begin, end) of every non-overlapping match, left to right.
  // `text` must be valid UTF-8.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
};

}  // namespace kiln::text
