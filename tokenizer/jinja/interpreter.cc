// The tree-walking renderer (docs/design.md, chat templates).
#include "tokenizer/jinja/interpreter.h"

#include <cmath>
#include <ctime>
#include <unordered_map>

#include "tokenizer/jinja/builtins.h"

namespace yoco::jinja {
namespace {

using Frame = std::unordered_map<std::string, Value>;

std::string at(int line, int col) { return location(line, col); }

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  Interpreter(const RenderLimits& limits) : limits_(limits) {}

  std::string run(const Template& tpl, std::vector<std::pair<std::string, Value>> globals) {
    reset_work(limits_.max_steps);
    root_ = std::make_shared<Frame>();
    for (auto& [k, v] : globals) (*root_)[k] = std::move(v);
    install_builtins();
    frames_.push_back(root_);
    std::string out;
    out_ = &out;
    exec_body(tpl.body);
    return out;
  }

 private:
  // --- statements ---

  Flow exec_body(const Body& body) {
    for (const auto& s : body) {
      Flow f = exec(*s);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  void step(int line, int col) {
    try {
      charge_work(1);
    } catch (const Error&) {
      throw Error(at(line, col) + "template exceeded its work limit");
    }
  }

  void emit(const std::string& s, int line, int col) {
    out_->append(s);
    if (out_->size() > limits_.max_output_bytes)
      throw Error(at(line, col) + "template output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }

  Flow exec(const Stmt& s) {
    Nest nest(*this, s.line, s.col);
    step(s.line, s.col);
    switch (s.kind) {
      case Stmt::Kind::kText:
        emit(s.text, s.line, s.col);
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        emit(eval(*s.expr).to_str(), s.line, s.col);
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond).truthy()) return exec_body(body);
        return exec_body(s.body);
      case Stmt::Kind::kFor:
        exec_for(s);
        return Flow::kNormal;
      case Stmt::Kind::kSet:
        exec_set(s);
        return Flow::kNormal;
      case Stmt::Kind::kSetBlock:
        exec_set_block(s);
        return Flow::kNormal;
      case Stmt::Kind::kMacro:
        define_macro(s);
        return Flow::kNormal;
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kBlock:
        return exec_body(s.body);
    }
    return Flow::kNormal;
  }

  void assign(const std::string& name, Value v) { (*frames_.back())[name] = std::move(v); }

  void exec_set(const Stmt& s) {
    Value v = eval(*s.expr);
    if (s.attr.empty()) {
      assign(s.text, std::move(v));
      return;
    }
    Value ns = lookup(s.text);
    if (!ns.is_namespace()) throw Error(at(s.line, s.col) + "cannot assign attribute on non-namespace object");
    ns.dict().set(s.attr, std::move(v));
  }

  std::string capture(const Body& body) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    try {
      exec_body(body);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buf;
  }

  void exec_set_block(const Stmt& s) {
    Value v(capture(s.body));
    if (s.filter) v = apply_filter_chain(*s.filter, v);
    if (s.text.empty()) {
      emit(v.to_str(), s.line, s.col);  // {% filter %}
    } else {
      assign(s.text, std::move(v));
    }
  }

  Value apply_filter_chain(const Expr& f, const Value& input) {
    Value v = f.a ? apply_filter_chain(*f.a, input) : input;
    Args args = eval_args(f);
    try {
      return apply_filter(f.name, v, args);
    } catch (const Error& e) {
      throw located(e, f);
    }
  }

  static std::vector<Value> iterate(const Value& v, const Stmt& s) {
    switch (v.kind()) {
      case Value::Kind::kUndefined:
        return {};
      case Value::Kind::kList:
        return v.list();
      case Value::Kind::kDict: {
        std::vector<Value> keys;
        for (const auto& kv : v.dict().items) keys.emplace_back(kv.first);
        return keys;
      }
      case Value::Kind::kString: {
        std::vector<Value> chars;
        for (std::string_view c : code_points(v.str())) chars.emplace_back(std::string(c));
        return chars;
      }
      default:
        throw Error(at(s.line, s.col) + "'" + v.type_name() + "' object is not iterable");
    }
  }

  void bind_targets(const Stmt& s, const Value& item) {
    if (s.targets.size() == 1) {
      assign(s.targets[0], item);
      return;
    }
    List parts;
    if (item.is_list()) {
      parts = item.list();
    } else if (item.is_string()) {
      for (std::string_view c : code_points(item.str())) parts.emplace_back(std::string(c));
    } else {
      throw Error(at(s.line, s.col) + "cannot unpack non-iterable " + item.type_name() + " object");
    }
    if (parts.size() != s.targets.size())
      throw Error(at(s.line, s.col) + "cannot unpack " + std::to_string(parts.size()) + " values into " +
                  std::to_string(s.targets.size()));
    for (size_t i = 0; i < parts.size(); ++i) assign(s.targets[i], parts[i]);
  }

  void exec_for(const Stmt& s) {
    std::vector<Value> all = iterate(eval(*s.expr), s);
    frames_.push_back(std::make_shared<Frame>());
    struct Pop {
      ~Pop() { f.pop_back(); }
      std::vector<std::shared_ptr<Frame>>& f;
    } pop{frames_};
    std::vector<Value> items;
    if (s.cond) {  // the filter sees the loop variables but not `loop`
      for (const Value& v : all) {
        step(s.line, s.col);
        bind_targets(s, v);
        if (eval(*s.cond).truthy()) items.push_back(v);
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) {
      frames_.back()->clear();
      exec_body(s.else_body);
      return;
    }
    // One loop object per loop, its fields updated in place (the order is fixed by make_loop).
    auto index = std::make_shared<int64_t>(0);
    auto loop = make_loop(index);
    Value loop_value = Value::dict(loop);
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      step(s.line, s.col);
      *index = i;
      auto& f = loop->items;
      f[0].second = Value(i);
      f[1].second = Value(i + 1);
      f[2].second = Value(n - i);
      f[3].second = Value(n - i - 1);
      f[4].second = Value(i == 0);
      f[5].second = Value(i == n - 1);
      f[6].second = Value(n);
      f[7].second = i > 0 ? items[static_cast<size_t>(i - 1)] : Value();
      f[8].second = i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value();
      assign("loop", loop_value);
      bind_targets(s, items[static_cast<size_t>(i)]);
      if (exec_body(s.body) == Flow::kBreak) break;
    }
  }

  static std::shared_ptr<Dict> make_loop(const std::shared_ptr<int64_t>& index) {
    auto loop = std::make_shared<Dict>();
    for (const char* k :
         {"index0", "index", "revindex", "revindex0", "first", "last", "length", "previtem", "nextitem"})
      loop->items.emplace_back(k, Value());
    loop->items.emplace_back("depth", Value(int64_t{1}));
    loop->items.emplace_back("depth0", Value(int64_t{0}));
    loop->items.emplace_back("cycle", Value::function([index](Args& a) -> Value {
                               if (a.positional.empty()) throw Error("no items for cycling given");
                               return a.positional[static_cast<size_t>(*index) % a.positional.size()];
                             }));
    return loop;
  }

  void define_macro(const Stmt& s) {
    const Stmt* m = &s;
    assign(s.text, Value::function([this, m](Args& args) -> Value { return call_macro(*m, args); }));
  }

  Value call_macro(const Stmt& m, Args& args) {
    if (++call_depth_ > limits_.max_call_depth) {
      --call_depth_;
      throw Error(at(m.line, m.col) + "macro recursion too deep");
    }
    auto frame = std::make_shared<Frame>();
    if (args.positional.size() > m.targets.size())
      throw Error(at(m.line, m.col) + "macro '" + m.text + "' takes not more than " + std::to_string(m.targets.size()) +
                  " argument(s)");
    for (size_t i = 0; i < m.targets.size(); ++i) {
      if (args.has(i, m.targets[i])) {
        (*frame)[m.targets[i]] = args.get(i, m.targets[i]);
      } else if (m.defaults[i]) {
        (*frame)[m.targets[i]] = eval(*m.defaults[i]);
      } else {
        (*frame)[m.targets[i]] = Value();
      }
    }
    for (const auto& [k, v] : args.keyword) {
      bool known = false;
      for (const auto& t : m.targets) known = known || t == k;
      if (!known) throw Error(at(m.line, m.col) + "macro '" + m.text + "' has no argument '" + k + "'");
    }
    std::vector<std::shared_ptr<Frame>> saved = std::move(frames_);
    frames_ = {root_, frame};
    std::string result;
    try {
      result = capture(m.body);
    } catch (...) {
      frames_ = std::move(saved);
      --call_depth_;
      throw;
    }
    frames_ = std::move(saved);
    --call_depth_;
    return Value(std::move(result));
  }

  // --- expressions ---

  Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto f = (*it)->find(name);
      if (f != (*it)->end()) return f->second;
    }
    return Value();
  }

