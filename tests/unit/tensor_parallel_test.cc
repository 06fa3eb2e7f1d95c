// Tensor parallelism on the CPU: N ranks are N threads over the in-process communicator.
// Sharded models give the logits of the unsharded one (gRet, SWA, YOCO-U; worlds 2 and 4;
// prefill, batched greedy decode, full forward), every rank holds 1/N of the KV cache and of
// the self-decoder state, bad splits are rejected naming the field, and a rank that fails
// never leaves the others waiting.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "model/communicator.h"
#include "model/model.h"
#include "model/random_model.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

using namespace std::chrono_literals;

// Runs fn(rank) on `world` threads. A hang is a failure of this suite, not a stuck ctest:
// past the deadline the process exits.
void run_ranks(int world, const std::function<void(int)>& fn, std::chrono::seconds deadline = 120s) {
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      fn(r);
      std::lock_guard<std::mutex> lk(mu);
      ++done;
      cv.notify_all();
    });
  {
    std::unique_lock<std::mutex> lk(mu);
    if (!cv.wait_for(lk, deadline, [&] { return done == world; })) {
      std::fprintf(stderr, "ranks still running after %llds: a collective hangs\n",
                   static_cast<long long>(deadline.count()));
      std::_Exit(1);
    }
  }
  for (auto& t : threads) t.join();
}

std::vector<std::unique_ptr<Communicator>> local_group(int world, LocalGroupOptions opt = {}) {
  auto g = make_local_group(world, opt);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return std::move(g).value();
}

std::vector<int32_t> random_tokens(int n, uint32_t seed, int vocab) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(g() % vocab);
  return t;
}

