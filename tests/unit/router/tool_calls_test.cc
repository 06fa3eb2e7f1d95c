// Tool-call text (router/tool_calls.h): each family's syntax found in the real templates, replies
// split into content and calls, and the streamed parse, fed in every split, adding up to the
// whole one (arguments arriving in fragments).
#include "router/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "common/json.h"

namespace yoco {
namespace {

using F = ToolCallFormat;

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(YOCO_SOURCE_DIR) + "/tests/data/chat_templates/" + name, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ToolCalls, TheFamilyIsFoundInTheTemplatesWeShip) {
  EXPECT_EQ(detect_tool_call_format(read_template("qwen2.jinja")), F::kHermes);
  EXPECT_EQ(detect_tool_call_format(read_template("qwen3.jinja")), F::kHermes);
  EXPECT_EQ(detect_tool_call_format(read_template("llama3.jinja")), F::kLlama3Json);
  EXPECT_EQ(detect_tool_call_format(read_template("mistral.jinja")), F::kMistral);
  EXPECT_EQ(detect_tool_call_format(read_template("mistral_small3.jinja")), F::kMistral);
  EXPECT_EQ(detect_tool_call_format(read_template("chatml.jinja")), F::kNone);
  EXPECT_EQ(detect_tool_call_format(read_template("gemma2.jinja")), F::kNone);
  // The later Mistral templates write each call as [TOOL_CALLS]name[ARGS]arguments (this line's shape).
  EXPECT_EQ(detect_tool_call_format("{{- '[TOOL_CALLS]' + tool['function']['name'] + '[ARGS]' + arguments }}"),
            F::kMistralArgs);
  for (F f : {F::kNone, F::kHermes, F::kLlama3Json, F::kMistral, F::kMistralArgs})
    EXPECT_EQ(tool_call_format_named(tool_call_format_name(f)), f);
  EXPECT_FALSE(tool_call_format_named("auto"));
  EXPECT_FALSE(tool_call_format_named("Hermes"));
}

void expect_call(const ToolCallText& c, const std::string& name, const std::string& args) {
  EXPECT_EQ(c.name, name);
  EXPECT_EQ(c.arguments, args);
  EXPECT_TRUE(c.complete);
}

TEST(ToolCalls, HermesWhole) {
  const std::string text =
      "Let me look.<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n"
      "</tool_call>\n<tool_call>\n{\"arguments\": {}, \"name\": \"time\"}\n</tool_call>";
  ToolCallParse p = parse_tool_calls(F::kHermes, text, true);
  EXPECT_EQ(p.content, "Let me look.");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "weather", R"({"city": "Paris", "days": [1, 2]})");
  expect_call(p.calls[1], "time", "{}");
  // The last closing tag may be missing (the reply ended at EOS), and arguments may be absent.
  p = parse_tool_calls(F::kHermes, "<tool_call>\n{\"name\": \"now\"}\n", true);
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "now", "{}");
  EXPECT_EQ(p.content, "");
  // No marker: all content.
  p = parse_tool_calls(F::kHermes, "In the beginning <tool", true);
  EXPECT_EQ(p.content, "In the beginning <tool");
  EXPECT_TRUE(p.calls.empty());
}

