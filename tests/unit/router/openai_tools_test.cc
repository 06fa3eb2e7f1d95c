// Tools on chat (router/openai_tools.h): bad definitions are 400s naming the field, tool_choice's
// forms, assistant tool calls made what templates render (keys in the client's order), and the
// constraint of an enforced call (a grammar the structured-output check takes).
#include "router/openai_tools.h"

#include <gtest/gtest.h>

#include <cctype>

#include "router/openai_request.h"
#include "structured/check.h"

namespace yoco {
namespace {

using Choice = ChatTools::Choice;

Json body_of(const std::string& text) {
  auto j = Json::parse(text);
  EXPECT_TRUE(j.ok()) << text;
  return j.ok() ? *j : Json();
}

std::variant<ChatTools, ApiError> tools_of(const std::string& text) { return read_tools(body_of(text), text); }

// The field a bad request is blamed on ("" when it parsed).
std::string bad(const std::variant<ChatTools, ApiError>& r) {
  if (const auto* e = std::get_if<ApiError>(&r)) {
    EXPECT_EQ(e->http_status, 400);
    EXPECT_EQ(e->message.rfind(e->param + ": ", 0), 0u) << e->message;
    return e->param;
  }
  return "";
}

const char* kWeather = R"({"type": "function", "function": {"name": "get_weather", "description": "d",
  "parameters": {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "city": {"type": "string"}},
  "required": ["city"]}}})";
const char* kTime = R"({"type": "function", "function": {"name": "get-time"}})";

std::string with(const std::string& tools, const std::string& more = "") {
  return R"({"messages": [{"role": "user", "content": "x"}], "tools": [)" + tools + "]" + more + "}";
}

TEST(OpenAiTools, ChoicesAndDefaults) {
  auto t = std::get<ChatTools>(tools_of(with(std::string(kWeather) + "," + kTime)));
  ASSERT_EQ(t.tools.size(), 2u);
  EXPECT_EQ(t.tools[0].name, "get_weather");
  // The schema keeps the client's key order (properties as written: unit before city).
  EXPECT_LT(t.tools[0].parameters.find("unit"), t.tools[0].parameters.find("city"));
  EXPECT_EQ(t.tools[1].parameters, "");
  EXPECT_EQ(t.choice, Choice::kAuto);  // OpenAI's default with tools
  EXPECT_TRUE(t.parsed());
  EXPECT_FALSE(t.enforced());
  EXPECT_TRUE(t.parallel);
  EXPECT_EQ(std::get<ChatTools>(tools_of(R"({"messages": []})")).choice, Choice::kNone);  // no tools
  EXPECT_EQ(std::get<ChatTools>(tools_of(with(kWeather, R"(, "tool_choice": "none")"))).choice, Choice::kNone);
  EXPECT_EQ(std::get<ChatTools>(tools_of(with(kWeather, R"(, "tool_choice": "required")"))).choice, Choice::kRequired);
  auto named = std::get<ChatTools>(tools_of(with(
      std::string(kWeather) + "," + kTime,
      R"(, "tool_choice": {"type": "function", "function": {"name": "get-time"}}, "parallel_tool_calls": false)")));
  EXPECT_EQ(named.choice, Choice::kNamed);
  EXPECT_EQ(named.named, "get-time");
  EXPECT_TRUE(named.enforced());
  EXPECT_FALSE(named.parallel);
}

