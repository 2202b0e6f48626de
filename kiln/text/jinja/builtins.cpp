// jinja2's built-in filters and tests (jinja2/filters.py, tests.py), with
// transformers' tojson (json.dumps with ensure_ascii=False), as tables.
#include "kiln/text/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "kiln/text/jinja/checked_int.h"
#include "kiln/text/jinja/interpreter.h"
#include "kiln/text/utf8.h"

namespace kiln::text::jinja {
namespace {

using FilterFn = Value (*)(Value, CallArgs&, Interpreter&);
using TestFn = bool (*)(const Value&, CallArgs&, Interpreter&);

const Value& required(const CallArgs& a, size_t i, const char* name, const char* filter) {
  const Value* v = argument(a, i, name);
  if (!v) throw TemplateError(std::string(filter) + "() missing required argument '" + name + "'");
  return *v;
}
bool flag(const CallArgs& a, size_t i, const char* name, bool fallback = false) {
  const Value* v = argument(a, i, name);
  return v ? v->truthy() : fallback;
}

// jinja2's make_attrgetter: "a.b" and "0" walk attributes and items.
Value attribute_path(const Value& v, const Value& path) {
  if (!path.is_string()) return get_item(v, path);
  Value cur = v;
  const std::string& p = path.as_string();
  size_t start = 0;
  while (true) {
    const size_t dot = p.find('.', start);
    const std::string part = p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = digits ? get_item(cur, Value(parse_int64(part))) : get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// Sort keys as jinja2's ignore_case: strings compared lower-cased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  std::string s = v.as_string();
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return Value(s);
}

Value sorted(const std::vector<Value>& items, const CallArgs& a, size_t first_arg) {
  const bool reverse = flag(a, first_arg, "reverse"), case_sensitive = flag(a, first_arg + 1, "case_sensitive");
  const Value* attribute = argument(a, first_arg + 2, "attribute");
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& v : items)
    keyed.emplace_back(sort_key(attribute && !attribute->is_none() ? attribute_path(v, *attribute) : v, case_sensitive), v);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  Array out;
  for (auto& kv : keyed) out.push_back(kv.second);
  return Value::array(std::move(out));
}

// select/reject/selectattr/rejectattr: a test by name (default: truthiness) on each item or its attribute.
Value select(const Value& seq, CallArgs& a, Interpreter& in, bool by_attribute, bool keep) {
  size_t next = 0;
  Value attribute;
  if (by_attribute) attribute = required(a, next++, "attribute", "selectattr");
  std::string test;
  if (next < a.positional.size()) test = to_str(a.positional[next++]);
  CallArgs test_args;
  test_args.positional.assign(a.positional.begin() + long(std::min(next, a.positional.size())), a.positional.end());
  if (!test.empty() && !has_test(test)) throw TemplateError("No test named '" + test + "'.");
  Array out;
  if (!seq.truthy()) return Value::generator({});  // jinja2 yields nothing from a false value (None, [])
  for (const Value& item : iterate(seq)) {
    const Value subject = by_attribute ? attribute_path(item, attribute) : item;
    const bool passed = test.empty() ? subject.truthy() : apply_test(test, subject, test_args, in);
    if (passed == keep) out.push_back(item);
  }
  return Value::generator(std::move(out));
}

std::string indent_text(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::vector<std::string> lines;
  size_t start = 0;
  const std::string text = s + "\n";  // jinja2's quirk for splitlines
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == '\n') {
      lines.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i == 0) {
      out = lines[0];
      continue;
    }
    out += "\n" + ((blank || !lines[i].empty()) ? pad : "") + lines[i];
  }
  return first ? pad + out : out;
}

