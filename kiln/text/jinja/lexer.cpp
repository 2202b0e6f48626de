#include "kiln/text/jinja/lexer.h"

#include <cctype>
#include <cstring>

#include "kiln/text/jinja/value.h"
#include "kiln/text/utf8.h"

namespace kiln::text::jinja {
namespace {

bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

[[noreturn]] void syntax_error(int line, const std::string& what) {
  throw TemplateError("chat template syntax error at line " + std::to_string(line) + ": " + what);
}

// Template text with its line breaks as jinja's lexer writes them (\r\n and \r become \n).
std::string normalize_newlines(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

// A string literal's value: Python's unicode-escape, as jinja decodes it.
std::string unescape(const std::string& body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    auto hex = [&](size_t digits) {
      uint32_t v = 0;
      for (size_t k = 1; k <= digits; ++k) {
        if (i + k >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[i + k])))
          syntax_error(line, "truncated \\x/\\u escape in a string");
        const char h = body[i + k];
        v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : std::tolower(h) - 'a' + 10);
      }
      i += digits;
      if (v > 0x10ffff) syntax_error(line, "an escape beyond U+10FFFF");
      utf8_append(out, v);
    };
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\n': break;  // a line continuation
      case 'x': hex(2); break;
      case 'u': hex(4); break;
      case 'U': hex(8); break;
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = 0;
          size_t k = 0;
          for (; k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7'; ++k)
            v = v * 8 + uint32_t(body[i + k] - '0');
          i += k - 1;
          utf8_append(out, v);
        } else {
          out += '\\';  // Python keeps an unknown escape as written
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  // jinja splits the source on any line break and joins it with \n, less one final empty line.
  explicit Lexer(const std::string& source) : s_(normalize_newlines(source)) {
    if (!s_.empty() && s_.back() == '\n') s_.pop_back();
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      const size_t at = next_tag(pos_);
      std::string text = s_.substr(pos_, (at == std::string::npos ? s_.size() : at) - pos_);
      if (at == std::string::npos) {
        emit_text(text);
        break;
      }
      const char kind = s_[at + 1];
      const char sign = at + 2 < s_.size() && (s_[at + 2] == '-' || s_[at + 2] == '+') ? s_[at + 2] : 0;
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && space(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: a block or comment alone on its line takes the line's indent with it.
        const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((line_start > 0 || line_starting) && line_start < text.size()) {
          bool blank = true;
          for (size_t i = line_start; i < text.size(); ++i) blank = blank && space(text[i]);
          if (blank) text.resize(line_start);
        }
      }
      emit_text(text);
      line_ += count_lines(pos_, at);
      pos_ = at + 2 + (sign ? 1 : 0);
      if (kind == '#')
        line_starting = comment();
      else if (kind == '%' && raw_block())
        line_starting = false;
      else
        line_starting = tag(kind == '{');
    }
    tokens_.push_back({Token::Type::end, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t next_tag(size_t from) const {
    for (size_t i = s_.find('{', from); i != std::string::npos && i + 1 < s_.size(); i = s_.find('{', i + 1))
      if (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#') return i;
    return std::string::npos;
  }
  int count_lines(size_t from, size_t to) const {
    int n = 0;
    for (size_t i = from; i < to && i < s_.size(); ++i) n += s_[i] == '\n';
    return n;
  }
  void emit_text(const std::string& text) {
    if (!text.empty()) tokens_.push_back({Token::Type::text, text, line_});
  }

  // After a tag's closing characters: '-' strips every following blank,
  // trim_blocks (blocks and comments) drops one newline. True when the
  // tag's match ended a line (lstrip_blocks then applies to the next tag).
  bool after_close(char sign, bool block) {
    if (sign == '-') {
      const size_t start = pos_;
      while (pos_ < s_.size() && space(s_[pos_])) ++pos_;
      line_ += count_lines(start, pos_);
      return pos_ > start && s_[pos_ - 1] == '\n';
    }
    if (sign != '+' && block && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
      ++line_;
      return true;
    }
    return false;
  }

  bool comment() {
    const size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) syntax_error(line_, "a comment {# is never closed with #}");
    const char sign = end > pos_ && (s_[end - 1] == '-' || s_[end - 1] == '+') ? s_[end - 1] : 0;
    line_ += count_lines(pos_, end);
    pos_ = end + 2;
    return after_close(sign, true);
  }

  // {% raw %}...{% endraw %}: the text between, untouched.
  bool raw_block() {
    size_t i = pos_;
    while (i < s_.size() && space(s_[i])) ++i;
    if (s_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    while (i < s_.size() && space(s_[i])) ++i;
    const char sign = i < s_.size() && s_[i] == '-' ? '-' : 0;
    if (s_.compare(i + (sign ? 1 : 0), 2, "%}") != 0) return false;
    pos_ = i + (sign ? 1 : 0) + 2;
    after_close(sign, true);
    for (size_t at = s_.find("{%", pos_); at != std::string::npos; at = s_.find("{%", at + 2)) {
      size_t j = at + 2;
      const bool strip = j < s_.size() && s_[j] == '-';
      if (strip || (j < s_.size() && s_[j] == '+')) ++j;
      while (j < s_.size() && space(s_[j])) ++j;
      if (s_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      while (j < s_.size() && space(s_[j])) ++j;
      const char end_sign = j < s_.size() && s_[j] == '-' ? '-' : 0;
      if (s_.compare(j + (end_sign ? 1 : 0), 2, "%}") != 0) continue;
      std::string text = s_.substr(pos_, at - pos_);
      if (strip)
        while (!text.empty() && space(text.back())) text.pop_back();
      emit_text(text);
      line_ += count_lines(pos_, j);
      pos_ = j + (end_sign ? 1 : 0) + 2;
      after_close(end_sign, true);
      return true;
    }
    syntax_error(line_, "{% raw %} is never closed with {% endraw %}");
  }

  // The tokens of a {{ }} or {% %} tag up to its close.
  bool tag(bool variable) {
    tokens_.push_back({variable ? Token::Type::variable_begin : Token::Type::block_begin, "", line_});
    const int opened_at = line_;
    int depth = 0;  // brackets open: a }} or %} inside a literal does not close the tag
    while (true) {
      while (pos_ < s_.size() && space(s_[pos_])) line_ += s_[pos_++] == '\n';
      if (pos_ >= s_.size())
        syntax_error(opened_at, std::string("a tag ") + (variable ? "{{" : "{%") + " is never closed");
      const char c = s_[pos_];
      const char* close = variable ? "}}" : "%}";
      if (depth == 0) {
        const char sign = (c == '-' || c == '+') ? c : 0;
        if (s_.compare(pos_ + (sign ? 1 : 0), 2, close) == 0 && !(variable && sign == '+')) {
          pos_ += 2 + (sign ? 1 : 0);
          tokens_.push_back({variable ? Token::Type::variable_end : Token::Type::block_end, "", line_});
          return after_close(sign, !variable);
        }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos_;
        while (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_')) ++end;
        tokens_.push_back({Token::Type::name, s_.substr(pos_, end - pos_), line_});
        pos_ = end;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        number();
      } else if (c == '\'' || c == '"') {
        string(c);
      } else {
        static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* t : two)
          if (s_.compare(pos_, 2, t) == 0) op = t;
        if (op.size() == 1 && !std::strchr("+-*/%~()[]{},.:|=<>;", c))
          syntax_error(line_, std::string("unexpected character '") + c + "'");
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        tokens_.push_back({Token::Type::op, op, line_});
        pos_ += op.size();
      }
    }
  }

  void number() {
    size_t end = pos_;
    auto digits = [&] {
      while (end < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[end])) || s_[end] == '_')) ++end;
    };
    digits();
    bool floating = false;
    if (end + 1 < s_.size() && s_[end] == '.' && std::isdigit(static_cast<unsigned char>(s_[end + 1]))) {
      floating = true;
      ++end;
      digits();
    }
    if (end < s_.size() && (s_[end] == 'e' || s_[end] == 'E')) {
      size_t e = end + 1;
      if (e < s_.size() && (s_[e] == '+' || s_[e] == '-')) ++e;
      if (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) {
        floating = true;
        end = e;
        digits();
      }
    }
    std::string text;
    for (size_t i = pos_; i < end; ++i)
      if (s_[i] != '_') text += s_[i];
    tokens_.push_back({floating ? Token::Type::floating : Token::Type::integer, text, line_});
    pos_ = end;
  }

  void string(char quote) {
    size_t i = pos_ + 1;
    const int start_line = line_;
    while (i < s_.size() && s_[i] != quote) {
      if (s_[i] == '\\') ++i;
      if (i < s_.size() && s_[i] == '\n') ++line_;
      ++i;
    }
    if (i >= s_.size()) syntax_error(start_line, "a string is never closed");
    tokens_.push_back({Token::Type::string, unescape(s_.substr(pos_ + 1, i - pos_ - 1), line_),
                       start_line});
    pos_ = i + 1;
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(source).run(); }

}  // namespace kiln::text::jinja
