// Continuous batching: many concurrent requests give exactly the in-process generation,
// preemption by recompute keeps streams identical, cancellation and deadlines free blocks at
// once, queues are bounded, bad requests are refused with the field named, and n choices of one
// prompt fork one prefill (fork groups).
#include "decode_service/batcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "model/cpu_engine.h"
#include "model/generate.h"
#include "model/random_model.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

struct Outcome {
  std::vector<int32_t> tokens;
  FinishInfo info;
  bool done = false;
};

class Collector {
 public:
  DecodeRequest wire(DecodeRequest r, Outcome* o) {
    // Callbacks run on the batcher's thread; the test thread reads an Outcome only under mu_
    // (tokens_seen, done) or after wait_all.
    r.on_token = [this, o](int32_t t) {
      std::lock_guard<std::mutex> lock(mu_);
      o->tokens.push_back(t);
    };
    r.on_finish = [this, o](const FinishInfo& f) {
      std::lock_guard<std::mutex> lock(mu_);
      o->info = f;
      o->done = true;
      cv_.notify_all();
    };
    return r;
  }
  size_t tokens_seen(const Outcome& o) {
    std::lock_guard<std::mutex> lock(mu_);
    return o.tokens.size();
  }
  bool done(const Outcome& o) {
    std::lock_guard<std::mutex> lock(mu_);
    return o.done;
  }
  bool wait_all(const std::vector<Outcome>& outs, std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] {
      for (const auto& o : outs)
        if (!o.done) return false;
      return true;
    });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

class BatcherTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto cfg = find_preset(GetParam());
    ASSERT_TRUE(cfg.ok());
    ASSERT_TRUE(write_random_model(dir_.path(), cfg.value(), 21, DType::kF32).ok());
    auto m = Model::load(dir_.path());
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value();
  }
  DecodeRequest request(int i, int prompt_len, int max_tokens) const {
    DecodeRequest r;
    for (int t = 0; t < prompt_len; ++t) r.prompt.push_back((t * 29 + i * 11 + 3) % model_->config().vocab_size);
    r.max_tokens = max_tokens;
    if (i % 2) {  // half sampled with a seed, half greedy
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = 100 + i;
    } else {
      r.sampling.temperature = 0;
    }
    return r;
  }
  std::vector<int32_t> reference(const DecodeRequest& r) const {
    GenerateOptions opt;
    opt.max_tokens = r.max_tokens;
    opt.sampling = r.sampling;
    opt.stop_token_ids = r.stop_token_ids;
    auto res = generate(*model_, r.prompt, opt);
    EXPECT_TRUE(res.ok());
    return res->tokens;
  }

  test::TempDir dir_;
  std::unique_ptr<Model> model_;
};

TEST_P(BatcherTest, ConcurrentRequestsMatchInProcessGeneration) {
  auto pool = KvPool::create(512, 32, model_->config().kv_dim());
  ASSERT_TRUE(pool.ok());
  BatcherLimits lim;
  lim.max_running = 16;
  ContinuousBatcher b(*model_, **pool, lim);
  b.start();
  const int n = 64;
  std::vector<Outcome> outs(n);
  std::vector<DecodeRequest> reqs;
  Collector c;
  for (int i = 0; i < n; ++i) {
    reqs.push_back(request(i, 1 + (i * 7) % 70, 4 + i % 13));
    ASSERT_TRUE(b.submit(c.wire(reqs.back(), &outs[i])).ok());
  }
  ASSERT_TRUE(c.wait_all(outs, std::chrono::seconds(120)));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(outs[i].info.reason, "length") << i;
    EXPECT_EQ(outs[i].tokens, reference(reqs[i])) << "request " << i;
  }
  b.stop(true);
  EXPECT_EQ((*pool)->free_blocks(), 512);
}