Value f_tojson(Value v, CallArgs& a, Interpreter& in) {
  JsonStyle style;
  style.ensure_ascii = flag(a, 0, "ensure_ascii");
  if (const Value* indent = argument(a, 1, "indent"); indent && !indent->is_none()) {
    if (!indent->is_int()) throw TemplateError("tojson: indent must be an integer");
    style.indent = int(std::clamp<int64_t>(indent->as_int(), 0, 64));
  }
  if (const Value* sep = argument(a, 2, "separators"); sep && !sep->is_none()) {
    const auto parts = iterate(*sep);
    if (parts.size() != 2) throw TemplateError("tojson: separators must be a pair of strings");
    style.item_separator = to_str(parts[0]);
    style.key_separator = to_str(parts[1]);
    if (style.item_separator.empty()) style.item_separator = std::string(1, '\0');
  }
  style.sort_keys = flag(a, 3, "sort_keys");
  std::string out = to_json(v, style);
  if (style.item_separator == std::string(1, '\0')) out.erase(std::remove(out.begin(), out.end(), '\0'), out.end());
  in.check_size(out.size());
  return Value(std::move(out));
}

Value f_default(Value v, CallArgs& a, Interpreter&) {
  const bool boolean = flag(a, 1, "boolean");
  if (v.is_undefined() || (boolean && !v.truthy())) {
    const Value* d = argument(a, 0, "default_value");
    return d ? *d : Value("");
  }
  return v;
}

Value f_join(Value v, CallArgs& a, Interpreter& in) {
  const Value* sep = argument(a, 0, "d");
  const Value* attribute = argument(a, 1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    out += (first ? "" : (sep ? to_str(*sep) : "")) + to_str(attribute ? attribute_path(item, *attribute) : item);
    first = false;
    in.check_size(out.size());
  }
  return Value(std::move(out));
}

Value f_map(Value v, CallArgs& a, Interpreter& in) {
  Array out;
  if (!v.truthy()) return Value::generator({});
  if (const Value* attribute = argument(a, 99, "attribute")) {
    const Value* fallback = argument(a, 99, "default");
    for (const Value& item : iterate(v)) {
      Value x = attribute_path(item, *attribute);
      out.push_back(x.is_undefined() && fallback ? *fallback : x);
    }
    return Value::generator(std::move(out));
  }
  if (a.positional.empty()) return Value::generator(iterate(v));
  const std::string filter = to_str(a.positional[0]);
  if (!has_filter(filter)) throw TemplateError("No filter named '" + filter + "'.");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : iterate(v)) {
    CallArgs copy = rest;
    out.push_back(apply_filter(filter, item, copy, in));
  }
  return Value::generator(std::move(out));
}

Value f_items(Value v, CallArgs&, Interpreter&) {
  if (v.is_undefined()) return Value::generator({});
  if (!v.is_object()) throw TemplateError("Can only get item pairs from a mapping.");
  Array out;
  for (const auto& [k, item] : v.object_ref().entries) out.push_back(Value::tuple({key_value(k), item}));
  return Value::generator(std::move(out));
}

Value f_dictsort(Value v, CallArgs& a, Interpreter&) {
  if (!v.is_object()) throw TemplateError("You can only sort by either \"key\" or \"value\"");
  const bool case_sensitive = flag(a, 0, "case_sensitive");
  const Value* by = argument(a, 1, "by");
  const bool by_value = by && to_str(*by) == "value";
  const bool reverse = flag(a, 2, "reverse");
  Array pairs;
  for (const auto& [k, item] : v.object_ref().entries) pairs.push_back(Value::tuple({key_value(k), item}));
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    const Value kx = sort_key(x.items()[by_value ? 1 : 0], case_sensitive),
                ky = sort_key(y.items()[by_value ? 1 : 0], case_sensitive);
    return reverse ? less(ky, kx) : less(kx, ky);
  });
  return Value::array(std::move(pairs));
}

Value f_first_last(Value v, bool last) {
  if (last && v.is_generator()) throw TemplateError("'generator' object is not reversible");
  const auto items = iterate(v);
  if (items.empty()) return Value::undefined(last ? "No last item, sequence was empty." : "No first item, sequence was empty.");
  return last ? items.back() : items.front();
}

