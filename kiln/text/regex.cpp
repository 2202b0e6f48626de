#define PCRE2_CODE_UNIT_WIDTH 8
#include "kiln/text/regex.h"

#include <pcre2.h>

#include <memory>

#include "kiln/core/error.h"

namespace kiln::text {

Regex::Regex(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &error,
                        &offset, nullptr);
  if (!code_) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    KILN_FAIL("tokenizer regex /", pattern, "/ does not compile at offset ", offset, ": ",
              reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // faster where the JIT exists; matching works either way
}

Regex::~Regex() { pcre2_code_free(code_); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
  std::vector<std::pair<size_t, size_t>> out;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    // The text was checked as UTF-8 once, by the caller; don't re-check per match.
    const int rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    KILN_CHECK(rc >= 0, "tokenizer regex match failed (PCRE2 error ", rc, ")");
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      start = end;
    } else {  // an empty match: step over one character
      if (begin >= text.size()) break;
      start = begin + 1;
      while (start < text.size() && (uint8_t(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
  return out;
}

}  // namespace kiln::text
