// Runs a parsed template: the variable scopes (a for loop's body and a
// macro call each get their own, as in jinja2, so a plain {% set %} inside
// them does not leak out: templates use namespace() for that), the output
// being written, loop control, and the limits that keep an untrusted
// template from running away.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/text/jinja/value.h"

namespace kiln::text::jinja {

struct Limits {
  int64_t max_steps = 5'000'000;           // statements, loop iterations and calls
  size_t max_output_bytes = 64u << 20;     // the rendered text and every string built on the way
  int max_call_depth = 200;                // macro calls inside macro calls
};

using Frame = std::unordered_map<std::string, Value>;

class Interpreter {
 public:
  Interpreter(Frame context, Limits limits, int64_t now_unix_seconds);

  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value value);

  // Scopes: a for body, a macro call. Macros run in the scopes they were defined in.
  using Scopes = std::vector<std::shared_ptr<Frame>>;
  void push_scope() { scopes_.push_back(std::make_shared<Frame>()); }
  void pop_scope() { scopes_.pop_back(); }
  const Scopes& scopes() const { return scopes_; }
  Scopes swap_scopes(Scopes s) {
    std::swap(s, scopes_);
    return s;
  }

  // Output: writes go to the innermost capture (a macro's or block set's text).
  void write(const std::string& text);
  void begin_capture() { captures_.emplace_back(); }
  std::string end_capture();

  // One unit of work; a TemplateError once the template has run too long.
  void step();
  void check_size(size_t bytes) const;
  void enter_call();
  void leave_call() { --call_depth_; }

  enum class Flow { normal, break_loop, continue_loop };
  Flow flow = Flow::normal;

  int64_t now() const { return now_; }

 private:
  Scopes scopes_;
  std::vector<std::string> captures_;
  Limits limits_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int64_t now_;
};

}  // namespace kiln::text::jinja