Value f_int(Value v, CallArgs& a, Interpreter&) {
  const Value* fallback = argument(a, 0, "default");
  const Value d = fallback ? *fallback : Value(int64_t(0));
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return std::isnan(v.as_double()) ? d : Value(float_to_int(v.as_double()));  // jinja2: int(nan) falls back
  if (v.is_string()) {
    const std::string s = python_strip(v.as_string(), nullptr, true, true);
    try {
      size_t used = 0;
      const int64_t base = argument(a, 1, "base") ? argument(a, 1, "base")->as_int() : 10;
      const long long n = std::stoll(s, &used, int(base));
      if (used == s.size()) return Value(int64_t(n));
      const double f = std::stod(s, &used);
      if (used == s.size()) return Value(float_to_int(f));
    } catch (const std::exception&) {  // not a number, or not one that fits: the default, as jinja2's ValueError
    }
  }
  return d;
}

Value f_float(Value v, CallArgs& a, Interpreter&) {
  const Value* fallback = argument(a, 0, "default");
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    try {
      const std::string s = python_strip(v.as_string(), nullptr, true, true);
      size_t used = 0;
      const double f = std::stod(s, &used);
      if (used == s.size()) return Value(f);
    } catch (const std::exception&) {
    }
  }
  return fallback ? *fallback : Value(0.0);
}

Value f_round(Value v, CallArgs& a, Interpreter&) {
  if (!v.is_number()) throw TemplateError("round: a number is required, not " + v.type_name());
  const Value* p = argument(a, 0, "precision");
  const int64_t precision = p ? p->as_int() : 0;
  const Value* m = argument(a, 1, "method");
  const std::string method = m ? to_str(*m) : "common";
  const double scale = std::pow(10.0, double(precision)), x = v.as_double() * scale;
  const bool int_result = method == "common" && !v.is_float();  // Python's round() of an int is an int
  if (int_result && precision >= 0) return Value(v.as_int());
  if (!std::isfinite(x)) return Value(v.as_double());  // finer than a double holds (or inf/nan): as Python's round
  if (scale == 0) return int_result ? Value(int64_t(0)) : Value(0.0);
  double r;
  if (method == "common") r = std::nearbyint(x);  // Python's round(): half to even
  else if (method == "ceil") r = std::ceil(x);
  else if (method == "floor") r = std::floor(x);
  else throw TemplateError("method must be common, ceil or floor");
  return int_result ? Value(float_to_int(r / scale)) : Value(r / scale);
}

Value f_sum(Value v, CallArgs& a, Interpreter& in) {
  const Value* attribute = argument(a, 0, "attribute");
  const Value* start = argument(a, 1, "start");
  Value total = start ? *start : Value(int64_t(0));
  for (const Value& item : iterate(v)) {
    const Value x = attribute && !attribute->is_none() ? attribute_path(item, *attribute) : item;
    if (!x.is_number() || !total.is_number()) throw TemplateError("unsupported operand type(s) for +: '" + total.type_name() + "' and '" + x.type_name() + "'");
    total = (total.is_float() || x.is_float()) ? Value(total.as_double() + x.as_double()) : Value(checked_add(total.as_int(), x.as_int()));
    in.step();
  }
  return total;
}

Value f_min_max(Value v, CallArgs& a, bool max) {
  const bool case_sensitive = flag(a, 0, "case_sensitive");
  const Value* attribute = argument(a, 1, "attribute");
  const auto items = iterate(v);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  const Value* best = &items[0];
  auto key = [&](const Value& x) { return sort_key(attribute ? attribute_path(x, *attribute) : x, case_sensitive); };
  for (const Value& x : items)
    if (max ? less(key(*best), key(x)) : less(key(x), key(*best))) best = &x;
  return *best;
}

Value f_unique(Value v, CallArgs& a, Interpreter&) {
  const bool case_sensitive = flag(a, 0, "case_sensitive");
  const Value* attribute = argument(a, 1, "attribute");
  Array out, seen;
  for (const Value& x : iterate(v)) {
    const Value k = sort_key(attribute ? attribute_path(x, *attribute) : x, case_sensitive);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) {
      seen.push_back(k);
      out.push_back(x);
    }
  }
  return Value::generator(std::move(out));
}