  static Error located(const Error& e, const Expr& x) {
    if (e.from_template) return e;
    std::string m = e.what();
    if (m.rfind("line ", 0) == 0) return e;
    return Error(at(x.line, x.col) + m);
  }

  // How an expression reads in an error about an undefined value.
  static std::string describe(const Expr& e) {
    if (e.kind == Expr::Kind::kName) return "'" + e.name + "' is undefined";
    if (e.kind == Expr::Kind::kAttr) return "'" + e.name + "' is undefined";
    return "value is undefined";
  }

  Args eval_args(const Expr& e) {
    Args a;
    for (const auto& x : e.items) a.positional.push_back(eval(*x));
    for (const auto& [k, x] : e.kwargs) a.keyword.emplace_back(k, eval(*x));
    return a;
  }

  // Every nested evaluation and statement counts against one depth bound, so recursion through
  // macros, each call a deep expression, cannot exhaust the thread's stack.
  struct Nest {
    Nest(Interpreter& in, int line, int col) : in(in) {
      if (++in.nesting_ > kMaxNesting) {
        --in.nesting_;
        throw Error(at(line, col) + "template recursion too deep");
      }
    }
    ~Nest() { --in.nesting_; }
    Interpreter& in;
  };
  static constexpr int kMaxNesting = 400;

