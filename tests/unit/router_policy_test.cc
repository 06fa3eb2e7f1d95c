#include <gtest/gtest.h>

#include <map>

#include "router/policy.h"

namespace yoco {
namespace {

std::vector<WorkerSnapshot> prefill_workers() {
  return {{"a:1", true, 1000}, {"b:1", true, 10}, {"c:1", false, 0}, {"d:1", true, 500}};
}

TEST(PrefillPicker, PowerOfTwoChoicesFavoursTheLightAndSkipsTheUnhealthy) {
  PrefillPicker p(7);
  std::map<std::string, int> counts;
  const auto w = prefill_workers();
  for (int i = 0; i < 3000; ++i) counts[w[*p.pick(w)].address]++;
  EXPECT_EQ(counts["c:1"], 0);           // unhealthy
  EXPECT_EQ(counts["a:1"], 0);           // heaviest: never wins a pair
  EXPECT_GT(counts["b:1"], counts["d:1"]);  // lightest wins both of its pairs
  EXPECT_GT(counts["d:1"], 0);
}

TEST(PrefillPicker, ExclusionAndNoneLeft) {
  PrefillPicker p(1);
  auto w = prefill_workers();
  for (int i = 0; i < 50; ++i) EXPECT_NE(w[*p.pick(w, {"b:1"})].address, "b:1");
  EXPECT_FALSE(p.pick(w, {"a:1", "b:1", "d:1"}).has_value());
  EXPECT_FALSE(p.pick({}).has_value());
}

TEST(PickDecode, MostFreeBlocksThatFitsTheSequence) {
  std::vector<WorkerSnapshot> w = {
      {"x:1", true, 0, 10, 32, 5}, {"y:1", true, 0, 40, 32, 9}, {"z:1", true, 0, 40, 32, 2}, {"u:1", false, 0, 99, 32, 0}};
  EXPECT_EQ(w[*pick_decode(w, 100)].address, "z:1");  // tie on blocks: fewer running
  EXPECT_EQ(w[*pick_decode(w, 100, {"z:1"})].address, "y:1");
  EXPECT_FALSE(pick_decode(w, 40 * 32 + 1).has_value());  // nobody can hold it
}

TEST(Admission, BoundsInFlightAndQueuedTokens) {
  Admission a(2, 1000);
  EXPECT_TRUE(a.try_admit(400).ok());
  EXPECT_EQ(a.try_admit(700).code(), StatusCode::kResourceExhausted);  // tokens
  EXPECT_TRUE(a.try_admit(600).ok());
  EXPECT_EQ(a.try_admit(1).code(), StatusCode::kResourceExhausted);  // in flight
  a.release(400);
  EXPECT_TRUE(a.try_admit(1).ok());
  EXPECT_EQ(a.in_flight(), 2);
  EXPECT_EQ(a.queued_tokens(), 601);
}

}  // namespace
}  // namespace yoco
