// yoco-cli's cluster mode over the public yoco.v1 API (docs/design.md §3.2): generate (streamed), score,
// tokenize, detokenize, info, and bench, an open-loop load generator.
#include "tools/cluster_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <semaphore>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "common/flags.h"
#include "common/json.h"
#include "common/status.h"
#include "yoco/v1/yoco.grpc.pb.h"

namespace yoco::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// JSON has no NaN or infinity (a -inf logprob, a percentile of nothing): those become null.
Json number(double v) { return std::isfinite(v) ? Json(v) : Json(); }

const char* grpc_code_name(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

int rpc_fail(const grpc::Status& st) {
  std::fprintf(stderr, "error: %s: %s\n", grpc_code_name(st.error_code()), st.error_message().c_str());
  return 1;
}

// A bad flag never reaches the server, but reads like the server's own INVALID_ARGUMENT.
int flag_fail(const Status& st) {
  std::fprintf(stderr, "error: %s: %s\n", status_code_name(st.code()), st.message().c_str());
  return 2;
}

// Every cluster command takes --router, --deadline-ms, the TLS flags and --api-key besides its own flags.
Result<Flags> parse_flags(int argc, char** argv, std::set<std::string> known, const std::set<std::string>& booleans) {
  known.insert({"router", "deadline-ms", "tls-ca", "tls-cert", "tls-key", "api-key"});
  auto f = Flags::parse(argc, argv, 2, known, booleans);
  if (!f.ok()) return f.status();
  if (!f->positional().empty()) return invalid_argument("unexpected argument \"" + f->positional()[0] + "\"");
  if (f->get("router").empty()) return invalid_argument("--router: required (HOST:PORT)");
  return f;
}

// Flags keeps the last value of a flag; --stop may be repeated, so its values are collected here.
std::vector<std::string> repeated_flag(int argc, char** argv, const std::string& name,
                                       const std::set<std::string>& booleans) {
  std::vector<std::string> out;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) continue;
    const std::string n = a.substr(2);
    if (const auto eq = n.find('='); eq != std::string::npos) {
      if (n.substr(0, eq) == name) out.push_back(n.substr(eq + 1));
      continue;
    }
    if (booleans.count(n) || i + 1 >= argc) continue;
    if (n == name) out.push_back(argv[i + 1]);
    ++i;
  }
  return out;
}

