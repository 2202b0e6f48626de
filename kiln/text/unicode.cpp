#include "kiln/text/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

#include "kiln/text/unicode_tables.h"
#include "kiln/text/utf8.h"

namespace kiln::text {
namespace {

bool in_ranges(const tables::CodeRange* ranges, size_t count, uint32_t cp) {
  const auto* end = ranges + count;
  const auto* it = std::upper_bound(ranges, end, cp, [](uint32_t c, const tables::CodeRange& r) { return c < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

const tables::Mapping* find_mapping(const tables::Mapping* table, size_t count, uint32_t cp) {
  const auto* end = table + count;
  const auto* it = std::lower_bound(table, end, cp, [](const tables::Mapping& m, uint32_t c) { return m.code_point < c; });
  return it != end && it->code_point == cp ? it : nullptr;
}

uint8_t combining_class(uint32_t cp) {
  const auto* end = tables::kCombiningClass + tables::kCombiningClassCount;
  const auto* it = std::lower_bound(tables::kCombiningClass, end, cp,
                                    [](const tables::CodeClass& c, uint32_t v) { return c.code_point < v; });
  return it != end && it->code_point == cp ? it->combining_class : 0;
}

bool is_chinese_char(uint32_t cp) {
  static constexpr tables::CodeRange kCjk[] = {{0x3400, 0x4DBF}, {0x4E00, 0x9FFF},   {0xF900, 0xFAFF},
                                              {0x20000, 0x2A6DF}, {0x2A700, 0x2B73F}, {0x2B740, 0x2B81F},
                                              {0x2B920, 0x2CEAF}, {0x2F800, 0x2FA1F}};
  return in_ranges(kCjk, std::size(kCjk), cp);
}

template <typename F>
std::string map_code_points(const std::string& s, F f) {
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : utf8_code_points(s)) f(cp, out);
  return out;
}

}  // namespace

bool is_whitespace(uint32_t cp) {
  static constexpr tables::CodeRange kWhiteSpace[] = {{0x9, 0xD},       {0x20, 0x20},     {0x85, 0x85},
                                                      {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                                                      {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                                      {0x3000, 0x3000}};
  return in_ranges(kWhiteSpace, std::size(kWhiteSpace), cp);
}

bool is_punctuation(uint32_t cp) {
  const bool ascii = (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
                     (cp >= 0x7B && cp <= 0x7E);
  return ascii || in_ranges(tables::kPunctuation, tables::kPunctuationCount, cp);
}

std::string unicode_lowercase(const std::string& s) {
  return map_code_points(s, [](uint32_t cp, std::string& out) {
    if (cp < 0x80) return out.push_back(char(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
    const auto* m = find_mapping(tables::kLowercase, tables::kLowercaseCount, cp);
    if (!m) return utf8_append(out, cp);
    for (uint32_t k = 0; k < m->length; ++k) utf8_append(out, tables::kLowercasePool[m->offset + k]);
  });
}

std::string unicode_normalize(const std::string& s, int form) {
  const int options = UTF8PROC_STABLE | (form == kNfkd ? UTF8PROC_DECOMPOSE : UTF8PROC_COMPOSE) |
                      (form == kNfc ? 0 : UTF8PROC_COMPAT);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          utf8proc_ssize_t(s.size()), &out, utf8proc_option_t(options));
  if (n < 0) return s;  // invalid UTF-8 cannot reach here: encode() repairs it first
  std::string result(reinterpret_cast<const char*>(out), size_t(n));
  std::free(out);
  return result;
}

std::string unicode_nfd(const std::string& s) {
  std::vector<uint32_t> cps;
  for (uint32_t cp : utf8_code_points(s)) {
    if (cp >= 0xAC00 && cp <= 0xD7A3) {  // Hangul syllables decompose by formula (Unicode 3.12)
      const uint32_t index = cp - 0xAC00;
      cps.push_back(0x1100 + index / 588);
      cps.push_back(0x1161 + (index % 588) / 28);
      if (index % 28) cps.push_back(0x11A7 + index % 28);
    } else if (const auto* m = find_mapping(tables::kDecomposition, tables::kDecompositionCount, cp)) {
      cps.insert(cps.end(), tables::kDecompositionPool + m->offset, tables::kDecompositionPool + m->offset + m->length);
    } else {
      cps.push_back(cp);
    }
  }
  // Canonical ordering: a run of combining marks is sorted by class, stably.
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + long(i), cps.begin() + long(j),
                     [](uint32_t a, uint32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  std::string out;
  for (uint32_t cp : cps) utf8_append(out, cp);
  return out;
}

std::string strip_accents(const std::string& s) {
  return map_code_points(unicode_nfd(s), [](uint32_t cp, std::string& out) {
    if (!in_ranges(tables::kNonspacingMark, tables::kNonspacingMarkCount, cp)) utf8_append(out, cp);
  });
}

std::string bert_clean_text(const std::string& s) {
  return map_code_points(s, [](uint32_t cp, std::string& out) {
    const bool kept_control = cp == '\t' || cp == '\n' || cp == '\r';
    if (cp == 0 || cp == 0xFFFD || (!kept_control && in_ranges(tables::kOther, tables::kOtherCount, cp))) return;
    utf8_append(out, is_whitespace(cp) ? ' ' : cp);
  });
}

std::string space_chinese_chars(const std::string& s) {
  return map_code_points(s, [](uint32_t cp, std::string& out) {
    if (!is_chinese_char(cp)) return utf8_append(out, cp);
    out += ' ';
    utf8_append(out, cp);
    out += ' ';
  });
}

std::string strip_whitespace(const std::string& s, bool left, bool right) {
  const auto cps = utf8_code_points(s);
  size_t b = 0, e = cps.size();
  while (left && b < e && is_whitespace(cps[b])) ++b;
  while (right && e > b && is_whitespace(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) utf8_append(out, cps[i]);
  return out;
}

std::vector<std::string> bert_pre_tokenize(const std::string& s) {
  std::vector<std::string> words;
  std::string word;
  auto flush = [&] {
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
  };
  for (uint32_t cp : utf8_code_points(s)) {
    if (is_whitespace(cp)) {
      flush();
    } else if (is_punctuation(cp)) {
      flush();
      utf8_append(word, cp);
      flush();
    } else {
      utf8_append(word, cp);
    }
  }
  flush();
  return words;
}

}  // namespace kiln::text
