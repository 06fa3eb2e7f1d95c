// Chat templates: compile once, render per request (docs/design.md, chat templates). The
// interpreter signals errors with jinja::Error internally; they become a Status here and never
// leave this file as exceptions.
#include "tokenizer/chat_template.h"

#include <fstream>
#include <sstream>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/json_order.h"
#include "tokenizer/jinja/parser.h"

namespace yoco {

struct ChatTemplate::Compiled {
  std::string source;
  std::unique_ptr<jinja::Template> tpl;
};

Result<ChatTemplate> ChatTemplate::compile(std::string_view source) {
  auto c = std::make_shared<Compiled>();
  c->source = std::string(source);
  try {
    c->tpl = jinja::parse(source);
  } catch (const jinja::Error& e) {
    return invalid_argument(std::string("chat_template: ") + e.what());
  } catch (const std::bad_alloc&) {
    return invalid_argument("chat_template: out of memory while compiling");
  }
  ChatTemplate t;
  t.compiled_ = std::move(c);
  return t;
}

const std::string& ChatTemplate::source() const { return compiled_->source; }

Result<std::string> ChatTemplate::render(const ChatTemplateContext& ctx) const {
  if (!ctx.messages.is_array()) return invalid_argument("chat_template: messages must be an array");
  if (!ctx.extra.is_null() && !ctx.extra.is_object())
    return invalid_argument("chat_template: extra variables must be an object");
  // What transformers' apply_chat_template passes: tools and documents are None unless given.
  struct Unlimited {  // later work on this thread is not charged to this render
    ~Unlimited() { jinja::reset_work(static_cast<size_t>(-1)); }
  } restore;
  try {
    // Reading the variables is charged to a work budget too (a huge request is work).
    jinja::reset_work(jinja::RenderLimits{}.max_steps);
    std::optional<jinja::Value> order;
    if (!ctx.request_json.empty()) {
      order = jinja::parse_json_ordered(ctx.request_json);
      if (order && !order->is_dict()) order.reset();
    }
    auto convert = [&](const std::string& key, const Json& j) {
      jinja::Value v = jinja::Value::from_json(j);
      const jinja::Value* hint = order ? order->dict().find(key) : nullptr;
      return hint ? jinja::reorder_like(v, *hint) : v;
    };
    std::vector<std::pair<std::string, jinja::Value>> globals;
    globals.emplace_back("messages", convert("messages", ctx.messages));
    globals.emplace_back("add_generation_prompt", jinja::Value(ctx.add_generation_prompt));
    globals.emplace_back("bos_token", jinja::Value(ctx.bos_token));
    globals.emplace_back("eos_token", jinja::Value(ctx.eos_token));
    globals.emplace_back("tools", jinja::Value::none());
    globals.emplace_back("documents", jinja::Value::none());
    if (ctx.extra.is_object()) {
      for (const auto& [k, v] : ctx.extra.as_object()) {
        bool replaced = false;
        for (auto& g : globals) {
          if (g.first == k) {
            g.second = convert(k, v);
            replaced = true;
          }
        }
        if (!replaced) globals.emplace_back(k, convert(k, v));
      }
    }
    return jinja::render(*compiled_->tpl, std::move(globals));
  } catch (const jinja::Error& e) {
    if (e.from_template) return invalid_argument(e.what());
    return invalid_argument(std::string("chat_template: ") + e.what());
  } catch (const std::bad_alloc&) {
    return invalid_argument("chat_template: out of memory while rendering");
  }
}

namespace {

Result<std::string> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return io_error("cannot read " + p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return io_error("cannot read " + p.string());
  return ss.str();
}

}  // namespace

Result<ChatTemplate> load_chat_template_file(const std::filesystem::path& file) {
  YOCO_ASSIGN_OR_RETURN(std::string text, read_file(file));
  auto t = ChatTemplate::compile(text);
  if (!t.ok()) return invalid_argument(file.string() + ": " + t.status().message());
  return t;
}

namespace {

// "chat_template" of tokenizer_config.json: a string, or [{"name", "template"}] of which "default".
Result<std::optional<ChatTemplate>> template_from_config(const std::filesystem::path& config) {
  YOCO_ASSIGN_OR_RETURN(std::string text, read_file(config));
  YOCO_ASSIGN_OR_RETURN(Json j, Json::parse(text));
  const Json* ct = j.is_object() ? j.find("chat_template") : nullptr;
  if (!ct || ct->is_null()) return std::optional<ChatTemplate>();
  const std::string where = config.string() + ": chat_template";
  std::string source;
  if (ct->is_string()) {
    source = ct->as_string();
  } else if (ct->is_array()) {
    bool found = false;
    for (const Json& e : ct->as_array()) {
      const Json* name = e.is_object() ? e.find("name") : nullptr;
      const Json* tpl = e.is_object() ? e.find("template") : nullptr;
      if (!name || !tpl || !name->is_string() || !tpl->is_string())
        return invalid_argument(where + ": each entry of the list must be {\"name\": string, \"template\": string}");
      if (name->as_string() == "default") {
        source = tpl->as_string();
        found = true;
      }
    }
    if (!found) return invalid_argument(where + ": the list has no template named \"default\"");
  } else {
    return invalid_argument(where + " must be a string or a list of {name, template}, not " +
                            json_type_name(ct->type()));
  }
  auto t = ChatTemplate::compile(source);
  if (!t.ok()) return invalid_argument(config.string() + ": " + t.status().message());
  return std::optional<ChatTemplate>(std::move(t).value());
}

}  // namespace

// chat_template.jinja wins over the config, as in transformers (it "clobbers any template in the
// config" when loading a tokenizer).
Result<std::optional<ChatTemplate>> load_model_chat_template(const std::filesystem::path& model_dir) {
  std::error_code ec;
  std::filesystem::path jinja_file = model_dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_file, ec)) {
    YOCO_ASSIGN_OR_RETURN(ChatTemplate t, load_chat_template_file(jinja_file));
    return std::optional<ChatTemplate>(std::move(t));
  }
  std::filesystem::path config = model_dir / "tokenizer_config.json";
  if (std::filesystem::exists(config, ec)) return template_from_config(config);
  return std::optional<ChatTemplate>();
}

}  // namespace yoco
