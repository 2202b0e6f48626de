// A parsed template: expressions that evaluate to a Value and statements
// that write output, each node knowing how to run itself against an
// Interpreter (interpreter.cpp, statements.cpp). The node set is jinja2's,
// less what chat templates cannot reach (includes, inheritance, autoescape).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/text/jinja/value.h"

namespace kiln::text::jinja {

class Interpreter;

struct Expr {
  int line = 0;
  virtual ~Expr() = default;
  virtual Value eval(Interpreter& in) const = 0;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Stmt {
  int line = 0;
  virtual ~Stmt() = default;
  virtual void run(Interpreter& in) const = 0;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// ---- expressions ----

struct Literal : Expr {
  Value value;
  Value eval(Interpreter&) const override { return value; }
};

struct Name : Expr {
  std::string name;
  Value eval(Interpreter& in) const override;
};

struct ListExpr : Expr {
  std::vector<ExprPtr> items;
  bool tuple = false;
  Value eval(Interpreter& in) const override;
};

struct DictExpr : Expr {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
  Value eval(Interpreter& in) const override;
};

struct Attribute : Expr {  // a.b
  ExprPtr object;
  std::string name;
  Value eval(Interpreter& in) const override;
};

struct Subscript : Expr {  // a[i], a[start:stop:step]
  ExprPtr object, index;
  bool slice = false;
  ExprPtr start, stop, step;
  Value eval(Interpreter& in) const override;
};

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star, star_star;  // *args, **kwargs
  CallArgs eval(Interpreter& in) const;
};

struct Call : Expr {
  ExprPtr callee;
  Arguments args;
  Value eval(Interpreter& in) const override;
};

struct FilterExpr : Expr {  // value | name(args)
  ExprPtr value;  // null inside a {% filter %} block: the block's text
  std::string name;
  Arguments args;
  Value eval(Interpreter& in) const override;
  Value apply(Interpreter& in, Value v) const;
};

struct TestExpr : Expr {  // value is [not] name(args)
  ExprPtr value;
  std::string name;
  Arguments args;
  bool negated = false;
  Value eval(Interpreter& in) const override;
};

struct Unary : Expr {
  enum class Op { negate, plus, logical_not } op;
  ExprPtr operand;
  Value eval(Interpreter& in) const override;
};

struct Binary : Expr {
  // and/or short-circuit; the rest evaluate both sides.
  std::string op;  // + - * / // % ** ~ and or in "not in"
  ExprPtr left, right;
  Value eval(Interpreter& in) const override;
};

struct Compare : Expr {  // a < b <= c: chained as Python chains them
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> rest;
  Value eval(Interpreter& in) const override;
};

struct Conditional : Expr {  // a if test else b (no else: undefined)
  ExprPtr then, test, otherwise;
  Value eval(Interpreter& in) const override;
};

// ---- statements ----

struct TextStmt : Stmt {
  std::string text;
  void run(Interpreter& in) const override;
};

struct Output : Stmt {
  ExprPtr value;
  void run(Interpreter& in) const override;
};

struct If : Stmt {
  std::vector<std::pair<ExprPtr, Body>> branches;  // if and each elif
  Body otherwise;
  void run(Interpreter& in) const override;
};

// Where an assignment goes: names (unpacked from a sequence when several),
// or one namespace attribute.
struct Target {
  std::vector<std::string> names;
  ExprPtr namespace_object;  // set ns.attr = ...
  std::string attribute;
  int line = 0;
  void assign(Interpreter& in, const Value& v) const;
};

struct For : Stmt {
  Target target;
  ExprPtr iterable, filter;
  Body body, otherwise;
  void run(Interpreter& in) const override;
};

struct Set : Stmt {
  Target target;
  ExprPtr value;
  void run(Interpreter& in) const override;
};

struct SetBlock : Stmt {  // {% set x | filters %}...{% endset %}
  Target target;
  Body body;
  std::vector<std::unique_ptr<FilterExpr>> filters;
  void run(Interpreter& in) const override;
};

struct Macro : Stmt {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // with their defaults (null: none)
  Body body;
  void run(Interpreter& in) const override;  // defines it
};

struct CallBlock : Stmt {  // {% call(params) macro(args) %}body{% endcall %}
  std::shared_ptr<Macro> caller;
  std::unique_ptr<Call> call;
  void run(Interpreter& in) const override;
};

struct FilterBlock : Stmt {
  Body body;
  std::vector<std::unique_ptr<FilterExpr>> filters;
  void run(Interpreter& in) const override;
};

struct With : Stmt {
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
  void run(Interpreter& in) const override;
};

// transformers' {% generation %}: marks the assistant's tokens; renders its body.
struct Scope : Stmt {
  Body body;
  void run(Interpreter& in) const override;
};

struct LoopControl : Stmt {
  bool is_break = true;
  void run(Interpreter& in) const override;
};

void run_body(const Body& body, Interpreter& in);

// Parses tokens into a template body; syntax errors name the line.
Body parse(const std::string& source);

}  // namespace kiln::text::jinja