Value f_escape(Value v, CallArgs&, Interpreter&) {
  return v.is_markup() ? v : Value::markup(html_escape(to_str(v)));
}

Value f_batch(Value v, CallArgs& a, Interpreter&) {
  const int64_t n = required(a, 0, "linecount", "batch").as_int();
  if (n <= 0) throw TemplateError("batch: the line count must be positive");
  const Value* fill = argument(a, 1, "fill_with");
  Array out, row;
  for (const Value& x : iterate(v)) {
    row.push_back(x);
    if (int64_t(row.size()) == n) out.push_back(Value::array(std::move(row))), row.clear();
  }
  if (!row.empty()) {
    while (fill && !fill->is_none() && int64_t(row.size()) < n) row.push_back(*fill);
    out.push_back(Value::array(std::move(row)));
  }
  return Value::generator(std::move(out));
}

std::string str_of(const Value& v) { return to_str(v); }

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = {
      {"abs", [](Value v, CallArgs&, Interpreter&) {
         if (!v.is_number()) throw TemplateError("bad operand type for abs(): '" + v.type_name() + "'");
         return v.is_float() ? Value(std::fabs(v.as_double())) : Value(v.as_int() < 0 ? checked_neg(v.as_int()) : v.as_int());
       }},
      {"attr", [](Value v, CallArgs& a, Interpreter&) { return get_attribute(v, to_str(required(a, 0, "name", "attr"))); }},
      {"batch", f_batch},
      {"capitalize", [](Value v, CallArgs&, Interpreter&) { return Value(python_title(str_of(v), false)); }},
      {"center", [](Value v, CallArgs& a, Interpreter& in) {
         const std::string s = str_of(v);
         const Value* w = argument(a, 0, "width");
         const int64_t width = w ? w->as_int() : 80, len = int64_t(utf8_code_points(s).size());
         if (width <= len) return Value(s);
         in.check_size(size_t(width));
         const int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
         return Value(std::string(size_t(left), ' ') + s + std::string(size_t(pad - left), ' '));
       }},
      {"count", [](Value v, CallArgs&, Interpreter&) { return Value(python_length(v)); }},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", [](Value v, CallArgs&, Interpreter&) { return f_first_last(v, false); }},
      {"float", f_float},
      {"forceescape", f_escape},
      {"format", [](Value v, CallArgs& a, Interpreter&) {
         return python_percent_format(str_of(v), Value::tuple(a.positional));  // "%s, %s"|format(a, b)
       }},
      {"indent", [](Value v, CallArgs& a, Interpreter& in) {
         const Value* w = argument(a, 0, "width");
         const std::string text = str_of(v);
         const size_t width = w && w->is_string() ? w->as_string().size() : size_t(w ? std::max<int64_t>(0, w->as_int()) : 4);
         const size_t lines = size_t(std::count(text.begin(), text.end(), '\n')) + 1;
         in.check_size(saturating_size_add(text.size(), saturating_size_mul(width, lines)));  // before the padding is made
         const std::string pad = w && w->is_string() ? w->as_string() : std::string(width, ' ');
         return Value(indent_text(text, pad, flag(a, 1, "first"), flag(a, 2, "blank")));
       }},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", [](Value v, CallArgs&, Interpreter&) { return f_first_last(v, true); }},
      {"length", [](Value v, CallArgs&, Interpreter&) { return Value(python_length(v)); }},
      {"list", [](Value v, CallArgs&, Interpreter&) { return Value::array(iterate(v)); }},
      {"lower", [](Value v, CallArgs&, Interpreter&) { return Value(python_case(str_of(v), false)); }},
      {"map", f_map},
      {"max", [](Value v, CallArgs& a, Interpreter&) { return f_min_max(v, a, true); }},
      {"min", [](Value v, CallArgs& a, Interpreter&) { return f_min_max(v, a, false); }},
      {"pprint", [](Value v, CallArgs&, Interpreter&) { return Value(to_repr(v)); }},
      {"reject", [](Value v, CallArgs& a, Interpreter& in) { return select(v, a, in, false, false); }},
      {"rejectattr", [](Value v, CallArgs& a, Interpreter& in) { return select(v, a, in, true, false); }},
      {"replace", [](Value v, CallArgs& a, Interpreter& in) {
         const Value* count = argument(a, 2, "count");
         std::string out = python_replace(str_of(v), str_of(required(a, 0, "old", "replace")),
                                          str_of(required(a, 1, "new", "replace")),
                                          count && !count->is_none() ? count->as_int() : -1, in);
         return Value(std::move(out));
       }},
      {"reverse", [](Value v, CallArgs&, Interpreter&) {
         if (v.is_string()) {
           auto cps = utf8_code_points(v.as_string());
           std::string out;
           for (auto it = cps.rbegin(); it != cps.rend(); ++it) utf8_append(out, *it);
           return Value(out);
         }
         auto items = iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::generator(std::move(items));
       }},
      {"round", f_round},
      {"safe", [](Value v, CallArgs&, Interpreter&) { return Value::markup(str_of(v)); }},
      {"select", [](Value v, CallArgs& a, Interpreter& in) { return select(v, a, in, false, true); }},
      {"selectattr", [](Value v, CallArgs& a, Interpreter& in) { return select(v, a, in, true, true); }},
      {"sort", [](Value v, CallArgs& a, Interpreter&) { return sorted(iterate(v), a, 0); }},
      {"string", [](Value v, CallArgs&, Interpreter&) { return v.is_string() ? v : Value(str_of(v)); }},
      {"sum", f_sum},
      {"title", [](Value v, CallArgs&, Interpreter&) { return Value(python_title(str_of(v), true)); }},
      {"tojson", f_tojson},
      {"trim", [](Value v, CallArgs& a, Interpreter&) {
         const Value* chars = argument(a, 0, "chars");
         const std::string set = chars && !chars->is_none() ? str_of(*chars) : "";
         return Value(python_strip(str_of(v), chars && !chars->is_none() ? &set : nullptr, true, true));
       }},
      {"unique", f_unique},
      {"upper", [](Value v, CallArgs&, Interpreter&) { return Value(python_case(str_of(v), true)); }},
      {"wordcount", [](Value v, CallArgs&, Interpreter&) {
         int64_t n = 0;
         bool in_word = false;
         for (uint32_t c : utf8_code_points(str_of(v))) {
           const bool word = c >= 0x80 || std::isalnum(int(c)) || c == '_';
           n += word && !in_word;
           in_word = word;
         }
         return Value(n);
       }},
  };
  return table;
}

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = {
      {"boolean", [](const Value& v, CallArgs&, Interpreter&) { return v.is_bool(); }},
      {"callable", [](const Value& v, CallArgs&, Interpreter&) { return v.is_callable(); }},
      {"defined", [](const Value& v, CallArgs&, Interpreter&) { return !v.is_undefined(); }},
      {"divisibleby", [](const Value& v, CallArgs& a, Interpreter&) {
         const int64_t n = required(a, 0, "num", "divisibleby").as_int();
         if (n == 0) throw TemplateError("integer modulo by zero");
         return floor_mod(v.as_int(), n) == 0;
       }},
      {"escaped", [](const Value&, CallArgs&, Interpreter&) { return false; }},
      {"even", [](const Value& v, CallArgs&, Interpreter&) { return v.as_int() % 2 == 0; }},
      {"false", [](const Value& v, CallArgs&, Interpreter&) { return v.is_bool() && !v.as_bool(); }},
      {"filter", [](const Value& v, CallArgs&, Interpreter&) { return v.is_string() && has_filter(v.as_string()); }},
      {"float", [](const Value& v, CallArgs&, Interpreter&) { return v.is_float(); }},
      {"in", [](const Value& v, CallArgs& a, Interpreter&) {
         const Value& seq = required(a, 0, "seq", "in");
         if (seq.is_string()) return v.is_string() && seq.as_string().find(v.as_string()) != std::string::npos;
         if (seq.is_object()) return (v.is_string() || v.is_number()) && seq.object_ref().find(object_key(v)) != nullptr;
         for (const Value& x : iterate(seq))
           if (equal(x, v)) return true;
         return false;
       }},
      {"integer", [](const Value& v, CallArgs&, Interpreter&) { return v.is_int(); }},
      {"iterable", [](const Value& v, CallArgs&, Interpreter&) {
         return v.is_undefined() || v.is_string() || v.is_array() || v.is_object();
       }},
      {"lower", [](const Value& v, CallArgs&, Interpreter&) {
         return v.is_string() && python_case(v.as_string(), false) == v.as_string();
       }},
      {"mapping", [](const Value& v, CallArgs&, Interpreter&) { return v.is_object() && !v.object_ref().is_namespace; }},
      {"none", [](const Value& v, CallArgs&, Interpreter&) { return v.is_none(); }},
      {"number", [](const Value& v, CallArgs&, Interpreter&) { return v.is_number(); }},
      {"odd", [](const Value& v, CallArgs&, Interpreter&) { return v.as_int() % 2 != 0; }},
      {"sameas", [](const Value& v, CallArgs& a, Interpreter&) {
         const Value& other = required(a, 0, "other", "sameas");
         if (v.kind() != other.kind()) return false;
         if (v.is_none() || v.is_undefined()) return true;
         if (v.is_bool()) return v.as_bool() == other.as_bool();
         if (v.is_array()) return &v.items() == &other.items();
         if (v.is_object()) return &v.object_ref() == &other.object_ref();
         return false;
       }},
      {"sequence", [](const Value& v, CallArgs&, Interpreter&) { return v.is_string() || v.is_array() || v.is_object(); }},
      {"string", [](const Value& v, CallArgs&, Interpreter&) { return v.is_string(); }},
      {"test", [](const Value& v, CallArgs&, Interpreter&) { return v.is_string() && has_test(v.as_string()); }},
      {"true", [](const Value& v, CallArgs&, Interpreter&) { return v.is_bool() && v.as_bool(); }},
      {"undefined", [](const Value& v, CallArgs&, Interpreter&) { return v.is_undefined(); }},
      {"upper", [](const Value& v, CallArgs&, Interpreter&) {
         return v.is_string() && python_case(v.as_string(), true) == v.as_string();
       }},
  };
  return table;
}

