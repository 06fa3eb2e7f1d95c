// The colocated mode: a router with no prefill workers and one decode worker, which prefills each
// prompt itself (DecodeRequest.local_prefill). Generate through the router is token-identical to
// the in-process engine, bad requests get INVALID_ARGUMENT naming the field, GetModelInfo and
// Score come from the decode worker (Describe, Score through its batcher), /metrics counts the
// work, and SIGTERM drains the worker, which exits 0. Score as forward slices (the default decode
// worker) agrees with a --score-per-token worker (the plain reference).
#include <signal.h>

#include <cmath>
#include <cstdio>

#include "tests/support/cluster_harness.h"
#include "tokenizer/tokenizer.h"

namespace yoco {
namespace {

using test::LocalCluster;

const std::string kModel = std::string(YOCO_SOURCE_DIR) + "/models/kjv-yoco";

grpc::Status generate_status(v1::Yoco::Stub& stub, const v1::GenerateRequest& req) {
  return test::run_generate(stub, req, std::chrono::milliseconds(30000)).status;
}

TEST(Colocated, GenerateScoreMetricsAndGracefulStop) {
  LocalCluster c({.model = kModel, .prefill = 0, .decode = 1, .kv_blocks = 256});
  ASSERT_TRUE(c.ready()) << c.logs();
  ASSERT_TRUE(c.prefill().empty());
  auto stub = c.stub();

  auto tok = Tokenizer::load(kModel);
  ASSERT_TRUE(tok.ok());
  auto model = Model::load(kModel);
  ASSERT_TRUE(model.ok());
  const std::vector<int32_t> prompt = (*tok)->encode("In the beginning God created");

  // Greedy through the router = the in-process engine.
  const v1::GenerateRequest req = test::greedy(prompt, 20);
  const test::Generated g = test::run_generate(*stub, req, std::chrono::milliseconds(60000));
  ASSERT_TRUE(g.status.ok()) << g.status.error_message() << c.logs();
  ASSERT_TRUE(g.final_seen);
  EXPECT_EQ(g.final.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(g.final.usage().completion_tokens(), 20u);
  EXPECT_EQ(g.final.usage().prompt_tokens(), prompt.size());
  EXPECT_EQ(g.ids, test::reference(**model, prompt, 20));
  EXPECT_EQ(g.text, (*tok)->decode(g.ids));

  // Bad requests: INVALID_ARGUMENT naming the field (the router's names).
  {
    v1::GenerateRequest bad = req;
    bad.mutable_tokens()->set_ids(1, 5000);
    grpc::Status st = generate_status(*stub, bad);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("prompt.tokens[1]"), std::string::npos) << st.error_message();
  }
  {
    v1::GenerateRequest bad = req;
    bad.mutable_sampling()->set_top_p(0);
    grpc::Status st = generate_status(*stub, bad);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("sampling.top_p"), std::string::npos) << st.error_message();
  }
  {
    v1::ModelInfo info;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
    EXPECT_EQ(info.vocab_size(), 4096);
    EXPECT_EQ(info.kv_bytes_per_token(), 2 * 128 * 4);
  }
  {
    v1::ScoreRequest sr;
    sr.set_text("And God saw the light, that it was good.");
    v1::ScoreResponse out;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->Score(&ctx, sr, &out).ok());
    EXPECT_EQ(out.token_logprobs_size() + 1, out.token_ids_size());
    // The decode worker's batcher computed what the in-process engine computes.
    const std::vector<int32_t> ids(out.token_ids().begin(), out.token_ids().end());
    auto ref = (*model)->score(ids);
    ASSERT_TRUE(ref.ok());
    ASSERT_EQ(ref->size(), static_cast<size_t>(out.token_logprobs_size()));
    for (size_t i = 0; i < ref->size(); ++i) EXPECT_NEAR(out.token_logprobs(static_cast<int>(i)), (*ref)[i], 1e-4) << i;
  }