int32_t argmax(const float* row, int n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

// Everything one model produces on a fixed workload: two prompts prefilled in chunks, their
// next-token logits, greedy decode steps of the pair as one batch, then the full forward of
// the first prompt (the cross-decoder's chunk mode).
struct Trace {
  Status status;
  std::vector<float> logits;
  std::vector<int32_t> greedy;
  size_t kv_floats = 0, self_floats = 0;
};

constexpr int kDecodeSteps = 6;

Trace run_workload(const Model& m) {
  Trace t;
  const int V = m.config().vocab_size;
  const auto a = random_tokens(37, 11, V), b = random_tokens(21, 12, V);
  PrefillOptions opt;
  opt.chunk_tokens = 16;
  opt.retention_chunk = 8;
  SequenceState sa = m.new_sequence(), sb = m.new_sequence();
  SequenceState* both[2] = {&sa, &sb};
  auto fail = [&](Status st) {
    t.status = std::move(st);
    return t;
  };
  if (Status st = m.prefill(sa, a, opt); !st.ok()) return fail(st);
  if (Status st = m.prefill(sb, b, opt); !st.ok()) return fail(st);
  std::vector<float> l(2 * static_cast<size_t>(V));
  if (Status st = m.logits(both, l.data()); !st.ok()) return fail(st);
  for (int step = 0;; ++step) {
    t.logits.insert(t.logits.end(), l.begin(), l.end());
    const int32_t next[2] = {argmax(l.data(), V), argmax(l.data() + V, V)};
    t.greedy.insert(t.greedy.end(), next, next + 2);
    if (step == kDecodeSteps) break;
    if (Status st = m.decode_step(both, next, l.data()); !st.ok()) return fail(st);
  }
  t.kv_floats = sa.k.size() + sa.v.size();
  for (const auto& s : sa.self) t.self_floats += s.s.size() + s.k.size() + s.v.size();
  if (Status st = m.forward(
          a,
          [&](int64_t, int rows, const float* lg) {
            t.logits.insert(t.logits.end(), lg, lg + static_cast<size_t>(rows) * V);
          },
          opt);
      !st.ok())
    return fail(st);
  return t;
}

struct SplitCase {
  const char* preset;
  int world;
  int attn_heads = 0;  // 0: the preset's (overrides keep n_attn_kv_heads divisible by world)
  int kv_heads = 0;
};

std::string case_name(const SplitCase& c) {
  std::string n = std::string(c.preset) + "_world" + std::to_string(c.world);
  if (c.attn_heads) n += "_heads" + std::to_string(c.attn_heads);
  if (c.kv_heads) n += "_kv" + std::to_string(c.kv_heads);
  for (auto& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

void PrintTo(const SplitCase& c, std::ostream* os) { *os << case_name(c); }

class TensorParallelTest : public ::testing::TestWithParam<SplitCase> {
 protected:
  static void SetUpTestSuite() { dir_ = new test::TempDir(); }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // The preset with the case's head counts, written once per configuration.
  static std::string model_dir(const SplitCase& c) {
    ModelConfig cfg = find_preset(c.preset).value();
    if (c.attn_heads) cfg.n_attn_heads = c.attn_heads;
    if (c.kv_heads) cfg.n_attn_kv_heads = c.kv_heads;
    const std::string dir = dir_->sub(std::string(c.preset) + "-h" + std::to_string(cfg.n_attn_heads) + "-kv" +
                                      std::to_string(cfg.n_attn_kv_heads));
    if (!std::filesystem::exists(dir + "/params.json")) {
      const Status st = write_random_model(dir, cfg, 42, DType::kF32);
      EXPECT_TRUE(st.ok()) << st.to_string();
    }
    return dir;
  }
  static test::TempDir* dir_;
};
test::TempDir* TensorParallelTest::dir_ = nullptr;

// Tolerance. Only the association of the row-parallel sums changes (N partial products of
// k/N terms each, added in rank order, instead of one k-term product), so each out_proj/fc2
// output moves by a few fp32 ulps, and those differences travel through every later layer
// (2 self + 2 cross layers, the self-decoder 3 times over for YOCO-U). The logits of these
// random models are O(1-10); measured differences are ~1e-6 of the largest logit, so
// |Δ| ≤ 1e-4 · max|logit| leaves ~100× headroom while a wrong head, a missing all-reduce or a
// misplaced shard moves logits by O(1).
constexpr double kRelTol = 1e-4;

TEST_P(TensorParallelTest, RanksGiveTheUnshardedLogitsAndHoldTheirShareOfTheState) {
  const SplitCase c = GetParam();
  const std::string dir = model_dir(c);
  auto ref_model = Model::load(dir);
  ASSERT_TRUE(ref_model.ok()) << ref_model.status().to_string();
  const Trace ref = run_workload(*ref_model.value());
  ASSERT_TRUE(ref.status.ok()) << ref.status.to_string();

  auto weights = load_model_dir(dir);
  ASSERT_TRUE(weights.ok());
  auto comms = local_group(c.world);
  std::vector<Trace> traces(c.world);
  run_ranks(c.world, [&](int r) {
    auto m = Model::create(weights.value(), TensorParallel{r, c.world, comms[r].get()});
    if (!m.ok()) {
      traces[r].status = m.status();
      comms[r]->abort(m.status());
      return;
    }
    EXPECT_EQ(m.value()->fingerprint(), ref_model.value()->fingerprint());
    traces[r] = run_workload(*m.value());
  });

  double max_ref = 0;
  for (float x : ref.logits) max_ref = std::max(max_ref, std::fabs(static_cast<double>(x)));
  for (int r = 0; r < c.world; ++r) {
    const Trace& t = traces[r];
    ASSERT_TRUE(t.status.ok()) << "rank " << r << ": " << t.status.to_string();
    ASSERT_EQ(t.logits.size(), ref.logits.size());
    // Replicated residual stream and output head: every rank computes the same bits.
    EXPECT_EQ(0, std::memcmp(t.logits.data(), traces[0].logits.data(), t.logits.size() * 4)) << "rank " << r;
    EXPECT_EQ(t.greedy, ref.greedy) << "rank " << r;
    EXPECT_EQ(t.kv_floats * c.world, ref.kv_floats) << "rank " << r;
    EXPECT_EQ(t.self_floats * c.world, ref.self_floats) << "rank " << r;
  }
  const double diff = test::max_abs_diff(traces[0].logits.data(), ref.logits.data(), ref.logits.size());
  std::printf("[ tp ] %s: max|logit| %.4g, max|delta| %.3g (%.3g of max|logit|) over %zu logits\n",
              case_name(c).c_str(), max_ref, diff, diff / max_ref, ref.logits.size());
  RecordProperty("max_abs_delta", std::to_string(diff));
  EXPECT_LE(diff, kRelTol * max_ref);
}

INSTANTIATE_TEST_SUITE_P(Splits, TensorParallelTest,
                         ::testing::Values(
                             // The presets as they are where world divides their KV heads
                             // (GQA ratio 2: each rank one KV head and its two query heads).
                             SplitCase{"tiny-gret", 2}, SplitCase{"tiny-swa", 2},
                             // World 4 needs 4 KV heads; YOCO-U's preset has a single one.
                             SplitCase{"tiny-gret", 4, 0, 4}, SplitCase{"tiny-swa", 4, 0, 4},
                             SplitCase{"tiny-gret", 4, 8, 4},  // GQA ratio 2 at world 4
                             SplitCase{"tiny-yocou", 2, 0, 2}, SplitCase{"tiny-yocou", 4, 0, 4},
                             // MoE: every expert's hidden units (and the shared expert's) split,
                             // the router replicated (docs/design.md §2.8).
                             SplitCase{"tiny-moe-gret", 2}, SplitCase{"tiny-moe-gret", 4, 0, 4},
                             SplitCase{"tiny-moe-yocou", 2, 0, 2}),
                         [](const auto& info) { return case_name(info.param); });

// --- bad splits -------------------------------------------------------------------------

Status split_status(const std::string& dir, int world, int rank = 0, bool with_comm = true) {
  auto comms = local_group(std::max(world, 1));
  Communicator* comm = with_comm && rank >= 0 && rank < world ? comms[rank].get() : nullptr;
  auto m = Model::load(dir, WeightSet::kFull, TensorParallel{rank, world, comm});
  return m.ok() ? Status::Ok() : m.status();
}

void expect_invalid(const Status& st, const std::string& field) {
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find(field), std::string::npos) << "expected \"" << field << "\" in: " << st.message();
}

TEST(TensorParallelSplit, BadWorldSizesAreRejectedNamingTheField) {
  test::TempDir dir;
  auto write = [&](const std::string& name, ModelConfig c) {
    const Status st = write_random_model(dir.sub(name), c, 1, DType::kF32);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return dir.sub(name);
  };
  const std::string gret = write("gret", find_preset("tiny-gret").value());  // 4 self heads, 4 heads, 2 KV heads
  expect_invalid(split_status(gret, 3), "n_self_heads");
  expect_invalid(split_status(gret, 4), "n_attn_kv_heads");
  expect_invalid(split_status(gret, 0), "world");
  expect_invalid(split_status(gret, 2, 2), "rank");
  expect_invalid(split_status(gret, 2, 0, /*with_comm=*/false), "comm");
  {
    auto comms = local_group(4);  // a communicator of another group size
    auto m = Model::load(gret, WeightSet::kFull, TensorParallel{1, 2, comms[1].get()});
    ASSERT_FALSE(m.ok());
    expect_invalid(m.status(), "comm");
  }
  ModelConfig odd_hidden = find_preset("tiny-gret").value();
  odd_hidden.hidden_dim = 162;
  odd_hidden.n_attn_kv_heads = 4;
  expect_invalid(split_status(write("hidden", odd_hidden), 4), "hidden_dim");
  // An MoE splits every expert's hidden units and the shared expert's (docs/design.md §2.8).
  ModelConfig odd_expert = find_preset("tiny-moe-gret").value();
  odd_expert.n_attn_kv_heads = 4;
  odd_expert.expert_hidden_dim = 42;
  expect_invalid(split_status(write("expert", odd_expert), 4), "expert_hidden_dim");
  ModelConfig odd_shared = find_preset("tiny-moe-gret").value();
  odd_shared.n_attn_kv_heads = 4;
  odd_shared.shared_expert_hidden_dim = 66;
  expect_invalid(split_status(write("shared", odd_shared), 4), "shared_expert_hidden_dim");
  ModelConfig six_heads = find_preset("tiny-gret").value();
  six_heads.dim = 96;  // 4 self heads of 24, 6 attention heads of 16 over 2 KV heads
  six_heads.n_attn_heads = 6;
  const std::string six = write("six", six_heads);
  expect_invalid(split_status(six, 4), "n_attn_heads");
  EXPECT_TRUE(split_status(six, 2).ok());
  EXPECT_TRUE(split_status(gret, 1, 0, /*with_comm=*/false).ok());
}

// --- failures ---------------------------------------------------------------------------

TEST(TensorParallelFailure, AbortWakesRanksWaitingInACollective) {
  auto comms = local_group(3);
  std::vector<Status> got(3);
  run_ranks(3, [&](int r) {
    if (r == 2) {
      std::this_thread::sleep_for(50ms);  // the others are waiting by now
      comms[r]->abort(internal_error("rank 2 lost its device"));
      got[r] = comms[r]->barrier();
      return;
    }
    std::vector<float> x(100, 1.0f);
    got[r] = comms[r]->all_reduce_sum(x.data(), x.size());
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got[r].code(), StatusCode::kUnavailable) << r << ": " << got[r].to_string();
    EXPECT_NE(got[r].message().find("rank 2 lost its device"), std::string::npos) << got[r].message();
  }
  float y = 0;
  EXPECT_FALSE(comms[0]->all_reduce_sum(&y, 1).ok());  // a group does not recover
}

TEST(TensorParallelFailure, ARankThatNeverComesTimesOutInsteadOfHanging) {
  LocalGroupOptions opt;
  opt.timeout = 100ms;
  auto comms = local_group(2, opt);
  float x = 1;
  const Status st = comms[0]->all_reduce_sum(&x, 1);  // rank 1 never calls
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.to_string();
  EXPECT_EQ(comms[1]->barrier().code(), StatusCode::kUnavailable);
}

// A rank whose arguments are rejected fails the call on every rank, and nothing hangs; the
// call is rejected before any compute, so the group and the states go on working.
TEST(TensorParallelFailure, ARankRejectingItsArgumentsFailsTheCallEverywhere) {
  test::TempDir dir;
  ASSERT_TRUE(write_random_model(dir.path(), find_preset("tiny-gret").value(), 3, DType::kF32).ok());
  auto comms = local_group(2);
  std::vector<Status> bad(2), good(2);
  std::vector<std::vector<float>> logits(2);
  run_ranks(2, [&](int r) {
    auto m = Model::load(dir.path(), WeightSet::kFull, TensorParallel{r, 2, comms[r].get()});
    if (!m.ok()) {
      bad[r] = good[r] = m.status();
      comms[r]->abort(m.status());
      return;
    }
    const int V = m.value()->config().vocab_size;
    SequenceState st = m.value()->new_sequence();
    SequenceState* one[1] = {&st};
    good[r] = m.value()->prefill(st, random_tokens(9, 5, V));
    if (!good[r].ok()) return;
    logits[r].resize(V);
    const int32_t token = r == 1 ? V : 7;  // rank 1 gets an id outside the vocabulary
    bad[r] = m.value()->decode_step(one, std::span(&token, 1), logits[r].data());
    const int32_t ok_token = 7;
    good[r] = m.value()->decode_step(one, std::span(&ok_token, 1), logits[r].data());
  });
  EXPECT_EQ(bad[1].code(), StatusCode::kInvalidArgument) << bad[1].to_string();
  EXPECT_EQ(bad[0].code(), StatusCode::kCancelled) << bad[0].to_string();
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(good[r].ok()) << r << ": " << good[r].to_string();
  EXPECT_EQ(logits[0], logits[1]);
}

// Passes calls through until `budget` all-reduces have gone by, then fails like a rank that
// lost its device: aborts the group and returns an error.
class FailingCommunicator final : public Communicator {
 public:
  FailingCommunicator(Communicator* inner, int budget) : inner_(inner), budget_(budget) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  Status all_reduce_sum(float* data, size_t n) override {
    if (budget_-- <= 0) {
      const Status st = internal_error("injected failure on rank " + std::to_string(rank()));
      inner_->abort(st);
      return st;
    }
    return inner_->all_reduce_sum(data, n);
  }
  Status all_gather(const float* send, size_t n, float* recv) override { return inner_->all_gather(send, n, recv); }
  Status barrier() override { return inner_->barrier(); }
  void abort(const Status& why) override { inner_->abort(why); }

 private:
  Communicator* inner_;
  int budget_;
};

TEST(TensorParallelFailure, ARankFailingMidPrefillAbortsTheOthers) {
  test::TempDir dir;
  ModelConfig cfg = find_preset("tiny-swa").value();
  cfg.n_attn_kv_heads = 4;  // divisible by both worlds
  ASSERT_TRUE(write_random_model(dir.path(), cfg, 3, DType::kF32).ok());
  auto weights = load_model_dir(dir.path());
  ASSERT_TRUE(weights.ok());
  for (int world : {2, 4}) {
    auto g = make_local_group(world);
    ASSERT_TRUE(g.ok());
    auto comms = std::move(g).value();
    FailingCommunicator failing(comms[world - 1].get(), /*budget=*/2);  // fails at layer 0's fc2
    std::vector<Status> got(world), after(world);
    run_ranks(world, [&](int r) {
      Communicator* c = r == world - 1 ? static_cast<Communicator*>(&failing) : comms[r].get();
      auto m = Model::create(weights.value(), TensorParallel{r, world, c});
      if (!m.ok()) {
        got[r] = after[r] = m.status();
        c->abort(m.status());
        return;
      }
      SequenceState st = m.value()->new_sequence();
      got[r] = m.value()->prefill(st, random_tokens(40, 8, 256));
      after[r] = m.value()->score(random_tokens(5, 9, 256)).status();
    });
    EXPECT_EQ(got[world - 1].code(), StatusCode::kInternal) << got[world - 1].to_string();
    for (int r = 0; r + 1 < world; ++r) {
      EXPECT_EQ(got[r].code(), StatusCode::kUnavailable) << r << ": " << got[r].to_string();
      EXPECT_NE(got[r].message().find("injected failure"), std::string::npos) << got[r].message();
    }
    for (int r = 0; r < world; ++r) EXPECT_FALSE(after[r].ok()) << r;  // later calls fail fast
  }
}

// --- the collectives ---------------------------------------------------------------------

TEST(LocalCommunicator, AllReduceSumsInRankOrderAndEveryRankGetsTheSameBits) {
  constexpr int kWorld = 3;
  auto comms = local_group(kWorld);
  const std::vector<size_t> sizes = {0, 1, 2, 5, 1000, 4099};
  std::vector<std::vector<std::vector<float>>> in(sizes.size(), std::vector<std::vector<float>>(kWorld));
  std::mt19937 g(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (size_t s = 0; s < sizes.size(); ++s)
    for (int r = 0; r < kWorld; ++r)
      for (size_t i = 0; i < sizes[s]; ++i)
        in[s][r].push_back(u(g) * std::pow(10.0f, static_cast<float>(g() % 9) - 4));  // order-sensitive sums
  std::vector<std::vector<std::vector<float>>> out = in;
  constexpr int kRounds = 20;
  std::atomic<int> failures{0};
  run_ranks(kWorld, [&](int r) {
    for (int round = 0; round < kRounds; ++round)
      for (size_t s = 0; s < sizes.size(); ++s) {
        std::vector<float> x = in[s][r];
        if (!comms[r]->all_reduce_sum(x.data(), x.size()).ok()) ++failures;
        out[s][r] = x;
      }
  });
  EXPECT_EQ(failures.load(), 0);
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<float> want(sizes[s]);
    for (size_t i = 0; i < sizes[s]; ++i) {
      float acc = in[s][0][i];
      for (int r = 1; r < kWorld; ++r) acc += in[s][r][i];
      want[i] = acc;
    }
    if (sizes[s] == 0) continue;  // an empty vector's data() may be null: memcmp(null, null, 0) is UB
    for (int r = 0; r < kWorld; ++r)
      EXPECT_EQ(0, std::memcmp(out[s][r].data(), want.data(), sizes[s] * 4)) << "size " << sizes[s] << " rank " << r;
  }
}

TEST(LocalCommunicator, AllGatherAndBarrier) {
  constexpr int kWorld = 4;
  auto comms = local_group(kWorld);
  std::vector<std::vector<float>> got(kWorld);
  std::vector<Status> st(kWorld);
  run_ranks(kWorld, [&](int r) {
    const std::vector<float> mine = {static_cast<float>(r), static_cast<float>(10 * r)};
    got[r].resize(2 * kWorld);
    st[r] = comms[r]->all_gather(mine.data(), mine.size(), got[r].data());
    if (st[r].ok()) st[r] = comms[r]->barrier();
  });
  const std::vector<float> want = {0, 0, 1, 10, 2, 20, 3, 30};
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(st[r].ok()) << st[r].to_string();
    EXPECT_EQ(got[r], want) << r;
  }
}

TEST(LocalCommunicator, MismatchedSizesAbortTheGroupOnEveryRank) {
  auto comms = local_group(2);
  std::vector<Status> st(2);
  run_ranks(2, [&](int r) {
    std::vector<float> x(r == 0 ? 4 : 5, 1.0f);
    st[r] = comms[r]->all_reduce_sum(x.data(), x.size());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kUnavailable) << st[r].to_string();
    EXPECT_NE(st[r].message().find("elements"), std::string::npos) << st[r].message();
  }
  EXPECT_EQ(make_local_group(0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace yoco
