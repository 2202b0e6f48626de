// Attribute access and the Python methods a sandboxed template may call on
// str, dict and list (jinja2's ImmutableSandboxedEnvironment refuses the
// ones that modify a list or dict), and the globals every template sees.
#include <algorithm>
#include <ctime>

#include <utf8proc.h>

#include "kiln/text/jinja/builtins.h"
#include "kiln/text/jinja/checked_int.h"
#include "kiln/text/jinja/interpreter.h"
#include "kiln/text/utf8.h"

namespace kiln::text::jinja {

const Value* argument(const CallArgs& args, size_t position, const char* name) {
  if (position < args.positional.size()) return &args.positional[position];
  for (const auto& [k, v] : args.keyword)
    if (k == name) return &v;
  return nullptr;
}

namespace {

// Python's str.isspace() code points (what strip() and split() take away).
bool python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

const std::string& string_arg(const CallArgs& a, size_t i, const char* name, const char* method) {
  const Value* v = argument(a, i, name);
  if (!v || !v->is_string())
    throw TemplateError(std::string(method) + "() argument must be str, not " + (v ? v->type_name() : "nothing"));
  return v->as_string();
}


// str.split(sep=None, maxsplit=-1), and rsplit when from_right.
Value python_split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
  Array parts;
  if (!sep || sep->is_none()) {
    // Runs of whitespace split; once maxsplit is reached, the rest is one part
    // (its far end's whitespace kept), as CPython's split_whitespace does.
    const auto cps = utf8_code_points(s);
    auto text = [&](size_t a, size_t b) {
      std::string out;
      for (size_t k = a; k < b; ++k) utf8_append(out, cps[k]);
      return Value(out);
    };
    const size_t n = cps.size();
    int64_t splits = 0;
    if (!from_right) {
      size_t k = 0;
      while (true) {
        while (k < n && python_space(cps[k])) ++k;
        if (k == n) break;
        if (maxsplit >= 0 && splits == maxsplit) {
          parts.push_back(text(k, n));
          break;
        }
        const size_t start = k;
        while (k < n && !python_space(cps[k])) ++k;
        parts.push_back(text(start, k));
        ++splits;
      }
    } else {
      size_t k = n;
      while (true) {
        while (k > 0 && python_space(cps[k - 1])) --k;
        if (k == 0) break;
        if (maxsplit >= 0 && splits == maxsplit) {
          parts.insert(parts.begin(), text(0, k));
          break;
        }
        const size_t end = k;
        while (k > 0 && !python_space(cps[k - 1])) --k;
        parts.insert(parts.begin(), text(k, end));
        ++splits;
      }
    }
    return Value::array(std::move(parts));
  }
  if (!sep->is_string()) throw TemplateError("must be str or None, not " + sep->type_name());
  const std::string& d = sep->as_string();
  if (d.empty()) throw TemplateError("empty separator");
  std::vector<std::string> out;
  if (!from_right) {
    size_t pos = 0;
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      const size_t at = s.find(d, pos);
      if (at == std::string::npos) break;
      out.push_back(s.substr(pos, at - pos));
      pos = at + d.size();
    }
    out.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      if (end < d.size()) break;
      const size_t at = s.rfind(d, end - d.size());
      if (at == std::string::npos) break;
      out.insert(out.begin(), s.substr(at + d.size(), end - at - d.size()));
      end = at;
    }
    out.insert(out.begin(), s.substr(0, end));
  }
  for (auto& p : out) parts.push_back(Value(p));
  return Value::array(std::move(parts));
}

// str.format with {}, {0} and {name} fields (format specs and conversions are refused by name).
std::string python_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t end = fmt.find('}', i);
      if (end == std::string::npos) throw TemplateError("Single '{' encountered in format string");
      const std::string field = fmt.substr(i + 1, end - i - 1);
      if (field.find_first_of(":!") != std::string::npos)
        throw TemplateError("str.format: the field '{" + field + "}' uses a format spec, which Kiln does not support");
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_index < a.positional.size() ? &a.positional[auto_index++] : nullptr;
      } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
        const int64_t k = parse_int64(field);
        v = k < int64_t(a.positional.size()) ? &a.positional[size_t(k)] : nullptr;
      } else {
        for (const auto& [name, value] : a.keyword)
          if (name == field) v = &value;
      }
      if (!v) throw TemplateError("Replacement index " + field + " out of range for positional args tuple");
      out += to_str(*v);
      i = end;
    } else if (c == '}') {
      throw TemplateError("Single '}' encountered in format string");
    } else {
      out += c;
    }
  }
  return out;
}

