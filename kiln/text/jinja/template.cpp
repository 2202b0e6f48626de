#include "kiln/text/jinja/template.h"

#include <ctime>

#include "kiln/text/jinja/ast.h"
#include "kiln/text/jinja/builtins.h"

namespace kiln::text::jinja {

namespace {
template <typename Json>
Value convert(const Json& j, int depth) {
  if (depth > 512) throw TemplateError("the template's input nests deeper than 512 levels");
  switch (j.type()) {
    case Json::value_t::null: return Value::none();
    case Json::value_t::boolean: return Value(j.template get<bool>());
    case Json::value_t::number_integer: return Value(j.template get<int64_t>());
    case Json::value_t::number_unsigned: return Value(int64_t(j.template get<uint64_t>()));
    case Json::value_t::number_float: return Value(j.template get<double>());
    case Json::value_t::string: return Value(j.template get<std::string>());
    case Json::value_t::array: {
      Array items;
      for (const auto& x : j) items.push_back(convert(x, depth + 1));
      return Value::array(std::move(items));
    }
    case Json::value_t::object: {
      Value o = Value::object();
      for (auto it = j.begin(); it != j.end(); ++it) o.object_ref().set(it.key(), convert(it.value(), depth + 1));
      return o;
    }
    default: return Value::none();
  }
}
}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return convert(j, 0); }
Value from_json(const nlohmann::json& j) { return convert(j, 0); }

Template::Template(const std::string& source)
    : body_(std::make_shared<const std::vector<std::unique_ptr<Stmt>>>(parse(source))) {}

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  Object globals;
  add_builtin_globals(globals);
  Frame frame;
  for (auto& [k, v] : globals.entries) frame[k] = v;
  if (!context.is_object()) throw TemplateError("a template's context must be a JSON object");
  for (auto it = context.begin(); it != context.end(); ++it) frame[it.key()] = from_json(it.value());
  Interpreter in(std::move(frame), options.limits, options.now_unix_seconds.value_or(int64_t(std::time(nullptr))));
  run_body(*body_, in);
  return in.end_capture();
}

}  // namespace kiln::text::jinja