Result<std::vector<int32_t>> int32_list(const Flags& f, const std::string& name) {
  auto list = f.get_int_list(name);
  if (!list.ok()) return list.status();
  std::vector<int32_t> out;
  for (size_t i = 0; i < list->size(); ++i) {
    const int64_t v = list.value()[i];
    if (v < 0 || v > INT32_MAX)
      return invalid_argument("--" + name + "[" + std::to_string(i) + "]: negative or too large");
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

// An integer flag within [lo, hi]; `def` when absent.
Result<int64_t> int_in(const Flags& f, const std::string& name, int64_t def, int64_t lo, int64_t hi) {
  auto v = f.get_int(name, def);
  if (!v.ok()) return v.status();
  if (v.value() < lo || v.value() > hi)
    return invalid_argument("--" + name + ": must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                            "], got " + std::to_string(v.value()));
  return v;
}

Result<std::string> read_pem(const Flags& f, const std::string& name) {
  if (!f.has(name)) return std::string();
  std::ifstream in(f.get(name), std::ios::binary);
  std::stringstream ss;
  if (!in || !(ss << in.rdbuf())) return invalid_argument("--" + name + ": cannot read " + f.get(name));
  return ss.str();
}

// --tls-ca: TLS, the router's certificate checked against it (and its name against --router's
// host); --tls-cert and --tls-key: the client certificate a router with --tls-client-ca requires.
Result<std::shared_ptr<grpc::ChannelCredentials>> channel_credentials(const Flags& f) {
  if (!f.has("tls-ca")) {
    if (f.has("tls-cert") || f.has("tls-key")) return invalid_argument("--tls-ca: required with --tls-cert/--tls-key");
    return grpc::InsecureChannelCredentials();
  }
  if (f.has("tls-cert") != f.has("tls-key")) return invalid_argument("--tls-cert and --tls-key: both or neither");
  grpc::SslCredentialsOptions o;
  auto ca = read_pem(f, "tls-ca");
  auto cert = read_pem(f, "tls-cert");
  auto key = read_pem(f, "tls-key");
  for (const auto* r : {&ca, &cert, &key})
    if (!r->ok()) return r->status();
  o.pem_root_certs = *ca;
  o.pem_cert_chain = *cert;
  o.pem_private_key = *key;
  return grpc::SslCredentials(o);
}

struct Connection {
  std::unique_ptr<v1::Yoco::Stub> stub;
  std::optional<std::chrono::milliseconds> deadline;
  std::string api_key;  // --api-key or $YOCO_API_KEY (docs/design.md §9b)

  void authorize(grpc::ClientContext& ctx) const {
    if (!api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key);
  }
  void prepare(grpc::ClientContext& ctx) const {
    if (deadline) ctx.set_deadline(std::chrono::system_clock::now() + *deadline);
    authorize(ctx);
  }
};

Result<Connection> connect(const Flags& f) {
  Connection c;
  if (f.has("deadline-ms")) {
    auto ms = int_in(f, "deadline-ms", 0, 1, INT32_MAX);
    if (!ms.ok()) return ms.status();
    c.deadline = std::chrono::milliseconds(ms.value());
  }
  auto creds = channel_credentials(f);
  if (!creds.ok()) return creds.status();
  const char* env_key = std::getenv("YOCO_API_KEY");
  c.api_key = f.has("api-key") ? f.get("api-key") : (env_key ? env_key : "");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // Score with top-n alternatives over a long text is large
  c.stub = v1::Yoco::NewStub(grpc::CreateCustomChannel(f.get("router"), *creds, args));
  return c;
}

Json token_logprob_json(const v1::TokenLogprob& t) {
  Json::Object o;
  o["id"] = Json(t.id());
  o["logprob"] = number(t.logprob());
  o["text"] = Json(t.text());
  return Json(std::move(o));
}

Json logprob_entry_json(const v1::LogprobEntry& e) {
  Json o = token_logprob_json(e.chosen());
  Json::Array top;
  for (const auto& t : e.top()) top.push_back(token_logprob_json(t));
  o.mutable_object()["top"] = Json(std::move(top));
  return o;
}

const char* finish_reason_name(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_EOS:
      return "eos";
    default:
      return "unspecified";
  }
}

template <class Ids>
Json ids_json(const Ids& ids) {
  Json::Array a;
  for (int32_t t : ids) a.push_back(Json(t));
  return Json(std::move(a));
}

// ---- generate ----

Status build_generate_request(const Flags& f, int argc, char** argv, const std::set<std::string>& booleans,
                              v1::GenerateRequest& req) {
  if (f.has("prompt") && f.has("tokens")) return invalid_argument("--prompt and --tokens are alternatives; give one");
  if (f.has("prompt")) {
    req.set_text(f.get("prompt"));
  } else if (f.has("tokens")) {
    YOCO_ASSIGN_OR_RETURN(auto ids, int32_list(f, "tokens"));
    for (int32_t t : ids) req.mutable_tokens()->add_ids(t);
  } else {
    return invalid_argument("--prompt or --tokens: required");
  }
  // Cached documents go before the prompt, in the order given (comma-separated ids).
  for (size_t pos = 0; f.has("document-ids") && pos <= f.get("document-ids").size();) {
    const std::string all = f.get("document-ids");
    size_t end = all.find(',', pos);
    if (end == std::string::npos) end = all.size();
    if (end > pos) req.add_document_ids(all.substr(pos, end - pos));
    pos = end + 1;
  }
  // 0 on the wire means "the server's default", so a requested 0 is refused here.
  if (f.has("max-tokens")) {
    YOCO_ASSIGN_OR_RETURN(auto n, int_in(f, "max-tokens", 0, 1, UINT32_MAX));
    req.set_max_tokens(static_cast<uint32_t>(n));
  }
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
    if (!f.has(name)) continue;
    YOCO_ASSIGN_OR_RETURN(double v, f.get_double(name, 0));
    (s->*set)(static_cast<float>(v));
  }
  if (f.has("top-k")) {
    YOCO_ASSIGN_OR_RETURN(auto k, int_in(f, "top-k", 0, 0, INT32_MAX));
    s->set_top_k(static_cast<int32_t>(k));
  }
  if (f.has("seed")) {
    YOCO_ASSIGN_OR_RETURN(auto seed, int_in(f, "seed", 0, 0, INT64_MAX));
    s->set_seed(static_cast<uint64_t>(seed));
  }
  for (const std::string& stop : repeated_flag(argc, argv, "stop", booleans)) req.add_stop(stop);
  if (f.has("stop-token-ids")) {
    YOCO_ASSIGN_OR_RETURN(auto ids, int32_list(f, "stop-token-ids"));
    for (int32_t t : ids) req.add_stop_token_ids(t);
  }
  req.set_ignore_eos(f.get_bool("ignore-eos"));
  if (f.has("logprobs")) {
    YOCO_ASSIGN_OR_RETURN(auto n, int_in(f, "logprobs", 0, 0, UINT32_MAX));
    req.set_logprobs(static_cast<uint32_t>(n));
  }
  if (f.has("priority")) {
    YOCO_ASSIGN_OR_RETURN(auto p, int_in(f, "priority", 0, INT32_MIN, INT32_MAX));
    req.set_priority(static_cast<int32_t>(p));
  }
  req.set_request_id(f.get("request-id"));
  return Status::Ok();
}