bool starts_or_ends(const std::string& s, const Value& affix, bool ends) {
  auto one = [&](const Value& v) {
    if (!v.is_string()) throw TemplateError("startswith first arg must be str or a tuple of str, not " + v.type_name());
    const std::string& x = v.as_string();
    if (x.size() > s.size()) return false;
    return ends ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0;
  };
  if (affix.is_array()) return std::any_of(affix.items().begin(), affix.items().end(), one);
  return one(affix);
}

Value string_method(const std::string& s, const std::string& name) {
  using F = std::function<Value(CallArgs&)>;
  auto method = [&](F f) {
    return Value::function(name, [f = std::move(f)](CallArgs& a, Interpreter&) { return f(a); });
  };
  auto chars_arg = [](CallArgs& a) -> const std::string* {
    const Value* v = argument(a, 0, "chars");
    return v && !v->is_none() ? &v->as_string() : nullptr;
  };
  if (name == "strip") return method([s, chars_arg](CallArgs& a) { return Value(python_strip(s, chars_arg(a), true, true)); });
  if (name == "lstrip") return method([s, chars_arg](CallArgs& a) { return Value(python_strip(s, chars_arg(a), true, false)); });
  if (name == "rstrip") return method([s, chars_arg](CallArgs& a) { return Value(python_strip(s, chars_arg(a), false, true)); });
  if (name == "split" || name == "rsplit")
    return method([s, right = name == "rsplit"](CallArgs& a) {
      const Value* max = argument(a, 1, "maxsplit");
      return python_split(s, argument(a, 0, "sep"), max ? max->as_int() : -1, right);
    });
  if (name == "splitlines")
    return method([s](CallArgs&) {
      Array lines;
      size_t start = 0;
      for (size_t i = 0; i < s.size(); ++i)
        if (s[i] == '\n' || s[i] == '\r') {
          lines.push_back(Value(s.substr(start, i - start)));
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          start = i + 1;
        }
      if (start < s.size()) lines.push_back(Value(s.substr(start)));
      return Value::array(std::move(lines));
    });
  if (name == "startswith" || name == "endswith")
    return method([s, ends = name == "endswith"](CallArgs& a) {
      const Value* affix = argument(a, 0, "prefix");
      if (!affix) throw TemplateError("startswith() takes at least 1 argument (0 given)");
      return Value(starts_or_ends(s, *affix, ends));
    });
  if (name == "replace")
    return Value::function(name, [s](CallArgs& a, Interpreter& in) {
      const std::string &from = string_arg(a, 0, "old", "replace"), &to = string_arg(a, 1, "new", "replace");
      const Value* count = argument(a, 2, "count");
      return Value(python_replace(s, from, to, count ? count->as_int() : -1, in));
    });
  if (name == "upper" || name == "lower")
    return method([s, up = name == "upper"](CallArgs&) { return Value(python_case(s, up)); });
  if (name == "title" || name == "capitalize")
    return method([s, title = name == "title"](CallArgs&) { return Value(python_title(s, title)); });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count")
    return method([s, name](CallArgs& a) {
      const std::string& sub = string_arg(a, 0, "sub", name.c_str());
      if (name == "count") {
        if (sub.empty()) return Value(int64_t(utf8_code_points(s).size() + 1));
        int64_t n = 0;
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
        return Value(n);
      }
      const size_t at = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
      if (at == std::string::npos) {
        if (name.find("index") != std::string::npos) throw TemplateError("substring not found");
        return Value(int64_t(-1));
      }
      return Value(int64_t(utf8_code_points(s.substr(0, at)).size()));
    });
  if (name == "join")
    return method([s](CallArgs& a) {
      const Value* items = argument(a, 0, "iterable");
      if (!items) throw TemplateError("join() takes exactly one argument (0 given)");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(*items)) {
        if (!v.is_string()) throw TemplateError("sequence item: expected str instance, " + v.type_name() + " found");
        out += (first ? "" : s) + v.as_string();
        first = false;
      }
      return Value(std::move(out));
    });
  if (name == "format") return method([s](CallArgs& a) { return Value(python_format(s, a)); });
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper")
    return method([s, name](CallArgs&) {
      if (s.empty()) return Value(false);
      bool cased = false, all = true;
      for (uint32_t c : utf8_code_points(s)) {
        const bool ascii = c < 0x80;
        const bool digit = ascii && std::isdigit(int(c)), alpha = ascii && std::isalpha(int(c));
        if (name == "isdigit") all = all && digit;
        if (name == "isalpha") all = all && alpha;
        if (name == "isalnum") all = all && (digit || alpha);
        if (name == "isspace") all = all && python_space(c);
        if (name == "islower") all = all && !(ascii && std::isupper(int(c))), cased = cased || (ascii && std::islower(int(c)));
        if (name == "isupper") all = all && !(ascii && std::islower(int(c))), cased = cased || (ascii && std::isupper(int(c)));
      }
      return Value(all && (name != "islower" && name != "isupper" ? true : cased));
    });
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

