// A model's chat template (the Jinja "chat_template" of tokenizer_config.json) compiled once
// and rendered per chat request, byte for byte as Hugging Face transformers renders it with
// jinja2 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
// raise_exception, strftime_now, tojson). The Jinja subset and its bounds are in
// docs/design.md ("Chat templates"); tests/unit/chat_template_test.cc compares real templates
// with Python's jinja2.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"

namespace yoco {

namespace jinja {
struct Template;
}

struct ChatTemplateContext {
  Json messages;  // array of message objects exactly as the request gives them
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
  Json extra;  // null, or an object of further top-level variables (e.g. "tools"), passed through
  // Optional: the request body as received. Json sorts object keys; where this text has the same
  // objects (at "messages" and at each key of `extra`), their keys take its order, as
  // transformers would see them (tool schemas, tool-call arguments). Ignored when not JSON.
  std::string request_json;
};

// Cheap to copy: the compiled form is shared and immutable; render() may run on many threads.
class ChatTemplate {
 public:
  // INVALID_ARGUMENT "chat_template: line L col C: ..." on a syntax error or an unsupported
  // construct (unknown filter or test, {% extends %}, ...).
  static Result<ChatTemplate> compile(std::string_view source);

  // INVALID_ARGUMENT with the template's own message for raise_exception('m'), and
  // "chat_template: line L col C: ..." for errors while rendering (undefined attribute of an
  // undefined value, a type error, output over 16 MiB, too much work).
  // The text already holds what the template wrote for bos_token and the special tokens of each
  // turn: encode it with special tokens recognised and without adding another BOS, as
  // transformers does (apply_chat_template tokenizes with add_special_tokens=False).
  Result<std::string> render(const ChatTemplateContext& ctx) const;

  const std::string& source() const;

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
};

// The model's template: <model_dir>/chat_template.jinja if present (it wins, as in transformers),
// else "chat_template" in <model_dir>/tokenizer_config.json (a string, or the list form
// [{"name", "template"}] -> the one named "default"). Returns nullopt when the model has none (the
// caller answers 400 naming the missing template).
Result<std::optional<ChatTemplate>> load_model_chat_template(const std::filesystem::path& model_dir);
// A template file as it is (for a --chat-template flag).
Result<ChatTemplate> load_chat_template_file(const std::filesystem::path& file);

}  // namespace yoco
