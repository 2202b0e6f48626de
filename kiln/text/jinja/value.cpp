#include "kiln/text/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kiln/text/utf8.h"

namespace kiln::text::jinja {

const Value* Object::find(const std::string& key) const {
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}
Value* Object::find(const std::string& key) {
  for (auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}
void Object::set(const std::string& key, Value value) {
  if (Value* v = find(key))
    *v = std::move(value);
  else
    entries.emplace_back(key, std::move(value));
}

namespace {
constexpr char kTypedKey = '\x01';  // starts an encoded non-string key: never the first byte of a template's text
}

std::string object_key(const Value& key) {
  if (key.is_string()) return key.as_string();
  if (!key.is_number() && !key.is_none()) throw TemplateError("unhashable type: '" + key.type_name() + "'");
  return std::string(1, kTypedKey) + (key.is_bool() ? "b" : key.is_int() ? "i" : key.is_float() ? "f" : "n") + to_repr(key);
}

Value key_value(const std::string& stored) {
  if (stored.size() < 2 || stored[0] != kTypedKey) return Value(stored);
  const std::string text = stored.substr(2);
  switch (stored[1]) {
    case 'b': return Value(text == "True");
    case 'i': return Value(parse_int64(text));
    case 'f': return Value(std::strtod(text.c_str(), nullptr));
    default: return Value::none();
  }
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::none;
  return v;
}
int64_t parse_int64(const std::string& digits) {
  try {
    size_t used = 0;
    const long long v = std::stoll(digits, &used);
    if (used == digits.size()) return v;
  } catch (const std::exception&) {
  }
  throw TemplateError("the integer " + digits.substr(0, 40) + " is out of range");
}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.text_ = std::move(hint);
  return v;
}
Value Value::array(Array items) {
  Value v;
  v.kind_ = Kind::array;
  v.array_ = std::make_shared<Array>(std::move(items));
  return v;
}
Value Value::tuple(Array items) {
  Value v = array(std::move(items));
  v.sequence_ = Sequence::tuple;
  return v;
}
Value Value::generator(Array items) {
  Value v = array(std::move(items));
  v.sequence_ = Sequence::generator;
  return v;
}
Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::object;
  v.object_ = o ? std::move(o) : std::make_shared<Object>();
  return v;
}
Value Value::function(std::string name, Function f) {
  Value v;
  v.kind_ = Kind::callable;
  v.text_ = std::move(name);
  v.function_ = std::make_shared<Function>(std::move(f));
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean: return boolean_;
    case Kind::integer: return integer_ != 0;
    case Kind::floating: return floating_ != 0;
    case Kind::string: return !text_.empty();
    case Kind::array: return sequence_ == Sequence::generator || !array_->empty();
    case Kind::object: return !object_->entries.empty();
    case Kind::callable: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::undefined: return "Undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::array: return sequence_ == Sequence::tuple ? "tuple" : sequence_ == Sequence::generator ? "generator" : "list";
    case Kind::object: return object_->is_namespace ? "Namespace" : "dict";
    case Kind::callable: return "function";
  }
  return "object";
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none: return true;
    case Value::Kind::string: return a.as_string() == b.as_string();
    case Value::Kind::array: {
      if (a.is_generator() || b.is_generator()) return &a.items() == &b.items();
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Value::Kind::object: {
      const auto &x = a.object_ref().entries, &y = b.object_ref().entries;
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* other = b.object_ref().find(k);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::callable: return &a == &b;
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 orders as code points
  if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
    const Array &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less(x[i], y[i])) return true;
      if (less(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  throw TemplateError("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // The shortest of %.1e .. %.17e that reads back as d: its digits and exponent.
  char buf[40];
  for (int precision = 0; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  const size_t e = s.find('e');
  const int exponent = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (std::isdigit(static_cast<unsigned char>(s[i]))) digits += s[i];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const std::string sign = d < 0 ? "-" : "";
  // Python's repr: positional for 1e-4 <= |d| < 1e16, else scientific with at least two exponent digits.
  if (exponent < -4 || exponent >= 16) {
    std::string mantissa = digits.substr(0, 1);
    if (digits.size() > 1) mantissa += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return sign + mantissa + exp;
  }
  if (exponent < 0) return sign + "0." + std::string(size_t(-exponent - 1), '0') + digits;
  const size_t whole = size_t(exponent) + 1;
  if (digits.size() <= whole) return sign + digits + std::string(whole - digits.size(), '0') + ".0";
  return sign + digits.substr(0, whole) + "." + digits.substr(whole);
}

namespace {

// Python's repr of a str: single quotes unless the text holds ' and no ".
std::string string_repr(const std::string& s) {
  const bool double_quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = double_quote ? '"' : '\'';
  std::string out(1, quote);
  for (uint32_t c : utf8_code_points(s)) {
    if (c == '\\' || c == uint32_t(quote)) {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  return out + quote;
}

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (uint32_t c : utf8_code_points(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        char buf[16];
        if (c < 0x20 || (ensure_ascii && c > 0x7e)) {
          if (c > 0xffff) {  // a surrogate pair, as json.dumps writes it
            const uint32_t v = c - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
          }
          out += buf;
        } else {
          utf8_append(out, c);
        }
      }
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& v, const JsonStyle& style, int depth) {
  const std::string item_sep = !style.item_separator.empty() ? style.item_separator : style.indent >= 0 ? "," : ", ";
  const std::string key_sep = !style.key_separator.empty() ? style.key_separator : ": ";
  auto newline = [&](int level) {
    if (style.indent >= 0) out += "\n" + std::string(size_t(style.indent * level), ' ');
  };
  KILN_CHECK(depth < 512, "");
  switch (v.kind()) {
    case Value::Kind::none: out += "null"; return;
    case Value::Kind::boolean: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::integer: out += std::to_string(v.as_int()); return;
    case Value::Kind::floating: {
      const double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : float_repr(d);
      return;
    }
    case Value::Kind::string: json_string(out, v.as_string(), style.ensure_ascii); return;
    case Value::Kind::array: {
      if (v.is_generator()) break;
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_value(out, v.items()[i], style, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::object: {
      auto entries = v.object_ref().entries;
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (style.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        const Value key = key_value(entries[i].first);
        json_string(out, key.is_string() ? key.as_string() : key.is_bool() ? (key.as_bool() ? "true" : "false") : key.is_none() ? "null" : to_str(key), style.ensure_ascii);
        out += key_sep;
        json_value(out, entries[i].second, style, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default: break;
  }
  throw TemplateError("Object of type " + v.type_name() + " is not JSON serializable");
}

}  // namespace

std::string to_repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::string: return string_repr(v.as_string());
    case Value::Kind::array: {
      if (v.is_generator()) return "<generator object>";
      std::string out = v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < v.items().size(); ++i) out += (i ? ", " : "") + to_repr(v.items()[i]);
      if (v.is_tuple() && v.items().size() == 1) out += ",";
      return out + (v.is_tuple() ? ")" : "]");
    }
    case Value::Kind::object: {
      if (v.object_ref().is_namespace) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, item] : v.object_ref().entries) {
        out += (first ? "" : ", ") + to_repr(key_value(k)) + ": " + to_repr(item);
        first = false;
      }
      return out + "}";
    }
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined: return "";
    case Value::Kind::none: return "None";
    case Value::Kind::boolean: return v.as_bool() ? "True" : "False";
    case Value::Kind::integer: return std::to_string(v.as_int());
    case Value::Kind::floating: return float_repr(v.as_double());
    case Value::Kind::string: return v.as_string();
    case Value::Kind::callable: return "<function " + v.function_name() + ">";
    default: return to_repr(v);
  }
}

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  try {
    json_value(out, v, style, 0);
  } catch (const TemplateError&) {
    throw;
  } catch (const Error&) {
    throw TemplateError("tojson: the value nests too deeply");
  }
  return out;
}

}  // namespace kiln::text::jinja