int cmd_generate(int argc, char** argv) {
  const std::set<std::string> booleans = {"json", "ignore-eos"};
  auto f = parse_flags(argc, argv,
                       {"prompt", "tokens", "max-tokens", "temperature", "top-k", "top-p", "min-p",
                        "repetition-penalty", "presence-penalty", "frequency-penalty", "seed", "stop", "stop-token-ids",
                        "ignore-eos", "logprobs", "json", "request-id", "priority", "document-ids"},
                       booleans);
  if (!f.ok()) return flag_fail(f.status());
  v1::GenerateRequest req;
  if (Status st = build_generate_request(f.value(), argc, argv, booleans, req); !st.ok()) return flag_fail(st);
  auto conn = connect(f.value());
  if (!conn.ok()) return flag_fail(conn.status());
  const bool json = f->get_bool("json");

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

  if (json) {
    Json::Object usage, timings, o;
    usage["prompt_tokens"] = Json(static_cast<int64_t>(fin->usage().prompt_tokens()));
    usage["cached_tokens"] = Json(static_cast<int64_t>(fin->usage().cached_tokens()));
    usage["completion_tokens"] = Json(static_cast<int64_t>(fin->usage().completion_tokens()));
    const auto& t = fin->timings();
    timings["queue_seconds"] = number(t.queue_seconds());
    timings["prefill_seconds"] = number(t.prefill_seconds());
    timings["transfer_seconds"] = number(t.transfer_seconds());
    timings["first_token_seconds"] = number(t.first_token_seconds());
    timings["total_seconds"] = number(t.total_seconds());
    o["request_id"] = Json(fin->request_id());
    o["token_ids"] = ids_json(ids);
    o["text"] = Json(text);
    o["finish_reason"] = Json(finish_reason_name(fin->finish_reason()));
    o["usage"] = Json(std::move(usage));
    o["timings"] = Json(std::move(timings));
    o["logprobs"] = Json(std::move(logprobs));
    std::cout << Json(std::move(o)).dump() << "\n";
    return 0;
  }
  if (text.empty() && !ids.empty()) {  // a model without a tokenizer streams ids only
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? " " : "", ids[i]);
    std::printf("\n");
  }
  std::fprintf(stderr, "[%u tokens, finish=%s, first token %.3f s, total %.3f s]\n", fin->usage().completion_tokens(),
               finish_reason_name(fin->finish_reason()), fin->timings().first_token_seconds(),
               fin->timings().total_seconds());
  return 0;
}

// ---- score, tokenize, detokenize, info ----