TEST_P(BatcherTest, PreemptionByRecomputeKeepsStreamsIdentical) {
  // 10 blocks of 32 rows for 6 sequences that each grow past 64 rows: the pool runs dry.
  auto pool = KvPool::create(10, 32, model_->config().kv_dim());
  ASSERT_TRUE(pool.ok());
  BatcherLimits lim;
  lim.reserve_ahead_rows = 0;
  ContinuousBatcher b(*model_, **pool, lim);
  b.start();
  std::vector<Outcome> outs(6);
  std::vector<DecodeRequest> reqs;
  Collector c;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(request(i, 30 + i, 45));
    ASSERT_TRUE(b.submit(c.wire(reqs.back(), &outs[i])).ok());
  }
  ASSERT_TRUE(c.wait_all(outs, std::chrono::seconds(120)));
  EXPECT_GT(b.preemptions(), 0);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(outs[i].tokens, reference(reqs[i])) << "request " << i;
  b.stop(true);
  EXPECT_EQ((*pool)->free_blocks(), 10);
}

TEST_P(BatcherTest, ContinuationFromGeneratedTokensMatchesUninterruptedRun) {
  // Migration: a request resumed elsewhere with the tokens already streamed continues the
  // same stream, for greedy and for seeded sampling (the sampler replays its draws).
  auto pool = KvPool::create(128, 32, model_->config().kv_dim());
  ASSERT_TRUE(pool.ok());
  ContinuousBatcher b(*model_, **pool, BatcherLimits{});
  b.start();
  Collector c;
  for (int i = 0; i < 4; ++i) {
    DecodeRequest r = request(i, 9 + i, 20);
    r.sampling.repetition_penalty = 1.2f;
    r.sampling.frequency_penalty = 0.3f;
    const std::vector<int32_t> full = reference(r);
    ASSERT_EQ(full.size(), 20u);
    for (int cut : {1, 7, 19}) {
      DecodeRequest resumed = r;
      resumed.generated_before.assign(full.begin(), full.begin() + cut);
      std::vector<Outcome> o(1);
      ASSERT_TRUE(b.submit(c.wire(resumed, &o[0])).ok());
      ASSERT_TRUE(c.wait_all(o, std::chrono::seconds(60)));
      EXPECT_EQ(o[0].info.reason, "length");
      EXPECT_EQ(o[0].tokens, std::vector<int32_t>(full.begin() + cut, full.end())) << "request " << i << " cut " << cut;
    }
  }
  DecodeRequest over = request(0, 5, 3);
  over.generated_before = {1, 2, 3};
  EXPECT_NE(b.submit(over).status().message().find("generated"), std::string::npos);
  b.stop(true);
  EXPECT_EQ((*pool)->free_blocks(), 128);
}

TEST_P(BatcherTest, LogprobsAreTheRawModelDistribution) {
  auto pool = KvPool::create(64, 32, model_->config().kv_dim());
  ASSERT_TRUE(pool.ok());
  ContinuousBatcher b(*model_, **pool, BatcherLimits{});
  b.start();
  Collector c;
  DecodeRequest r = request(0, 12, 3);  // greedy
  r.logprobs = 4;
  std::vector<TokenLogprobs> lps;
  std::vector<Outcome> o(1);
  DecodeRequest wired = c.wire(r, &o[0]);
  wired.on_logprobs = [&](const TokenLogprobs& t) { lps.push_back(t); };
  ASSERT_TRUE(b.submit(std::move(wired)).ok());
  ASSERT_TRUE(c.wait_all(o, std::chrono::seconds(60)));
  ASSERT_EQ(lps.size(), 3u);
  // The first token's distribution, from the full forward over the prompt.
  const int V = model_->config().vocab_size;
  std::vector<float> last(V);
  ASSERT_TRUE(model_
                  ->forward(r.prompt,
                            [&](int64_t pos0, int rows, const float* lg) {
                              if (pos0 + rows == static_cast<int64_t>(r.prompt.size()))
                                std::copy(lg + static_cast<size_t>(rows - 1) * V, lg + static_cast<size_t>(rows) * V,
                                          last.begin());
                            })
                  .ok());
  double mx = *std::max_element(last.begin(), last.end()), sum = 0;
  for (float x : last) sum += std::exp(x - mx);
  const double lse = mx + std::log(sum);
  EXPECT_EQ(lps[0].token, o[0].tokens[0]);
  EXPECT_NEAR(lps[0].logprob, last[lps[0].token] - lse, 1e-4);
  ASSERT_EQ(lps[0].top.size(), 4u);
  EXPECT_EQ(lps[0].top[0].first, o[0].tokens[0]);  // greedy picks the top one
  for (size_t k = 1; k < 4; ++k) EXPECT_LE(lps[0].top[k].second, lps[0].top[k - 1].second);
  double total = 0;
  for (int v = 0; v < V; ++v) total += std::exp(last[v] - lse);
  EXPECT_NEAR(total, 1.0, 1e-6);
  b.stop(true);
}