  const std::string metrics = test::http_get(test::port_of(c.decode()[0].metrics), "/metrics");
  EXPECT_NE(metrics.find("yoco_generation_tokens_total 20"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("yoco_kv_cache_blocks_free 256"), std::string::npos);  // blocks back to idle
  const std::string router_metrics = test::http_get(test::port_of(c.router().metrics), "/metrics");
  EXPECT_NE(router_metrics.find("yoco_requests_total{status=\"invalid_argument\"} 2"), std::string::npos)
      << router_metrics;
  if (std::system("command -v promtool >/dev/null 2>&1") == 0) {
    for (const std::string* m : {&metrics, &router_metrics}) {
      const size_t body = m->find("\r\n\r\n");
      ASSERT_NE(body, std::string::npos);
      const std::string file = c.state_dir() + "/metrics.txt";
      test::write_file(file, m->substr(body + 4));
      const std::string cmd = "promtool check metrics < " + file + " > " + c.state_dir() + "/promtool.txt 2>&1";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << test::read_file(c.state_dir() + "/promtool.txt");
    }
  }

  // SIGTERM: the worker drains and exits 0 (the launcher reports how it ended).
  ASSERT_EQ(kill(c.decode()[0].pid, SIGTERM), 0);
  bool reported = false;
  for (int i = 0; i < 600 && !reported; ++i) {
    reported = test::read_file(c.state_dir() + "/launcher.err").find("exited with code 0") != std::string::npos;
    if (!reported) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(reported) << c.logs();
}

// Score through a decode worker's forward slices (the default) and through one started with
// --score-per-token (the plain reference, one forced token per decode step) on the bundled
// trained model, a text of several slices (1300 tokens: three 512-row chunks): the same log-probs
// and alternatives within fp32 rounding, |Δ| ≤ 3e-5 + 1e-5·|ref| (a slice runs chunkwise
// retention and many-row products, a step the recurrence and one-row products; the largest
// difference is printed).
constexpr double kScoreAtol = 3e-5, kScoreRtol = 1e-5;

TEST(Colocated, ScoreSlicesEqualThePerTokenWorker) {
  std::vector<int32_t> ids(1300);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 2654435761u >> 7) % 4096);
  std::vector<v1::ScoreResponse> outs;
  for (const bool per_token : {false, true}) {
    LocalCluster::Options o{.model = kModel, .prefill = 0, .decode = 1, .kv_blocks = 256};
    if (per_token) o.decode_args = {"--score-per-token"};
    LocalCluster c(o);
    ASSERT_TRUE(c.ready()) << c.logs();
    v1::ScoreRequest sr;
    sr.mutable_tokens()->mutable_ids()->Add(ids.begin(), ids.end());
    sr.set_top_logprobs(3);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    v1::ScoreResponse out;
    const grpc::Status st = c.stub()->Score(&ctx, sr, &out);
    ASSERT_TRUE(st.ok()) << st.error_message() << c.logs();
    ASSERT_EQ(out.token_logprobs_size() + 1, static_cast<int>(ids.size()));
    outs.push_back(out);
  }
  const v1::ScoreResponse &sliced = outs[0], &plain = outs[1];
  double worst = 0, worst_rel = 0;
  auto compare = [&](double got, double ref) {
    worst = std::max(worst, std::abs(got - ref));
    worst_rel = std::max(worst_rel, std::abs(got - ref) / std::max(1.0, std::abs(ref)));
    return std::abs(got - ref) <= kScoreAtol + kScoreRtol * std::abs(ref);
  };
  for (int i = 0; i < sliced.token_logprobs_size(); ++i) {
    EXPECT_TRUE(compare(sliced.token_logprobs(i), plain.token_logprobs(i)))
        << i << ": " << sliced.token_logprobs(i) << " vs " << plain.token_logprobs(i);
    ASSERT_EQ(sliced.top(i).top_size(), 3);
    ASSERT_EQ(plain.top(i).top_size(), 3);
    for (int k = 0; k < 3; ++k)
      EXPECT_TRUE(compare(sliced.top(i).top(k).logprob(), plain.top(i).top(k).logprob()))
          << i << " top " << k << ": " << sliced.top(i).top(k).logprob() << " vs " << plain.top(i).top(k).logprob();
  }
  std::printf("largest |sliced - per-token| log-prob: %.3g (relative to max(1, |ref|): %.3g)\n", worst, worst_rel);
  EXPECT_NEAR(sliced.sum_logprob(), plain.sum_logprob(), 1e-6 * std::abs(plain.sum_logprob()));
}

}  // namespace
}  // namespace yoco
