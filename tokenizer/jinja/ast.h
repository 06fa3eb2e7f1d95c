// The parsed form of a template: expression and statement trees (docs/design.md, chat templates).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace yoco::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // items; name "tuple" for a tuple
    kDict,     // keys + items
    kAttr,     // a.name
    kItem,     // a[b]
    kSlice,    // a[b:c:d], absent parts null
    kCall,     // a(items, kwargs)
    kFilter,   // a | name(items, kwargs); a null when the filter heads a block
    kTest,     // a is [not] name(items)
    kUnary,    // op a: "-", "+", "not"
    kBinary,   // a op b: + - * / // % ** ~ and or in "not in"
    kCompare,  // a ops[0] items[0] ops[1] items[1] ...
    kCond,     // b if a else c
  };
  Kind kind;
  int line = 0, col = 0;
  int depth = 1;  // height of this subtree; the parser bounds it (evaluating and freeing recurse)
  Value literal;
  std::string name;  // name, attribute, filter, test or operator
  std::vector<ExprPtr> items;
  std::vector<ExprPtr> keys;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  ExprPtr a, b, c;
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kBlock };
  Kind kind;
  int line = 0, col = 0;
  std::string text;                                // kText; kSet/kSetBlock/kMacro: the name
  std::string attr;                                // kSet on a namespace: ns.attr
  std::vector<std::string> targets;                // kFor loop variables; kMacro parameter names
  std::vector<ExprPtr> defaults;                   // kMacro parameter defaults (null: none)
  ExprPtr expr;                                    // kOutput, kSet value, kFor iterable
  ExprPtr cond;                                    // kFor filter
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: condition and body
  Body body;                                       // kFor, kSetBlock, kMacro, kBlock, kIf else
  Body else_body;                                  // kFor else
  ExprPtr filter;                                  // kSetBlock: optional filter chain applied to the body
};

struct Template {
  Body body;
};

}  // namespace yoco::jinja
