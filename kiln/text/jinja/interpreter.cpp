// Expressions: how each node of ast.h evaluates, with Python's operators
// (as jinja2 hands them to Python) and jinja2's undefined rules: an
// undefined prints as nothing, tests false and iterates as empty, and any
// other use raises the message it carries.
#include "kiln/text/jinja/interpreter.h"

#include <cmath>

#include "kiln/text/jinja/ast.h"
#include "kiln/text/jinja/builtins.h"
#include "kiln/text/jinja/checked_int.h"
#include "kiln/text/utf8.h"

namespace kiln::text::jinja {

Interpreter::Interpreter(Frame context, Limits limits, int64_t now_unix_seconds)
    : limits_(limits), now_(now_unix_seconds) {
  scopes_.push_back(std::make_shared<Frame>(std::move(context)));
  captures_.emplace_back();
}

Value Interpreter::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto found = (*it)->find(name);
    if (found != (*it)->end()) return found->second;
  }
  return Value::undefined("'" + name + "' is undefined");
}

void Interpreter::assign(const std::string& name, Value value) { (*scopes_.back())[name] = std::move(value); }

void Interpreter::write(const std::string& text) {
  std::string& out = captures_.back();
  check_size(out.size() + text.size());
  out += text;
}

std::string Interpreter::end_capture() {
  std::string text = std::move(captures_.back());
  captures_.pop_back();
  return text;
}

void Interpreter::step() {
  if (++steps_ > limits_.max_steps)
    throw TemplateError("the chat template ran more than " + std::to_string(limits_.max_steps) +
                        " steps (a loop that does not end?)");
}

void Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes)
    throw TemplateError("the chat template's output passed " + std::to_string(limits_.max_output_bytes >> 20) +
                        " MiB (a loop that does not end?)");
}

void Interpreter::enter_call() {
  if (++call_depth_ > limits_.max_call_depth)
    throw TemplateError("the chat template's macros call each other more than " +
                        std::to_string(limits_.max_call_depth) + " deep (endless recursion?)");
  step();
}

namespace {

[[noreturn]] void fail_undefined(const Value& v) { throw TemplateError(v.undefined_message()); }
void check_defined(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw TemplateError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() +
                      "'");
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == -1) return checked_result(a == INT64_MIN, a == INT64_MIN ? 0 : -a, "//");  // INT64_MIN // -1 leaves 64 bits
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value repeat(const Value& seq, int64_t times, Interpreter& in) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    in.check_size(saturating_size_mul(seq.as_string().size(), size_t(times)));
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  in.check_size(saturating_size_mul(saturating_size_mul(seq.items().size(), size_t(times)), sizeof(Value)));
  Array out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::array(std::move(out));
}

}  // namespace

Value python_percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> values = args.is_tuple() ? args.items() : std::vector<Value>{args};
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    std::string spec = "%";
    while (++i < fmt.size() && std::string("-+ #0123456789.").find(fmt[i]) != std::string::npos) spec += fmt[i];
    if (i >= fmt.size()) throw TemplateError("incomplete format");
    const char c = fmt[i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size()) throw TemplateError("not enough arguments for format string");
    const Value& v = values[next++];
    char buf[512];
    if (c == 's' || c == 'r') {
      const std::string text = c == 's' ? to_str(v) : to_repr(v);
      std::snprintf(buf, sizeof buf, (spec + "s").c_str(), text.c_str());
      out += spec.size() == 1 ? text : std::string(buf);
    } else if (c == 'd' || c == 'i' || c == 'x' || c == 'X') {
      if (!v.is_number()) throw TemplateError("%" + std::string(1, c) + " format: a real number is required, not " + v.type_name());
      std::snprintf(buf, sizeof buf, (spec + "ll" + (c == 'i' ? 'd' : c)).c_str(), (long long)(v.is_float() ? float_to_int(v.as_double()) : v.as_int()));
      out += buf;
    } else if (c == 'f' || c == 'F' || c == 'e' || c == 'g') {
      if (!v.is_number()) throw TemplateError("must be real number, not " + v.type_name());
      std::snprintf(buf, sizeof buf, (spec + c).c_str(), v.as_double());
      out += buf;
    } else {
      throw TemplateError(std::string("unsupported format character '") + c + "'");
    }
  }
  if (next < values.size() && args.is_tuple()) throw TemplateError("not all arguments converted during string formatting");
  return Value(std::move(out));
}

