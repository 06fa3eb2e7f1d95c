// yoco-cli bench --router: an open-loop load generator over the public gRPC API (docs/design.md
// §3.2). Requests of random prompt ids (below the served model's vocabulary) arrive as a Poisson
// process at --rate (or all at once), each on its own thread whatever the earlier ones are doing
// (--concurrency caps the requests in flight); greedy, ignore_eos, so every request asks for
// exactly --max-tokens. Reports request and token throughput, TTFT, inter-token latency and
// end-to-end percentiles, and the K/V transfer's share of TTFT from the router's timings.
// --trace FILE replays a request trace instead (bench/request_trace.h: arrival times, prompt and
// output lengths, shared documents, which are cached with CacheDocument before the clock starts):
// the SLA planner's calibration (bench/planner/calibrate.sh) runs the same trace here and in
// its simulator.
// Compiled into yoco-cli (tools/CMakeLists.txt) over its connection helper
// (tools/client/connection.h); bench/serve_bench.sh and bench/aiperf.sh drive it.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "bench/request_trace.h"
#include "common/json.h"
#include "proto/grpc_util.h"
#include "tools/client/commands.h"
#include "tools/client/connection.h"
#include "tools/client/output.h"

namespace yoco::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct BenchSample {
  grpc::Status status;
  double ttft = NAN;        // seconds from sending to the first token
  std::vector<double> itl;  // seconds between tokens, one entry per token after the first delta
  double e2e = NAN;
  int64_t output_tokens = 0;
  double transfer = 0;                         // the router's timings: K/V transfer not hidden behind prefill
  double first_token = 0;                      // and the server-side time to the first token
  double sent = 0;                             // seconds from the run's start to the call (--requests-out)
  std::vector<std::pair<double, int>> deltas;  // each delta: seconds from the call, tokens in it
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
    s.deltas.emplace_back(seconds(now - t0), k);
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
  std::string trace;  // a trace file instead of the synthetic load
};

// The load from the flags; errors go into `f`.
BenchConfig bench_config(ServerFlags& f) {
  BenchConfig c;
  if (f.has("trace")) {
    for (const char* x : {"requests", "rate", "prompt-tokens", "max-tokens"})
      if (f.has(x)) f.fail(std::string("--") + x + ": not with --trace (the trace sets it)");
    c.trace = f.str("trace");
    c.concurrency = f.integer("concurrency");
    c.seed = static_cast<uint64_t>(f.integer("seed"));
    return c;
  }
  if (!f.has("requests")) f.fail("--requests: required");
  c.requests = f.integer("requests");
  c.concurrency = f.integer("concurrency");
  c.prompt_tokens = f.integer("prompt-tokens");
  c.max_tokens = f.integer("max-tokens");
  c.rate = f.number("rate");
  if (!(c.rate >= 0) || !std::isfinite(c.rate)) f.fail("--rate: must be >= 0 (0: all at once)");
  c.seed = static_cast<uint64_t>(f.integer("seed"));
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

}  // namespace