int cmd_score(int argc, char** argv) {
  auto f = parse_flags(argc, argv, {"text", "tokens", "top-logprobs", "json"}, {"json"});
  if (!f.ok()) return flag_fail(f.status());
  v1::ScoreRequest req;
  if (f->has("text") && f->has("tokens"))
    return flag_fail(invalid_argument("--text and --tokens are alternatives; give one"));
  if (f->has("text")) {
    req.set_text(f->get("text"));
  } else if (f->has("tokens")) {
    auto ids = int32_list(f.value(), "tokens");
    if (!ids.ok()) return flag_fail(ids.status());
    for (int32_t t : ids.value()) req.mutable_tokens()->add_ids(t);
  } else {
    return flag_fail(invalid_argument("--text or --tokens: required"));
  }
  auto top = int_in(f.value(), "top-logprobs", 0, 0, UINT32_MAX);
  if (!top.ok()) return flag_fail(top.status());
  req.set_top_logprobs(static_cast<uint32_t>(top.value()));
  auto conn = connect(f.value());
  if (!conn.ok()) return flag_fail(conn.status());
  grpc::ClientContext ctx;
  conn->prepare(ctx);
  v1::ScoreResponse resp;
  if (grpc::Status st = conn->stub->Score(&ctx, req, &resp); !st.ok()) return rpc_fail(st);
  if (f->get_bool("json")) {
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

int cmd_tokenize(int argc, char** argv) {
  auto f = parse_flags(argc, argv, {"text", "add-bos", "allow-special", "json"}, {"add-bos", "allow-special", "json"});
  if (!f.ok()) return flag_fail(f.status());
  if (!f->has("text")) return flag_fail(invalid_argument("--text: required"));
  v1::TokenizeRequest req;
  req.set_text(f->get("text"));
  req.set_add_bos(f->get_bool("add-bos"));
  req.set_allow_special(f->get_bool("allow-special"));
  auto conn = connect(f.value());
  if (!conn.ok()) return flag_fail(conn.status());
  grpc::ClientContext ctx;
  conn->prepare(ctx);
  v1::TokenizeResponse resp;
  if (grpc::Status st = conn->stub->Tokenize(&ctx, req, &resp); !st.ok()) return rpc_fail(st);
  if (f->get_bool("json")) {
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
  auto f = parse_flags(argc, argv, {"tokens", "skip-special"}, {"skip-special"});
  if (!f.ok()) return flag_fail(f.status());
  if (!f->has("tokens")) return flag_fail(invalid_argument("--tokens: required (comma-separated token ids)"));
  auto ids = int32_list(f.value(), "tokens");
  if (!ids.ok()) return flag_fail(ids.status());
  v1::DetokenizeRequest req;
  for (int32_t t : ids.value()) req.add_ids(t);
  req.set_skip_special(f->get_bool("skip-special"));
  auto conn = connect(f.value());
  if (!conn.ok()) return flag_fail(conn.status());
  grpc::ClientContext ctx;
  conn->prepare(ctx);
  v1::DetokenizeResponse resp;
  if (grpc::Status st = conn->stub->Detokenize(&ctx, req, &resp); !st.ok()) return rpc_fail(st);
  std::fwrite(resp.text().data(), 1, resp.text().size(), stdout);
  std::printf("\n");
  return 0;
}

int cmd_info(int argc, char** argv) {
  auto f = parse_flags(argc, argv, {"json"}, {"json"});  // the output is JSON either way
  if (!f.ok()) return flag_fail(f.status());
  auto conn = connect(f.value());
  if (!conn.ok()) return flag_fail(conn.status());
  grpc::ClientContext ctx;
  conn->prepare(ctx);
  v1::ModelInfo info;
  if (grpc::Status st = conn->stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info); !st.ok()) return rpc_fail(st);
  Json::Object o;
  o["name"] = Json(info.name());
  o["fingerprint"] = Json(info.fingerprint());
  o["arch"] = Json(info.arch());
  o["vocab_size"] = Json(info.vocab_size());
  o["max_seq_len"] = Json(info.max_seq_len());
  o["n_layers"] = Json(info.n_layers());
  o["n_self_layers"] = Json(info.n_self_layers());
  o["n_loops"] = Json(info.n_loops());
  o["sliding_window"] = Json(info.sliding_window());
  o["kv_bytes_per_token"] = Json(info.kv_bytes_per_token());
  if (info.has_bos_id()) o["bos_id"] = Json(info.bos_id());
  if (info.has_eos_id()) o["eos_id"] = Json(info.eos_id());
  auto config = Json::parse(info.params_json());
  o["config"] = config.ok() ? config.value() : Json(info.params_json());
  std::cout << Json(std::move(o)).dump() << "\n";
  return 0;
}

// ---- bench ----

struct BenchSample {
  grpc::Status status;
  double ttft = NAN;        // seconds from sending to the first token
  std::vector<double> itl;  // seconds between tokens, one entry per token after the first delta
  double e2e = NAN;
  int64_t output_tokens = 0;
  double transfer = 0;     // the router's timings: K/V transfer not hidden behind prefill
  double first_token = 0;  // and the server-side time to the first token
};

BenchSample run_one(v1::Yoco::Stub& stub, const Connection& conn, const v1::GenerateRequest& req) {
  BenchSample s;
  grpc::ClientContext ctx;
  conn.prepare(ctx);
  const auto t0 = Clock::now();
  auto reader = stub.Generate(&ctx, req);
  std::optional<Clock::time_point> last;
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (resp.has_final()) {
      s.transfer = resp.final().timings().transfer_seconds();
      s.first_token = resp.final().timings().first_token_seconds();
    }
    if (!resp.has_delta() || resp.delta().token_ids_size() == 0) continue;
    const auto now = Clock::now();
    const int k = resp.delta().token_ids_size();
    if (!last) {
      s.ttft = seconds(now - t0);
    } else {
      // A delta carrying k tokens counts as k gaps of equal share: percentiles are per token.
      s.itl.insert(s.itl.end(), k, seconds(now - *last) / k);
    }
    last = now;
    s.output_tokens += k;
  }
  s.status = reader->Finish();
  s.e2e = seconds(Clock::now() - t0);
  return s;
}

// Linear interpolation between closest ranks (numpy's default); NaN for no samples.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank)), hi = static_cast<size_t>(std::ceil(rank));
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

struct BenchConfig {
  int64_t requests = 0, concurrency = 0, prompt_tokens = 32, max_tokens = 32, vocab = 0;
  double rate = 0;
  uint64_t seed = 0;
};

Result<BenchConfig> bench_config(const Flags& f) {
  BenchConfig c;
  if (!f.has("requests")) return invalid_argument("--requests: required");
  YOCO_ASSIGN_OR_RETURN(c.requests, int_in(f, "requests", 0, 1, 1000000));
  YOCO_ASSIGN_OR_RETURN(c.concurrency, int_in(f, "concurrency", 0, 0, 1000000));
  YOCO_ASSIGN_OR_RETURN(c.prompt_tokens, int_in(f, "prompt-tokens", 32, 1, INT32_MAX));
  YOCO_ASSIGN_OR_RETURN(c.max_tokens, int_in(f, "max-tokens", 32, 1, UINT32_MAX));
  YOCO_ASSIGN_OR_RETURN(c.rate, f.get_double("rate", 0));
  if (!(c.rate >= 0) || !std::isfinite(c.rate)) return invalid_argument("--rate: must be >= 0 (0: all at once)");
  YOCO_ASSIGN_OR_RETURN(auto seed, int_in(f, "seed", 0, 0, INT64_MAX));
  c.seed = static_cast<uint64_t>(seed);
  return c;
}

Json percentiles_json(const std::vector<double>& secs, std::initializer_list<int> ps) {
  Json::Object o;
  for (int p : ps) {
    char key[8];
    std::snprintf(key, sizeof key, "p%d", p);
    o[key] = number(percentile(secs, p) * 1e3);
  }
  return Json(std::move(o));
}

int cmd_bench(int argc, char** argv) {
  auto f = parse_flags(argc, argv,
                       {"requests", "rate", "concurrency", "prompt-tokens", "max-tokens", "vocab-from-router",
                        "vocab-size", "seed", "json"},
                       {"vocab-from-router", "json"});
  if (!f.ok()) return flag_fail(f.status());
  auto cfg = bench_config(f.value());
  if (!cfg.ok()) return flag_fail(cfg.status());
  auto conn = connect(f.value());
  if (!conn.ok()) return flag_fail(conn.status());
  BenchConfig& c = cfg.value();

  // Prompt ids are drawn below the served model's vocabulary (--vocab-size may narrow it).
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    conn->authorize(ctx);
    v1::ModelInfo info;
    if (grpc::Status st = conn->stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info); !st.ok())
      return rpc_fail(st);
    c.vocab = info.vocab_size();
    if (f->has("vocab-size")) {
      auto v = int_in(f.value(), "vocab-size", 0, 1, INT32_MAX);
      if (!v.ok()) return flag_fail(v.status());
      c.vocab = std::min(c.vocab, v.value());
    }
    if (c.vocab < 1) return rpc_fail({grpc::StatusCode::FAILED_PRECONDITION, "GetModelInfo: vocab_size < 1"});
  }

  // Everything random is drawn up front from one seeded generator: a run is reproducible.
  std::mt19937_64 rng(c.seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.vocab - 1));
  std::exponential_distribution<double> gap(c.rate > 0 ? c.rate : 1.0);
  std::vector<v1::GenerateRequest> reqs(static_cast<size_t>(c.requests));
  std::vector<double> arrival(reqs.size(), 0.0);
  double t = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (c.rate > 0) t += gap(rng);
    arrival[i] = t;
    auto& r = reqs[i];
    r.set_request_id("bench-" + std::to_string(i));
    for (int64_t j = 0; j < c.prompt_tokens; ++j) r.mutable_tokens()->add_ids(token(rng));
    r.set_max_tokens(static_cast<uint32_t>(c.max_tokens));
    r.mutable_sampling()->set_temperature(0.0f);
    r.set_ignore_eos(true);
  }

  // Open loop: each request is sent at its arrival time (or as soon as one of --concurrency
  // slots frees up), one thread per request, whatever the earlier ones are doing.
  std::counting_semaphore<> slots(c.concurrency > 0 ? c.concurrency : c.requests);
  std::vector<BenchSample> samples(reqs.size());
  std::vector<std::thread> threads;
  threads.reserve(reqs.size());
  const auto start = Clock::now();
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::this_thread::sleep_until(
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival[i])));
    slots.acquire();
    threads.emplace_back([&, i] {
      samples[i] = run_one(*conn->stub, conn.value(), reqs[i]);
      slots.release();
    });
  }
  for (auto& th : threads) th.join();
  const double wall = seconds(Clock::now() - start);

  int64_t completed = 0, out_tokens = 0;
  std::map<std::string, int64_t> errors;
  std::map<std::string, std::string> first_error;
  std::vector<double> ttft, itl, e2e;
  double transfer_sum = 0, first_token_sum = 0;
  for (const auto& s : samples) {
    if (!s.status.ok()) {
      const std::string code = grpc_code_name(s.status.error_code());
      ++errors[code];
      first_error.emplace(code, s.status.error_message());
      continue;
    }
    ++completed;
    out_tokens += s.output_tokens;
    if (std::isfinite(s.ttft)) ttft.push_back(s.ttft);
    itl.insert(itl.end(), s.itl.begin(), s.itl.end());
    e2e.push_back(s.e2e);
    transfer_sum += s.transfer;
    first_token_sum += s.first_token;
  }
  // The K/V transfer's share of the time to first token, as the router timed both (0 colocated).
  const double transfer_share = first_token_sum > 0 ? transfer_sum / first_token_sum : 0;
  for (const auto& [code, msg] : first_error)
    std::fprintf(stderr, "bench: first %s error: %s\n", code.c_str(), msg.c_str());
  const double req_per_s = wall > 0 ? completed / wall : 0, tok_per_s = wall > 0 ? out_tokens / wall : 0;

  if (f->get_bool("json")) {
    Json::Object o, errs;
    for (const auto& [code, n] : errors) errs[code] = Json(n);
    o["requests"] = Json(c.requests);
    o["completed"] = Json(completed);
    o["errors"] = Json(std::move(errs));
    o["wall_seconds"] = number(wall);
    o["request_throughput"] = number(req_per_s);
    o["output_tokens"] = Json(out_tokens);
    o["output_tokens_per_second"] = number(tok_per_s);
    o["ttft_ms"] = percentiles_json(ttft, {50, 90, 99});
    o["itl_ms"] = percentiles_json(itl, {50, 90, 99});
    o["e2e_ms"] = percentiles_json(e2e, {50, 99});
    o["transfer_share_of_ttft"] = number(transfer_share);
    Json::Object conf;
    conf["rate"] = number(c.rate);
    conf["concurrency"] = Json(c.concurrency);
    conf["prompt_tokens"] = Json(c.prompt_tokens);
    conf["max_tokens"] = Json(c.max_tokens);
    conf["vocab"] = Json(c.vocab);
    conf["seed"] = Json(c.seed);
    o["config"] = Json(std::move(conf));
    std::cout << Json(std::move(o)).dump() << "\n";
  } else {
    char arrivals[64] = "all at once";
    if (c.rate > 0) std::snprintf(arrivals, sizeof arrivals, "Poisson arrivals at %g req/s", c.rate);
    const std::string in_flight = c.concurrency > 0 ? std::to_string(c.concurrency) : "unlimited";
    std::printf(
        "bench: %lld requests to %s, %s, concurrency %s, prompt %lld random ids below %lld (seed %llu), "
        "max_tokens %lld, greedy, ignore_eos\n",
        static_cast<long long>(c.requests), f->get("router").c_str(), arrivals, in_flight.c_str(),
        static_cast<long long>(c.prompt_tokens), static_cast<long long>(c.vocab),
        static_cast<unsigned long long>(c.seed), static_cast<long long>(c.max_tokens));
    std::string errs = std::to_string(c.requests - completed);
    if (!errors.empty()) {
      errs += " (";
      for (auto it = errors.begin(); it != errors.end(); ++it)
        errs += (it == errors.begin() ? "" : ", ") + it->first + " " + std::to_string(it->second);
      errs += ")";
    }
    auto ms = [](const std::vector<double>& v, double p) { return percentile(v, p) * 1e3; };
    std::printf("completed         %lld\n", static_cast<long long>(completed));
    std::printf("errors            %s\n", errs.c_str());
    std::printf("wall              %.3f s\n", wall);
    std::printf("throughput        %.2f req/s\n", req_per_s);
    std::printf("output tokens     %lld (%.1f tok/s)\n", static_cast<long long>(out_tokens), tok_per_s);
    std::printf("TTFT ms           p50 %.1f  p90 %.1f  p99 %.1f\n", ms(ttft, 50), ms(ttft, 90), ms(ttft, 99));
    std::printf("ITL ms            p50 %.2f  p90 %.2f  p99 %.2f\n", ms(itl, 50), ms(itl, 90), ms(itl, 99));
    std::printf("E2E ms            p50 %.1f  p99 %.1f\n", ms(e2e, 50), ms(e2e, 99));
    std::printf("transfer / TTFT   %.2f%% (server timings, all requests)\n", 100 * transfer_share);
  }
  return completed > 0 ? 0 : 1;  // errors are results; nothing completing is a failed run
}

}  // namespace