TEST(OpenAiTools, BadDefinitionsNameTheirField) {
  EXPECT_EQ(bad(tools_of(R"({"tools": {}})")), "tools");
  EXPECT_EQ(bad(tools_of(with("5"))), "tools[0]");
  EXPECT_EQ(bad(tools_of(with(R"({"type": "retrieval"})"))), "tools[0].type");
  EXPECT_EQ(bad(tools_of(with(R"({"type": "function"})"))), "tools[0].function");
  EXPECT_EQ(bad(tools_of(with(R"({"type": "function", "function": {}})"))), "tools[0].function.name");
  EXPECT_EQ(bad(tools_of(with(R"({"type": "function", "function": {"name": "has space"}})"))),
            "tools[0].function.name");
  EXPECT_EQ(bad(tools_of(with(std::string(kTime) + "," + kTime))), "tools[1].function.name");  // twice
  EXPECT_EQ(bad(tools_of(with(std::string(kTime) + R"(,{"type": "function", "function": {"name": "p",
              "parameters": "object"}})"))),
            "tools[1].function.parameters");
  EXPECT_EQ(bad(tools_of(with(R"({"type": "function", "function": {"name": "d", "description": 1}})"))),
            "tools[0].function.description");
  if (structured_outputs_enabled()) {  // a schema the grammar engine refuses
    EXPECT_EQ(bad(tools_of(with(std::string(kTime) + R"(,{"type": "function", "function": {"name": "p",
                "parameters": {"type": "no-such-type"}}})"))),
              "tools[1].function.parameters");
  }
  EXPECT_EQ(bad(tools_of(with(kWeather, R"(, "tool_choice": "sometimes")"))), "tool_choice");
  EXPECT_EQ(bad(tools_of(with(kWeather, R"(, "tool_choice": 1)"))), "tool_choice");
  EXPECT_EQ(bad(tools_of(with(kWeather, R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})"))),
            "tool_choice.function.name");
  EXPECT_EQ(bad(tools_of(with(kWeather, R"(, "tool_choice": {"type": "function"})"))), "tool_choice.function");
  EXPECT_EQ(bad(tools_of(with(kWeather, R"(, "tool_choice": {"type": "x", "function": {"name": "get_weather"}})"))),
            "tool_choice.type");
  EXPECT_EQ(bad(tools_of(R"({"tool_choice": "required"})")), "tool_choice");  // nothing to call
  EXPECT_EQ(bad(tools_of(with(kWeather, R"(, "parallel_tool_calls": "yes")"))), "parallel_tool_calls");
}

TEST(OpenAiTools, AssistantToolCallsBecomeWhatTemplatesRender) {
  const std::string body = R"({"messages": [{"role": "user", "content": "x"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"zone\": \"b\", \"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]})";
  auto r = parse_chat_request(body_of(body), body);
  ASSERT_TRUE(std::holds_alternative<OpenAiRequest>(r)) << std::get<ApiError>(r).message;
  const Json& call = std::get<OpenAiRequest>(r).messages.as_array()[1].find("tool_calls")->as_array()[0];
  EXPECT_EQ(call.find("function")->find("arguments")->dump(), R"({"city":"Paris","zone":"b"})");
  // The template takes key order from the request's text: the arguments' own order, parsed.
  const std::string ordered = with_parsed_arguments(body);
  EXPECT_NE(ordered.find(R"("arguments":{"zone":"b","city":"Paris"})"), std::string::npos) << ordered;
  EXPECT_EQ(with_parsed_arguments(R"({"messages": []})"), R"({"messages": []})");

  auto msg_error = [](const std::string& calls) {
    const std::string b = R"({"messages": [{"role": "assistant", "tool_calls": )" + calls + "}]}";
    auto r = parse_chat_request(body_of(b), b);
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r).message : "";
  };
  EXPECT_NE(msg_error("{}").find("messages[0].tool_calls must be an array"), std::string::npos);
  EXPECT_NE(msg_error(R"([{"function": {"arguments": "{}"}}])").find("messages[0].tool_calls[0].function.name"),
            std::string::npos);
  EXPECT_NE(msg_error(R"([{"function": {"name": "f", "arguments": "{not json"}}])")
                .find("messages[0].tool_calls[0].function.arguments"),
            std::string::npos);
  EXPECT_EQ(msg_error("null"), "");  // null tool_calls: as if absent
}

TEST(OpenAiTools, AnEnforcedCallIsAGrammarTheCheckTakes) {
  auto t = std::get<ChatTools>(tools_of(with(std::string(kWeather) + "," + kTime, R"(, "tool_choice": "required")")));
  auto none = tool_call_constraint(t, ToolCallFormat::kNone);
  ASSERT_TRUE(std::holds_alternative<ApiError>(none));
  EXPECT_EQ(std::get<ApiError>(none).param, "tool_choice");
  if (!structured_outputs_enabled()) GTEST_SKIP() << "built without xgrammar (scripts/setup.sh)";
  for (ToolCallFormat f :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral, ToolCallFormat::kMistralArgs}) {
    auto c = tool_call_constraint(t, f);
    ASSERT_TRUE(std::holds_alternative<StructuredOutput>(c)) << std::get<ApiError>(c).message;
    const StructuredOutput& so = std::get<StructuredOutput>(c);
    EXPECT_EQ(so.kind, StructuredOutput::Kind::kGrammar);
    EXPECT_TRUE(check_structured_output(so, "structured_output.grammar").ok());
    EXPECT_NE(so.text.find("get_weather"), std::string::npos);
    EXPECT_NE(so.text.find("get-time"), std::string::npos);
  }
  t.choice = Choice::kNamed;
  t.named = "get-time";
  auto named = std::get<StructuredOutput>(tool_call_constraint(t, ToolCallFormat::kHermes));
  EXPECT_EQ(named.text.find("get_weather"), std::string::npos);
}

TEST(OpenAiTools, CallIds) {
  const std::string a = new_tool_call_id(ToolCallFormat::kHermes), b = new_tool_call_id(ToolCallFormat::kHermes);
  EXPECT_EQ(a.rfind("call_", 0), 0u);
  EXPECT_EQ(a.size(), 29u);
  EXPECT_NE(a, b);
  for (ToolCallFormat f : {ToolCallFormat::kMistral, ToolCallFormat::kMistralArgs}) {
    const std::string m = new_tool_call_id(f);  // Mistral's templates check 9 alphanumerics
    EXPECT_EQ(m.size(), 9u);
    for (char c : m) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)));
  }
}

}  // namespace
}  // namespace yoco