// Scoring through the batcher's plain reference (teacher forcing: one forced token per step,
// batched with other sequences, preempted and recomputed like them) gives Model::score's
// per-position log-probs.
TEST_P(BatcherTest, ForcedTokensScoreLikeModelScore) {
  // 8 blocks of 32 rows for 5 sequences of 60+ rows: they preempt each other while they score.
  auto pool = KvPool::create(8, 32, model_->config().kv_dim());
  ASSERT_TRUE(pool.ok());
  BatcherLimits lim;
  lim.reserve_ahead_rows = 0;
  lim.score_per_token = true;
  ContinuousBatcher b(*model_, **pool, lim);  // started once every request is queued
  const int n = 5;
  std::vector<Outcome> outs(n);
  std::vector<std::vector<int32_t>> inputs(n);
  std::vector<std::vector<TokenLogprobs>> lps(n);
  Collector c;
  for (int i = 0; i < n; ++i) {
    DecodeRequest r = request(i, 60 + 3 * i, 1);
    inputs[i] = r.prompt;
    r.forced.assign(r.prompt.begin() + 1, r.prompt.end());
    r.prompt.resize(1);
    r.max_tokens = static_cast<int>(r.forced.size());
    r.logprobs = i == 0 ? 3 : 0;
    DecodeRequest wired = c.wire(std::move(r), &outs[i]);
    wired.on_logprobs = [&lps, i](const TokenLogprobs& t) { lps[i].push_back(t); };
    ASSERT_TRUE(b.submit(std::move(wired)).ok());
  }
  b.start();
  ASSERT_TRUE(c.wait_all(outs, std::chrono::seconds(120)));
  EXPECT_GT(b.preemptions(), 0);
  for (int i = 0; i < n; ++i) {
    auto ref = model_->score(inputs[i]);
    ASSERT_TRUE(ref.ok());
    EXPECT_EQ(outs[i].info.reason, "length") << i;
    EXPECT_EQ(outs[i].tokens, std::vector<int32_t>(inputs[i].begin() + 1, inputs[i].end())) << i;
    ASSERT_EQ(lps[i].size(), ref->size()) << i;
    for (size_t p = 0; p < ref->size(); ++p) {
      EXPECT_EQ(lps[i][p].token, inputs[i][p + 1]);
      EXPECT_NEAR(lps[i][p].logprob, (*ref)[p], 1e-4) << "request " << i << " position " << p;
      EXPECT_EQ(lps[i][p].top.size(), i == 0 ? 3u : 0u);
    }
  }
  // Forced tokens must be what max_tokens counts, and in the vocabulary.
  DecodeRequest bad = request(0, 1, 2);
  bad.forced = {1};
  EXPECT_NE(b.validate(bad).message().find("max_tokens"), std::string::npos);
  bad.forced = {1, model_->config().vocab_size};
  EXPECT_NE(b.validate(bad).message().find("forced[1]"), std::string::npos);
  // A prompt alone too long is the prompt's fault, not max_tokens'; max_tokens only when the sum is.
  const int max_seq = static_cast<int>(model_->config().max_seq_len);
  EXPECT_EQ(b.validate(request(0, max_seq + 5, 1)).message().rfind("prompt: ", 0), 0u)
      << b.validate(request(0, max_seq + 5, 1)).message();
  EXPECT_EQ(b.validate(request(0, max_seq, 1)).message().rfind("prompt: ", 0), 0u);
  EXPECT_EQ(b.validate(request(0, max_seq - 1, 2)).message().rfind("max_tokens: ", 0), 0u);
  EXPECT_TRUE(b.validate(request(0, max_seq - 1, 1)).ok());
  b.stop(true);
  EXPECT_EQ((*pool)->free_blocks(), 8);
}