bool mutates(const Value& v, const std::string& name) {
  static const std::vector<std::string> list_ops = {"append", "clear", "pop", "reverse", "insert", "sort", "extend",
                                                    "remove"};
  static const std::vector<std::string> dict_ops = {"clear", "pop", "popitem", "setdefault", "update"};
  const auto& ops = v.is_object() ? dict_ops : list_ops;
  return std::find(ops.begin(), ops.end(), name) != ops.end();
}

Value unsafe(const Value& v, const std::string& name) {
  const std::string message = "access to attribute '" + name + "' of '" + v.type_name() + "' object is unsafe.";
  return Value::function(name, [message](CallArgs&, Interpreter&) -> Value { throw TemplateError(message); });
}

Value dict_method(const Value& d, const std::string& name) {
  auto method = [&](std::function<Value(CallArgs&)> f) {
    return Value::function(name, [f = std::move(f)](CallArgs& a, Interpreter&) { return f(a); });
  };
  if (name == "get")
    return method([d](CallArgs& a) {
      const Value* key = argument(a, 0, "key");
      if (!key) throw TemplateError("get expected at least 1 argument, got 0");
      const Value* found = d.object_ref().find(object_key(*key));
      if (found) return *found;
      const Value* fallback = argument(a, 1, "default");
      return fallback ? *fallback : Value::none();
    });
  if (name == "items")
    return method([d](CallArgs&) {
      Array out;
      for (const auto& [k, v] : d.object_ref().entries) out.push_back(Value::tuple({key_value(k), v}));
      return Value::array(std::move(out));
    });
  if (name == "keys")
    return method([d](CallArgs&) {
      Array out;
      for (const auto& kv : d.object_ref().entries) out.push_back(key_value(kv.first));
      return Value::array(std::move(out));
    });
  if (name == "values")
    return method([d](CallArgs&) {
      Array out;
      for (const auto& kv : d.object_ref().entries) out.push_back(kv.second);
      return Value::array(std::move(out));
    });
  if (name == "copy")
    return method([d](CallArgs&) { return Value::object(std::make_shared<Object>(d.object_ref())); });
  return Value();
}

}  // namespace

std::string python_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  const auto cps = utf8_code_points(s);
  std::vector<uint32_t> strip_set;
  if (chars) strip_set = utf8_code_points(*chars);
  auto strips = [&](uint32_t c) {
    return chars ? std::find(strip_set.begin(), strip_set.end(), c) != strip_set.end() : python_space(c);
  };
  size_t begin = 0, end = cps.size();
  if (left)
    while (begin < end && strips(cps[begin])) ++begin;
  if (right)
    while (end > begin && strips(cps[end - 1])) --end;
  if (begin == 0 && end == cps.size()) return s;
  std::string out;
  for (size_t i = begin; i < end; ++i) utf8_append(out, cps[i]);
  return out;
}

