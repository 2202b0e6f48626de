// The one dynamic value a Jinja template computes with, with the Python
// semantics chat templates rely on (as jinja2 runs them in transformers):
// truthiness, == across int/float/bool, lists and dicts shared by reference,
// dicts that keep their insertion order, and an `undefined` that carries the
// message to raise when a template uses it for more than a test.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::text::jinja {

// What a template raises: its own raise_exception text, an undefined name
// used, a type error, a limit reached. The message is what transformers'
// jinja2 says for the same template and input, where the two can agree.
class TemplateError : public Error {
 public:
  explicit TemplateError(const std::string& what) : Error(what) {}
};

class Value;
using Array = std::vector<Value>;

// A dict: keys in insertion order (Python 3.7+ dicts, which `items()` and
// `tojson` follow). Keys are strings; the few non-string keys a template
// writes ({0: 0, 512: 128}) are stored encoded (object_key) and come back
// typed (key_value). A namespace() is a dict whose attributes
// `{% set ns.x = ... %}` may assign.
struct Object {
  std::vector<std::pair<std::string, Value>> entries;
  bool is_namespace = false;

  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  void set(const std::string& key, Value value);
};

class Value;
std::string object_key(const Value& key);
Value key_value(const std::string& stored);

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

class Interpreter;
using Function = std::function<Value(CallArgs&, Interpreter&)>;

class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, floating, string, array, object, callable };

  Value() = default;  // undefined, with no message of its own
  Value(bool b) : kind_(Kind::boolean), boolean_(b) {}
  Value(int i) : kind_(Kind::integer), integer_(i) {}
  Value(int64_t i) : kind_(Kind::integer), integer_(i) {}
  Value(double d) : kind_(Kind::floating), floating_(d) {}
  Value(std::string s) : kind_(Kind::string), text_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::string), text_(s) {}

  static Value none();
  // A markupsafe.Markup string (|safe, |escape): `+` with a plain string
  // escapes the plain one, as Markup.__add__ does even with autoescape off.
  static Value markup(std::string s);
  // `hint` is the error a use raises ("'x' is undefined", "'dict object' has no attribute 'y'").
  static Value undefined(std::string hint);
  static Value array(Array items = {});
  static Value tuple(Array items);
  // What jinja2's map, select, reject, items, unique and batch filters give:
  // a Python generator, which iterates but has no len(), is always true, and
  // that tojson refuses.
  static Value generator(Array items);
  static Value object(std::shared_ptr<Object> o = nullptr);
  static Value function(std::string name, Function f);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_int() const { return kind_ == Kind::integer; }
  bool is_float() const { return kind_ == Kind::floating; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_markup() const { return kind_ == Kind::string && markup_; }
  bool is_array() const { return kind_ == Kind::array; }
  bool is_tuple() const { return kind_ == Kind::array && sequence_ == Sequence::tuple; }
  bool is_generator() const { return kind_ == Kind::array && sequence_ == Sequence::generator; }
  bool is_object() const { return kind_ == Kind::object; }
  bool is_callable() const { return kind_ == Kind::callable; }

  bool as_bool() const { return boolean_; }
  int64_t as_int() const { return is_bool() ? int64_t(boolean_) : integer_; }
  double as_double() const { return is_float() ? floating_ : double(as_int()); }
  const std::string& as_string() const { return text_; }
  // The list of an array (shared: appending through one copy shows in all).
  Array& items() const { return *array_; }
  Object& object_ref() const { return *object_; }
  const std::string& function_name() const { return text_; }
  Value call(CallArgs& args, Interpreter& in) const { return (*function_)(args, in); }
  // The message an undefined raises when used.
  std::string undefined_message() const { return text_.empty() ? "value is undefined" : text_; }

  // Python's bool(x); an undefined is false.
  bool truthy() const;
  // The type's name as Python's errors and jinja's messages spell it ("str", "dict", "NoneType").
  std::string type_name() const;

 private:
  Kind kind_ = Kind::undefined;
  enum class Sequence { list, tuple, generator };
  bool boolean_ = false, markup_ = false;
  Sequence sequence_ = Sequence::list;
  int64_t integer_ = 0;
  double floating_ = 0;
  std::string text_;  // a string, an undefined's message, a function's name
  std::shared_ptr<Array> array_;
  std::shared_ptr<Object> object_;
  std::shared_ptr<Function> function_;
};

// Python's ==, which templates use across types (1 == 1.0 == True).
bool equal(const Value& a, const Value& b);
// Python's <; a TemplateError for types Python cannot order.
bool less(const Value& a, const Value& b);

// Decimal digits as an int64; a TemplateError when they do not fit.
int64_t parse_int64(const std::string& digits);

// markupsafe's escape(): & < > ' " as entities.
std::string html_escape(const std::string& s);

// Python's str() and repr() of a value, as `{{ x }}` prints it (None, True,
// ['a', 1], {'k': 'v'}, 1.0); an undefined prints as nothing.
std::string to_str(const Value& v);
std::string to_repr(const Value& v);
// Python's repr of a float: the shortest text that reads back the same number.
std::string float_repr(double d);

// json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...),
// transformers' tojson. indent < 0: none.
struct JsonStyle {
  int indent = -1;
  std::string item_separator, key_separator;  // empty: json.dumps' defaults for the indent
  bool sort_keys = false;
  bool ensure_ascii = false;
};
std::string to_json(const Value& v, const JsonStyle& style = {});

}  // namespace kiln::text::jinja
