// Recursive descent over jinja2's grammar (docs/design.md, chat templates). Nesting is bounded so
// a hostile template cannot exhaust the stack.
#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"

namespace yoco::jinja {
namespace {

constexpr int kMaxDepth = 100;

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  std::unique_ptr<Template> run() {
    auto tpl = std::make_unique<Template>();
    std::string end = parse_body(tpl->body, {});
    if (!end.empty()) fail(peek(), "unexpected '" + end + "'");
    return tpl;
  }

 private:
  using Type = Token::Type;

  const Token& peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  [[noreturn]] void fail(const Token& t, const std::string& msg) const { throw Error(location(t.line, t.col) + msg); }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Type::kEof:
        return "end of template";
      case Type::kBlockEnd:
        return "end of statement block";
      case Type::kVarEnd:
        return "end of print statement";
      case Type::kString:
        return "string";
      default:
        return "'" + t.text + "'";
    }
  }
  bool is_op(const char* op, size_t k = 0) const { return peek(k).type == Type::kOp && peek(k).text == op; }
  bool is_name(const char* n, size_t k = 0) const { return peek(k).type == Type::kName && peek(k).text == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(peek(), std::string("expected '") + op + "', got " + describe(peek()));
    next();
  }
  std::string expect_name() {
    if (peek().type != Type::kName) fail(peek(), "expected a name, got " + describe(peek()));
    return next().text;
  }
  void expect(Type type, const char* what) {
    if (peek().type != type) fail(peek(), std::string("expected ") + what + ", got " + describe(peek()));
    next();
  }

  struct DepthGuard {
    DepthGuard(Parser& p, const Token& at) : p(p) {
      if (++p.depth_ > kMaxDepth) p.fail(at, "template nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  ExprPtr make(Expr::Kind k, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  // Sets e's height from its children; long chains (a + b + c ..., x|f|g ..., a.b.c ...) are
  // parsed in loops, so the height, not the parser's recursion, is what bounds them.
  ExprPtr finish(ExprPtr e) {
    int d = 0;
    auto see = [&](const ExprPtr& c) {
      if (c) d = std::max(d, c->depth);
    };
    see(e->a);
    see(e->b);
    see(e->c);
    for (const auto& x : e->items) see(x);
    for (const auto& x : e->keys) see(x);
    for (const auto& kv : e->kwargs) see(kv.second);
    e->depth = d + 1;
    if (e->depth > kMaxDepth) fail(peek(), "expression nested too deeply");
    return e;
  }

  StmtPtr make_stmt(Stmt::Kind k, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  // Parses statements until a block tag whose name is in `ends`; returns that name (consumed,
  // with the rest of its tag left to the caller), or "" at end of input.
  std::string parse_body(Body& body, std::initializer_list<const char*> ends) {
    DepthGuard g(*this, peek());
    while (true) {
      const Token& t = peek();
      if (t.type == Type::kEof) {
        if (ends.size() != 0) fail(t, std::string("unexpected end of template, expected '") + *ends.begin() + "'");
        return "";
      }
      if (t.type == Type::kText) {
        auto s = make_stmt(Stmt::Kind::kText, t);
        s->text = next().text;
        body.push_back(std::move(s));
        continue;
      }
      if (t.type == Type::kVarBegin) {
        auto s = make_stmt(Stmt::Kind::kOutput, next());
        s->expr = parse_expr();
        expect(Type::kVarEnd, "'}}'");
        body.push_back(std::move(s));
        continue;
      }
      if (t.type != Type::kBlockBegin) fail(t, "unexpected " + describe(t));
      const Token& tag = peek(1);
      if (tag.type != Type::kName) fail(tag, "expected a statement name, got " + describe(tag));
      for (const char* e : ends) {
        if (tag.text == e) {
          next();
          next();
          return tag.text;
        }
      }
      next();
      body.push_back(parse_statement());
    }
  }

  StmtPtr parse_statement() {
    const Token& tag = next();
    const std::string& n = tag.text;
    if (n == "if") return parse_if(tag);
    if (n == "for") return parse_for(tag);
    if (n == "set") return parse_set(tag);
    if (n == "macro") return parse_macro(tag);
    if (n == "break" || n == "continue") {
      auto s = make_stmt(n == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, tag);
      expect(Type::kBlockEnd, "'%}'");
      return s;
    }
    if (n == "generation") {  // HF's assistant-mask marker: renders its body unchanged
      auto s = make_stmt(Stmt::Kind::kBlock, tag);
      expect(Type::kBlockEnd, "'%}'");
      parse_body(s->body, {"endgeneration"});
      expect(Type::kBlockEnd, "'%}'");
      return s;
    }
    if (n == "filter") {
      auto s = make_stmt(Stmt::Kind::kSetBlock, tag);
      s->filter = parse_filter_chain(nullptr);
      expect(Type::kBlockEnd, "'%}'");
      parse_body(s->body, {"endfilter"});
      expect(Type::kBlockEnd, "'%}'");
      return s;  // a kSetBlock without a name outputs its filtered body
    }
    static const char* kEnds[] = {"endif", "endfor",        "endset",    "endmacro", "else",
                                  "elif",  "endgeneration", "endfilter", "endraw"};
    for (const char* e : kEnds)
      if (n == e) fail(tag, "unexpected '" + n + "'");
    fail(tag, "unsupported tag '" + n + "'");
  }

  StmtPtr parse_if(const Token& tag) {
    auto s = make_stmt(Stmt::Kind::kIf, tag);
    ExprPtr cond = parse_expr();
    expect(Type::kBlockEnd, "'%}'");
    while (true) {
      Body body;
      std::string end = parse_body(body, {"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") {
        cond = parse_expr();
        expect(Type::kBlockEnd, "'%}'");
        continue;
      }
      expect(Type::kBlockEnd, "'%}'");
      if (end == "else") {
        parse_body(s->body, {"endif"});
        expect(Type::kBlockEnd, "'%}'");
      }
      return s;
    }
  }

  StmtPtr parse_for(const Token& tag) {
    auto s = make_stmt(Stmt::Kind::kFor, tag);
    bool paren = is_op("(");
    if (paren) next();
    s->targets.push_back(expect_name());
    while (is_op(",")) {
      next();
      s->targets.push_back(expect_name());
    }
    if (paren) expect_op(")");
    if (!is_name("in")) fail(peek(), "expected 'in', got " + describe(peek()));
    next();
    s->expr = parse_or();  // no conditional expression here: a trailing `if` filters the loop
    if (is_name("if")) {
      next();
      s->cond = parse_expr();
    }
    if (is_name("recursive")) fail(peek(), "recursive loops are not supported");
    expect(Type::kBlockEnd, "'%}'");
    std::string end = parse_body(s->body, {"else", "endfor"});
    expect(Type::kBlockEnd, "'%}'");
    if (end == "else") {
      parse_body(s->else_body, {"endfor"});
      expect(Type::kBlockEnd, "'%}'");
    }
    return s;
  }

  StmtPtr parse_set(const Token& tag) {
    std::string name = expect_name();
    if (is_op(".")) {
      next();
      auto s = make_stmt(Stmt::Kind::kSet, tag);
      s->text = name;
      s->attr = expect_name();
      expect_op("=");
      s->expr = parse_expr();
      expect(Type::kBlockEnd, "'%}'");
      return s;
    }
    if (is_op("=")) {
      next();
      auto s = make_stmt(Stmt::Kind::kSet, tag);
      s->text = name;
      s->expr = parse_expr();
      expect(Type::kBlockEnd, "'%}'");
      return s;
    }
    auto s = make_stmt(Stmt::Kind::kSetBlock, tag);
    s->text = name;
    if (is_op("|")) s->filter = parse_filter_chain(nullptr);
    expect(Type::kBlockEnd, "'%}'");
    parse_body(s->body, {"endset"});
    expect(Type::kBlockEnd, "'%}'");
    return s;
  }

  StmtPtr parse_macro(const Token& tag) {
    auto s = make_stmt(Stmt::Kind::kMacro, tag);
    s->text = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!s->targets.empty()) expect_op(",");
      if (is_op(")")) break;
      s->targets.push_back(expect_name());
      if (is_op("=")) {
        next();
        s->defaults.push_back(parse_expr());
      } else {
        s->defaults.push_back(nullptr);
      }
    }
    next();
    expect(Type::kBlockEnd, "'%}'");
    parse_body(s->body, {"endmacro"});
    if (peek().type == Type::kName) next();  // {% endmacro name %}
    expect(Type::kBlockEnd, "'%}'");
    return s;
  }

  // --- expressions, loosest first ---

  ExprPtr parse_expr() {
    DepthGuard g(*this, peek());
    ExprPtr e = parse_or();
    while (is_name("if")) {
      auto c = make(Expr::Kind::kCond, next());
      c->a = parse_or();
      c->b = std::move(e);
      if (is_name("else")) {
        next();
        c->c = parse_expr();
      }
      e = finish(std::move(c));
    }
    return e;
  }

  ExprPtr binary(const Token& at, std::string op, ExprPtr l, ExprPtr r) {
    auto e = make(Expr::Kind::kBinary, at);
    e->name = std::move(op);
    e->a = std::move(l);
    e->b = std::move(r);
    return finish(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token& at = next();
      e = binary(at, "or", std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token& at = next();
      e = binary(at, "and", std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this, peek());
      auto e = make(Expr::Kind::kUnary, next());
      e->name = "not";
      e->a = parse_not();
      return finish(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      const Token& at = peek();
      if (at.type == Type::kOp && (at.text == "==" || at.text == "!=" || at.text == "<" || at.text == "<=" ||
                                   at.text == ">" || at.text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::kCompare, at);
        cmp->a = std::move(first);
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
      cmp = finish(std::move(cmp));
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      e = binary(at, at.text, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token& at = next();
      e = binary(at, "~", std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      e = binary(at, at.text, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token& at = next();
      e = binary(at, "**", std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(*this, peek());
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make(Expr::Kind::kUnary, peek());
      e->name = next().text;
      e->a = parse_unary(false);
      e = finish(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    if (t.type == Type::kName) {
      next();
      if (t.text == "true" || t.text == "True") return literal(t, Value(true));
      if (t.text == "false" || t.text == "False") return literal(t, Value(false));
      if (t.text == "none" || t.text == "None") return literal(t, Value::none());
      auto e = make(Expr::Kind::kName, t);
      e->name = t.text;
      return e;
    }
    if (t.type == Type::kString) {
      std::string s = next().text;
      while (peek().type == Type::kString) s += next().text;  // adjacent literals concatenate
      return literal(t, Value(std::move(s)));
    }
    if (t.type == Type::kInt) return literal(next(), Value(t.int_value));
    if (t.type == Type::kFloat) return literal(next(), Value(t.float_value));
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        next();
        auto empty = make(Expr::Kind::kList, t);
        empty->name = "tuple";
        return empty;
      }
      ExprPtr e = parse_expr();
      if (is_op(",")) {
        auto tup = make(Expr::Kind::kList, t);
        tup->name = "tuple";
        tup->items.push_back(std::move(e));
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          tup->items.push_back(parse_expr());
        }
        e = finish(std::move(tup));
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = make(Expr::Kind::kList, next());
      while (!is_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("]")) break;
        e->items.push_back(parse_expr());
      }
      next();
      return finish(std::move(e));
    }
    if (is_op("{")) {
      auto e = make(Expr::Kind::kDict, next());
      while (!is_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("}")) break;
        e->keys.push_back(parse_expr());
        expect_op(":");
        e->items.push_back(parse_expr());
      }
      next();
      return finish(std::move(e));
    }
    fail(t, "unexpected " + describe(t));
  }

  ExprPtr literal(const Token& at, Value v) {
    auto e = make(Expr::Kind::kLiteral, at);
    e->literal = std::move(v);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Token& at = next();
        auto a = make(Expr::Kind::kAttr, at);
        a->a = std::move(e);
        if (peek().type == Type::kInt) {  // foo.0 is foo[0]
          a->kind = Expr::Kind::kItem;
          a->b = literal(peek(), Value(peek().int_value));
          next();
        } else {
          a->name = expect_name();
        }
        e = finish(std::move(a));
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const Token& at = next();  // '['
    ExprPtr parts[3];
    int n = 0;
    bool slice = false;
    while (true) {
      if (is_op("]")) break;
      if (is_op(":")) {
        next();
        slice = true;
        if (++n > 2) fail(at, "invalid slice");
        continue;
      }
      if (parts[n]) fail(peek(), "expected ':' or ']', got " + describe(peek()));
      parts[n] = parse_expr();
    }
    next();
    if (!slice) {
      if (!parts[0]) fail(at, "expected a subscript");
      auto e = make(Expr::Kind::kItem, at);
      e->a = std::move(obj);
      e->b = std::move(parts[0]);
      return finish(std::move(e));
    }
    auto e = make(Expr::Kind::kSlice, at);
    e->a = std::move(obj);
    e->b = std::move(parts[0]);
    e->c = std::move(parts[1]);
    if (parts[2]) e->items.push_back(std::move(parts[2]));
    return finish(std::move(e));
  }

  // (args...) into e->items / e->kwargs.
  void parse_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail(peek(), "*args and **kwargs in calls are not supported");
      if (peek().type == Type::kName && is_op("=", 1)) {
        std::string k = next().text;
        next();
        e.kwargs.emplace_back(std::move(k), parse_expr());
      } else {
        if (!e.kwargs.empty()) fail(peek(), "positional argument after a keyword argument");
        e.items.push_back(parse_expr());
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(Expr::Kind::kCall, peek());
    e->a = std::move(callee);
    parse_args(*e);
    return finish(std::move(e));
  }

  // `| name(args) | name ...` after `obj` (null: the filter heads a {% filter %} or {% set %} block).
  ExprPtr parse_filter_chain(ExprPtr obj) {
    bool first = true;
    while (first || is_op("|")) {
      if (is_op("|")) next();
      first = false;
      const Token& at = peek();
      auto f = make(Expr::Kind::kFilter, at);
      f->name = expect_name();
      while (is_op(".")) {  // dotted filter names are not used by templates; keep the error clear
        next();
        f->name += '.';
        f->name += expect_name();
      }
      if (!is_known_filter(f->name)) fail(at, "no filter named '" + f->name + "'");
      if (is_op("(")) parse_args(*f);
      f->a = std::move(obj);
      obj = finish(std::move(f));
    }
    return obj;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(std::move(e));
      } else if (is_name("is")) {
        const Token& at = next();
        auto t = make(Expr::Kind::kTest, at);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        const Token& name_at = peek();
        t->name = expect_name();
        if (!is_known_test(t->name)) fail(name_at, "no test named '" + t->name + "'");
        if (is_op("(")) {
          parse_args(*t);
        } else if (starts_test_arg()) {
          t->items.push_back(parse_postfix(parse_primary()));
        }
        t->a = std::move(e);
        e = finish(std::move(t));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  bool starts_test_arg() const {
    const Token& t = peek();
    if (t.type == Type::kString || t.type == Type::kInt || t.type == Type::kFloat) return true;
    if (t.type == Type::kOp) return t.text == "[" || t.text == "{";
    if (t.type != Type::kName) return false;
    static const char* kStop[] = {"else", "or", "and", "is", "in", "if", "not"};
    for (const char* s : kStop)
      if (t.text == s) return false;
    return true;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

std::unique_ptr<Template> parse(std::string_view source) { return Parser(lex(source)).run(); }

}  // namespace yoco::jinja
