// jinja2's parser (jinja2/parser.py) over the lexer's tokens, with its
// operator precedence: conditional < or < and < not < comparison < + - <
// ~ < * / // % < ** < unary - + < filters and tests < postfix . [] ().
// Unknown filters and tests fail here, as jinja2's compiler fails them
// ("No filter named 'x'."), before anything renders; inside an if
// statement or a conditional expression jinja2 defers the error to the
// moment the filter runs, and so does Kiln.
#include <set>

#include "kiln/text/jinja/ast.h"
#include "kiln/text/jinja/builtins.h"
#include "kiln/text/jinja/lexer.h"

namespace kiln::text::jinja {
namespace {

using T = Token::Type;
constexpr int kMaxNesting = 200;  // expression and block depth: deeper is refused, not a stack overflow

template <typename Node>
std::unique_ptr<Node> node(int line) {
  auto n = std::make_unique<Node>();
  n->line = line;
  return n;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse_template() {
    Body body = subparse({});
    if (peek().type != T::end) fail("unexpected end tag");
    for (const Unknown& u : unknown_)
      if (!u.soft)
        throw TemplateError("chat template syntax error at line " + std::to_string(u.line) + ": No " + u.kind +
                            " named '" + u.name + "'.");
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool is_op(const std::string& op, size_t ahead = 0) const {
    return peek(ahead).type == T::op && peek(ahead).text == op;
  }
  bool is_name(const std::string& name, size_t ahead = 0) const {
    return peek(ahead).type == T::name && peek(ahead).text == name;
  }
  [[noreturn]] void fail(const std::string& what) const {
    const Token& t = peek();
    std::string found = t.type == T::end            ? "end of template"
                        : t.type == T::block_end     ? "'%}'"
                        : t.type == T::variable_end  ? "'}}'"
                        : t.type == T::text          ? "text"
                                                     : "'" + t.text + "'";
    throw TemplateError("chat template syntax error at line " + std::to_string(t.line) + ": " + what + " (found " +
                        found + ")");
  }
  void expect_op(const std::string& op) {
    if (!is_op(op)) fail("expected '" + op + "'");
    next();
  }
  std::string expect_name() {
    if (peek().type != T::name) fail("expected a name");
    return next().text;
  }
  void expect_block_end() {
    if (peek().type != T::block_end) fail("expected the end of the statement '%}'");
    next();
  }
  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail("the template nests deeper than " + std::to_string(kMaxNesting) + " levels");
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  // Runs f with soft frames on (an if) or off (a for, macro, block: jinja2's inner frames).
  template <typename F>
  auto with_soft(bool soft, F f) {
    const bool saved = soft_;
    soft_ = soft;
    auto result = f();
    soft_ = saved;
    return result;
  }


  // ---- statements ----

  // Statements until a {% name %} in `ends` (left unconsumed: the caller reads it).
  Body subparse(const std::set<std::string>& ends) {
    Depth guard(*this);
    Body body;
    while (peek().type != T::end) {
      const Token& t = peek();
      if (t.type == T::text) {
        auto s = node<TextStmt>(t.line);
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (t.type == T::variable_begin) {
        next();
        auto s = node<Output>(t.line);
        s->value = parse_tuple();
        if (peek().type != T::variable_end) fail("expected the end of the print statement '}}'");
        next();
        body.push_back(std::move(s));
      } else if (t.type == T::block_begin) {
        if (peek(1).type == T::name && ends.count(peek(1).text)) return body;
        next();
        body.push_back(statement());
      } else {
        fail("unexpected token");
      }
    }
    if (!ends.empty()) fail("a block is never closed: expected one of {% " + *ends.begin() + " %}");
    return body;
  }

  // The body of a block through its end tag: {% end<name> %}.
  Body block_body(const std::string& end) {
    Body b = subparse({end});
    next();  // block_begin
    next();  // end name
    expect_block_end();
    return b;
  }

  StmtPtr statement() {
    const Token& t = peek();
    if (t.type != T::name) fail("expected a statement name");
    const std::string name = t.text;
    const int line = t.line;
    next();
    if (name == "if") return parse_if(line);
    if (name == "for") return parse_for(line);
    if (name == "set") return parse_set(line);
    if (name == "macro") return parse_macro(line);
    if (name == "call") return parse_call_block(line);
    if (name == "filter") return parse_filter_block(line);
    if (name == "with") return parse_with(line);
    if (name == "generation") {
      auto s = node<Scope>(line);
      expect_block_end();
      s->body = block_body("endgeneration");
      return s;
    }
    if (name == "break" || name == "continue") {
      if (loops_ == 0) fail("'" + name + "' outside of a loop");
      auto s = node<LoopControl>(line);
      s->is_break = name == "break";
      expect_block_end();
      return s;
    }
    if (name == "include" || name == "import" || name == "from" || name == "extends" || name == "block")
      throw TemplateError("chat template syntax error at line " + std::to_string(line) + ": '" + name +
                          "' needs other template files, which a chat template cannot load");
    throw TemplateError("chat template syntax error at line " + std::to_string(line) + ": unknown tag '" + name + "'");
  }

  StmtPtr parse_if(int line) {
    return with_soft(true, [&] { return parse_if_soft(line); });
  }
  StmtPtr parse_if_soft(int line) {
    auto s = node<If>(line);
    while (true) {
      ExprPtr test = parse_tuple(false);
      expect_block_end();
      Body body = subparse({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(test), std::move(body));
      next();  // block_begin
      const std::string tag = next().text;
      if (tag == "elif") continue;
      if (tag == "else") {
        expect_block_end();
        s->otherwise = block_body("endif");
      } else {
        expect_block_end();
      }
      return s;
    }
  }

  Target parse_target(bool allow_attribute) {
    Target target;
    target.line = peek().line;
    const bool parenthesized = is_op("(");
    if (parenthesized) next();
    target.names.push_back(expect_name());
    if (allow_attribute && is_op(".") && !parenthesized) {
      next();
      auto ns = node<Name>(target.line);
      ns->name = target.names[0];
      target.names.clear();
      target.namespace_object = std::move(ns);
      target.attribute = expect_name();
      return target;
    }
    while (is_op(",")) {
      next();
      if (peek().type != T::name) break;
      target.names.push_back(expect_name());
    }
    if (parenthesized) expect_op(")");
    return target;
  }

  StmtPtr parse_for(int line) {
    auto s = node<For>(line);
    s->target = parse_target(false);
    if (!is_name("in")) fail("expected 'in' in the for loop");
    next();
    s->iterable = parse_tuple(false, false);
    if (is_name("if")) {
      next();
      s->filter = with_soft(false, [&] { return parse_expression(); });
    }
    if (is_name("recursive")) fail("recursive for loops are not supported in chat templates");
    expect_block_end();
    ++loops_;
    s->body = with_soft(false, [&] { return subparse({"endfor", "else"}); });
    --loops_;
    next();
    if (next().text == "else") {
      expect_block_end();
      s->otherwise = with_soft(false, [&] { return block_body("endfor"); });
    } else {
      expect_block_end();
    }
    return s;
  }

  std::vector<std::unique_ptr<FilterExpr>> filter_chain(bool first_needs_bar) {
    std::vector<std::unique_ptr<FilterExpr>> chain;
    bool first = true;
    while ((first && !first_needs_bar) || is_op("|")) {
      if (!(first && !first_needs_bar)) next();
      first = false;
      chain.push_back(parse_filter(nullptr));
    }
    return chain;
  }

  StmtPtr parse_set(int line) {
    Target target = parse_target(true);
    if (is_op("=")) {
      next();
      auto s = node<Set>(line);
      s->target = std::move(target);
      s->value = parse_tuple();
      expect_block_end();
      return s;
    }
    auto s = node<SetBlock>(line);
    s->target = std::move(target);
    s->filters = filter_chain(true);
    expect_block_end();
    s->body = with_soft(false, [&] { return block_body("endset"); });
    return s;
  }

  std::unique_ptr<Macro> macro_signature(int line, std::string name) {
    auto m = node<Macro>(line);
    m->name = std::move(name);
    expect_op("(");
    while (!is_op(")")) {
      if (!m->params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string param = expect_name();
      ExprPtr default_value;
      if (is_op("=")) {
        next();
        default_value = parse_expression();
      }
      m->params.emplace_back(std::move(param), std::move(default_value));
    }
    next();
    return m;
  }

  StmtPtr parse_macro(int line) {
    const std::string name = expect_name();
    auto m = macro_signature(line, name);
    expect_block_end();
    const int loops = loops_;
    loops_ = 0;
    m->body = with_soft(false, [&] { return block_body("endmacro"); });
    loops_ = loops;
    return m;
  }

  StmtPtr parse_call_block(int line) {
    auto s = node<CallBlock>(line);
    std::unique_ptr<Macro> caller = is_op("(") ? macro_signature(line, "caller") : node<Macro>(line);
    caller->name = "caller";
    ExprPtr call = parse_expression();
    auto* as_call = dynamic_cast<Call*>(call.get());
    if (!as_call) fail("{% call %} needs a macro call");
    call.release();
    s->call.reset(as_call);
    expect_block_end();
    caller->body = with_soft(false, [&] { return block_body("endcall"); });
    s->caller = std::move(caller);
    return s;
  }

  StmtPtr parse_filter_block(int line) {
    auto s = node<FilterBlock>(line);
    s->filters = filter_chain(false);
    expect_block_end();
    s->body = with_soft(false, [&] { return block_body("endfilter"); });
    return s;
  }

  StmtPtr parse_with(int line) {
    auto s = node<With>(line);
    while (peek().type != T::block_end) {
      if (!s->assignments.empty()) expect_op(",");
      Target target = parse_target(false);
      expect_op("=");
      s->assignments.emplace_back(std::move(target), parse_expression());
    }
    expect_block_end();
    s->body = with_soft(false, [&] { return block_body("endwith"); });
    return s;
  }

  // ---- expressions ----

  // a, b (a tuple) or one expression; an empty tuple where nothing follows.
  ExprPtr parse_tuple(bool with_condexpr = true, bool allow_empty = false) {
    const int line = peek().line;
    auto parse_one = [&] { return with_condexpr ? parse_expression() : parse_or(); };
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) {
        if (!is_op(",")) break;
        next();
        is_tuple = true;
      }
      if (peek().type == T::block_end || peek().type == T::variable_end || is_op(")") ||
          (!items.empty() && is_name("if")) || (!items.empty() && is_name("recursive")))
        break;
      items.push_back(parse_one());
    }
    if (items.empty() && !allow_empty) fail("expected an expression");
    if (!is_tuple && items.size() == 1) return std::move(items[0]);
    auto t = node<ListExpr>(line);
    t->items = std::move(items);
    t->tuple = true;
    return t;
  }

  ExprPtr parse_expression() {
    Depth guard(*this);
    const size_t unknown_before = unknown_.size();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      // a if b else c: all three parts compile in a soft frame
      for (size_t k = unknown_before; k < unknown_.size(); ++k) unknown_[k].soft = true;
      auto c = node<Conditional>(peek().line);
      next();
      c->then = std::move(e);
      with_soft(true, [&] {
        c->test = parse_or();
        if (is_name("else")) {
          next();
          c->otherwise = parse_expression();
        }
        return 0;
      });
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    auto b = node<Binary>(line);
    b->op = std::move(op);
    b->left = std::move(left);
    b->right = std::move(right);
    return b;
  }

  // One left-associative level: operands from `operand`, joined by any of `ops`.
  ExprPtr left_assoc(ExprPtr (Parser::*operand)(), std::initializer_list<const char*> ops) {
    ExprPtr e = (this->*operand)();
    while (true) {
      const char* op = nullptr;
      for (const char* o : ops)
        if (is_op(o) || is_name(o)) op = o;
      if (!op) return e;
      const int line = next().line;
      e = binary(op, std::move(e), (this->*operand)(), line);
    }
  }
  ExprPtr parse_or() { return left_assoc(&Parser::parse_and, {"or"}); }
  ExprPtr parse_and() { return left_assoc(&Parser::parse_not, {"and"}); }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Depth guard(*this);
      auto u = node<Unary>(next().line);
      u->op = Unary::Op::logical_not;
      u->operand = parse_not();
      return u;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const int line = peek().line;
    ExprPtr first = parse_math1();
    std::vector<std::pair<std::string, ExprPtr>> rest;
    static const std::set<std::string> ops = {"==", "!=", "<", "<=", ">", ">="};
    while (true) {
      if (peek().type == T::op && ops.count(peek().text)) {
        const std::string op = next().text;
        rest.emplace_back(op, parse_math1());
      } else if (is_name("in")) {
        next();
        rest.emplace_back("in", parse_math1());
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        rest.emplace_back("not in", parse_math1());
      } else {
        break;
      }
    }
    if (rest.empty()) return first;
    auto c = node<Compare>(line);
    c->first = std::move(first);
    c->rest = std::move(rest);
    return c;
  }
  ExprPtr parse_math1() { return left_assoc(&Parser::parse_concat, {"+", "-"}); }
  ExprPtr parse_concat() { return left_assoc(&Parser::parse_math2, {"~"}); }
  ExprPtr parse_math2() { return left_assoc(&Parser::parse_pow, {"*", "/", "//", "%"}); }
  ExprPtr parse_pow() { return left_assoc(&Parser::parse_operand, {"**"}); }
  ExprPtr parse_operand() { return parse_unary(); }
  ExprPtr parse_unary(bool with_filter = true) {
    Depth guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      auto u = node<Unary>(peek().line);
      u->op = next().text == "-" ? Unary::Op::negate : Unary::Op::plus;
      u->operand = parse_unary(false);
      e = std::move(u);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    Depth guard(*this);
    const Token& t = peek();
    const int line = t.line;
    if (t.type == T::name) {
      const std::string name = next().text;
      auto lit = node<Literal>(line);
      if (name == "true" || name == "True") lit->value = Value(true);
      else if (name == "false" || name == "False") lit->value = Value(false);
      else if (name == "none" || name == "None") lit->value = Value::none();
      else {
        auto n = node<Name>(line);
        n->name = name;
        return n;
      }
      return lit;
    }
    if (t.type == T::string) {
      std::string text;
      while (peek().type == T::string) text += next().text;  // adjacent literals join
      auto lit = node<Literal>(line);
      lit->value = Value(std::move(text));
      return lit;
    }
    if (t.type == T::integer || t.type == T::floating) {
      auto lit = node<Literal>(line);
      const std::string digits = next().text;
      try {
        lit->value = t.type == T::integer ? Value(int64_t(std::stoll(digits))) : Value(std::stod(digits));
      } catch (const std::exception&) {
        fail("the number " + digits + " is out of range");
      }
      return lit;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto list = node<ListExpr>(line);
      while (!is_op("]")) {
        if (!list->items.empty()) expect_op(",");
        if (is_op("]")) break;
        list->items.push_back(parse_expression());
      }
      next();
      return list;
    }
    if (is_op("{")) {
      next();
      auto dict = node<DictExpr>(line);
      while (!is_op("}")) {
        if (!dict->items.empty()) expect_op(",");
        if (is_op("}")) break;
        ExprPtr key = parse_expression();
        expect_op(":");
        dict->items.emplace_back(std::move(key), parse_expression());
      }
      next();
      return dict;
    }
    fail("expected an expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (is_op(".")) {
        next();
        const Token& t = peek();
        if (t.type == T::integer) {  // a.0 is a[0]
          auto s = node<Subscript>(line);
          s->object = std::move(e);
          auto lit = node<Literal>(line);
          try {
            lit->value = Value(parse_int64(t.text));
          } catch (const TemplateError&) {
            fail("the index " + t.text + " is out of range");
          }
          next();
          s->index = std::move(lit);
          e = std::move(s);
          continue;
        }
        auto a = node<Attribute>(line);
        a->object = std::move(e);
        a->name = expect_name();
        e = std::move(a);
      } else if (is_op("[")) {
        next();
        e = parse_subscript(std::move(e), line);
      } else if (is_op("(")) {
        auto c = node<Call>(line);
        c->callee = std::move(e);
        c->args = parse_arguments();
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object, int line) {
    auto s = node<Subscript>(line);
    s->object = std::move(object);
    auto part = [&]() -> ExprPtr {
      if (is_op(":") || is_op("]")) return nullptr;
      return parse_expression();
    };
    ExprPtr first = part();
    if (is_op(":")) {
      s->slice = true;
      next();
      s->start = std::move(first);
      s->stop = part();
      if (is_op(":")) {
        next();
        s->step = part();
      }
    } else {
      if (!first) fail("expected an index");
      s->index = std::move(first);
    }
    expect_op("]");
    return s;
  }

  Arguments parse_arguments() {
    Arguments args;
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("**")) {
        next();
        args.star_star = parse_expression();
      } else if (is_op("*")) {
        next();
        args.star = parse_expression();
      } else if (peek().type == T::name && is_op("=", 1)) {
        std::string key = next().text;
        next();
        args.keyword.emplace_back(std::move(key), parse_expression());
      } else {
        args.positional.push_back(parse_expression());
      }
    }
    next();
    return args;
  }

  std::unique_ptr<FilterExpr> parse_filter(ExprPtr value) {
    auto f = node<FilterExpr>(peek().line);
    f->value = std::move(value);
    f->name = expect_name();
    while (is_op(".")) {  // dotted filter names
      next();
      f->name += "." + expect_name();
    }
    if (!has_filter(f->name)) note_unknown("filter", f->name, f->line);
    if (is_op("(")) f->args = parse_arguments();
    return f;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        next();
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        auto t = node<TestExpr>(next().line);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        t->name = expect_name();
        while (is_op(".")) {
          next();
          t->name += "." + expect_name();
        }
        if (!has_test(t->name)) note_unknown("test", t->name, t->line);
        t->value = std::move(e);
        const Token& a = peek();
        if (is_op("(")) {
          t->args = parse_arguments();
        } else if ((a.type == T::name || a.type == T::string || a.type == T::integer || a.type == T::floating ||
                    is_op("[") || is_op("{")) &&
                   !(a.type == T::name && (a.text == "else" || a.text == "or" || a.text == "and"))) {
          // x is divisibleby 3: one argument without parentheses
          if (is_name("is")) fail("expected a test argument");
          t->args.positional.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        auto c = node<Call>(peek().line);
        c->callee = std::move(e);
        c->args = parse_arguments();
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  // A filter or test no builtin has: an error at parse time unless it
  // sits where jinja2 compiles in a soft frame (an if, a conditional).
  struct Unknown {
    std::string kind, name;
    int line;
    bool soft;
  };
  void note_unknown(const char* kind, const std::string& name, int line) { unknown_.push_back({kind, name, line, soft_}); }
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0, loops_ = 0;
  bool soft_ = false;
  std::vector<Unknown> unknown_;
};

}  // namespace

Body parse(const std::string& source) { return Parser(tokenize(source)).parse_template(); }

}  // namespace kiln::text::jinja
