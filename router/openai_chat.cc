#include "router/openai_chat.h"

#include <fstream>
#include <sstream>

#include "tokenizer/chat_template.h"

namespace yoco {
namespace {

Result<std::optional<ChatTemplate>> find_template(const std::string& template_file, const std::string& model_dir) {
  if (template_file.empty()) return load_model_chat_template(model_dir);
  auto t = load_chat_template_file(template_file);
  if (!t.ok()) return Status(t.status().code(), "--chat-template: " + t.status().message());
  return std::optional<ChatTemplate>(std::move(t).value());
}

std::string spelling(const Tokenizer* tok, std::optional<int32_t> id) {
  return tok && id ? tok->id_to_token(*id).value_or("") : "";
}

}  // namespace

Result<ChatRenderer> load_chat_renderer(const std::string& template_file, const std::string& model_dir,
                                        const Tokenizer* tok, std::string* source) {
  auto found = find_template(template_file, model_dir);
  if (!found.ok()) return found.status();
  if (!found->has_value()) return ChatRenderer();
  if (source) *source = (*found)->source();
  auto tmpl = std::make_shared<const ChatTemplate>(std::move(**found));
  const std::string bos = spelling(tok, tok ? tok->bos_id() : std::nullopt);
  const std::string eos = spelling(tok, tok ? tok->eos_id() : std::nullopt);
  return ChatRenderer([tmpl, bos, eos](const Json& messages, bool add_generation_prompt, const Json& extra,
                                       const std::string& request_json) {
    ChatTemplateContext c;
    c.messages = messages;
    c.add_generation_prompt = add_generation_prompt;
    c.bos_token = bos;
    c.eos_token = eos;
    c.extra = extra;
    c.request_json = request_json;
    return tmpl->render(c);
  });
}

Json load_tokenizer_config(const std::string& model_dir) {
  std::ifstream in(model_dir + "/tokenizer_config.json", std::ios::binary);
  if (!in) return Json();
  std::ostringstream text;
  text << in.rdbuf();
  auto j = Json::parse(text.str());
  return j.ok() && j->is_object() ? std::move(j).value() : Json();
}

}  // namespace yoco
