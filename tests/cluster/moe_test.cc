// A mixture-of-experts model served by the cluster (issue 27, docs/design.md §2.2): the experts sit
// inside the FFN, so the KV cache, the hand-off format and the disaggregation path are those of a
// dense model. A random YOCO-U MoE (SWA, 3 loops, NoPE cross-decoder, 8 experts, top-2):
//   1. disaggregated (1 prefill + 2 decode workers, a memory KV store): greedy tokens = the
//      in-process engine, a cached document + question = the uncached prompt, and a decode worker
//      killed mid-stream: the streams migrate and finish with the same tokens;
//   2. colocated (1 decode worker that prefills itself): the same greedy tokens.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <thread>

#include "model/random_model.h"
#include "tests/support/cluster_harness.h"

namespace yoco {
namespace {

using std::chrono::milliseconds;
using test::greedy;
using test::LocalCluster;
using test::reference;

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(g() % vocab);
  return t;
}

class MoeCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(write_random_model(tmp_.sub("model"), find_preset("tiny-moe-yocou").value(), 5, DType::kF32).ok());
    dir_ = tmp_.sub("model");
    auto m = Model::load(dir_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
    ASSERT_TRUE(model_->config().is_moe());
    vocab_ = model_->config().vocab_size;
    // Lengths around the 64-token prefill chunk and the 32-token KV block.
    for (int n : {1, 31, 64, 65, 130}) prompts_.push_back(random_tokens(n, vocab_, 40 + n));
  }
  std::vector<std::vector<int32_t>> greedy_through(LocalCluster& c, int max_tokens) {
    auto stub = c.stub();
    std::vector<std::vector<int32_t>> out;
    for (const auto& p : prompts_) {
      const auto g = test::run_generate(*stub, greedy(p, max_tokens), milliseconds(60000));
      EXPECT_TRUE(g.status.ok()) << g.status.error_message() << c.logs();
      out.push_back(g.ids);
    }
    return out;
  }

  test::TempDir tmp_;
  std::string dir_;
  std::unique_ptr<Model> model_;
  int vocab_ = 0;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_F(MoeCluster, DisaggregatedAndColocatedGiveTheEngineTokens) {
  const int max_tokens = 10;
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts_) want.push_back(reference(*model_, p, max_tokens));
  std::vector<std::vector<int32_t>> disaggregated;
  {
    LocalCluster c({.model = dir_,
                    .prefill = 1,
                    .decode = 2,
                    .prefill_args = {"--kv-store=memory:64MiB", "--kv-block-tokens=32", "--chunk-tokens=64"}});
    ASSERT_TRUE(c.ready()) << c.logs();
    disaggregated = greedy_through(c, max_tokens);
    EXPECT_EQ(disaggregated, want);
    auto stub = c.stub();

    // A cached document + a question = the uncached prompt.
    const std::vector<int32_t> doc = random_tokens(100, vocab_, 17);
    v1::Document d;
    {
      v1::CacheDocumentRequest req;
      req.mutable_tokens()->mutable_ids()->Add(doc.begin(), doc.end());
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      const auto st = stub->CacheDocument(&ctx, req, &d);
      ASSERT_TRUE(st.ok()) << st.error_message() << c.logs();
    }
    const std::vector<int32_t> question = random_tokens(20, vocab_, 18);
    v1::GenerateRequest req = greedy(question, max_tokens);
    req.add_document_ids(d.id());
    const auto g = test::run_generate(*stub, req, milliseconds(60000));
    ASSERT_TRUE(g.status.ok()) << g.status.error_message() << c.logs();
    std::vector<int32_t> full = doc;
    full.insert(full.end(), question.begin(), question.end());
    EXPECT_EQ(g.ids, reference(*model_, full, max_tokens));
    EXPECT_EQ(g.final.usage().cached_tokens(), doc.size());

    // A decode worker killed mid-stream: every stream migrates and ends with the same tokens.
    const int long_tokens = 150;
    std::vector<v1::GenerateRequest> reqs;
    for (int i = 0; i < 4; ++i) reqs.push_back(greedy(prompts_[i], long_tokens));
    const std::vector<test::Generated> got = test::run_streams(*stub, reqs, milliseconds(120000), [&] {
      EXPECT_EQ(kill(c.decode()[0].pid, SIGKILL), 0);  // not ASSERT: the threads must be joined
    });
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status.error_message() << c.logs();
      EXPECT_EQ(got[i].ids, reference(*model_, prompts_[i], long_tokens)) << "stream " << i;
    }
    // The kill landed mid-stream: the router migrated streams to the surviving worker.
    const std::string rm = test::http_get_body(test::port_of(c.router().metrics), "/metrics");
    EXPECT_NE(rm.find("yoco_router_retries_total{kind=\"migration\"}"), std::string::npos) << rm;
  }
  LocalCluster colocated({.model = dir_, .prefill = 0, .decode = 1});
  ASSERT_TRUE(colocated.ready()) << colocated.logs();
  EXPECT_EQ(greedy_through(colocated, max_tokens), disaggregated);
}

}  // namespace
}  // namespace yoco