// Scores as forward slices (Engine::forward between decode steps) against the plain reference,
// one forced token per decode step (BatcherLimits::score_per_token), each run with sampled
// streams beside them and a pool small enough that streams growing into new blocks preempt the
// scores (recomputed: the rows already answered prefilled, the slices going on): the same
// log-probs and top alternatives within |Δ| ≤ 1e-6 + 1e-6·|ref| (a few fp32 ulps: the forward
// computes retention chunkwise, a decode step recurrently), the streams unchanged.
TEST_P(BatcherTest, ScoreSlicesEqualThePerTokenScores) {
  struct Run {
    std::vector<std::vector<TokenLogprobs>> lps;
    std::vector<Outcome> outs;
    int64_t preemptions = 0;
  };
  const int scores = 4, streams = 3;
  auto stream = [&](int i) { return request(10 + i, 60, 12); };
  auto score = [&](int i) {
    DecodeRequest q = request(i, 70 + 15 * i, 1);
    q.forced.assign(q.prompt.begin() + 1 + i, q.prompt.end());  // prompts of 1 to 4 tokens
    q.prompt.resize(1 + i);
    q.max_tokens = static_cast<int>(q.forced.size());
    q.logprobs = i % 2 ? 0 : 5;
    q.sampling.temperature = 0;
    return q;
  };
  auto run = [&](bool per_token) {
    // 10 blocks of 32 rows: 3 streams of 60 → 72 rows (2 blocks, then 3) admitted first, then
    // scores of 70-115 rows (3-4 blocks each).
    auto pool = KvPool::create(10, 32, model_->config().kv_dim());
    EXPECT_TRUE(pool.ok());
    BatcherLimits lim;
    lim.reserve_ahead_rows = 0;
    lim.prefill.chunk_tokens = 24;  // several slices per score, and slices that straddle two
    lim.score_per_token = per_token;
    ContinuousBatcher b(*model_, **pool, lim);
    Run r;
    r.lps.resize(scores);
    r.outs.resize(scores + streams);
    Collector c;
    for (int i = 0; i < streams; ++i) EXPECT_TRUE(b.submit(c.wire(stream(i), &r.outs[scores + i])).ok());
    for (int i = 0; i < scores; ++i) {
      DecodeRequest wired = c.wire(score(i), &r.outs[i]);
      wired.on_logprobs = [&r, i](const TokenLogprobs& t) { r.lps[i].push_back(t); };
      EXPECT_TRUE(b.submit(std::move(wired)).ok());
    }
    b.start();
    EXPECT_TRUE(c.wait_all(r.outs, std::chrono::seconds(120)));
    r.preemptions = b.preemptions();
    b.stop(true);
    EXPECT_EQ((*pool)->free_blocks(), 10);
    return r;
  };
  const Run plain = run(true), sliced = run(false);
  EXPECT_GT(sliced.preemptions, 0);
  auto close = [](double got, double ref) { return std::abs(got - ref) <= 1e-6 + 1e-6 * std::abs(ref); };
  double worst = 0;
  for (int i = 0; i < scores; ++i) {
    const std::vector<int32_t> forced = score(i).forced;
    EXPECT_EQ(sliced.outs[i].info.reason, "length") << i;
    EXPECT_EQ(sliced.outs[i].tokens, forced) << i;
    ASSERT_EQ(sliced.lps[i].size(), forced.size()) << i;
    ASSERT_EQ(plain.lps[i].size(), forced.size()) << i;
    for (size_t p = 0; p < forced.size(); ++p) {
      const TokenLogprobs &a = sliced.lps[i][p], &b = plain.lps[i][p];
      EXPECT_EQ(a.token, forced[p]);
      EXPECT_EQ(b.token, forced[p]);
      worst = std::max(worst, std::abs(static_cast<double>(a.logprob) - b.logprob));
      EXPECT_TRUE(close(a.logprob, b.logprob))
          << "score " << i << " position " << p << ": " << a.logprob << " vs " << b.logprob;
      ASSERT_EQ(a.top.size(), i % 2 ? 0u : 5u);
      ASSERT_EQ(a.top.size(), b.top.size());
      // The same alternatives' values (two within the tolerance of each other may swap ids).
      for (size_t k = 0; k < a.top.size(); ++k)
        EXPECT_TRUE(close(a.top[k].second, b.top[k].second)) << "score " << i << " position " << p << " top " << k;
    }
  }
  std::printf("largest |sliced - per-token| log-prob: %.3g\n", worst);
  for (int i = 0; i < streams; ++i) {
    EXPECT_EQ(sliced.outs[scores + i].tokens, reference(stream(i))) << i;
    EXPECT_EQ(sliced.outs[scores + i].tokens, plain.outs[scores + i].tokens) << i;
  }
}

