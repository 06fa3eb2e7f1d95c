// Tool calls in a chat reply (docs/design.md §3.2d): the tool-call syntax of the chat template
// families we ship (Hermes `<tool_call>{...}</tool_call>` as Qwen 2.5/3 write it, Llama 3.1's bare
// JSON, Mistral's `[TOOL_CALLS][...]` and `[TOOL_CALLS]name[ARGS]{...}`), found in a template's text or named by the router's
// --tool-call-parser, and a reply's text split into content and calls, whole or as it streams.
// Text only: no grammar engine, no RPC (the enforcement grammar is router/openai_tools.h's).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace yoco {

enum class ToolCallFormat {
  kNone,         // tool calls are not parsed (only tool_choice "none" is served)
  kHermes,       // <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, one or more
  kLlama3Json,   // {"name": ..., "parameters": {...}} as the whole reply (after <|python_tag|>), ";" between
  kMistral,      // [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (read: the later form too)
  kMistralArgs,  // [TOOL_CALLS]name[ARGS]{...}, one marker per call (read: the earlier form too; a
                 // [CALL_ID]id between name and [ARGS] is read and dropped)
};

// vLLM's --tool-call-parser names: "hermes", "llama3_json", "mistral"; "mistral_args" is ours (vLLM's
// "mistral" picks the form from the tokenizer's version); "none" is kNone.
std::optional<ToolCallFormat> tool_call_format_named(std::string_view name);
const char* tool_call_format_name(ToolCallFormat f);
// The family whose markers a chat template writes: "<tool_call>" Hermes, "[TOOL_CALLS]" Mistral
// (with "[ARGS]" too, the later form), "<|python_tag|>" or an "ipython" role Llama 3 JSON; kNone
// for a template with none of them.
ToolCallFormat detect_tool_call_format(std::string_view chat_template);

// The text around the arguments' JSON of one call to `name` as the family writes it: what the
// enforcement of tool_choice "required" / a named function forces (`name` is [A-Za-z0-9_-]).
struct ToolCallSyntax {
  std::string prefix, suffix;
};
ToolCallSyntax tool_call_syntax(ToolCallFormat f, std::string_view name);

struct ToolCallText {
  std::string name;       // empty while its text is not complete
  std::string arguments;  // the arguments' JSON as written ("{}" when absent); so far, while streaming
  bool complete = false;
};

struct ToolCallParse {
  std::string content;  // the text before the first call
  std::vector<ToolCallText> calls;
  bool broken = false;  // not final: the text went wrong inside a call's markup
};

// `final`: `text` is the whole reply; calls that do not parse, or a reply cut inside one, make it
// all content with no calls. Otherwise the reply may go on: content stops short of what could
// still become a call's marker, and the last call may be partial.
ToolCallParse parse_tool_calls(ToolCallFormat f, std::string_view text, bool final);
// A whole reply without its last `end_text` (the stop token's text, when kept).
std::string_view strip_end_text(std::string_view text, std::string_view end_text);

// One streamed call's news: its first delta carries the name, later ones arguments only.
struct ToolCallDelta {
  int index = 0;
  std::optional<std::string> name;
  std::string arguments;  // the fragment that arrived
};
struct ToolCallStep {
  std::string content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

// A reply parsed as it streams: each step says what became certain since the last. The
// concatenated steps equal parse_tool_calls(final) of the whole text (while no call has started
// when the text goes wrong: then it is content, as in the whole answer; once one has, the calls
// sent stand). At most `max_calls` calls. `end_text`: the stop token's text when special tokens'
// text is kept (Mistral's [TOOL_CALLS] is one): the reply's end, never content (strip_end_text).
class ToolCallStream {
 public:
  ToolCallStream(ToolCallFormat f, int max_calls, std::string end_text = "")
      : format_(f), max_calls_(max_calls), end_text_(std::move(end_text)) {}
  ToolCallStep push(std::string_view text);
  ToolCallStep finish();
  int calls_begun() const { return static_cast<int>(args_sent_.size()); }

 private:
  ToolCallStep step(bool final);

  ToolCallFormat format_;
  int max_calls_;
  std::string end_text_;
  std::string text_;
  size_t content_sent_ = 0;
  std::vector<size_t> args_sent_;  // per call begun
  bool plain_ = false;             // the reply turned out to be content only
};

}  // namespace yoco
