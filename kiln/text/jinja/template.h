// A Jinja template, parsed once and rendered many times: the engine that
// runs the chat templates real models ship (Kiln's own code; no C++ Jinja
// library is packaged for Debian 12). It runs them as transformers'
// apply_chat_template does: jinja2's ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, the loopcontrols and {% generation %}
// extensions, transformers' tojson, raise_exception and strftime_now.
// Everything a template raises, and every limit it reaches (steps, output
// size, macro depth), is a TemplateError with the template's message.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kiln/text/jinja/interpreter.h"
#include "kiln/text/jinja/value.h"

namespace kiln::text::jinja {

struct Stmt;

struct RenderOptions {
  Limits limits;
  std::optional<int64_t> now_unix_seconds;  // strftime_now's clock; unset: the current time
};

class Template {
 public:
  // Parses the source; a TemplateError names the line of a syntax error.
  explicit Template(const std::string& source);
  // Renders with the context's keys as variables (messages, tools, bos_token, ...).
  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
};

// JSON as a template sees it: objects keep their key order.
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

}  // namespace kiln::text::jinja
