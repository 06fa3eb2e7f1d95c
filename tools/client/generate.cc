// yoco-cli generate --router: one streamed Generate (docs/design.md §3.2), the text as it comes
// or, with --json, the whole answer with its usage, timings and log-probs.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "tools/client/commands.h"
#include "tools/client/connection.h"
#include "tools/client/output.h"

namespace yoco::cli {
namespace {

FlagTable generate_flags() {
  constexpr double kAny = std::numeric_limits<double>::infinity();  // ranges are the server's to check
  return {
      flag::str("prompt", "the prompt's text (or --tokens)"),
      token_ids_flag("tokens", "the prompt's token ids, comma-separated (or --prompt)"),
      flag::optional_integer("max-tokens", "tokens to generate (default: the server's)", 1, UINT32_MAX),
      flag::optional_number("temperature", "sampling temperature (default: the server's, 1)", -kAny, kAny),
      flag::optional_integer("top-k", "sample among the k likeliest tokens", 0, INT32_MAX),
      flag::optional_number("top-p", "nucleus sampling's probability mass", -kAny, kAny),
      flag::optional_number("min-p", "drop tokens below this fraction of the likeliest's probability", -kAny, kAny),
      flag::optional_number("repetition-penalty", "divides the logits of tokens already seen", -kAny, kAny),
      flag::optional_number("presence-penalty", "subtracted from the logits of tokens already seen", -kAny, kAny),
      flag::optional_number("frequency-penalty", "subtracted per occurrence of a token already seen", -kAny, kAny),
      flag::optional_integer("seed", "the sampler's seed (default: a random one)", 0, INT64_MAX),
      flag::repeated("stop", "a stop string (repeat the flag for several)"),
      token_ids_flag("stop-token-ids", "token ids that end the generation, comma-separated"),
      flag::boolean("ignore-eos", "keep generating past the end-of-sequence token"),
      flag::optional_integer("logprobs", "log-probs of this many top alternatives per token", 0, UINT32_MAX),
      flag::boolean("json", "the whole answer as JSON (usage, timings, log-probs)"),
      flag::str("request-id", "the request's id in the cluster's logs (default: one is made)"),
      flag::optional_integer("priority", "the request's priority", INT32_MIN, INT32_MAX),
      flag::str("document-ids", "cached documents put before the prompt, comma-separated ids"),
      flag::str("json-schema",
                "structured output: a JSON schema the answer follows (docs: README, structured outputs)"),
      flag::boolean("json-object", "structured output: any JSON object"),
      flag::str("regex", "structured output: a regular expression the answer matches"),
      flag::str("grammar", "structured output: an EBNF grammar (xgrammar's GBNF dialect)"),
      flag::repeated("choice", "structured output: one of these strings (repeat the flag for each)"),
  };
}

// The request the flags describe; errors go into `f`.
v1::GenerateRequest generate_request(ServerFlags& f) {
  v1::GenerateRequest req;
  if (f.has("prompt") && f.has("tokens")) f.fail("--prompt and --tokens are alternatives; give one");
  if (f.has("prompt")) {
    req.set_text(f.str("prompt"));
  } else if (f.has("tokens")) {
    for (int32_t t : token_ids(f, "tokens")) req.mutable_tokens()->add_ids(t);
  } else {
    f.fail("--prompt or --tokens: required");
  }
  // Cached documents go before the prompt, in the order given (comma-separated ids).
  const std::string docs = f.str("document-ids");
  for (size_t pos = 0; f.has("document-ids") && pos <= docs.size();) {
    size_t end = docs.find(',', pos);
    if (end == std::string::npos) end = docs.size();
    if (end > pos) req.add_document_ids(docs.substr(pos, end - pos));
    pos = end + 1;
  }
  // 0 on the wire means "the server's default", so a requested 0 is refused here.
  if (f.has("max-tokens")) req.set_max_tokens(static_cast<uint32_t>(f.integer("max-tokens")));
  // Sampling flags left out stay unset: the server's defaults apply (temperature 1).
  auto* s = req.mutable_sampling();
  struct FloatFlag {
    const char* name;
    void (v1::SamplingParams::*set)(float);
  };
  for (const auto& [name, set] :
       {FloatFlag{"temperature", &v1::SamplingParams::set_temperature},
        FloatFlag{"top-p", &v1::SamplingParams::set_top_p}, FloatFlag{"min-p", &v1::SamplingParams::set_min_p},
        FloatFlag{"repetition-penalty", &v1::SamplingParams::set_repetition_penalty},
        FloatFlag{"presence-penalty", &v1::SamplingParams::set_presence_penalty},
        FloatFlag{"frequency-penalty", &v1::SamplingParams::set_frequency_penalty}}) {
    if (f.has(name)) (s->*set)(static_cast<float>(f.number(name)));
  }
  if (f.has("top-k")) s->set_top_k(static_cast<int32_t>(f.integer("top-k")));
  if (f.has("seed")) s->set_seed(static_cast<uint64_t>(f.integer("seed")));
  for (const std::string& stop : f.all("stop")) req.add_stop(stop);
  for (int32_t t : token_ids(f, "stop-token-ids")) req.add_stop_token_ids(t);
  req.set_ignore_eos(f.boolean("ignore-eos"));
  if (f.has("logprobs")) req.set_logprobs(static_cast<uint32_t>(f.integer("logprobs")));
  if (f.has("priority")) req.set_priority(static_cast<int32_t>(f.integer("priority")));
  req.set_request_id(f.str("request-id"));
  // Structured output (docs/design.md §3.2c): one of these; the router refuses several at once.
  v1::StructuredOutput* so = req.mutable_structured_output();
  if (f.has("json-schema")) so->set_json_schema(f.str("json-schema"));
  if (f.boolean("json-object")) so->set_json_object(true);
  if (f.has("regex")) so->set_regex(f.str("regex"));
  if (f.has("grammar")) so->set_grammar(f.str("grammar"));
  for (const std::string& c : f.all("choice")) so->mutable_choice()->add_values(c);
  const int given =
      f.has("json-schema") + f.boolean("json-object") + f.has("regex") + f.has("grammar") + (so->has_choice() ? 1 : 0);
  if (given > 1) f.fail("--json-schema, --json-object, --regex, --grammar and --choice are alternatives; give one");
  if (given == 0) req.clear_structured_output();
  return req;
}

int print_json(const v1::Final& fin, const std::vector<int32_t>& ids, const std::string& text, Json::Array logprobs) {
  Json::Object usage, timings, o;
  usage["prompt_tokens"] = Json(static_cast<int64_t>(fin.usage().prompt_tokens()));
  usage["cached_tokens"] = Json(static_cast<int64_t>(fin.usage().cached_tokens()));
  usage["completion_tokens"] = Json(static_cast<int64_t>(fin.usage().completion_tokens()));
  const auto& t = fin.timings();
  timings["queue_seconds"] = number(t.queue_seconds());
  timings["prefill_seconds"] = number(t.prefill_seconds());
  timings["transfer_seconds"] = number(t.transfer_seconds());
  timings["first_token_seconds"] = number(t.first_token_seconds());
  timings["total_seconds"] = number(t.total_seconds());
  o["request_id"] = Json(fin.request_id());
  o["token_ids"] = ids_json(ids);
  o["text"] = Json(text);
  o["finish_reason"] = Json(finish_reason_name(fin.finish_reason()));
  o["usage"] = Json(std::move(usage));
  o["timings"] = Json(std::move(timings));
  o["logprobs"] = Json(std::move(logprobs));
  std::cout << Json(std::move(o)).dump() << "\n";
  return 0;
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  ServerFlags f = command_flags(argc, argv, "one streamed Generate: the text as it comes, or --json", generate_flags());
  if (!f.ok()) return flag_fail(f);
  const v1::GenerateRequest req = generate_request(f);
  auto conn = connect(f);
  if (!f.ok()) return flag_fail(f);
  const bool json = f.boolean("json");

  grpc::ClientContext ctx;
  conn->prepare(ctx);
  auto reader = conn->stub->Generate(&ctx, req);
  std::vector<int32_t> ids;
  std::string text;
  Json::Array logprobs;
  std::optional<v1::Final> fin;
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (resp.has_final()) {
      fin = resp.final();
      continue;
    }
    const v1::Delta& d = resp.delta();
    ids.insert(ids.end(), d.token_ids().begin(), d.token_ids().end());
    text += d.text();
    for (const auto& e : d.logprobs()) logprobs.push_back(logprob_entry_json(e));
    if (!json && !d.text().empty()) {
      std::fwrite(d.text().data(), 1, d.text().size(), stdout);
      std::fflush(stdout);
    }
  }
  const grpc::Status st = reader->Finish();
  if (!json && !text.empty()) std::printf("\n");  // end the partial line even when the stream failed
  std::fflush(stdout);
  if (!st.ok()) return rpc_fail(st);
  if (!fin) return rpc_fail({grpc::StatusCode::INTERNAL, "the stream ended without its final message"});

  if (json) return print_json(*fin, ids, text, std::move(logprobs));
  if (text.empty() && !ids.empty()) {  // a model without a tokenizer streams ids only
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? " " : "", ids[i]);
    std::printf("\n");
  }
  std::fprintf(stderr, "[%u tokens, finish=%s, first token %.3f s, total %.3f s]\n", fin->usage().completion_tokens(),
               finish_reason_name(fin->finish_reason()), fin->timings().first_token_seconds(),
               fin->timings().total_seconds());
  return 0;
}

}  // namespace yoco::cli