// The output is checked as it grows: 'x' * 10**6 with each 'x' replaced by
// 10**6 bytes would be a terabyte.
std::string python_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                           const Interpreter& in) {
  std::string out;
  if (from.empty()) {  // Python puts `to` around every character
    int64_t n = 0;
    for (uint32_t c : utf8_code_points(s)) {
      if (count < 0 || n++ < count) out += to;
      utf8_append(out, c);
      in.check_size(out.size());
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out += s.substr(pos, at - pos) + to;
    in.check_size(out.size());
    pos = at + from.size();
  }
  return out + s.substr(pos);
}

namespace {
bool is_letter(uint32_t c) {
  const auto category = utf8proc_category(utf8proc_int32_t(c));
  return category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO;
}
}  // namespace

// Per code point (utf8proc's simple case mappings; Python's full ones differ for a few, such as ß).
std::string python_case(const std::string& s, bool upper) {
  std::string out;
  for (uint32_t c : utf8_code_points(s))
    utf8_append(out, uint32_t(upper ? utf8proc_toupper(utf8proc_int32_t(c)) : utf8proc_tolower(utf8proc_int32_t(c))));
  return out;
}

std::string python_title(const std::string& s, bool every_word) {
  std::string out;
  bool word_start = true;
  for (uint32_t c : utf8_code_points(s)) {
    const bool letter = is_letter(c);
    uint32_t mapped = c;
    if (letter || !every_word)
      mapped = uint32_t(word_start && letter ? utf8proc_totitle(utf8proc_int32_t(c)) : utf8proc_tolower(utf8proc_int32_t(c)));
    utf8_append(out, mapped);
    word_start = every_word ? !letter : false;
  }
  return out;
}

Value get_attribute(const Value& v, const std::string& name) {
  switch (v.kind()) {
    case Value::Kind::undefined: throw TemplateError(v.undefined_message());
    case Value::Kind::string: return string_method(v.as_string(), name);
    case Value::Kind::object: {
      if (v.object_ref().is_namespace) {
        if (const Value* found = v.object_ref().find(name)) return *found;
        return Value::undefined("'Namespace object' has no attribute '" + name + "'");
      }
      if (mutates(v, name)) return unsafe(v, name);
      Value method = dict_method(v, name);
      if (!method.is_undefined()) return method;
      if (const Value* found = v.object_ref().find(name)) return *found;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::array:
      if (mutates(v, name)) return unsafe(v, name);
      if (name == "index" || name == "count")
        return Value::function(name, [v, name](CallArgs& a, Interpreter&) {
          const Value* x = argument(a, 0, "value");
          if (!x) throw TemplateError(name + "() takes exactly one argument (0 given)");
          int64_t n = 0;
          for (size_t i = 0; i < v.items().size(); ++i)
            if (equal(v.items()[i], *x)) {
              if (name == "index") return Value(int64_t(i));
              ++n;
            }
          if (name == "index") throw TemplateError(to_repr(*x) + " is not in list");
          return Value(n);
        });
      return Value::undefined("'" + v.type_name() + " object' has no attribute '" + name + "'");
    case Value::Kind::none: return Value::undefined("'None' has no attribute '" + name + "'");
    default: return Value::undefined("'" + v.type_name() + " object' has no attribute '" + name + "'");
  }
}

Value get_item(const Value& v, const Value& index) {
  if (v.is_undefined()) throw TemplateError(v.undefined_message());
  if (v.is_object()) {
    if (index.is_string()) {
      if (const Value* found = v.object_ref().find(index.as_string())) return *found;
      Value method = get_attribute(v, index.as_string());  // d['items'] is the method when no key says otherwise
      return method.is_callable() ? method : Value::undefined("'dict object' has no attribute " + to_repr(index));
    }
    // Jinja's Undefined hashes (to no key any dict holds): map[spec.type] of a schema without a type.
    if (index.is_undefined()) return Value::undefined("'dict object' has no element Undefined");
    if (const Value* found = v.object_ref().find(object_key(index))) return *found;
    return Value::undefined("'dict object' has no element " + to_repr(index));
  }
  if (v.is_generator()) throw TemplateError("'generator' object is not subscriptable");
  if ((v.is_array() || v.is_string()) && (index.is_int() || index.is_bool())) {
    int64_t i = index.as_int();
    if (v.is_array()) {
      const int64_t n = int64_t(v.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return v.items()[size_t(i)];
      return Value::undefined("'" + v.type_name() + " object' has no element " + std::to_string(index.as_int()));
    }
    const auto cps = utf8_code_points(v.as_string());
    if (i < 0) i += int64_t(cps.size());
    if (i >= 0 && i < int64_t(cps.size())) {
      std::string out;
      utf8_append(out, cps[size_t(i)]);
      return Value(out);
    }
    return Value::undefined("'str object' has no element " + std::to_string(index.as_int()));
  }
  if (index.is_string()) return get_attribute(v, index.as_string());
  return Value::undefined("'" + v.type_name() + " object' has no element " + to_repr(index));
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined: return {};
    case Value::Kind::array: return v.items();
    case Value::Kind::object: {
      std::vector<Value> keys;
      for (const auto& kv : v.object_ref().entries) keys.push_back(key_value(kv.first));
      return keys;
    }
    case Value::Kind::string: {
      std::vector<Value> chars;
      for (uint32_t c : utf8_code_points(v.as_string())) {
        std::string one;
        utf8_append(one, c);
        chars.push_back(Value(one));
      }
      return chars;
    }
    default: throw TemplateError("'" + v.type_name() + "' object is not iterable");
  }
}

int64_t python_length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined: return 0;
    case Value::Kind::string: return int64_t(utf8_code_points(v.as_string()).size());
    case Value::Kind::array:
      if (!v.is_generator()) return int64_t(v.items().size());
      break;
    case Value::Kind::object: return int64_t(v.object_ref().entries.size());
    default: break;
  }
  throw TemplateError("object of type '" + v.type_name() + "' has no len()");
}

