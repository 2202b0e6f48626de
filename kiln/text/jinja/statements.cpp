// Statements: how each {% %} node of ast.h runs. Scoping follows jinja2: a
// for body and a macro call get their own scope (a plain set inside does
// not leak out), if/elif/else do not.
#include "kiln/text/jinja/ast.h"
#include "kiln/text/jinja/builtins.h"
#include "kiln/text/jinja/interpreter.h"

namespace kiln::text::jinja {

void run_body(const Body& body, Interpreter& in) {
  for (const auto& s : body) {
    in.step();
    s->run(in);
    if (in.flow != Interpreter::Flow::normal) return;
  }
}

void TextStmt::run(Interpreter& in) const { in.write(text); }

void Output::run(Interpreter& in) const { in.write(to_str(value->eval(in))); }

void If::run(Interpreter& in) const {
  for (const auto& [test, body] : branches)
    if (test->eval(in).truthy()) return run_body(body, in);
  run_body(otherwise, in);
}

void Target::assign(Interpreter& in, const Value& v) const {
  if (namespace_object) {
    const Value ns = namespace_object->eval(in);
    if (!ns.is_object() || !ns.object_ref().is_namespace)
      throw TemplateError("cannot assign attribute on non-namespace object");
    if (!attribute.empty() && attribute[0] == '_')
      throw TemplateError("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
                          attribute + "'. Please rename the attribute.");
    ns.object_ref().set(attribute, v);
    return;
  }
  if (names.size() == 1) return in.assign(names[0], v);
  const std::vector<Value> items = iterate(v);
  if (items.size() != names.size())
    throw TemplateError(items.size() > names.size()
                            ? "too many values to unpack (expected " + std::to_string(names.size()) + ")"
                            : "not enough values to unpack (expected " + std::to_string(names.size()) + ", got " +
                                  std::to_string(items.size()) + ")");
  for (size_t i = 0; i < names.size(); ++i) in.assign(names[i], items[i]);
}

namespace {

// The `loop` of one iteration: index, first, last, length, previtem, cycle(), ...
Value loop_object(const std::vector<Value>& items, size_t i) {
  Value loop = Value::object();
  Object& o = loop.object_ref();
  const int64_t n = int64_t(items.size()), index0 = int64_t(i);
  o.set("index0", Value(index0));
  o.set("index", Value(index0 + 1));
  o.set("revindex0", Value(n - index0 - 1));
  o.set("revindex", Value(n - index0));
  o.set("first", Value(i == 0));
  o.set("last", Value(index0 == n - 1));
  o.set("length", Value(n));
  o.set("depth0", Value(0));
  o.set("depth", Value(1));
  o.set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
  o.set("nextitem", index0 + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
  o.set("cycle", Value::function("cycle", [index0](CallArgs& a, Interpreter&) {
          if (a.positional.empty()) throw TemplateError("no items for cycling given");
          return a.positional[size_t(index0) % a.positional.size()];
        }));
  return loop;
}

}  // namespace

void For::run(Interpreter& in) const {
  std::vector<Value> items = iterate(iterable->eval(in));
  in.push_scope();
  if (filter) {  // for x in xs if test: the test sees each item; the loop counts only those it keeps
    std::vector<Value> kept;
    for (Value& v : items) {
      in.step();
      target.assign(in, v);
      if (filter->eval(in).truthy()) kept.push_back(std::move(v));
    }
    items = std::move(kept);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    in.step();
    target.assign(in, items[i]);
    in.assign("loop", loop_object(items, i));
    run_body(body, in);
    if (in.flow == Interpreter::Flow::break_loop) {
      in.flow = Interpreter::Flow::normal;
      break;
    }
    in.flow = Interpreter::Flow::normal;
  }
  in.pop_scope();
  if (items.empty()) run_body(otherwise, in);
}

void Set::run(Interpreter& in) const { target.assign(in, value->eval(in)); }

void SetBlock::run(Interpreter& in) const {
  in.begin_capture();
  run_body(body, in);
  Value v(in.end_capture());
  for (const auto& f : filters) v = f->apply(in, std::move(v));
  target.assign(in, v);
}

namespace {

// A macro as a callable: its parameters bound from the call, run in a scope
// of its own over the scopes it was defined in; returns the text it wrote.
// It holds those scopes weakly: the macro is stored in one of them, and a
// strong hold would be a cycle that outlives the render.
Value macro_function(const Macro* m, const Interpreter::Scopes& scopes) {
  std::vector<std::weak_ptr<Frame>> defined_in(scopes.begin(), scopes.end());
  return Value::function(m->name, [m, defined_in](CallArgs& a, Interpreter& in) {
    Interpreter::Scopes frames;
    for (const auto& weak : defined_in) {
      frames.push_back(weak.lock());
      if (!frames.back()) throw TemplateError("macro '" + m->name + "' was called after its scope ended");
    }
    in.enter_call();
    Interpreter::Scopes saved = in.swap_scopes(std::move(frames));
    in.push_scope();
    Array varargs;
    for (size_t i = 0; i < a.positional.size(); ++i) {
      if (i < m->params.size())
        in.assign(m->params[i].first, a.positional[i]);
      else
        varargs.push_back(a.positional[i]);
    }
    Value kwargs = Value::object();
    for (auto& [k, v] : a.keyword) {
      if (k == "caller") {  // from a {% call %} block
        in.assign(k, v);
        continue;
      }
      bool is_param = false;
      for (const auto& p : m->params) is_param = is_param || p.first == k;
      if (is_param)
        in.assign(k, v);
      else
        kwargs.object_ref().set(k, v);
    }
    for (size_t i = 0; i < m->params.size(); ++i) {
      const auto& [name, default_value] = m->params[i];
      bool given = i < a.positional.size();
      for (const auto& kv : a.keyword) given = given || kv.first == name;
      if (!given)
        in.assign(name, default_value ? default_value->eval(in)
                                      : Value::undefined("parameter '" + name + "' was not provided"));
    }
    in.assign("varargs", Value::tuple(std::move(varargs)));
    in.assign("kwargs", kwargs);
    in.begin_capture();
    try {
      run_body(m->body, in);
    } catch (...) {
      in.end_capture();
      in.swap_scopes(std::move(saved));
      in.leave_call();
      throw;
    }
    std::string text = in.end_capture();
    in.swap_scopes(std::move(saved));
    in.leave_call();
    return Value(std::move(text));
  });
}

}  // namespace

void Macro::run(Interpreter& in) const { in.assign(name, macro_function(this, in.scopes())); }

void CallBlock::run(Interpreter& in) const {
  const Value f = call->callee->eval(in);
  if (!f.is_callable()) throw TemplateError("{% call %} on line " + std::to_string(line) + " needs a macro");
  CallArgs a = call->args.eval(in);
  const Value caller_fn = macro_function(caller.get(), in.scopes());
  // The called macro finds `caller` in the scope its call opens.
  a.keyword.emplace_back("caller", caller_fn);
  in.write(to_str(f.call(a, in)));
}

void FilterBlock::run(Interpreter& in) const {
  in.begin_capture();
  run_body(body, in);
  Value v(in.end_capture());
  for (const auto& f : filters) v = f->apply(in, std::move(v));
  in.write(to_str(v));
}

void With::run(Interpreter& in) const {
  in.push_scope();
  for (const auto& [target, value] : assignments) target.assign(in, value->eval(in));
  run_body(body, in);
  in.pop_scope();
}

void Scope::run(Interpreter& in) const { run_body(body, in); }

void LoopControl::run(Interpreter& in) const {
  in.flow = is_break ? Interpreter::Flow::break_loop : Interpreter::Flow::continue_loop;
}

}  // namespace kiln::text::jinja
