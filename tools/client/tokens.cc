// yoco-cli tokenize / detokenize --router: the router's tokenizer.
#include <cstdint>
#include <cstdio>
#include <iostream>

#include "common/json.h"
#include "tools/client/commands.h"
#include "tools/client/connection.h"
#include "tools/client/output.h"

namespace yoco::cli {

int cmd_tokenize(int argc, char** argv) {
  ServerFlags f = command_flags(argc, argv, "the router's tokenizer: text to token ids",
                                {flag::str("text", "the text"), flag::boolean("add-bos", "start with the BOS token"),
                                 flag::boolean("allow-special", "special tokens written in the text are tokens"),
                                 flag::boolean("json", "{\"tokens\": [...]}")});
  if (f.ok() && !f.has("text")) f.fail("--text: required");
  if (!f.ok()) return flag_fail(f);
  v1::TokenizeRequest req;
  req.set_text(f.str("text"));
  req.set_add_bos(f.boolean("add-bos"));
  req.set_allow_special(f.boolean("allow-special"));
  auto conn = connect(f);
  if (!f.ok()) return flag_fail(f);
  grpc::ClientContext ctx;
  conn->prepare(ctx);
  v1::TokenizeResponse resp;
  if (grpc::Status st = conn->stub->Tokenize(&ctx, req, &resp); !st.ok()) return rpc_fail(st);
  if (f.boolean("json")) {
    Json::Object o;
    o["tokens"] = ids_json(resp.ids());
    std::cout << Json(std::move(o)).dump() << "\n";
  } else {
    for (int i = 0; i < resp.ids_size(); ++i) std::printf("%s%d", i ? "," : "", resp.ids(i));
    std::printf("\n");
  }
  return 0;
}

int cmd_detokenize(int argc, char** argv) {
  ServerFlags f = command_flags(argc, argv, "the router's tokenizer: token ids to text",
                                {token_ids_flag("tokens", "comma-separated token ids"),
                                 flag::boolean("skip-special", "leave the special tokens' text out")});
  f.required("tokens");
  v1::DetokenizeRequest req;
  for (int32_t t : token_ids(f, "tokens")) req.add_ids(t);
  req.set_skip_special(f.boolean("skip-special"));
  auto conn = connect(f);
  if (!f.ok()) return flag_fail(f);
  grpc::ClientContext ctx;
  conn->prepare(ctx);
  v1::DetokenizeResponse resp;
  if (grpc::Status st = conn->stub->Detokenize(&ctx, req, &resp); !st.ok()) return rpc_fail(st);
  std::fwrite(resp.text().data(), 1, resp.text().size(), stdout);
  std::printf("\n");
  return 0;
}

}  // namespace yoco::cli