// A score runs one slice of at most the prefill chunk per turn, between the decode steps: a short
// stream admitted with a long score finishes long before it, and both are exact.
TEST_P(BatcherTest, ScoreSlicesLeaveDecodeStepsRunning) {
  auto pool = KvPool::create(16, 32, model_->config().kv_dim());
  ASSERT_TRUE(pool.ok());
  BatcherLimits lim;
  lim.prefill.chunk_tokens = 16;
  ContinuousBatcher b(*model_, **pool, lim);
  std::vector<Outcome> outs(2);
  std::vector<int> order;
  std::mutex order_mu;
  Collector c;
  DecodeRequest q = request(0, 300, 1);
  const std::vector<int32_t> text = q.prompt;
  q.forced.assign(q.prompt.begin() + 1, q.prompt.end());
  q.prompt.resize(1);
  q.max_tokens = static_cast<int>(q.forced.size());
  std::vector<TokenLogprobs> lps;
  std::vector<DecodeRequest> reqs;
  reqs.push_back(c.wire(std::move(q), &outs[0]));
  reqs[0].on_logprobs = [&lps](const TokenLogprobs& t) { lps.push_back(t); };
  reqs.push_back(c.wire(request(3, 20, 6), &outs[1]));
  for (int i = 0; i < 2; ++i) {
    auto done = reqs[i].on_finish;
    reqs[i].on_finish = [&order, &order_mu, i, done](const FinishInfo& f) {
      {
        std::lock_guard<std::mutex> lock(order_mu);
        order.push_back(i);
      }
      done(f);
    };
    ASSERT_TRUE(b.submit(std::move(reqs[i])).ok());
  }
  b.start();
  ASSERT_TRUE(c.wait_all(outs, std::chrono::seconds(120)));
  b.stop(true);
  // 299 rows in slices of 16 take 19 turns; the stream's 5 steps after its first token take 5.
  EXPECT_EQ(order, (std::vector<int>{1, 0}));
  EXPECT_EQ(outs[1].tokens, reference(request(3, 20, 6)));
  auto ref = model_->score(text);
  ASSERT_TRUE(ref.ok());
  ASSERT_EQ(lps.size(), ref->size());
  for (size_t p = 0; p < ref->size(); ++p) EXPECT_NEAR(lps[p].logprob, (*ref)[p], 1e-4) << p;
  EXPECT_EQ((*pool)->free_blocks(), 16);
}

