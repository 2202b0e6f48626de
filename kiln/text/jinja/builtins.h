// What a template can call without defining it: jinja2's filters and tests,
// the Python methods of str, dict and list that the immutable sandbox lets
// a template use, and the globals transformers adds (raise_exception,
// strftime_now, namespace, dict, range).
#pragma once
#include <string>
#include <vector>

#include "kiln/text/jinja/value.h"

namespace kiln::text::jinja {

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(const std::string& name, Value value, CallArgs& args, Interpreter& in);
bool apply_test(const std::string& name, const Value& value, CallArgs& args, Interpreter& in);

// value.name as jinja2's sandbox resolves it: a method of the value's
// Python type first, then a dict key (or namespace attribute); otherwise an
// undefined that says what was missing.
Value get_attribute(const Value& value, const std::string& name);
// value[index] as jinja2 resolves it: the item, else an attribute of that name.
Value get_item(const Value& value, const Value& index);

// The functions every template sees (range, dict, namespace, joiner, cycler).
void add_builtin_globals(Object& globals);

// Helpers the interpreter shares with the builtins.
std::vector<Value> iterate(const Value& v);  // for loops, list(), |list: keys of a dict, characters of a str
int64_t python_length(const Value& v);       // len(); a TemplateError for what has none
std::string python_strip(const std::string& s, const std::string* chars, bool left, bool right);
std::string python_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                           const Interpreter& in);
// Python's fmt % args (%s %r %d %i %x %f %e %g %%); args a tuple or one value.
Value python_percent_format(const std::string& fmt, const Value& args);
std::string python_title(const std::string& s, bool every_word);
std::string python_case(const std::string& s, bool upper);  // str.upper() / str.lower()  // title(), or capitalize() when false

// Argument access for builtins: positional i or keyword `name`, else the default.
const Value* argument(const CallArgs& args, size_t position, const char* name);

}  // namespace kiln::text::jinja
