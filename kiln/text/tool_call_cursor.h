// The cursor tool_calls.cpp reads a model's tool calls with: literals (their
// whitespace matching any run of it), JSON strings, objects and values, bare
// names, Python literals, and text up to a mark, each step telling whether
// it read, ran out of text, or found what the format does not spell.
#pragma once
#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "kiln/text/python_literal.h"
#include "kiln/text/spaces.h"

namespace kiln::text::tool_call_reading {

using text::is_space;

// Reads a section left to right. Each step answers kDone (read), kPartial
// (the text ends inside it) or kBad (the text is not what the format spells).
enum class Scan { kDone, kPartial, kBad };

class Cursor {
 public:
  explicit Cursor(std::string_view text, size_t pos = 0) : text_(text), pos_(pos) {}
  size_t pos() const { return pos_; }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return text_[pos_]; }
  void skip_space() {
    while (!at_end() && is_space(peek())) ++pos_;
  }

  // `literal`, after any whitespace; its own whitespace matches any run of it.
  Scan literal(std::string_view literal) {
    skip_space();
    for (size_t i = 0; i < literal.size(); ++i) {
      if (is_space(literal[i])) {
        skip_space();
        continue;
      }
      if (at_end()) return Scan::kPartial;
      if (peek() != literal[i]) return Scan::kBad;
      ++pos_;
    }
    return Scan::kDone;
  }

  // A JSON string, decoded into `out`.
  Scan string(std::string* out) {
    skip_space();
    if (at_end()) return Scan::kPartial;
    if (peek() != '"') return Scan::kBad;
    const size_t start = pos_;
    size_t end;
    if (Scan s = skip_string(&end); s != Scan::kDone) return s;
    const nlohmann::ordered_json decoded =
        nlohmann::ordered_json::parse(text_.substr(start, end - start), nullptr, false);
    if (decoded.is_discarded() || !decoded.is_string()) return Scan::kBad;
    if (out) *out = decoded.get<std::string>();
    pos_ = end;
    return Scan::kDone;
  }

  // A JSON object, as written: [start, pos) once read.
  Scan object(size_t* start) {
    skip_space();
    if (at_end()) return Scan::kPartial;
    if (peek() != '{') return Scan::kBad;
    *start = pos_;
    return skip_value();
  }

  // Any JSON value, skipped: strings and brackets followed; scalars run to
  // a delimiter (the format's text after them catches what is not JSON).
  Scan skip_value() {
    skip_space();
    if (at_end()) return Scan::kPartial;
    if (peek() == '"') {
      size_t end;
      const Scan s = skip_string(&end);
      if (s == Scan::kDone) pos_ = end;
      return s;
    }
    if (peek() != '{' && peek() != '[') {
      const size_t start = pos_;
      while (!at_end() && !is_space(peek()) && peek() != ',' && peek() != '}' && peek() != ']') ++pos_;
      if (at_end()) return Scan::kPartial;
      return pos_ > start ? Scan::kDone : Scan::kBad;
    }
    std::string open;  // the brackets still open
    while (!at_end()) {
      const char c = peek();
      if (c == '"') {
        size_t end;
        if (Scan s = skip_string(&end); s != Scan::kDone) return s;
        pos_ = end;
        continue;
      }
      ++pos_;
      if (c == '{' || c == '[') {
        open += c == '{' ? '}' : ']';
      } else if (c == '}' || c == ']') {
        if (open.back() != c) return Scan::kBad;
        open.pop_back();
        if (open.empty()) return Scan::kDone;
      }
    }
    return Scan::kPartial;
  }

  // A bare name (a function's, or an id): letters, digits and `punctuation`.
  Scan name(std::string* out, std::string_view punctuation = "_-.:") {
    skip_space();
    const size_t start = pos_;
    while (!at_end() && (std::isalnum(uint8_t(peek())) || punctuation.find(peek()) != std::string_view::npos)) ++pos_;
    if (at_end()) return Scan::kPartial;
    if (pos_ == start) return Scan::kBad;
    *out = std::string(text_.substr(start, pos_ - start));
    return Scan::kDone;
  }

  // Text up to the first `end` (not included) from here: kPartial, with
  // all of it, when `end` has not come yet.
  Scan until(std::string_view end, std::string_view* out) {
    const size_t at = text_.find(end, pos_);
    *out = text_.substr(pos_, at == std::string_view::npos ? std::string_view::npos : at - pos_);
    if (at == std::string_view::npos) return Scan::kPartial;
    pos_ = at;
    return Scan::kDone;
  }
  // One `c` if it is next.
  Scan optional(char c) {
    if (at_end()) return Scan::kPartial;
    if (peek() == c) ++pos_;
    return Scan::kDone;
  }

  // `literal` exactly here (no whitespace before it), moving past it only when it is whole.
  Scan exact(std::string_view literal) {
    const std::string_view rest = text_.substr(pos_);
    if (rest.starts_with(literal)) {
      pos_ += literal.size();
      return Scan::kDone;
    }
    return literal.starts_with(rest) ? Scan::kPartial : Scan::kBad;
  }

  // A Python literal (python_literal.h), as JSON text.
  Scan python_literal(std::string* json, std::string_view raw_quote = "") {
    PythonLiteral literal = read_python_literal(text_, pos_, raw_quote);
    if (literal.scan != PythonLiteral::Scan::kDone)
      return literal.scan == PythonLiteral::Scan::kPartial ? Scan::kPartial : Scan::kBad;
    *json = std::move(literal.json);
    pos_ = literal.end;
    return Scan::kDone;
  }

  void seek(size_t pos) { pos_ = pos; }

  // Whether the text here starts with `literal` (after whitespace), without moving.
  Scan peek_literal(std::string_view literal) const {
    Cursor copy = *this;
    return copy.literal(literal);
  }

 private:
  Scan skip_string(size_t* end) const {
    for (size_t i = pos_ + 1; i < text_.size(); ++i) {
      if (text_[i] == '\\') {
        ++i;
      } else if (text_[i] == '"') {
        *end = i + 1;
        return Scan::kDone;
      } else if (uint8_t(text_[i]) < 0x20) {
        return Scan::kBad;
      }
    }
    return Scan::kPartial;
  }

  std::string_view text_;
  size_t pos_;
};

}  // namespace kiln::text::tool_call_reading