  Value eval(const Expr& e) {
    Nest nest(*this, e.line, e.col);
    try {
      return eval_inner(e);
    } catch (const Error& err) {
      throw located(err, e);
    }
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return lookup(e.name);
      case Expr::Kind::kList: {
        List l;
        for (const auto& x : e.items) l.push_back(eval(*x));
        return e.name == "tuple" ? Value::tuple(std::move(l)) : Value(std::move(l));
      }
      case Expr::Kind::kDict: {
        auto d = std::make_shared<Dict>();
        for (size_t i = 0; i < e.keys.size(); ++i) {
          Value k = eval(*e.keys[i]);
          if (!k.is_string()) throw Error("dict keys must be strings in this implementation");
          d->set(k.str(), eval(*e.items[i]));
        }
        return Value::dict(std::move(d));
      }
      case Expr::Kind::kAttr:
        return get_attr(eval(*e.a), e.name, describe(*e.a));
      case Expr::Kind::kItem:
        return get_item(eval(*e.a), eval(*e.b), describe(*e.a));
      case Expr::Kind::kSlice:
        return eval_slice(e);
      case Expr::Kind::kCall:
        return eval_call(e);
      case Expr::Kind::kFilter: {
        Value v = eval(*e.a);
        Args args = eval_args(e);
        return apply_filter(e.name, v, args);
      }
      case Expr::Kind::kTest: {
        Value v = eval(*e.a);
        Args args = eval_args(e);
        return Value(apply_test(e.name, v, args) != e.negated);
      }
      case Expr::Kind::kUnary: {
        Value v = eval(*e.a);
        if (e.name == "not") return Value(!v.truthy());
        if (v.kind() == Value::Kind::kFloat) return Value(e.name == "-" ? -v.as_double() : v.as_double());
        if (v.is_int()) return Value(e.name == "-" ? -v.as_int() : v.as_int());
        throw Error(std::string("bad operand type for unary ") + e.name + ": '" + v.type_name() + "'");
      }
      case Expr::Kind::kBinary:
        return eval_binary(e);
      case Expr::Kind::kCompare: {
        Value left = eval(*e.a);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.items[i]);
          if (!compare(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::kCond: {
        if (eval(*e.a).truthy()) return eval(*e.b);
        return e.c ? eval(*e.c) : Value();
      }
    }
    return Value();
  }

  Value eval_call(const Expr& e) {
    step(e.line, e.col);
    if (e.a->kind == Expr::Kind::kAttr) {
      Value obj = eval(*e.a->a);
      if (obj.is_string() || obj.is_dict() || obj.is_list()) {
        const Value* member = obj.is_dict() ? obj.dict().find(e.a->name) : nullptr;
        if (!member || !member->is_function()) {
          Args args = eval_args(e);
          return call_method(obj, e.a->name, args);
        }
      }
    }
    Value f = eval(*e.a);
    if (f.is_undefined()) throw Error(describe(*e.a));
    if (!f.is_function()) throw Error(std::string("'") + f.type_name() + "' object is not callable");
    Args args = eval_args(e);
    return f.fn()(args);
  }

  static int64_t slice_index(const Value& v) {
    if (!v.is_int()) throw Error("slice indices must be integers or None");
    return v.as_int();
  }

  Value eval_slice(const Expr& e) {
    Value obj = eval(*e.a);
    Value start = e.b ? eval(*e.b) : Value::none();
    Value stop = e.c ? eval(*e.c) : Value::none();
    Value stepv = e.items.empty() ? Value::none() : eval(*e.items[0]);
    std::vector<std::string_view> cps;
    int64_t n;
    if (obj.is_sequence()) {
      n = static_cast<int64_t>(obj.list().size());
    } else if (obj.is_string()) {
      cps = code_points(obj.str());
      n = static_cast<int64_t>(cps.size());
    } else if (obj.is_undefined()) {
      throw Error(describe(*e.a));
    } else {  // jinja2 slices with Python's own [] (not its forgiving getitem)
      throw Error(obj.is_dict() ? std::string("unhashable type: 'slice'")
                                : std::string("'") + (obj.is_generator() ? "generator" : obj.type_name()) +
                                      "' object is not subscriptable");
    }
    int64_t st = stepv.is_none() || stepv.is_undefined() ? 1 : slice_index(stepv);
    if (st == 0) throw Error("slice step cannot be zero");
    auto norm = [&](const Value& v, int64_t dflt) -> int64_t {
      if (v.is_none() || v.is_undefined()) return dflt;
      int64_t i = slice_index(v);
      if (i < 0) i += n;
      if (st > 0) return std::clamp<int64_t>(i, 0, n);
      return std::clamp<int64_t>(i, -1, n - 1);
    };
    int64_t b = norm(start, st > 0 ? 0 : n - 1);
    int64_t en = norm(stop, st > 0 ? n : -1);
    std::vector<size_t> idx;
    if (st > 0) {
      for (int64_t i = b; i < en; i += st) idx.push_back(static_cast<size_t>(i));
    } else {
      for (int64_t i = b; i > en; i += st) idx.push_back(static_cast<size_t>(i));
    }
    if (obj.is_list()) {
      List l;
      for (size_t i : idx) l.push_back(obj.list()[i]);
      return Value(std::move(l));
    }
    std::string s;
    for (size_t i : idx) s += cps[i];
    return Value(std::move(s));
  }

  static bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return values_equal(a, b);
    if (op == "!=") return !values_equal(a, b);
    if (op == "in") return contains(b, a);
    if (op == "not in") return !contains(b, a);
    int c;
    if (a.is_number() && b.is_number()) {
      double x = a.as_double(), y = b.as_double();
      if (a.is_int() && b.is_int()) c = a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
      else c = x < y ? -1 : x > y ? 1 : 0;
    } else if (a.is_string() && b.is_string()) {
      c = a.str().compare(b.str());
    } else {
      throw Error("'" + op + "' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() +
                  "'");
    }
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  Value eval_binary(const Expr& e) {
    if (e.name == "and") {
      Value l = eval(*e.a);
      return l.truthy() ? eval(*e.b) : l;
    }
    if (e.name == "or") {
      Value l = eval(*e.a);
      return l.truthy() ? l : eval(*e.b);
    }
    Value l = eval(*e.a);
    Value r = eval(*e.b);
    if (e.name == "~") {
      std::string s = l.to_str() + r.to_str();
      check_size(s);
      return Value(std::move(s));
    }
    return arithmetic(e.name, l, r);
  }

  static Value arithmetic(const std::string& op, const Value& l, const Value& r) {
    auto bad = [&]() -> Error {
      if (l.is_undefined() || r.is_undefined()) return Error("unsupported operand: value is undefined");
      return Error("unsupported operand type(s) for " + op + ": '" + l.type_name() + "' and '" + r.type_name() + "'");
    };
    if (l.is_number() && r.is_number()) {
      bool ints = l.is_int() && r.is_int();
      int64_t a = l.as_int(), b = r.as_int();
      double x = l.as_double(), y = r.as_double();
      if (op == "+") return ints ? Value(a + b) : Value(x + y);
      if (op == "-") return ints ? Value(a - b) : Value(x - y);
      if (op == "*") return ints ? Value(a * b) : Value(x * y);
      if (op == "/") {
        if (y == 0) throw Error("division by zero");
        return Value(x / y);
      }
      if (op == "//" || op == "%") {
        if (ints) {
          if (b == 0) throw Error("integer division or modulo by zero");
          int64_t q = a / b, m = a % b;
          if (m != 0 && ((m < 0) != (b < 0))) {
            --q;
            m += b;
          }
          return op == "//" ? Value(q) : Value(m);
        }
        if (y == 0) throw Error("float division by zero");
        double q = std::floor(x / y);
        return op == "//" ? Value(q) : Value(x - q * y);
      }
      if (op == "**") {
        if (ints && b >= 0) {
          int64_t p = 1;
          for (int64_t i = 0; i < b && i < 64; ++i) p *= a;
          return Value(p);
        }
        return Value(std::pow(x, y));
      }
      throw bad();
    }
    if (op == "+" && l.is_string() && r.is_string()) {
      std::string s = l.str() + r.str();
      check_size(s);
      return Value(std::move(s));
    }
    if (op == "+" && l.is_sequence() && r.is_sequence()) {
      List out = l.list();
      out.insert(out.end(), r.list().begin(), r.list().end());
      if (out.size() > kMaxListItems) throw Error("list too long");
      return Value(std::move(out));
    }
    if (op == "*" && ((l.is_string() && r.is_int()) || (l.is_int() && r.is_string()))) {
      const Value& s = l.is_string() ? l : r;
      int64_t n = l.is_string() ? r.as_int() : l.as_int();
      if (n > 0 && s.str().size() * static_cast<size_t>(n) > kMaxStringBytes) throw Error("string too long");
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += s.str();
      check_size(out);
      return Value(std::move(out));
    }
    if (op == "*" && ((l.is_sequence() && r.is_int()) || (l.is_int() && r.is_sequence()))) {
      const Value& x = l.is_sequence() ? l : r;
      int64_t n = l.is_sequence() ? r.as_int() : l.as_int();
      if (n > 0 && x.list().size() * static_cast<size_t>(n) > kMaxListItems) throw Error("list too long");
      List out;
      for (int64_t i = 0; i < n; ++i) out.insert(out.end(), x.list().begin(), x.list().end());
      return x.is_tuple() ? Value::tuple(std::move(out)) : Value(std::move(out));
    }
    throw bad();
  }

  void install_builtins() {
    auto set_default = [&](const char* name, Value v) {
      if (!root_->count(name)) (*root_)[name] = std::move(v);
    };
    set_default("raise_exception",
                Value::function([](Args& a) -> Value { throw Error(a.get(0, "message").to_str(), /*raised=*/true); }));
    set_default("strftime_now", Value::function([](Args& a) -> Value {
                  Value fmt = a.get(0, "format");
                  if (!fmt.is_string()) throw Error("strftime_now() needs a format string");
                  std::time_t t = std::time(nullptr);
                  std::tm tm{};
                  localtime_r(&t, &tm);
                  char buf[256];
                  size_t n = std::strftime(buf, sizeof(buf), fmt.str().c_str(), &tm);
                  return Value(std::string(buf, n));
                }));
    set_default("namespace", Value::function([](Args& a) -> Value {
                  auto d = std::make_shared<Dict>();
                  for (const Value& p : a.positional) {
                    if (!p.is_dict()) throw Error("namespace() takes keyword arguments or a dict");
                    for (const auto& kv : p.dict().items) d->set(kv.first, kv.second);
                  }
                  for (const auto& [k, v] : a.keyword) d->set(k, v);
                  return Value::name_space(std::move(d));
                }));
    set_default("dict", Value::function([](Args& a) -> Value {
                  auto d = std::make_shared<Dict>();
                  for (const Value& p : a.positional) {
                    if (!p.is_dict()) throw Error("dict() takes keyword arguments or a dict");
                    for (const auto& kv : p.dict().items) d->set(kv.first, kv.second);
                  }
                  for (const auto& [k, v] : a.keyword) d->set(k, v);
                  return Value::dict(std::move(d));
                }));
    set_default("range", Value::function([](Args& a) -> Value {
                  for (const Value& v : a.positional)
                    if (!v.is_int()) throw Error("range() arguments must be integers");
                  int64_t start = 0, stop = 0, st = 1;
                  if (a.positional.size() == 1) {
                    stop = a.positional[0].as_int();
                  } else if (a.positional.size() >= 2) {
                    start = a.positional[0].as_int();
                    stop = a.positional[1].as_int();
                    if (a.positional.size() >= 3) st = a.positional[2].as_int();
                  } else {
                    throw Error("range expected at least 1 argument");
                  }
                  if (st == 0) throw Error("range() arg 3 must not be zero");
                  List out;
                  for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st) {
                    if (out.size() >= 100000)
                      throw Error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
                    out.emplace_back(i);
                  }
                  return Value(std::move(out));
                }));
  }

  const RenderLimits& limits_;
  std::shared_ptr<Frame> root_;
  std::vector<std::shared_ptr<Frame>> frames_;
  std::string* out_ = nullptr;
  int call_depth_ = 0;
  int nesting_ = 0;
};

}  // namespace

std::string render(const Template& tpl, std::vector<std::pair<std::string, Value>> globals,
                   const RenderLimits& limits) {
  struct Unlimited {  // whatever happens, this thread's later work is not charged to this render
    ~Unlimited() { reset_work(static_cast<size_t>(-1)); }
  } restore;
  Interpreter in(limits);
  return in.run(tpl, std::move(globals));
}

}  // namespace yoco::jinja