namespace {

Value arithmetic(const std::string& op, const Value& a, const Value& b, Interpreter& in) {
  check_defined(a);
  check_defined(b);
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.is_float() || b.is_float());
  if (op == "+") {
    if (numbers) return floats ? Value(a.as_double() + b.as_double()) : Value(checked_add(a.as_int(), b.as_int()));
    if (a.is_string() && b.is_string()) {
      in.check_size(a.as_string().size() + b.as_string().size());
      if (a.is_markup() || b.is_markup())
        return Value::markup((a.is_markup() ? a.as_string() : html_escape(a.as_string())) +
                             (b.is_markup() ? b.as_string() : html_escape(b.as_string())));
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
      Array out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::array(std::move(out));
    }
    if (a.is_string()) throw TemplateError("can only concatenate str (not \"" + b.type_name() + "\") to str");
    if (a.is_array() && !a.is_tuple())
      throw TemplateError("can only concatenate list (not \"" + b.type_name() + "\") to list");
    unsupported("+", a, b);
  }
  if (op == "*") {
    if (numbers) return floats ? Value(a.as_double() * b.as_double()) : Value(checked_mul(a.as_int(), b.as_int()));
    if ((a.is_string() || a.is_array()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int(), in);
    if ((b.is_string() || b.is_array()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int(), in);
    unsupported("*", a, b);
  }
  if (op == "%" && a.is_string()) return python_percent_format(a.as_string(), b);
  if (!numbers) unsupported(op, a, b);
  if (op == "-") return floats ? Value(a.as_double() - b.as_double()) : Value(checked_sub(a.as_int(), b.as_int()));
  if (op == "/") {
    if (b.as_double() == 0) throw TemplateError("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (b.as_double() == 0) throw TemplateError(op == "//" ? "integer division or modulo by zero" : "integer modulo by zero");
    if (floats) {
      const double q = std::floor(a.as_double() / b.as_double());
      return op == "//" ? Value(q) : Value(a.as_double() - q * b.as_double());
    }
    return op == "//" ? Value(floor_div(a.as_int(), b.as_int())) : Value(floor_mod(a.as_int(), b.as_int()));
  }
  if (op == "**") {
    if (!floats && b.as_int() >= 0) {  // by squaring: a base is squared only when a later bit needs it
      int64_t r = 1, base = a.as_int();
      for (uint64_t e = uint64_t(b.as_int()); e != 0; e >>= 1) {
        if (e & 1) r = checked_mul(r, base);
        if (e > 1) base = checked_mul(base, base);
      }
      return Value(r);
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  throw TemplateError("unknown operator " + op);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::undefined: return false;
    case Value::Kind::string:
      if (!item.is_string())
        throw TemplateError("'in <string>' requires string as left operand, not " + item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::array:
      for (const Value& v : container.items())
        if (equal(v, item)) return true;
      return false;
    case Value::Kind::object:
      return (item.is_string() || item.is_number() || item.is_none()) && container.object_ref().find(object_key(item)) != nullptr;
    default: throw TemplateError("argument of type '" + container.type_name() + "' is not iterable");
  }
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  check_defined(a);
  check_defined(b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return !less(b, a);
  return !less(a, b);  // >=
}

}  // namespace

// ---- expression nodes ----

Value Name::eval(Interpreter& in) const { return in.lookup(name); }

Value ListExpr::eval(Interpreter& in) const {
  Array out;
  for (const auto& e : items) out.push_back(e->eval(in));
  return tuple ? Value::tuple(std::move(out)) : Value::array(std::move(out));
}

Value DictExpr::eval(Interpreter& in) const {
  Value out = Value::object();
  for (const auto& [k, v] : items) {
    const Value key = k->eval(in);
    out.object_ref().set(object_key(key), v->eval(in));
  }
  return out;
}

Value Attribute::eval(Interpreter& in) const { return get_attribute(object->eval(in), name); }

namespace {

// Python's slice indices over a sequence of n elements.
std::vector<int64_t> slice_indices(int64_t n, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto as_index = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) throw TemplateError("slice indices must be integers or None");
    return v.as_int();
  };
  const int64_t step = as_index(step_v).value_or(1);
  if (step == 0) throw TemplateError("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> i, int64_t if_none) {
    if (!i) return if_none;
    int64_t v = *i < 0 ? *i + n : *i;
    if (step > 0) return std::clamp<int64_t>(v, 0, n);
    return std::clamp<int64_t>(v, -1, n - 1);
  };
  const int64_t start = clamp(as_index(start_v), step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(as_index(stop_v), step > 0 ? n : -1);
  std::vector<int64_t> out;
  // 128-bit, so that the step past the last index cannot overflow.
  for (__int128 i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(int64_t(i));
  return out;
}

}  // namespace

Value Subscript::eval(Interpreter& in) const {
  const Value object_value = object->eval(in);
  if (!slice) return get_item(object_value, index->eval(in));
  check_defined(object_value);
  const Value s = start ? start->eval(in) : Value::none(), e = stop ? stop->eval(in) : Value::none(),
              st = step ? step->eval(in) : Value::none();
  if (object_value.is_string()) {
    const auto chars = utf8_code_points(object_value.as_string());
    std::string out;
    for (int64_t i : slice_indices(int64_t(chars.size()), s, e, st)) utf8_append(out, chars[size_t(i)]);
    return Value(std::move(out));
  }
  if (object_value.is_array()) {
    Array out;
    for (int64_t i : slice_indices(int64_t(object_value.items().size()), s, e, st))
      out.push_back(object_value.items()[size_t(i)]);
    return object_value.is_tuple() ? Value::tuple(std::move(out)) : Value::array(std::move(out));
  }
  throw TemplateError("'" + object_value.type_name() + "' object is not subscriptable");
}

CallArgs Arguments::eval(Interpreter& in) const {
  CallArgs args;
  for (const auto& e : positional) args.positional.push_back(e->eval(in));
  if (star)
    for (Value& v : iterate(star->eval(in))) args.positional.push_back(std::move(v));
  for (const auto& [k, e] : keyword) args.keyword.emplace_back(k, e->eval(in));
  if (star_star) {
    const Value kw = star_star->eval(in);
    if (!kw.is_object()) throw TemplateError("argument after ** must be a mapping, not " + kw.type_name());
    for (const auto& [k, v] : kw.object_ref().entries) args.keyword.emplace_back(k, v);
  }
  return args;
}

Value Call::eval(Interpreter& in) const {
  const Value f = callee->eval(in);
  CallArgs a = args.eval(in);
  check_defined(f);
  if (!f.is_callable()) throw TemplateError("'" + f.type_name() + "' object is not callable");
  in.step();
  return f.call(a, in);
}

Value FilterExpr::apply(Interpreter& in, Value v) const {
  CallArgs a = args.eval(in);
  in.step();
  return apply_filter(name, std::move(v), a, in);
}
Value FilterExpr::eval(Interpreter& in) const { return apply(in, value->eval(in)); }

Value TestExpr::eval(Interpreter& in) const {
  const Value v = value->eval(in);
  CallArgs a = args.eval(in);
  return Value(apply_test(name, v, a, in) != negated);
}

Value Unary::eval(Interpreter& in) const {
  const Value v = operand->eval(in);
  if (op == Op::logical_not) return Value(!v.truthy());
  check_defined(v);
  if (!v.is_number()) throw TemplateError("bad operand type for unary " + std::string(op == Op::negate ? "-" : "+") + ": '" + v.type_name() + "'");
  if (op == Op::plus) return v.is_bool() ? Value(v.as_int()) : v;
  return v.is_float() ? Value(-v.as_double()) : Value(checked_neg(v.as_int()));
}

Value Binary::eval(Interpreter& in) const {
  if (op == "and") {
    Value l = left->eval(in);
    return l.truthy() ? right->eval(in) : l;
  }
  if (op == "or") {
    Value l = left->eval(in);
    return l.truthy() ? l : right->eval(in);
  }
  const Value l = left->eval(in), r = right->eval(in);
  if (op == "~") {
    std::string text = to_str(l) + to_str(r);
    in.check_size(text.size());
    return Value(std::move(text));
  }
  return arithmetic(op, l, r, in);
}

Value Compare::eval(Interpreter& in) const {
  Value l = first->eval(in);
  for (const auto& [op, e] : rest) {
    Value r = e->eval(in);
    if (!compare(op, l, r)) return Value(false);
    l = std::move(r);
  }
  return Value(true);
}

Value Conditional::eval(Interpreter& in) const {
  if (test->eval(in).truthy()) return then->eval(in);
  if (otherwise) return otherwise->eval(in);
  return Value::undefined("the inline if-expression on line " + std::to_string(line) +
                          " evaluated to false and no else section was defined.");
}

}  // namespace kiln::text::jinja