TEST(ToolCalls, WhatDoesNotParseIsContent) {
  for (const std::string& text : {
           std::string("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }}\n</tool_call>"),  // bad JSON
           std::string("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1"),                 // cut short
           std::string("<tool_call>\n{\"arguments\": {}}\n</tool_call>"),                          // no name
           std::string("<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>"),        // not an object
           std::string("<tool_call>\nnot json</tool_call>"),
           std::string("<tool_call>\n{\"name\": \"f\"} trailing words"),
       }) {
    ToolCallParse p = parse_tool_calls(F::kHermes, text, true);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(ToolCalls, Llama3Json) {
  ToolCallParse p = parse_tool_calls(
      F::kLlama3Json,
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}", true);
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "a", R"({"x": 1})");
  expect_call(p.calls[1], "b", "{}");
  p = parse_tool_calls(F::kLlama3Json, " {\"name\": \"a\", \"arguments\": {\"y\": \"z\"}}", true);
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "a", R"({"y": "z"})");
  // Anything else is an answer: text, or JSON that is not a call.
  for (const std::string& text : {std::string("The answer is {\"name\": \"a\"}"),
                                  std::string("{\"answer\": 42, \"name\": \"a\"}"), std::string("")}) {
    p = parse_tool_calls(F::kLlama3Json, text, true);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(ToolCalls, Mistral) {
  ToolCallParse p = parse_tool_calls(
      F::kMistral,
      "Sure. [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"]\"}}, {\"name\": \"b\", \"arguments\": {}}]",
      true);
  EXPECT_EQ(p.content, "Sure. ");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "a", R"({"q": "]"})");
  expect_call(p.calls[1], "b", "{}");
  p = parse_tool_calls(F::kMistral, "[TOOL_CALLS] {\"name\": \"a\", \"arguments\": {}}", true);
  ASSERT_EQ(p.calls.size(), 1u);
  p = parse_tool_calls(F::kMistral, "[TOOL_CALLS][]", true);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "[TOOL_CALLS][]");
}

// [TOOL_CALLS]name[ARGS]{...} per call (and the [CALL_ID] and bare name{...} variants); either
// Mistral format reads both forms.
TEST(ToolCalls, MistralArgs) {
  const std::string text =
      "Let me check.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"q\": \"[ARGS]}\"}"
      "[TOOL_CALLS]get_time[ARGS]{}";
  for (F f : {F::kMistralArgs, F::kMistral}) {
    ToolCallParse p = parse_tool_calls(f, text, true);
    EXPECT_EQ(p.content, "Let me check.");
    ASSERT_EQ(p.calls.size(), 2u);
    expect_call(p.calls[0], "get_weather", R"({"city": "Paris", "q": "[ARGS]}"})");
    expect_call(p.calls[1], "get_time", "{}");
  }
  ToolCallParse p = parse_tool_calls(F::kMistralArgs, "[TOOL_CALLS]f[CALL_ID]a1B2c3D4e[ARGS]{\"x\": 1}", true);
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "f", R"({"x": 1})");
  p = parse_tool_calls(F::kMistralArgs, "[TOOL_CALLS] my.tool-2{\"x\": [1]}\nignored", true);
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "my.tool-2", R"({"x": [1]})");
  p = parse_tool_calls(F::kMistralArgs, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}]", true);
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "a", "{}");
  // Whole replies that are not calls stay content: arguments not an object, cut inside the
  // arguments, a name with no arguments, no name.
  for (const char* t : {"[TOOL_CALLS]f[ARGS][1]", "[TOOL_CALLS]f[ARGS]{\"a\": ", "[TOOL_CALLS]f", "[TOOL_CALLS]f[ARGS]",
                        "[TOOL_CALLS]f!{}", "[TOOL_CALLS][ARGS]{}", "[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b"}) {
    p = parse_tool_calls(F::kMistralArgs, t, true);
    EXPECT_TRUE(p.calls.empty()) << t;
    EXPECT_EQ(p.content, t);
  }
  // While streaming, a call begins with its name once [ARGS] follows it.
  p = parse_tool_calls(F::kMistralArgs, "Hi [TOOL_CALLS]get_wea", false);
  EXPECT_EQ(p.content, "Hi ");
  EXPECT_TRUE(p.calls.empty());
  p = parse_tool_calls(F::kMistralArgs, "Hi [TOOL_CALLS]get_weather[AR", false);
  EXPECT_TRUE(p.calls.empty());
  p = parse_tool_calls(F::kMistralArgs, "Hi [TOOL_CALLS]get_weather[ARGS]{\"ci", false);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, "{\"ci");
  EXPECT_FALSE(p.calls[0].complete);
}

