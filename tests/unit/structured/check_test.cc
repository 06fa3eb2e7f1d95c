// Constraint checks (structured/check.h): what cannot compile is INVALID_ARGUMENT naming the
// field, a compile past its time bound is refused rather than waited for.
#include "structured/check.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace yoco {
namespace {

using Kind = StructuredOutput::Kind;

StructuredOutput make(Kind k, std::string text) {
  StructuredOutput s;
  s.kind = k;
  s.text = std::move(text);
  return s;
}

void expect_refused(const StructuredOutput& s, const std::string& field, const StructuredLimits& lim = {}) {
  Status st = check_structured_output(s, field, lim);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_EQ(st.message().rfind(field, 0), 0u) << st.message();
}

class StructuredCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!structured_outputs_enabled()) GTEST_SKIP() << "built without xgrammar (scripts/setup.sh)";
  }
};

TEST_F(StructuredCheck, WellFormedConstraintsPass) {
  EXPECT_TRUE(check_structured_output(make(Kind::kNone, ""), "f").ok());
  EXPECT_TRUE(check_structured_output(make(Kind::kJsonObject, ""), "f").ok());
  EXPECT_TRUE(check_structured_output(
                  make(Kind::kJsonSchema, R"({"type":"object","properties":{"a":{"type":"integer"}}})"), "f")
                  .ok());
  EXPECT_TRUE(check_structured_output(make(Kind::kRegex, "[a-z]+@[a-z]+\\.com"), "f").ok());
  EXPECT_TRUE(check_structured_output(make(Kind::kGrammar, "root ::= \"a\" | \"b\" root"), "f").ok());
  StructuredOutput c = make(Kind::kChoice, "");
  c.choices = {"yes", "no", "quote \" and back\\slash", "tab\tand é"};
  EXPECT_TRUE(check_structured_output(c, "f").ok());
}

TEST_F(StructuredCheck, InvalidConstraintsNameTheirField) {
  expect_refused(make(Kind::kJsonSchema, "{not json"), "response_format.json_schema.schema");
  expect_refused(make(Kind::kJsonSchema, R"({"type": "no-such-type"})"), "structured_outputs.json");
  expect_refused(make(Kind::kJsonSchema, ""), "structured_output.json_schema");
  expect_refused(make(Kind::kRegex, "(unclosed"), "structured_outputs.regex");
  expect_refused(make(Kind::kGrammar, "root ::= undefined_rule"), "structured_outputs.grammar");
  expect_refused(make(Kind::kGrammar, "no rules at all"), "structured_output.grammar");
  StructuredOutput none = make(Kind::kChoice, "");
  expect_refused(none, "structured_outputs.choice");
  StructuredOutput empty = none;
  empty.choices = {"a", ""};
  expect_refused(empty, "structured_outputs.choice");
}

TEST_F(StructuredCheck, SizesAreBounded) {
  StructuredLimits lim;
  lim.max_text_bytes = 16;
  expect_refused(make(Kind::kRegex, std::string(17, 'a')), "structured_outputs.regex", lim);
  lim.max_choices = 2;
  StructuredOutput c = make(Kind::kChoice, "");
  c.choices = {"a", "b", "c"};
  expect_refused(c, "structured_outputs.choice", lim);
}

TEST_F(StructuredCheck, ACompilePastItsTimeBoundIsRefusedNotWaitedFor) {
  StructuredLimits lim;
  lim.timeout = std::chrono::milliseconds(0);
  lim.max_background = 64;
  std::string big = "(";
  for (int i = 0; i < 3000; ++i) big += (i ? "|" : "") + std::string("w") + std::to_string(i) + "[a-z]{2,5}";
  big += ")";
  const auto t0 = std::chrono::steady_clock::now();
  Status st = check_structured_output(make(Kind::kRegex, big), "structured_outputs.regex", lim);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("did not compile within"), std::string::npos) << st.message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  // It finishes on its own; the process must not exit under it.
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (background_compiles() > 0 && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(background_compiles(), 0);
}

}  // namespace
}  // namespace yoco