// ---- documents (RAG pre-caching) ----

Json document_json(const v1::Document& d) {
  Json::Object o;
  o["id"] = Json(d.id());
  o["token_count"] = Json(static_cast<int64_t>(d.token_count()));
  o["stored_bytes"] = Json(static_cast<int64_t>(d.stored_bytes()));
  o["created_unix_ms"] = Json(d.created_unix_ms());
  o["ttl_seconds"] = Json(static_cast<int64_t>(d.ttl_seconds()));
  o["already_cached"] = Json(d.already_cached());
  return Json(std::move(o));
}

int cmd_cache_doc(int argc, char** argv) {
  auto f = parse_flags(argc, argv, {"text", "tokens", "file", "ttl-seconds"}, {});
  if (!f.ok()) return flag_fail(f.status());
  v1::CacheDocumentRequest req;
  const int given = f->has("text") + f->has("tokens") + f->has("file");
  if (given != 1) return flag_fail(invalid_argument("--text, --tokens or --file: give exactly one"));
  if (f->has("text")) {
    req.set_text(f->get("text"));
  } else if (f->has("file")) {
    std::ifstream in(f->get("file"), std::ios::binary);
    if (!in) return flag_fail(invalid_argument("--file: cannot read " + f->get("file")));
    std::stringstream ss;
    ss << in.rdbuf();
    req.set_text(ss.str());
  } else {
    auto ids = int32_list(f.value(), "tokens");
    if (!ids.ok()) return flag_fail(ids.status());
    for (int32_t t : *ids) req.mutable_tokens()->add_ids(t);
  }
  auto ttl = f->get_int("ttl-seconds", 0);
  if (!ttl.ok() || *ttl < 0 || *ttl > 0xffffffffLL) return flag_fail(invalid_argument("--ttl-seconds: 0 .. 2^32-1"));
  req.set_ttl_seconds(static_cast<uint32_t>(*ttl));
  auto conn = connect(f.value());
  if (!conn.ok()) return flag_fail(conn.status());
  grpc::ClientContext ctx;
  conn->prepare(ctx);
  v1::Document doc;
  if (grpc::Status st = conn->stub->CacheDocument(&ctx, req, &doc); !st.ok()) return rpc_fail(st);
  std::printf("%s\n", document_json(doc).dump().c_str());
  return 0;
}

