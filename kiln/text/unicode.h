// The Unicode operations of BERT's normalizer and pre-tokenizer, as the
// `tokenizers` library defines them (tables: unicode_tables.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::text {

bool is_whitespace(uint32_t cp);  // White_Space (Rust's char::is_whitespace)
bool is_punctuation(uint32_t cp);  // P* or ASCII punctuation (BERT's rule)
std::string unicode_lowercase(const std::string& s);  // full mappings, as str::to_lowercase
std::string unicode_nfd(const std::string& s);         // canonical decomposition and ordering
std::string strip_accents(const std::string& s);       // NFD, then nonspacing marks (Mn) removed
// The other normal forms (utf8proc): compose, compatibility-compose, compatibility-decompose.
enum UnicodeForm { kNfc, kNfkc, kNfkd };
std::string unicode_normalize(const std::string& s, int form);
// BERT's clean_text: drops NUL, U+FFFD and other (C*) characters except
// \t \n \r, and turns every whitespace character into ' '.
std::string bert_clean_text(const std::string& s);
std::string space_chinese_chars(const std::string& s);  // ' ' around each CJK ideograph
std::string strip_whitespace(const std::string& s, bool left, bool right);
// Words split at whitespace (dropped) and around each punctuation character.
std::vector<std::string> bert_pre_tokenize(const std::string& s);

}  // namespace kiln::text
