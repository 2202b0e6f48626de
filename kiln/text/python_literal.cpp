#include "kiln/text/python_literal.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "kiln/text/grammar/json_schema.h"
#include "kiln/text/spaces.h"

namespace kiln::text {

namespace {

using Scan = PythonLiteral::Scan;
constexpr int kMaxDepth = 64;

size_t skip_space(std::string_view text, size_t pos) {
  while (pos < text.size() && is_space(text[pos])) ++pos;
  return pos;
}

// A quoted string's body (between the quotes, as written) as a JSON string.
std::string string_json(std::string_view body) {
  static const char* hex = "0123456789abcdef";
  std::string out(1, '"');
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\') {
      if (c == '"') {
        out += "\\\"";
      } else if (uint8_t(c) < 0x20) {
        ((out += "\\u00") += hex[uint8_t(c) >> 4]) += hex[uint8_t(c) & 15];
      } else {
        out += c;
      }
      continue;
    }
    const char e = ++i < body.size() ? body[i] : '\\';
    if (e == '\'') {
      out += '\'';
    } else if (e == '/') {
      out += '/';
    } else if (std::string_view("\"\\bfnrtu").find(e) != std::string_view::npos) {
      (out += '\\') += e;  // JSON's own (a bad \u fails the check below)
    } else if (e == 'x' && i + 2 < body.size() && std::isxdigit(uint8_t(body[i + 1])) &&
               std::isxdigit(uint8_t(body[i + 2]))) {
      ((out += "\\u00") += body[i + 1]) += body[i + 2];
      i += 2;
    } else if (e != '\n') {  // a backslash before a line break joins the lines; before anything else it stays
      out += "\\\\";
      --i;
    }
  }
  return out += '"';
}

// A bare word: a number, or Python's or JSON's constants.
std::string word_json(std::string_view word) {
  if (word == "True" || word == "true") return "true";
  if (word == "False" || word == "false") return "false";
  if (word == "None" || word == "null") return "null";
  if (nlohmann::json::accept(word)) return std::string(word);
  if (!word.empty() && word.front() == '+') word.remove_prefix(1);
  double value;
  const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), value);
  if (word.empty() || error != std::errc() || end != word.data() + word.size() || !std::isfinite(value)) return "";
  return nlohmann::json(value).dump();
}

// Gemma's raw string (`quote` TEXT `quote`), or a bare key (up to ':'), at `pos`.
PythonLiteral read_raw(std::string_view text, size_t pos, std::string_view quote, bool key) {
  const std::string_view rest = text.substr(pos);
  if (rest.starts_with(quote)) {
    const size_t end = text.find(quote, pos + quote.size());
    if (end == std::string_view::npos) return {Scan::kPartial};
    const std::string body(text.substr(pos + quote.size(), end - pos - quote.size()));
    return {Scan::kDone, end + quote.size(),
            nlohmann::json(body).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
  }
  if (quote.starts_with(rest)) return {Scan::kPartial};
  if (!key) return {Scan::kBad};
  size_t end = pos;
  while (end < text.size() &&
         (std::isalnum(uint8_t(text[end])) || kBareKeyPunctuation.find(text[end]) != std::string_view::npos))
    ++end;
  if (end == text.size()) return {Scan::kPartial};
  if (end == pos) return {Scan::kBad};
  return {Scan::kDone, end, nlohmann::json(std::string(text.substr(pos, end - pos))).dump()};
}

PythonLiteral read(std::string_view text, size_t pos, std::string_view quote, int depth) {
  pos = skip_space(text, pos);
  if (pos >= text.size()) return {Scan::kPartial};
  const char c = text[pos];
  if (!quote.empty() && c == quote.front()) return read_raw(text, pos, quote, false);
  if (c == '\'' || c == '"') {
    for (size_t i = pos + 1; i < text.size(); ++i) {
      if (text[i] == '\\') {
        ++i;
      } else if (text[i] == c) {
        std::string json = string_json(text.substr(pos + 1, i - pos - 1));
        if (!nlohmann::json::accept(json)) return {Scan::kBad};
        return {Scan::kDone, i + 1, std::move(json)};
      }
    }
    return {Scan::kPartial};
  }
  if (c == '[' || c == '(' || c == '{') {
    if (depth >= kMaxDepth) return {Scan::kBad};
    const char close = c == '[' ? ']' : c == '(' ? ')' : '}';
    std::string json(1, c == '{' ? '{' : '[');
    pos = skip_space(text, pos + 1);
    for (bool first = true;; first = false) {
      if (pos >= text.size()) return {Scan::kPartial};
      if (text[pos] == close) break;
      if (!first) {
        if (text[pos] != ',') return {Scan::kBad};
        pos = skip_space(text, pos + 1);
        if (pos >= text.size()) return {Scan::kPartial};
        if (text[pos] == close) break;  // a trailing comma
        json += ", ";
      }
      PythonLiteral item =
          c == '{' && !quote.empty() ? read_raw(text, pos, quote, true) : read(text, pos, quote, depth + 1);
      if (item.scan != Scan::kDone) return item;
      json += item.json;
      pos = skip_space(text, item.end);
      if (c == '{') {
        if (item.json.front() != '"') return {Scan::kBad};  // JSON keys are strings
        if (pos >= text.size()) return {Scan::kPartial};
        if (text[pos] != ':') return {Scan::kBad};
        PythonLiteral value = read(text, pos + 1, quote, depth + 1);
        if (value.scan != Scan::kDone) return value;
        (json += ": ") += value.json;
        pos = skip_space(text, value.end);
      }
    }
    return {Scan::kDone, pos + 1, json + (c == '{' ? '}' : ']')};
  }
  size_t end = pos;
  while (end < text.size() &&
         (std::isalnum(uint8_t(text[end])) || std::string_view("._+-").find(text[end]) != std::string_view::npos))
    ++end;
  if (end == text.size()) return {Scan::kPartial};
  std::string json = word_json(text.substr(pos, end - pos));
  if (json.empty()) return {Scan::kBad};
  return {Scan::kDone, end, std::move(json)};
}

}  // namespace

PythonLiteral read_python_literal(std::string_view text, size_t pos, std::string_view raw_quote) {
  return read(text, pos, raw_quote, 0);
}

std::string python_literal_json(std::string_view text) {
  // A bare word runs to the text's end, which read() cannot tell from a cut-off one: a space ends it.
  const std::string spaced = std::string(text) + " ";
  const PythonLiteral literal = read(spaced, 0, "", 0);
  if (literal.scan != Scan::kDone || skip_space(spaced, literal.end) != spaced.size()) return "";
  return literal.json;
}

}  // namespace kiln::text