TEST_P(BatcherTest, HigherPriorityIsAdmittedFirst) {
  auto pool = KvPool::create(64, 32, model_->config().kv_dim());
  ASSERT_TRUE(pool.ok());
  BatcherLimits lim;
  lim.max_running = 1;                        // one at a time: admission order = finish order
  ContinuousBatcher b(*model_, **pool, lim);  // not started: everything queues first
  std::mutex mu;
  std::vector<int> order;
  std::vector<Outcome> outs(4);
  Collector c;
  const int prio[] = {0, 5, 0, 9};
  for (int i = 0; i < 4; ++i) {
    DecodeRequest r = c.wire(request(i, 6, 3), &outs[i]);
    r.priority = prio[i];
    auto fin = r.on_finish;
    r.on_finish = [&, i, fin](const FinishInfo& f) {
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
      }
      fin(f);
    };
    ASSERT_TRUE(b.submit(std::move(r)).ok());
  }
  b.start();
  ASSERT_TRUE(c.wait_all(outs, std::chrono::seconds(60)));
  EXPECT_EQ(order, (std::vector<int>{3, 1, 0, 2}));  // by priority, FCFS within one
  b.stop(true);
}

TEST_P(BatcherTest, CancellationAndDeadlinesFreeBlocks) {
  // The pool holds every row both long requests could ever write, so "late" can only end by its
  // deadline (a small pool let a fast machine fill it within 200 ms: RESOURCE_EXHAUSTED).
  constexpr int kBlocks = 2048;
  auto pool = KvPool::create(kBlocks, 32, model_->config().kv_dim());
  ASSERT_TRUE(pool.ok());
  ContinuousBatcher b(*model_, **pool, BatcherLimits{});
  b.start();
  std::vector<Outcome> outs(3);
  Collector c;
  DecodeRequest longer = request(0, 10, 100000 - 20);
  longer.max_tokens = 5000;
  auto id = b.submit(c.wire(longer, &outs[0]));
  ASSERT_TRUE(id.ok());
  DecodeRequest late = request(2, 10, 30000);
  late.deadline = Clock::now() + std::chrono::milliseconds(200);
  ASSERT_TRUE(b.submit(c.wire(late, &outs[1])).ok());
  DecodeRequest past = request(4, 10, 5);
  past.deadline = Clock::now() - std::chrono::seconds(1);
  ASSERT_TRUE(b.submit(c.wire(past, &outs[2])).ok());
  while (c.tokens_seen(outs[0]) < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  b.cancel(id.value());
  ASSERT_TRUE(c.wait_all(outs, std::chrono::seconds(30)));
  EXPECT_EQ(outs[0].info.reason, "cancelled");
  EXPECT_EQ(outs[0].info.status.code(), StatusCode::kCancelled);
  EXPECT_EQ(outs[1].info.reason, "deadline");
  EXPECT_EQ(outs[1].info.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(outs[2].info.reason, "deadline");
  EXPECT_TRUE(outs[2].tokens.empty());
  EXPECT_EQ((*pool)->free_blocks(), kBlocks);  // freed at once, before stop
  b.stop(false);
}

// A shipped state whose request ends before admission gives its pool blocks back.
TEST_P(BatcherTest, ShippedStateNeverAdmittedFreesItsBlocks) {
  auto pool = KvPool::create(16, 32, model_->config().kv_dim());
  ASSERT_TRUE(pool.ok());
  auto engine = std::make_unique<CpuEngine>(*model_, pool->get());
  ContinuousBatcher b(*model_, **pool, BatcherLimits{}, engine.get());
  std::vector<Outcome> outs(2);
  Collector c;
  DecodeRequest shipped[2] = {request(0, 40, 5), request(1, 40, 5)};
  for (auto& r : shipped) {
    SequenceState st = model_->new_sequence();
    st.pages = (*pool)->new_pages();
    ASSERT_TRUE((*pool)->reserve(*st.pages, 40).ok());
    ASSERT_TRUE(model_->prefill(st, r.prompt).ok());
    r.state = std::move(st);
  }
  EXPECT_EQ((*pool)->free_blocks(), 12);
  shipped[0].deadline = Clock::now() - std::chrono::seconds(1);  // ends in the queue
  const std::vector<int32_t> want = reference(shipped[1]);
  ASSERT_TRUE(b.submit(c.wire(shipped[0], &outs[0])).ok());
  ASSERT_TRUE(b.submit(c.wire(shipped[1], &outs[1])).ok());
  b.start();
  ASSERT_TRUE(c.wait_all(outs, std::chrono::seconds(30)));
  EXPECT_EQ(outs[0].info.reason, "deadline");
  EXPECT_EQ(outs[1].info.reason, "length");
  EXPECT_EQ(outs[1].tokens, want);
  EXPECT_EQ((*pool)->free_blocks(), 16);
  b.stop(true);
}

TEST_P(BatcherTest, BoundedQueueAndBadRequests) {
  auto pool = KvPool::create(4, 32, model_->config().kv_dim());
  ASSERT_TRUE(pool.ok());
  BatcherLimits lim;
  lim.max_waiting = 2;
  ContinuousBatcher b(*model_, **pool, lim);  // not started: requests stay queued
  Outcome o[3];
  Collector c;
  ASSERT_TRUE(b.submit(c.wire(request(0, 5, 5), &o[0])).ok());
  ASSERT_TRUE(b.submit(c.wire(request(1, 5, 5), &o[1])).ok());
  EXPECT_EQ(b.submit(c.wire(request(2, 5, 5), &o[2])).status().code(), StatusCode::kResourceExhausted);
  DecodeRequest bad = request(3, 5, 5);
  bad.prompt[2] = model_->config().vocab_size;
  auto r = b.submit(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("prompt[2]"), std::string::npos);
  bad = request(3, 5, 0);
  EXPECT_NE(b.submit(bad).status().message().find("max_tokens"), std::string::npos);
  bad = request(3, 5, 5);
  bad.sampling.top_p = 0;
  EXPECT_NE(b.submit(bad).status().message().find("top_p"), std::string::npos);
  bad = request(3, 0, 5);
  EXPECT_NE(b.submit(bad).status().message().find("prompt"), std::string::npos);
  // A request the whole pool cannot hold fails instead of waiting forever.
  b.start();
  std::vector<Outcome*> first = {&o[0], &o[1]};
  for (int i = 0; i < 600 && !(c.done(o[0]) && c.done(o[1])); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(c.done(o[0]) && c.done(o[1]));
  std::vector<Outcome> big(1);
  ASSERT_TRUE(b.submit(c.wire(request(5, 200, 5), &big[0])).ok());
  ASSERT_TRUE(c.wait_all(big, std::chrono::seconds(30)));
  EXPECT_EQ(big[0].info.status.code(), StatusCode::kResourceExhausted);
  b.stop(true);
  EXPECT_EQ((*pool)->free_blocks(), 4);
}

// n choices (docs/design.md §3.3): the siblings of an admitted request fork its prefilled state;
// each stream equals a separate request with its own seed; a sibling of another prompt, one past
// the group's count, or one after the source expired prefills as any other.
TEST_P(BatcherTest, ForkGroupSharesOnePrefillAndMatchesSeparateRequests) {
  auto pool = KvPool::create(512, 32, model_->config().kv_dim());
  ASSERT_TRUE(pool.ok());
  ContinuousBatcher b(*model_, **pool, BatcherLimits{});
  b.start();
  Collector c;
  std::vector<DecodeRequest> reqs;
  for (int j = 0; j < 6; ++j) {
    DecodeRequest r = request(1, 45, 12);                                               // seeded sampling
    r.sampling.seed = r.sampling.seed + j;                                              // as the router seeds choice j
    if (j == 4) r.prompt.back() = (r.prompt.back() + 1) % model_->config().vocab_size;  // another prompt
    reqs.push_back(r);
  }
  std::vector<Outcome> outs(reqs.size());
  DecodeRequest leader = reqs[0];
  leader.fork_group = "g";
  leader.fork_siblings = 3;
  ASSERT_TRUE(b.submit(c.wire(leader, &outs[0])).ok());
  while (c.tokens_seen(outs[0]) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (size_t j = 1; j < reqs.size(); ++j) {  // 1-3 fork; 4 has another prompt; 5 is one too many
    DecodeRequest r = reqs[j];
    r.fork_group = "g";
    ASSERT_TRUE(b.submit(c.wire(r, &outs[j])).ok());
  }
  ASSERT_TRUE(c.wait_all(outs, std::chrono::seconds(120)));
  EXPECT_EQ(b.forks(), 3);
  for (size_t j = 0; j < reqs.size(); ++j) EXPECT_EQ(outs[j].tokens, reference(reqs[j])) << "choice " << j;
  EXPECT_NE(outs[1].tokens, outs[2].tokens);  // the seeds differ
  b.stop(true);
  EXPECT_EQ((*pool)->free_blocks(), 512);
}

TEST_P(BatcherTest, ForkSourcesExpireAndGiveWayToRequests) {
  // 6 blocks of 32 rows: a source left for siblings that never come must not stop a request
  // that needs the whole pool, and an expired source is not forked.
  auto pool = KvPool::create(6, 32, model_->config().kv_dim());
  ASSERT_TRUE(pool.ok());
  BatcherLimits lim;
  lim.reserve_ahead_rows = 0;
  ContinuousBatcher b(*model_, **pool, lim);
  b.start();
  Collector c;
  DecodeRequest leader = request(1, 40, 1);
  leader.fork_group = "g";
  leader.fork_siblings = 5;
  std::vector<Outcome> first(1);
  ASSERT_TRUE(b.submit(c.wire(leader, &first[0])).ok());
  ASSERT_TRUE(c.wait_all(first, std::chrono::seconds(60)));
  EXPECT_LT((*pool)->free_blocks(), 6);           // the source holds the prompt's blocks
  const DecodeRequest big = request(2, 170, 10);  // 180 rows: every block
  std::vector<Outcome> second(1);
  ASSERT_TRUE(b.submit(c.wire(big, &second[0])).ok());
  ASSERT_TRUE(c.wait_all(second, std::chrono::seconds(120)));
  EXPECT_EQ(second[0].info.reason, "length") << second[0].info.status.to_string();
  EXPECT_EQ(second[0].tokens, reference(big));
  b.stop(true);
  EXPECT_EQ((*pool)->free_blocks(), 6);

  lim.fork_source_ms = 0;  // expires at once
  ContinuousBatcher e(*model_, **pool, lim);
  e.start();
  std::vector<Outcome> lead(1), sib(1);
  ASSERT_TRUE(e.submit(c.wire(leader, &lead[0])).ok());
  ASSERT_TRUE(c.wait_all(lead, std::chrono::seconds(60)));
  DecodeRequest sibling = request(1, 40, 3);
  sibling.fork_group = "g";
  ASSERT_TRUE(e.submit(c.wire(sibling, &sib[0])).ok());
  ASSERT_TRUE(c.wait_all(sib, std::chrono::seconds(60)));
  EXPECT_EQ(e.forks(), 0);
  EXPECT_EQ(sib[0].tokens, reference(sibling));
  e.stop(true);
  EXPECT_EQ((*pool)->free_blocks(), 6);
}

INSTANTIATE_TEST_SUITE_P(Presets, BatcherTest, ::testing::Values("tiny-gret", "tiny-swa", "tiny-yocou"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace yoco
