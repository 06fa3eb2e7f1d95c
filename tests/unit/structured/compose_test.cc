// Composed constraints (structured/compose.h): literal text around JSON for a schema, one of
// several, as a grammar that passes the check, compiles and masks exactly those texts.
#include "structured/compose.h"

#include <gtest/gtest.h>

#include "structured/token_mask.h"

namespace yoco {
namespace {

class ComposeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!structured_outputs_enabled()) GTEST_SKIP() << "built without xgrammar (scripts/setup.sh)";
    vocab_.push_back("");                                                                  // id 0: the stop token
    for (int b = 1; b < 128; ++b) vocab_.push_back(std::string(1, static_cast<char>(b)));  // id b: byte b
    auto c = ConstraintCompiler::create(vocab_, {0});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    compiler_ = std::move(c).value();
  }

  // Whether the mask takes `text` byte by byte and then the stop token.
  bool takes(const StructuredOutput& s, const std::string& text) {
    auto compiled = compiler_->compile(s, "test");
    EXPECT_TRUE(compiled.ok()) << compiled.status().to_string();
    if (!compiled.ok()) return false;
    const int32_t stop[] = {0};
    TokenMask m(*compiled, stop);
    for (char c : text)
      if (!m.accept(static_cast<unsigned char>(c))) return false;
    return m.accept(0) && m.terminated();
  }

  std::vector<std::string> vocab_;
  std::unique_ptr<ConstraintCompiler> compiler_;
};

const char* kCity =
    R"({"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}, "days": {"type": "integer"}},
  "required": ["city", "days"]})";
// $defs resolve against the slot's own schema, not the composed grammar's.
const char* kRefs = R"({"$defs": {"unit": {"enum": ["c", "f"]}}, "type": "object",
  "properties": {"unit": {"$ref": "#/$defs/unit"}}, "required": ["unit"]})";

TEST_F(ComposeTest, OneOfSeveralSlotsAndNothingElse) {
  auto g = json_slots_grammar({{"<call>{\"name\": \"city\", \"args\": ", kCity, "}</call>"},
                               {"<call>{\"name\": \"unit\", \"args\": ", kRefs, "}</call>"}},
                              "tools");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->kind, StructuredOutput::Kind::kGrammar);
  EXPECT_TRUE(check_structured_output(*g, "structured_output.grammar").ok());  // what the router's Generate checks
  EXPECT_TRUE(takes(*g, R"(<call>{"name": "city", "args": {"city": "Rome", "days": 3}}</call>)"));
  EXPECT_TRUE(takes(*g, R"(<call>{"name": "unit", "args": {"unit": "f"}}</call>)"));
  EXPECT_FALSE(takes(*g, R"(<call>{"name": "unit", "args": {"city": "Rome", "days": 3}}</call>)"));
  EXPECT_FALSE(takes(*g, R"(<call>{"name": "city", "args": {"city": "Oslo", "days": 3}}</call>)"));
  EXPECT_FALSE(takes(*g, R"(<call>{"name": "city", "args": {"city": "Rome", "days": 3}})"));      // no suffix
  EXPECT_FALSE(takes(*g, R"(<call>{"name": "city", "args": {"city":"Rome","days":3}}</call>)"));  // compact JSON
  auto one = json_slots_grammar({{"", kCity, ""}}, "tools");
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_TRUE(takes(*one, R"({"city": "Paris", "days": 12})"));
}

TEST_F(ComposeTest, ABadSchemaNamesTheField) {
  auto g = json_slots_grammar({{"a", R"({"type": "no-such-type"})", "b"}}, "tool_choice");
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.status().message().rfind("tool_choice", 0), 0u) << g.status().message();
  EXPECT_FALSE(json_slots_grammar({}, "tool_choice").ok());
}

}  // namespace
}  // namespace yoco