// get-doc, list-docs, delete-doc: parse (--id when `needs_id`), connect, one call, print the
// JSON `call` builds.
template <class Call>
int doc_command(int argc, char** argv, bool needs_id, Call call) {
  auto f = parse_flags(argc, argv, needs_id ? std::set<std::string>{"id"} : std::set<std::string>{}, {});
  if (!f.ok()) return flag_fail(f.status());
  if (needs_id && !f->has("id")) return flag_fail(invalid_argument("--id: required"));
  auto conn = connect(f.value());
  if (!conn.ok()) return flag_fail(conn.status());
  grpc::ClientContext ctx;
  conn->prepare(ctx);
  Json out;
  if (grpc::Status st = call(*conn->stub, ctx, f->get("id"), out); !st.ok()) return rpc_fail(st);
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

int cmd_get_doc(int argc, char** argv) {
  return doc_command(argc, argv, true, [](auto& stub, grpc::ClientContext& ctx, const std::string& id, Json& out) {
    v1::GetDocumentRequest req;
    req.set_id(id);
    v1::Document doc;
    grpc::Status st = stub.GetDocument(&ctx, req, &doc);
    out = document_json(doc);
    return st;
  });
}

int cmd_list_docs(int argc, char** argv) {
  return doc_command(argc, argv, false, [](auto& stub, grpc::ClientContext& ctx, const std::string&, Json& out) {
    v1::ListDocumentsResponse resp;
    grpc::Status st = stub.ListDocuments(&ctx, v1::ListDocumentsRequest(), &resp);
    Json::Array docs;
    for (const auto& d : resp.documents()) docs.push_back(document_json(d));
    out = Json(std::move(docs));
    return st;
  });
}

int cmd_delete_doc(int argc, char** argv) {
  return doc_command(argc, argv, true, [](auto& stub, grpc::ClientContext& ctx, const std::string& id, Json& out) {
    v1::DeleteDocumentRequest req;
    req.set_id(id);
    v1::DeleteDocumentResponse resp;
    grpc::Status st = stub.DeleteDocument(&ctx, req, &resp);
    out = Json(Json::Object{{"deleted", Json(resp.deleted())}});
    return st;
  });
}

int run_cluster_command(const std::string& cmd, int argc, char** argv) {
  if (cmd == "cache-doc") return cmd_cache_doc(argc, argv);
  if (cmd == "get-doc") return cmd_get_doc(argc, argv);
  if (cmd == "list-docs") return cmd_list_docs(argc, argv);
  if (cmd == "delete-doc") return cmd_delete_doc(argc, argv);
  if (cmd == "generate") return cmd_generate(argc, argv);
  if (cmd == "score") return cmd_score(argc, argv);
  if (cmd == "tokenize") return cmd_tokenize(argc, argv);
  if (cmd == "detokenize") return cmd_detokenize(argc, argv);
  if (cmd == "info") return cmd_info(argc, argv);
  if (cmd == "bench") return cmd_bench(argc, argv);
  return flag_fail(invalid_argument("\"" + cmd + "\" does not take --router"));
}

void cluster_usage() {
  std::fprintf(
      stderr,
      "With --router HOST:PORT the commands talk to a cluster (yoco.v1) instead of loading a model;\n"
      "sampling flags left out take the server's defaults (temperature 1). Every one takes --deadline-ms MS,\n"
      "--api-key KEY (default $YOCO_API_KEY, sent as `authorization: Bearer KEY`) and, for a TLS router,\n"
      "--tls-ca FILE [--tls-cert FILE --tls-key FILE] (a client certificate).\n"
      "  generate --router HOST:PORT (--prompt TEXT | --tokens 1,2,3) [--max-tokens N] [--temperature T]\n"
      "           [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R] [--presence-penalty P]\n"
      "           [--frequency-penalty F] [--seed S] [--stop STR]... [--stop-token-ids 1,2] [--ignore-eos]\n"
      "           [--logprobs N] [--request-id ID] [--priority P] [--document-ids ID,ID] [--json]\n"
      "  cache-doc --router HOST:PORT (--text TEXT | --file PATH | --tokens 1,2,3) [--ttl-seconds S]\n"
      "  get-doc --router HOST:PORT --id ID;  list-docs --router HOST:PORT;  delete-doc --router HOST:PORT --id ID\n"
      "  score --router HOST:PORT (--text TEXT | --tokens 1,2,3) [--top-logprobs N] [--json]\n"
      "  tokenize --router HOST:PORT --text TEXT [--add-bos] [--allow-special] [--json]\n"
      "  detokenize --router HOST:PORT --tokens 1,2,3 [--skip-special]\n"
      "  info --router HOST:PORT\n"
      "  bench --router HOST:PORT --requests N [--rate R (Poisson req/s; 0: all at once)] [--concurrency C]\n"
      "        [--prompt-tokens L] [--max-tokens M] [--vocab-from-router] [--vocab-size V] [--seed S] [--json]\n"
      "An RPC error prints `error: CODE: message` and exits 1; a bad flag exits 2.\n");
}

}  // namespace yoco::cli
