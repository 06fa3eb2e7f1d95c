#include "router/openai_chat.h"

namespace yoco {

Result<ChatRenderer> load_chat_renderer(const std::string& template_file, const std::string&, const Tokenizer*) {
  if (!template_file.empty()) return invalid_argument("--chat-template: chat templates are not built in yet");
  return ChatRenderer();
}

}  // namespace yoco
