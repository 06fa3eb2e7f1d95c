// The cluster on the GPU (deploy/local/cluster.py, the same processes users start): prefill and
// decode workers with --device cuda, and the two mixed set-ups (a CPU prefill worker shipping to
// a CUDA decode worker and the reverse), so the state crosses backends over UCX. Greedy tokens
// through the router equal the CPU engine's wherever its top-2 margin exceeds 2·kLogprobTol (bf16
// weights: each log-prob may be off by the tolerance); every decode worker's host blocks come
// back. Labels gpu and cluster: skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/ops.h"
#include "model/model.h"
#include "tests/support/cluster_harness.h"

namespace yoco {
namespace {

using std::chrono::milliseconds;

constexpr double kLogprobTol = 2e-2;
const std::string kGret = test::source_dir() + "/models/kjv-yoco";
const std::string kYocoU = test::source_dir() + "/models/kjv-yoco-u";

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<double> margins;  // log p(top 1) − log p(top 2) at each step
};

// The CPU engine's greedy continuation with the margin of every choice.
Greedy cpu_greedy(const Model& m, const std::vector<int32_t>& prompt, int n) {
  Greedy g;
  const int V = m.config().vocab_size;
  SequenceState st = m.new_sequence();
  EXPECT_TRUE(m.prefill(st, prompt).ok());
  std::vector<float> logits(V);
  SequenceState* one[1] = {&st};
  EXPECT_TRUE(m.logits(one, logits.data()).ok());
  for (int i = 0; i < n; ++i) {
    std::vector<int> idx(V);
    for (int v = 0; v < V; ++v) idx[v] = v;
    std::partial_sort(idx.begin(), idx.begin() + 2, idx.end(),
                      [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    g.tokens.push_back(idx[0]);
    g.margins.push_back(static_cast<double>(logits[idx[0]]) - logits[idx[1]]);  // log-softmax shifts both alike
    if (i + 1 == n) break;
    const int32_t tok[1] = {idx[0]};
    EXPECT_TRUE(m.decode_step(one, tok, logits.data()).ok());
  }
  return g;
}

std::vector<std::vector<int32_t>> prompts(int vocab) {
  std::vector<std::vector<int32_t>> out;
  uint64_t x = 5;
  for (int len : {1, 17, 64, 65, 130, 257, 300, 700}) {
    std::vector<int32_t> p(len);
    for (auto& t : p) t = static_cast<int32_t>((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 33) % vocab;
    out.push_back(std::move(p));
  }
  return out;
}

struct Case {
  std::string name, model;
  bool prefill_cuda, decode_cuda;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

class CudaCluster : public ::testing::TestWithParam<Case> {};

TEST_P(CudaCluster, GreedyMatchesTheCpuEngine) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  auto model = Model::load(c.model);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  std::vector<std::string> pa = {"--chunk-tokens=64"}, da;
  if (c.prefill_cuda) pa.push_back("--device=cuda");
  if (c.decode_cuda) da = {"--device=cuda", "--cuda-kv-blocks=512"};
  test::LocalCluster cl({.model = c.model, .prefill = 1, .decode = 1, .prefill_args = pa, .decode_args = da});
  ASSERT_TRUE(cl.ready()) << cl.logs();
  auto stub = cl.stub();
  const auto ps = prompts((*model)->config().vocab_size);
  const int max_tokens = 16;
  std::vector<test::Generated> got(ps.size());
  std::vector<std::thread> th;  // all at once: the decode worker batches them
  for (size_t i = 0; i < ps.size(); ++i)
    th.emplace_back(
        [&, i] { got[i] = test::run_generate(*stub, test::greedy(ps[i], max_tokens), milliseconds(120000)); });
  for (auto& t : th) t.join();
  int compared = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    ASSERT_TRUE(got[i].status.ok()) << "prompt " << i << ": " << got[i].status.error_message() << cl.logs();
    ASSERT_EQ(got[i].ids.size(), static_cast<size_t>(max_tokens));
    const Greedy ref = cpu_greedy(**model, ps[i], max_tokens);
    for (int s = 0; s < max_tokens; ++s, ++compared) {
      if (got[i].ids[s] == ref.tokens[s]) continue;
      EXPECT_LT(ref.margins[s], 2 * kLogprobTol)
          << "prompt " << i << " (" << ps[i].size() << " tokens), step " << s << ": GPU chose " << got[i].ids[s]
          << ", CPU " << ref.tokens[s] << " by a margin of " << ref.margins[s];
      break;  // later tokens follow a different history
    }
  }
  EXPECT_GT(compared, static_cast<int>(ps.size()) * max_tokens / 2) << "too few steps compared";
  // Shipped states reached the decode worker over UCX and every host block came back.
  const std::string m = test::http_get_body(test::port_of(cl.decode()[0].metrics), "/metrics");
  EXPECT_GT(test::metric_value(m, "yoco_kv_transfer_bytes_total"), 0);
  double free = -1;
  for (int i = 0; i < 100 && free != 1024; ++i) {
    free = test::metric_value(test::http_get_body(test::port_of(cl.decode()[0].metrics), "/metrics"),
                              "yoco_kv_cache_blocks_free");
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(free, 1024);
}

INSTANTIATE_TEST_SUITE_P(Devices, CudaCluster,
                         ::testing::Values(Case{"gret_cuda_cuda", kGret, true, true},
                                           Case{"gret_cpu_to_cuda", kGret, false, true},
                                           Case{"gret_cuda_to_cpu", kGret, true, false},
                                           Case{"yocou_cuda_cuda", kYocoU, true, true}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace yoco
