// The chat template behind /v1/chat/completions and /tokenize's messages (docs/design.md, OpenAI
// HTTP API): --chat-template FILE (vLLM's flag), else the model directory's tokenizer_config.json
// "chat_template"; the model's BOS/EOS spellings are bound in, since templates write them.
#pragma once

#include <string>

#include "common/status.h"
#include "router/openai_server.h"
#include "tokenizer/tokenizer.h"

namespace yoco {

// An empty renderer when neither gives a template (chat requests then answer 400 saying so).
// Errors name the flag or the file. `source`, when given, receives the template's text ("" for none).
Result<ChatRenderer> load_chat_renderer(const std::string& template_file, const std::string& model_dir,
                                        const Tokenizer* tok, std::string* source = nullptr);

// The model directory's tokenizer_config.json as /tokenizer_info serves it; null when there is
// none or it does not parse (the tokenizer's own load names that error).
Json load_tokenizer_config(const std::string& model_dir);

}  // namespace yoco
