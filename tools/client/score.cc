// yoco-cli score --router: the prompt's own log-probs (Score, docs/design.md §3.2), per token or
// --json with the top alternatives.
#include <cstdint>
#include <cstdio>
#include <iostream>

#include "common/json.h"
#include "tools/client/commands.h"
#include "tools/client/connection.h"
#include "tools/client/output.h"

namespace yoco::cli {

int cmd_score(int argc, char** argv) {
  ServerFlags f = command_flags(
      argc, argv, "the prompt's own log-probs (Score)",
      {flag::str("text", "the text to score (or --tokens)"), token_ids_flag("tokens", "token ids, comma-separated"),
       flag::integer("top-logprobs", "top alternatives per token", 0, 0, UINT32_MAX),
       flag::boolean("json", "the answer as JSON")});
  if (!f.ok()) return flag_fail(f);
  v1::ScoreRequest req;
  if (f.has("text") && f.has("tokens")) f.fail("--text and --tokens are alternatives; give one");
  if (f.has("text")) {
    req.set_text(f.str("text"));
  } else if (f.has("tokens")) {
    for (int32_t t : token_ids(f, "tokens")) req.mutable_tokens()->add_ids(t);
  } else {
    f.fail("--text or --tokens: required");
  }
  req.set_top_logprobs(static_cast<uint32_t>(f.integer("top-logprobs")));
  auto conn = connect(f);
  if (!f.ok()) return flag_fail(f);
  grpc::ClientContext ctx;
  conn->prepare(ctx);
  v1::ScoreResponse resp;
  if (grpc::Status st = conn->stub->Score(&ctx, req, &resp); !st.ok()) return rpc_fail(st);
  if (f.boolean("json")) {
    Json::Array lps, tops;
    for (float x : resp.token_logprobs()) lps.push_back(number(x));
    for (const auto& e : resp.top()) tops.push_back(logprob_entry_json(e));
    Json::Object o;
    o["token_ids"] = ids_json(resp.token_ids());
    o["token_logprobs"] = Json(std::move(lps));
    if (!tops.empty()) o["top"] = Json(std::move(tops));
    o["sum_logprob"] = number(resp.sum_logprob());
    o["perplexity"] = number(resp.perplexity());
    std::cout << Json(std::move(o)).dump() << "\n";
    return 0;
  }
  for (int i = 0; i < resp.token_logprobs_size(); ++i)
    std::printf("%d\t%d\t%.6f\n", i + 1, i + 1 < resp.token_ids_size() ? resp.token_ids(i + 1) : -1,
                resp.token_logprobs(i));
  std::printf("sum_logprob %.6f perplexity %.4f\n", resp.sum_logprob(), resp.perplexity());
  return 0;
}

}  // namespace yoco::cli