void add_builtin_globals(Object& g) {
  g.set("range", Value::function("range", [](CallArgs& a, Interpreter& in) {
          int64_t start = 0, stop = 0, step = 1;
          for (const Value& v : a.positional)
            if (!v.is_int() && !v.is_bool()) throw TemplateError("'" + v.type_name() + "' object cannot be interpreted as an integer");
          if (a.positional.size() == 1) stop = a.positional[0].as_int();
          else if (a.positional.size() >= 2) start = a.positional[0].as_int(), stop = a.positional[1].as_int();
          if (a.positional.size() == 3) step = a.positional[2].as_int();
          if (a.positional.empty() || a.positional.size() > 3) throw TemplateError("range expected 1 to 3 arguments");
          if (step == 0) throw TemplateError("range() arg 3 must not be zero");
          // 128-bit: stop - start of two 64-bit integers can leave 64 bits.
          const __int128 lo = start, hi = stop, by = step;
          const __int128 n = by > 0 ? (hi > lo ? (hi - lo + by - 1) / by : 0) : (lo > hi ? (lo - hi - by - 1) / -by : 0);
          // jinja2's sandbox caps range() at MAX_RANGE.
          if (n > 100000) throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
          in.check_size(size_t(n) * sizeof(Value));
          Array out;
          for (int64_t i = 0; i < int64_t(n); ++i) out.push_back(Value(start + i * step));
          return Value::array(std::move(out));
        }));
  auto make_dict = [](bool is_namespace) {
    return [is_namespace](CallArgs& a, Interpreter&) {
      auto o = std::make_shared<Object>();
      o->is_namespace = is_namespace;
      for (const Value& v : a.positional) {
        if (v.is_object())
          for (const auto& [k, item] : v.object_ref().entries) o->set(k, item);
        else
          for (const Value& pair : iterate(v)) {
            const auto kv = iterate(pair);
            if (kv.size() != 2) throw TemplateError("dictionary update sequence element has the wrong length");
            o->set(to_str(kv[0]), kv[1]);
          }
      }
      for (const auto& [k, v] : a.keyword) {
        if (is_namespace && !k.empty() && k[0] == '_')
          throw TemplateError("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
                              k + "'. Please rename the attribute.");
        o->set(k, v);
      }
      return Value::object(o);
    };
  };
  g.set("dict", Value::function("dict", make_dict(false)));
  g.set("namespace", Value::function("namespace", make_dict(true)));
  g.set("raise_exception", Value::function("raise_exception", [](CallArgs& a, Interpreter&) -> Value {
          throw TemplateError(a.positional.empty() ? "" : to_str(a.positional[0]));
        }));
  g.set("strftime_now", Value::function("strftime_now", [](CallArgs& a, Interpreter& in) {
          const Value* fmt = argument(a, 0, "format");
          if (!fmt || !fmt->is_string()) throw TemplateError("strftime_now() needs a format string");
          const std::time_t t = std::time_t(in.now());
          std::tm tm{};
          localtime_r(&t, &tm);
          char buf[512];
          const size_t n = std::strftime(buf, sizeof buf, fmt->as_string().c_str(), &tm);
          return Value(std::string(buf, n));
        }));
}

}  // namespace kiln::text::jinja
