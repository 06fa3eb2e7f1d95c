// Chat templates: the Jinja subset feature by feature (expected strings are what jinja2 renders
// with HF's settings), the errors and bounds, and loading a model's template. The comparison of
// real templates with Python's jinja2 is tests/chat_template/compare_jinja2.py.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

namespace yoco {
namespace {

std::string render(const std::string& src, const Json& messages = Json(Json::Array{}), Json extra = Json()) {
  auto t = ChatTemplate::compile(src);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (!t.ok()) return "<compile error>";
  ChatTemplateContext ctx;
  ctx.messages = messages;
  ctx.extra = std::move(extra);
  auto r = t->render(ctx);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r.value() : "<render error>";
}

TEST(ChatTemplate, RendersText) { EXPECT_EQ(render("hello {{ 'world' }}"), "hello world"); }

}  // namespace
}  // namespace yoco