// The syntax an enforced call is written in is what the parser reads back.
TEST(ToolCalls, TheEnforcedSyntaxParsesBack) {
  for (F f : {F::kHermes, F::kLlama3Json, F::kMistral, F::kMistralArgs}) {
    const ToolCallSyntax s = tool_call_syntax(f, "get_weather");
    const std::string args = R"({"city": "Paris", "unit": "celsius"})";
    ToolCallParse p = parse_tool_calls(f, s.prefix + args + s.suffix, true);
    ASSERT_EQ(p.calls.size(), 1u) << tool_call_format_name(f);
    expect_call(p.calls[0], "get_weather", args);
    EXPECT_EQ(p.content, "");
  }
}

struct Streamed {
  std::string content;
  std::vector<std::string> names, args;
  std::vector<int> fragments;  // argument deltas per call
};

Streamed stream(F f, const std::string& text, const std::vector<size_t>& cuts, int max_calls = 100) {
  ToolCallStream s(f, max_calls);
  Streamed out;
  auto take = [&](const ToolCallStep& step) {
    out.content += step.content;
    for (const ToolCallDelta& d : step.calls) {
      if (d.name) {
        EXPECT_EQ(d.index, static_cast<int>(out.names.size()));
        out.names.push_back(*d.name);
        out.args.emplace_back();
        out.fragments.push_back(0);
      }
      ASSERT_LT(d.index, static_cast<int>(out.names.size()));
      out.args[d.index] += d.arguments;
      out.fragments[d.index] += !d.arguments.empty();
    }
  };
  size_t at = 0;
  for (size_t cut : cuts) {
    take(s.push(std::string_view(text).substr(at, cut - at)));
    at = cut;
  }
  take(s.push(std::string_view(text).substr(at)));
  take(s.finish());
  return out;
}

void expect_stream_equals_whole(F f, const std::string& text) {
  const ToolCallParse whole = parse_tool_calls(f, text, true);
  std::vector<std::vector<size_t>> splits;
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  splits.push_back(every);  // a byte at a time
  splits.push_back({});     // at once
  std::mt19937 rng(7);
  for (int k = 0; k < 40; ++k) {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < text.size(); ++i)
      if (rng() % 4 == 0) cuts.push_back(i);
    splits.push_back(cuts);
  }
  for (const auto& cuts : splits) {
    const Streamed s = stream(f, text, cuts);
    EXPECT_EQ(s.content, whole.content) << text;
    ASSERT_EQ(s.names.size(), whole.calls.size()) << text;
    for (size_t i = 0; i < whole.calls.size(); ++i) {
      EXPECT_EQ(s.names[i], whole.calls[i].name);
      EXPECT_EQ(s.args[i], whole.calls[i].arguments);
    }
  }
}

TEST(ToolCalls, StreamedEqualsWholeInEverySplit) {
  const char* hermes[] = {
      "Checking.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Par\\\"is\", \"n\": 12}}\n"
      "</tool_call>\n<tool_call>\n{\"arguments\": {\"tz\": \"UTC\"}, \"name\": \"time\"}\n</tool_call>",
      "<tool_call>\n{\"name\": \"now\"}\n</tool_call>", "no calls, only a < and a <tool",
      "<tool_call>\n{\"name\": broken",  // content, whole and streamed
  };
  for (const char* t : hermes) expect_stream_equals_whole(F::kHermes, t);
  const char* llama[] = {
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": [1, {\"y\": null}]}}; {\"name\": \"b\", \"parameters\": "
      "{}}",
      "{\"name\": \"a\", \"parameters\": {\"x\": 1.5e3}}",
      "  {\"other\": 1}",
      "<|python_ta is not a tag",
      "plain words",
  };
  for (const char* t : llama) expect_stream_equals_whole(F::kLlama3Json, t);
  const char* mistral[] = {
      "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"s\": \"[TOOL_CALLS]\"}}, {\"name\": \"b\", \"arguments\": {}}]",
      "Text first [TOOL_CALLS] {\"name\": \"a\", \"arguments\": {\"k\": true}}",
      "[TOOL no",
  };
  for (const char* t : mistral) expect_stream_equals_whole(F::kMistral, t);
  const char* mistral_args[] = {
      "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Pa[TOOL_CALLS]ris\", \"n\": [1, {\"m\": 2}]}"
      "[TOOL_CALLS]get_time[CALL_ID]x9Y8z7W6v[ARGS]{\"tz\": \"UTC\"}",
      "[TOOL_CALLS]f{\"a\": true}",
      "[TOOL_CALLS]f[ARGS]{\"a\": 1} and prose after",
      "[TOOL_CALLS]f[ARGS][1]",
      "[TOOL_CALL is not a marker",
  };
  for (const char* t : mistral_args) expect_stream_equals_whole(F::kMistralArgs, t);
}