// The comparison tests and their aliases (eq, ==, equalto, ...).
const std::map<std::string, std::string>& comparison_tests() {
  static const std::map<std::string, std::string> table = {
      {"eq", "=="}, {"equalto", "=="}, {"==", "=="}, {"ne", "!="}, {"!=", "!="}, {"lt", "<"}, {"lessthan", "<"},
      {"<", "<"},   {"le", "<="},      {"<=", "<="}, {"gt", ">"},  {"greaterthan", ">"}, {">", ">"}, {"ge", ">="},
      {">=", ">="},
  };
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }
bool has_test(const std::string& name) { return tests().count(name) > 0 || comparison_tests().count(name) > 0; }

Value apply_filter(const std::string& name, Value value, CallArgs& args, Interpreter& in) {
  auto it = filters().find(name);
  if (it == filters().end()) throw TemplateError("No filter named '" + name + "' found.");
  return it->second(std::move(value), args, in);
}

bool apply_test(const std::string& name, const Value& value, CallArgs& args, Interpreter& in) {
  if (auto c = comparison_tests().find(name); c != comparison_tests().end()) {
    const Value& other = required(args, 0, "other", name.c_str());
    const std::string& op = c->second;
    if (op == "==") return equal(value, other);
    if (op == "!=") return !equal(value, other);
    if (value.is_undefined()) throw TemplateError(value.undefined_message());
    if (op == "<") return less(value, other);
    if (op == ">") return less(other, value);
    if (op == "<=") return !less(other, value);
    return !less(value, other);
  }
  auto it = tests().find(name);
  if (it == tests().end()) throw TemplateError("No test named '" + name + "' found.");
  return it->second(value, args, in);
}

}  // namespace kiln::text::jinja
