// Renders every case of a JSON file with the C++ chat templates, for compare_jinja2.py:
//   render_cases CASES.json TEMPLATE_DIR > RESULTS.json
// CASES: [{"template": "llama3.jinja" | "source": "...", "messages": [...], "add_generation_prompt": bool,
//          "bos_token": str, "eos_token": str, "extra": {...}, "request_json": "..."}]
// RESULTS: [{"ok": true, "text": "..."} | {"ok": false, "error": "..."}], one per case.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "common/json.h"
#include "tokenizer/chat_template.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: render_cases CASES.json TEMPLATE_DIR\n");
    return 2;
  }
  std::ifstream f(argv[1], std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  auto cases = yoco::Json::parse(ss.str(), 256);
  if (!cases.ok() || !cases->is_array()) {
    std::fprintf(stderr, "render_cases: bad cases file: %s\n", cases.status().to_string().c_str());
    return 2;
  }
  std::map<std::string, yoco::Result<yoco::ChatTemplate>> compiled;
  yoco::Json::Array results;
  for (const yoco::Json& c : cases->as_array()) {
    yoco::Json::Object r;
    const yoco::Json* file = c.find("template");
    std::string key = file ? std::string("file:") + file->as_string() : "src:" + c.find("source")->as_string();
    auto it = compiled.find(key);
    if (it == compiled.end()) {
      auto t = file ? yoco::load_chat_template_file(std::string(argv[2]) + "/" + file->as_string())
                    : yoco::ChatTemplate::compile(c.find("source")->as_string());
      it = compiled.emplace(key, std::move(t)).first;
    }
    if (!it->second.ok()) {
      r["ok"] = yoco::Json(false);
      r["error"] = yoco::Json(it->second.status().message());
      results.emplace_back(std::move(r));
      continue;
    }
    yoco::ChatTemplateContext ctx;
    ctx.messages = *c.find("messages");
    if (const auto* g = c.find("add_generation_prompt")) ctx.add_generation_prompt = g->as_bool();
    if (const auto* b = c.find("bos_token")) ctx.bos_token = b->as_string();
    if (const auto* e = c.find("eos_token")) ctx.eos_token = e->as_string();
    if (const auto* x = c.find("extra")) ctx.extra = *x;
    if (const auto* rq = c.find("request_json")) ctx.request_json = rq->as_string();
    auto out = it->second->render(ctx);
    r["ok"] = yoco::Json(out.ok());
    if (out.ok()) {
      r["text"] = yoco::Json(out.value());
    } else {
      r["error"] = yoco::Json(out.status().message());
    }
    results.emplace_back(std::move(r));
  }
  std::cout << yoco::Json(std::move(results)).dump() << "\n";
  return 0;
}