TEST(ToolCalls, ArgumentsStreamAsTheyArrive) {
  const std::string text = "<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}";
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  const Streamed s = stream(F::kHermes, text, every);
  ASSERT_EQ(s.names.size(), 1u);
  EXPECT_EQ(s.args[0], R"({"city": "Paris", "days": 3})");
  EXPECT_GT(s.fragments[0], 10);  // not held back until the call is whole
  EXPECT_EQ(s.content, "");
  // Content is sent as it comes, only a possible marker's start held back.
  ToolCallStream st(F::kHermes, 10);
  EXPECT_EQ(st.push("Hello <").content, "Hello ");
  EXPECT_EQ(st.push("b>").content, "<b>");
  EXPECT_EQ(st.push(" <tool_").content, " ");
  EXPECT_EQ(st.push("call>\n{\"name\": \"f\", ").content, "");
  EXPECT_EQ(st.calls_begun(), 1);
}

TEST(ToolCalls, TextThatGoesWrongAfterACallBeganKeepsTheCallsSent) {
  ToolCallStream st(F::kHermes, 10);
  ToolCallStep a = st.push("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(*a.calls[0].name, "f");
  ToolCallStep b = st.push("}} and then prose");
  EXPECT_EQ(b.calls.size(), 1u);  // the rest of the arguments
  EXPECT_EQ(b.content, "");
  EXPECT_TRUE(st.finish().empty());
}

// With special tokens' text kept (Mistral's [TOOL_CALLS] is one), the stop token's text ends the
// reply: it is neither content nor part of a call, whole or streamed.
TEST(ToolCalls, TheStopTokensTextIsNotTheReplys) {
  EXPECT_EQ(strip_end_text("Amen</s>", "</s>"), "Amen");
  EXPECT_EQ(strip_end_text("Amen</s", "</s>"), "Amen</s");
  EXPECT_EQ(strip_end_text("Amen", ""), "Amen");
  ToolCallStream plain(F::kMistral, 10, "</s>");
  std::string content = plain.push("Amen <").content;
  content += plain.push("/").content;
  content += plain.push("s>").content;
  content += plain.finish().content;
  EXPECT_EQ(content, "Amen ");
  ToolCallStream call(F::kMistral, 10, "</s>");
  ToolCallStep a = call.push("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]</s>");
  ToolCallStep b = call.finish();
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, "{}");
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(a.content, "");
}

TEST(ToolCalls, AtMostMaxCalls) {
  const std::string text = "<tool_call>\n{\"name\": \"a\"}\n</tool_call><tool_call>\n{\"name\": \"b\"}\n</tool_call>";
  const Streamed s = stream(F::kHermes, text, {}, /*max_calls=*/1);
  ASSERT_EQ(s.names.size(), 1u);
  EXPECT_EQ(s.names[0], "a");
}

}  // namespace
}  // namespace yoco
