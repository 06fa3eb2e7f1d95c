// libFuzzer target: chat templates from arbitrary bytes (a template is data from a model
// directory). Compiles the input; when it compiles, renders it with a fixed conversation that has
// tool calls, content parts and tools, with and without the request's key order. Any Status is
// fine; a crash, a sanitizer report or a hang is not. Built with clang -fsanitize=fuzzer,address,
// undefined when YOCO_FUZZ=ON; replayed over the real templates (tests/data/chat_templates) and
// tests/fuzz/corpus/chat_template by a ctest in every build.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/json.h"
#include "tokenizer/chat_template.h"

namespace {

constexpr const char* kRequest = R"({"messages": [
  {"role": "system", "content": "sys"},
  {"role": "user", "content": "hi"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "abcdefghi", "type": "function",
     "function": {"name": "f", "arguments": {"x": 1, "a": [1.5, true, null]}}}]},
  {"role": "tool", "tool_call_id": "abcdefghi", "content": "42"},
  {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image"}]}],
 "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return 0;
  auto tpl = yoco::ChatTemplate::compile(std::string(reinterpret_cast<const char*>(data), size));
  if (!tpl.ok()) return 0;
  static const yoco::Json request = yoco::Json::parse(kRequest).value();
  yoco::ChatTemplateContext ctx;
  ctx.messages = *request.find("messages");
  ctx.extra = yoco::Json(yoco::Json::Object{{"tools", *request.find("tools")}});
  ctx.bos_token = "<s>";
  ctx.eos_token = "</s>";
  (void)tpl->render(ctx);
  ctx.request_json = kRequest;
  ctx.add_generation_prompt = false;
  (void)tpl->render(ctx);
  return 0;
}
