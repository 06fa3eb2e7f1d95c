// prefill_service/plan.h: the prefill scheduler's step planning alone, without threads, engine or
// transfer (milliseconds): admission up to max_active, the step budget spent oldest first, and
// the slices a run of steps gives each prompt (the same ones tests/unit/prefill_service/
// scheduler_test.cc sees from the real scheduler).
#include "prefill_service/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <numeric>
#include <random>
#include <vector>

namespace yoco {
namespace {

PrefillLimits limits(int chunk_tokens, int max_active) {
  PrefillLimits l;
  l.chunk_tokens = chunk_tokens;
  l.max_active = max_active;
  return l;
}

std::vector<PlanJob> jobs(std::initializer_list<int64_t> remaining) {
  std::vector<PlanJob> out;
  for (int64_t r : remaining) out.push_back({r});
  return out;
}

// (job, tokens) pairs, for readable expectations.
std::vector<std::pair<size_t, int>> slices(const StepPlan& p) {
  std::vector<std::pair<size_t, int>> out;
  for (const PlannedSlice& s : p.slices) out.emplace_back(s.job, s.tokens);
  return out;
}

using Slices = std::vector<std::pair<size_t, int>>;

// Steps of plan() over prompts of these lengths, all queued before the first step, as the
// scheduler runs them without a prompt cache (a prompt whose last slice ran leaves the active
// list; the waiting queue passed is its front, at most max_active): each prompt's slices.
std::vector<std::vector<int>> run_steps(const std::vector<int64_t>& lengths, const PrefillLimits& lim) {
  std::vector<std::vector<int>> chunks(lengths.size());
  std::vector<int64_t> left = lengths;
  std::deque<size_t> waiting(lengths.size());
  std::iota(waiting.begin(), waiting.end(), size_t{0});
  std::vector<size_t> active;
  for (int step = 0; step < 10000 && (!waiting.empty() || !active.empty()); ++step) {
    std::vector<PlanJob> w, a;
    for (size_t i = 0; i < waiting.size() && i < static_cast<size_t>(lim.max_active); ++i)
      w.push_back({left[waiting[i]]});
    for (size_t i : active) a.push_back({left[i]});
    const StepPlan p = plan(w, a, lim);
    for (size_t i = 0; i < p.admitted; ++i) {
      active.push_back(waiting.front());
      waiting.pop_front();
    }
    for (const PlannedSlice& s : p.slices) {
      const size_t job = active[s.job];
      chunks[job].push_back(s.tokens);
      left[job] -= s.tokens;
    }
    std::erase_if(active, [&](size_t j) { return left[j] == 0; });
  }
  return chunks;
}

TEST(PrefillPlan, WaitingPromptsStartWhileFewerThanMaxActiveCompute) {
  const auto lim = limits(1000, 4);
  EXPECT_EQ(plan(jobs({5, 5, 5, 5, 5}), jobs({5}), lim).admitted, 3u);
  EXPECT_EQ(plan(jobs({5, 5}), jobs({5}), lim).admitted, 2u);  // all there are
  EXPECT_EQ(plan(jobs({5, 5}), jobs({5, 5, 5, 5}), lim).admitted, 0u);
  EXPECT_EQ(plan(jobs({5}), jobs({5, 5, 5, 5, 5}), lim).admitted, 0u);  // over the limit: none, no underflow
  EXPECT_EQ(plan(jobs({5, 5, 5, 5, 5, 5}), {}, lim).admitted, 4u);
}

TEST(PrefillPlan, TheBudgetGoesToTheOldestPromptFirst) {
  // Active ones first, in arrival order, then the ones starting now, in queue order.
  EXPECT_EQ(slices(plan(jobs({40, 40}), jobs({30, 50}), limits(100, 4))), (Slices{{0, 30}, {1, 50}, {2, 20}}));
  EXPECT_EQ(slices(plan(jobs({10, 20, 300}), {}, limits(64, 4))), (Slices{{0, 10}, {1, 20}, {2, 34}}));
}

TEST(PrefillPlan, APromptGetsNoMoreThanItHasLeftAndThoseBeyondTheBudgetNone) {
  EXPECT_EQ(slices(plan({}, jobs({7}), limits(512, 4))), (Slices{{0, 7}}));
  EXPECT_EQ(slices(plan({}, jobs({100, 5}), limits(64, 4))), (Slices{{0, 64}}));
  EXPECT_EQ(slices(plan({}, jobs({64, 5}), limits(64, 4))), (Slices{{0, 64}}));
  // A prompt the cache covered whole has nothing left: it still gets its (empty) slice, which
  // ends it.
  EXPECT_EQ(slices(plan({}, jobs({0, 5}), limits(64, 4))), (Slices{{0, 0}, {1, 5}}));
}

TEST(PrefillPlan, NothingQueuedPlansNothing) {
  const StepPlan p = plan({}, {}, limits(64, 4));
  EXPECT_EQ(p.admitted, 0u);
  EXPECT_TRUE(p.slices.empty());
}

TEST(PrefillPlan, StepsGiveEachPromptTheSchedulersSlices) {
  // tests/unit/prefill_service/scheduler_test.cc, InterleavedPromptsDecodeBitwiseLikeALocalPrefill:
  // step 1 shares the budget between the first three; step 2 finishes the third and starts the
  // fourth; then the last two share it, then the last runs alone.
  const auto c = run_steps({1, 31, 33, 100, 700}, limits(64, 3));
  EXPECT_EQ(c[0], std::vector<int>({1}));
  EXPECT_EQ(c[1], std::vector<int>({31}));
  EXPECT_EQ(c[2], std::vector<int>({32, 1}));
  EXPECT_EQ(c[3], std::vector<int>({63, 37}));
  ASSERT_FALSE(c[4].empty());
  EXPECT_EQ(c[4].front(), 27);
  EXPECT_EQ(std::accumulate(c[4].begin(), c[4].end(), 0), 700);
  // AFinishedPromptIsCommittedWithoutWaitingForTheRestOfItsStep's two prompts.
  const auto d = run_steps({8, 100}, limits(64, 2));
  EXPECT_EQ(d[0], std::vector<int>({8}));
  EXPECT_EQ(d[1], std::vector<int>({56, 44}));
}

// Over random queues: every step starts as many prompts as there is room for, spends the whole
// budget while work remains, gives no prompt more than it has left, and slices the active
// prompts in order, a prefix of them.
TEST(PrefillPlan, EveryStepFillsTheRoomAndTheBudget) {
  std::mt19937 g(31);
  for (int trial = 0; trial < 2000; ++trial) {
    const auto lim = limits(1 + static_cast<int>(g() % 600), 1 + static_cast<int>(g() % 8));
    std::vector<PlanJob> waiting(g() % 10), active(g() % 10);
    for (auto& j : waiting) j.remaining = 1 + g() % 1000;
    for (auto& j : active) j.remaining = g() % 1000;
    const StepPlan p = plan(waiting, active, lim);
    const size_t room = active.size() < static_cast<size_t>(lim.max_active) ? lim.max_active - active.size() : 0;
    ASSERT_EQ(p.admitted, std::min(room, waiting.size()));
    std::vector<PlanJob> all = active;
    all.insert(all.end(), waiting.begin(), waiting.begin() + static_cast<std::ptrdiff_t>(p.admitted));
    int64_t spent = 0, work = 0;
    for (const PlanJob& j : all) work += j.remaining;
    for (size_t i = 0; i < p.slices.size(); ++i) {
      ASSERT_EQ(p.slices[i].job, i);
      ASSERT_GE(p.slices[i].tokens, 0);
      ASSERT_LE(p.slices[i].tokens, all[i].remaining);
      spent += p.slices[i].tokens;
    }
    ASSERT_EQ(spent, std::min<int64_t>(lim.chunk_tokens, work));
    // Only the last prompt sliced may keep work back; the ones after it got nothing this step.
    for (size_t i = 0; i + 1 < p.slices.size(); ++i) ASSERT_EQ(p.slices[i].tokens, all[i].remaining);
  }
}

}  // namespace
}  // namespace yoco