int cmd_bench(int argc, char** argv) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  ServerFlags f = command_flags(
      argc, argv, "the open-loop load generator (bench/README.md)",
      {flag::optional_integer("requests", "requests to send", 1, 1000000),
       flag::number("rate", "arrivals per second, Poisson (0: all at once)", 0, -kInf, kInf),
       flag::integer("concurrency", "requests in flight at most (0: no cap)", 0, 0, 1000000),
       flag::integer("prompt-tokens", "prompt length", 32, 1, INT32_MAX),
       flag::integer("max-tokens", "tokens generated per request", 32, 1, UINT32_MAX),
       flag::boolean("vocab-from-router", "draw prompt ids below the served model's vocabulary (always done)"),
       flag::optional_integer("vocab-size", "draw prompt ids below this (and the served vocabulary)", 1, INT32_MAX),
       flag::integer("seed", "the seed of every random draw (a run is reproducible)", 0, 0, INT64_MAX),
       flag::boolean("json", "the report as JSON"),
       flag::str("requests-out",
                 "write every request's timeline to this file, a JSON line each: index, sent (seconds from the run's "
                 "start), prompt tokens (a document's included), output tokens, status, and its deltas as [seconds "
                 "from the call, tokens]"),
       flag::str(
           "trace",
           "a request trace (CSV with the Azure trace columns, tools/planner/README.md): arrivals, lengths, documents; "
           "instead of --requests, --rate, --prompt-tokens and --max-tokens")});
  if (!f.ok()) return flag_fail(f);
  BenchConfig c = bench_config(f);
  std::vector<bench::TraceRequest> trace;
  if (f.ok() && !c.trace.empty()) {  // read before connecting: a bad file fails without a cluster
    auto t = bench::read_trace(c.trace);
    if (!t.ok()) f.fail("--trace: " + t.status().message());
    else trace = std::move(t.value());
    c.requests = static_cast<int64_t>(trace.size());
  }
  auto conn = connect(f);
  if (!f.ok()) return flag_fail(f);

  // Prompt ids are drawn below the served model's vocabulary (--vocab-size may narrow it).
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    conn->authorize(ctx);
    v1::ModelInfo info;
    if (grpc::Status st = conn->stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info); !st.ok())
      return rpc_fail(st);
    c.vocab = info.vocab_size();
    if (f.has("vocab-size")) {
      const int64_t v = f.integer("vocab-size");
      if (!f.ok()) return flag_fail(f);
      c.vocab = std::min(c.vocab, v);
    }
    if (c.vocab < 1) return rpc_fail({grpc::StatusCode::FAILED_PRECONDITION, "GetModelInfo: vocab_size < 1"});
  }

  // Everything random is drawn up front from one seeded generator: a run is reproducible.
  std::mt19937_64 rng(c.seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.vocab - 1));
  std::exponential_distribution<double> gap(c.rate > 0 ? c.rate : 1.0);
  std::vector<v1::GenerateRequest> reqs(static_cast<size_t>(c.requests));
  std::vector<double> arrival(reqs.size(), 0.0);
  std::vector<int64_t> prompt_len(reqs.size(), c.prompt_tokens);  // documents included
  if (!trace.empty()) {
    // Each document's tokens once, cached before the clock starts; each request its own suffix.
    std::map<std::string, std::string> doc_ids;
    for (size_t i = 0; i < trace.size(); ++i) {
      const bench::TraceRequest& tr = trace[i];
      auto& r = reqs[i];
      if (!tr.document.empty() && !doc_ids.count(tr.document)) {
        v1::CacheDocumentRequest dreq;
        for (int64_t j = 0; j < tr.document_tokens; ++j) dreq.mutable_tokens()->add_ids(token(rng));
        grpc::ClientContext ctx;
        conn->prepare(ctx);
        v1::Document doc;
        if (grpc::Status st = conn->stub->CacheDocument(&ctx, dreq, &doc); !st.ok()) return rpc_fail(st);
        doc_ids[tr.document] = doc.id();
      }
      arrival[i] = tr.arrival;
      prompt_len[i] = tr.prompt;
      r.set_request_id("bench-" + std::to_string(i));
      if (!tr.document.empty()) r.add_document_ids(doc_ids[tr.document]);
      for (int64_t j = tr.document_tokens; j < tr.prompt; ++j) r.mutable_tokens()->add_ids(token(rng));
      r.set_max_tokens(static_cast<uint32_t>(tr.output));
      r.mutable_sampling()->set_temperature(0.0f);
      r.set_ignore_eos(true);
    }
  }
  double t = 0;
  for (size_t i = 0; trace.empty() && i < reqs.size(); ++i) {
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
      const double sent = seconds(Clock::now() - start);
      samples[i] = run_one(*conn->stub, *conn, reqs[i]);
      samples[i].sent = sent;
      slots.release();
    });
  }
  for (auto& th : threads) th.join();
  const double wall = seconds(Clock::now() - start);
  if (f.has("requests-out")) {
    std::ofstream out(f.str("requests-out"));
    for (size_t i = 0; i < samples.size() && out; ++i) {
      const BenchSample& s = samples[i];
      Json::Array deltas;
      for (const auto& [at, k] : s.deltas) deltas.emplace_back(Json::Array{Json(at), Json(static_cast<int64_t>(k))});
      Json::Object o;
      o["index"] = Json(static_cast<int64_t>(i));
      o["sent"] = Json(s.sent);
      o["prompt_tokens"] = Json(prompt_len[i]);
      o["output_tokens"] = Json(s.output_tokens);
      o["status"] = Json(grpc_code_name(s.status.error_code()));
      o["deltas"] = Json(std::move(deltas));
      out << Json(std::move(o)).dump() << "\n";
    }
    if (!out) {
      std::fprintf(stderr, "bench: --requests-out %s: cannot write\n", f.str("requests-out").c_str());
      return 1;
    }
  }

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

  if (f.boolean("json")) {
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
    o["itl_ms"] = percentiles_json(itl, {10, 25, 50, 75, 90, 99});
    o["e2e_ms"] = percentiles_json(e2e, {50, 99});
    o["transfer_share_of_ttft"] = number(transfer_share);
    Json::Object conf;
    conf["rate"] = number(c.rate);
    conf["concurrency"] = Json(c.concurrency);
    if (c.trace.empty()) {
      conf["prompt_tokens"] = Json(c.prompt_tokens);
      conf["max_tokens"] = Json(c.max_tokens);
    }
    conf["vocab"] = Json(c.vocab);
    conf["seed"] = Json(c.seed);
    if (!c.trace.empty()) conf["trace"] = Json(c.trace);
    o["config"] = Json(std::move(conf));
    std::cout << Json(std::move(o)).dump() << "\n";
  } else {
    char arrivals[64] = "all at once";
    if (c.rate > 0) std::snprintf(arrivals, sizeof arrivals, "Poisson arrivals at %g req/s", c.rate);
    const std::string in_flight = c.concurrency > 0 ? std::to_string(c.concurrency) : "unlimited";
    if (c.trace.empty())
      std::printf(
          "bench: %lld requests to %s, %s, concurrency %s, prompt %lld random ids below %lld (seed %llu), "
          "max_tokens %lld, greedy, ignore_eos\n",
          static_cast<long long>(c.requests), f.str("router").c_str(), arrivals, in_flight.c_str(),
          static_cast<long long>(c.prompt_tokens), static_cast<long long>(c.vocab),
          static_cast<unsigned long long>(c.seed), static_cast<long long>(c.max_tokens));
    else
      std::printf(
          "bench: %lld requests of %s to %s, concurrency %s, random ids below %lld (seed %llu), greedy, "
          "ignore_eos\n",
          static_cast<long long>(c.requests), c.trace.c_str(), f.str("router").c_str(), in_flight.c_str(),
          static_cast<long long>(c.vocab), static_cast<unsigned long long>(c.seed));
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

}  // namespace yoco::cli
