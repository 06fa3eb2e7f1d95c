#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "router/policy.h"
#include "router/stall_watch.h"
#include "router/stop_strings.h"

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
  EXPECT_EQ(counts["c:1"], 0);              // unhealthy
  EXPECT_EQ(counts["a:1"], 0);              // heaviest: never wins a pair
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

TEST(PrefillPicker, PrefixAffinityIsStableAndYieldsToLoad) {
  PrefillPicker p(3);
  std::vector<WorkerSnapshot> w = {{"a:1", true, 100}, {"b:1", true, 100}, {"c:1", true, 100}, {"d:1", true, 100}};
  // The same prefix always goes to the same worker; different prefixes spread over all.
  std::map<std::string, int> spread;
  for (uint64_t h = 0; h < 400; ++h) {
    const auto first = w[*p.pick_affine(w, h * 0x9e3779b97f4a7c15ull, 1000)].address;
    for (int i = 0; i < 5; ++i) EXPECT_EQ(w[*p.pick_affine(w, h * 0x9e3779b97f4a7c15ull, 1000)].address, first);
    spread[first]++;
  }
  for (const auto& a : {"a:1", "b:1", "c:1", "d:1"}) EXPECT_GT(spread[a], 50) << a;
  // Removing one worker moves only the prefixes it had (rendezvous hashing).
  std::vector<WorkerSnapshot> three = {w[0], w[1], w[2]};
  for (uint64_t h = 0; h < 200; ++h) {
    const uint64_t key = h * 0x9e3779b97f4a7c15ull;
    const auto before = w[*p.pick_affine(w, key, 1000)].address;
    if (before != "d:1") EXPECT_EQ(three[*p.pick_affine(three, key, 1000)].address, before);
  }
  // A preferred worker far more loaded than the balanced pick loses.
  const uint64_t key = 12345;
  const auto pref = w[*p.pick_affine(w, key, 1000)].address;
  for (auto& x : w)
    if (x.address == pref) x.queued_tokens = 100000;
  for (int i = 0; i < 20; ++i) EXPECT_NE(w[*p.pick_affine(w, key, 1000)].address, pref);
}

TEST(PickDecode, MostFreeBlocksThatFitsTheSequence) {
  std::vector<WorkerSnapshot> w = {{"x:1", true, 0, 10, 32, 5},
                                   {"y:1", true, 0, 40, 32, 9},
                                   {"z:1", true, 0, 40, 32, 2},
                                   {"u:1", false, 0, 99, 32, 0}};
  EXPECT_EQ(w[*pick_decode(w, 100)].address, "z:1");  // tie on blocks: fewer running
  EXPECT_EQ(w[*pick_decode(w, 100, {"z:1"})].address, "y:1");
  EXPECT_FALSE(pick_decode(w, 40 * 32 + 1).has_value());  // nobody can hold it
}

// KV-aware decode choice (docs/design.md §3.3): cost = ship_weight · blocks not held as a leading
// run + load_weight · (blocks in use + the blocks the sequence adds beyond the resident ones).
WorkerSnapshot decode_worker(std::string address, int64_t free, int64_t total, std::vector<uint64_t> held,
                             int running = 0) {
  WorkerSnapshot w{std::move(address), true, 0, free, 32, running, "ab"};
  w.total_kv_blocks = total;
  if (!held.empty()) w.resident = std::make_shared<const std::unordered_set<uint64_t>>(held.begin(), held.end());
  return w;
}

TEST(PickDecodeKv, CostTradesBlocksToShipAgainstLoad) {
  const DecodeCost cost;  // 1, 1
  EXPECT_EQ(cost.cost(10, 5), 15);
  EXPECT_EQ((DecodeCost{2.0, 0.5}).cost(10, 4), 22);
  const std::vector<PromptChain> chains = {{32, {11, 12, 13, 14}}, {64, {21, 22}}};
  // a holds the prompt's first 3 blocks, b only its 2nd and 3rd (not a leading run: worth nothing).
  std::vector<WorkerSnapshot> w = {decode_worker("a:1", 98, 100, {11, 12, 13}), decode_worker("b:1", 95, 100, {12, 13}),
                                   decode_worker("c:1", 95, 100, {})};
  const auto pick = pick_decode_kv(w, 200, chains, cost);
  ASSERT_TRUE(pick.has_value());
  EXPECT_EQ(w[pick->index].address, "a:1");  // 200 rows = 7 blocks. a: 1 + (2 + 4) = 7; b, c: 4 + (5 + 7) = 16
  EXPECT_EQ(pick->prompt_blocks, 4);
  EXPECT_EQ(pick->resident_blocks, 3);
  // More load on the holder than the blocks it saves: the lighter worker wins.
  w[0].free_kv_blocks = 80;                                                  // a: 1 + 20 = 21 > b: 4 + 5 = 9
  EXPECT_EQ(w[pick_decode_kv(w, 200, chains, cost)->index].address, "b:1");  // tie with c: more free, then running
  w[2].running = 0, w[1].running = 3;
  EXPECT_EQ(w[pick_decode_kv(w, 200, chains, cost)->index].address, "c:1");
  // Load ignored: residency alone decides; shipping ignored: the old choice (least used).
  EXPECT_EQ(w[pick_decode_kv(w, 200, chains, DecodeCost{1.0, 0.0})->index].address, "a:1");
  EXPECT_EQ(w[pick_decode_kv(w, 200, chains, DecodeCost{0.0, 1.0})->index].address, "c:1");
  // Room first: a worker that cannot hold what the sequence adds is never chosen, however much it
  // holds (84 blocks: a adds 81 beyond its 3 resident ones, with 80 free).
  EXPECT_EQ(w[pick_decode_kv(w, 84 * 32, chains, DecodeCost{1.0, 0.0})->index].address, "c:1");
  EXPECT_FALSE(pick_decode_kv(w, 96 * 32, chains, cost).has_value());
  // Unhealthy and excluded workers are skipped; their residency counts for nothing.
  w[1].healthy = false;
  EXPECT_EQ(w[pick_decode_kv(w, 200, chains, DecodeCost{1.0, 0.0}, {"a:1"})->index].address, "c:1");
  // A worker of another block size is matched against that size's chain.
  WorkerSnapshot big = decode_worker("d:1", 50, 100, {21, 22});
  big.kv_block_rows = 64;
  EXPECT_EQ(residency(big, 0, chains).resident_blocks, 2);
  EXPECT_EQ(residency(big, 0, chains).prompt_blocks, 2);
  big.kv_block_rows = 16;  // no chain of its size: nothing predicted
  EXPECT_EQ(residency(big, 0, chains).prompt_blocks, 0);
}

TEST(PickDecodeKv, NewPrefixesGoWhereTheyEvictTheFewestKeptOnes) {
  // Both pools all free by the free-block count, but 99 of e's free blocks hold kept prefixes.
  const std::vector<PromptChain> chains = {{32, {31, 32}}};
  std::vector<WorkerSnapshot> w = {decode_worker("e:1", 100, 100, {41, 42}), decode_worker("f:1", 100, 100, {})};
  w[0].kept_kv_blocks = 99;
  // A prompt held nowhere (2 blocks): on e it evicts one kept block. e: 2 + (2 + 1) = 5, f: 2 + 2 = 4.
  EXPECT_EQ(w[pick_decode_kv(w, 64, chains, DecodeCost{})->index].address, "f:1");
  // A prompt e holds (3 blocks, 2 resident): e: 1 + (1 + 0) = 2, f: 3 + 3 = 6.
  const std::vector<PromptChain> held = {{32, {41, 42, 43}}};
  EXPECT_EQ(w[pick_decode_kv(w, 96, held, DecodeCost{})->index].address, "e:1");
  // Equal cost: the one with more empty blocks (not merely more free ones).
  w[0].kept_kv_blocks = 50;  // e: 2 + 2 = 4 = f's
  EXPECT_EQ(w[pick_decode_kv(w, 64, chains, DecodeCost{})->index].address, "f:1");
  // The free-blocks-only choice cannot tell the two apart (tie: fewer running, then the first).
  EXPECT_EQ(w[*pick_decode(w, 64)].address, "e:1");
}

TEST(PickDecodeKv, RoomCountsOnlyWhatTheSequenceAddsToItsResidentPrefix) {
  // g holds a 32-block document for running sequences and has 13 blocks free: a 34-block sequence
  // over that document adds 2, so g has room (the free-blocks-only choice would skip it).
  std::vector<uint64_t> doc(32);
  for (size_t i = 0; i < doc.size(); ++i) doc[i] = 100 + i;
  std::vector<uint64_t> prompt = doc;
  prompt.push_back(999);  // the question's block
  const std::vector<PromptChain> chains = {{32, prompt}};
  std::vector<WorkerSnapshot> w = {decode_worker("g:1", 13, 80, doc), decode_worker("h:1", 80, 80, {})};
  w[1].kept_kv_blocks = 80;
  EXPECT_EQ(w[pick_decode_kv(w, 34 * 32, chains, DecodeCost{})->index].address, "g:1");
  EXPECT_EQ(w[*pick_decode(w, 34 * 32)].address, "h:1");
  // Fewer free blocks than it adds: no room.
  w[0].free_kv_blocks = 1;
  EXPECT_EQ(w[pick_decode_kv(w, 34 * 32, chains, DecodeCost{})->index].address, "h:1");
}

TEST(PickDecodeKv, LeadingRunOnlyAndNoSummaryMeansNothingHeld) {
  const std::unordered_set<uint64_t> held = {1, 2, 4};
  const std::vector<uint64_t> keys = {1, 2, 3, 4};
  EXPECT_EQ(resident_prefix(keys, &held), 2);
  EXPECT_EQ(resident_prefix(keys, nullptr), 0);
  EXPECT_EQ(resident_prefix({}, &held), 0);
  // With no worker holding anything, the choice is the old one: least used (= most free), then
  // fewer running.
  std::vector<WorkerSnapshot> w = {decode_worker("x:1", 10, 100, {}, 5), decode_worker("y:1", 40, 100, {}, 9),
                                   decode_worker("z:1", 40, 100, {}, 2)};
  const std::vector<PromptChain> chains = {{32, {7, 8}}};
  EXPECT_EQ(w[pick_decode_kv(w, 100, chains, DecodeCost{})->index].address, "z:1");
  EXPECT_EQ(w[*pick_decode(w, 100)].address, "z:1");
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

#include "router/discovery.h"

namespace yoco {
namespace {

TEST(Discovery, ParsesTargetsAndNamesBadOnes) {
  auto t = parse_targets("10.0.0.5:7001, dns:///prefill.svc:7002,[::1]:7003");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->size(), 3u);
  EXPECT_FALSE((*t)[0].dns);
  EXPECT_TRUE((*t)[1].dns);
  EXPECT_EQ((*t)[1].host, "prefill.svc");
  EXPECT_EQ((*t)[2].host, "::1");
  for (const char* bad : {"nohost", "h:0", "h:70000", "h:x", "[::1", ""}) {
    auto r = parse_targets(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_NE(parse_targets("a:1,b:zz").status().message().find("\"b:zz\""), std::string::npos);
}

TEST(Discovery, ResolvesNamesAndKeepsTheLastGoodAnswer) {
  // localhost resolves on every machine without network access.
  Discovery d(parse_targets("dns:localhost:7001,127.0.0.2:7002").value());
  ASSERT_TRUE(d.refresh().ok());
  const auto a = d.addresses();
  EXPECT_NE(std::find(a.begin(), a.end(), "127.0.0.1:7001"), a.end());
  EXPECT_NE(std::find(a.begin(), a.end(), "127.0.0.2:7002"), a.end());
  // A failing resolver (no real DNS query leaves the machine): the last good answer stays.
  int calls = 0;
  Discovery flaky(parse_targets("dns:prefill.svc:7001").value(),
                  [&](const std::string&) -> Result<std::vector<std::string>> {
                    if (++calls == 1) return std::vector<std::string>{"10.1.0.7", "10.1.0.8"};
                    return Status(StatusCode::kUnavailable, "resolver down");
                  });
  ASSERT_TRUE(flaky.refresh().ok());
  EXPECT_EQ(flaky.refresh().code(), StatusCode::kUnavailable);
  EXPECT_EQ(flaky.addresses(), (std::vector<std::string>{"10.1.0.7:7001", "10.1.0.8:7001"}));
}

TEST(StopStrings, StopsAtTheFirstMatchAcrossDeltasAndHoldsBackPrefixes) {
  // Every way of cutting the text into deltas gives the same output.
  const std::string text = "In the beginning God created the heaven";
  for (size_t cut1 = 0; cut1 <= text.size(); cut1 += 3)
    for (size_t cut2 = cut1; cut2 <= text.size(); cut2 += 5) {
      StopStringMatcher m({"God cr", "heaven", ""});
      std::string out = m.push(text.substr(0, cut1));
      out += m.push(text.substr(cut1, cut2 - cut1));
      out += m.push(text.substr(cut2));
      out += m.flush();
      EXPECT_EQ(out, "In the beginning ") << cut1 << " " << cut2;
      EXPECT_TRUE(m.stopped());
    }
  StopStringMatcher held({"abc"});
  EXPECT_EQ(held.push("xxab"), "xx");  // "ab" may start "abc"
  EXPECT_EQ(held.push("d"), "abd");
  EXPECT_EQ(held.push("a"), "");
  EXPECT_EQ(held.flush(), "a");  // the end: nothing more can come
  EXPECT_FALSE(held.stopped());
  StopStringMatcher none({});
  EXPECT_EQ(none.push("abc"), "abc");
  StopStringMatcher whole({"\n\n"});
  EXPECT_EQ(whole.push("a\n"), "a");
  EXPECT_EQ(whole.push("\nb"), "");
  EXPECT_TRUE(whole.stopped());
  EXPECT_EQ(whole.push("more"), "");
}

// A hung worker's stream is cancelled only when it is both silent and unhealthy: a silent but
// healthy worker (a long prefill, a queue) and a worker still sending are left alone.
TEST(StallWatch, CancelsOnlyASilentStreamOfAnUnhealthyWorker) {
  using std::chrono::milliseconds;
  std::atomic<bool> unhealthy{false};
  std::atomic<int> cancels{0};
  {
    StallWatch w(
        milliseconds(100), [&] { return unhealthy.load(); }, [&] { ++cancels; });
    std::this_thread::sleep_for(milliseconds(400));  // silent, healthy
    EXPECT_FALSE(w.fired());
    unhealthy = true;
    for (int i = 0; i < 6; ++i) {  // unhealthy, but an event every 40 ms
      w.heard();
      std::this_thread::sleep_for(milliseconds(40));
    }
    EXPECT_FALSE(w.fired());
    for (int i = 0; i < 100 && !w.fired(); ++i) std::this_thread::sleep_for(milliseconds(10));
    EXPECT_TRUE(w.fired());
  }
  EXPECT_EQ(cancels, 1);
  {
    StallWatch quiet(
        milliseconds(100), [] { return true; }, [&] { ++cancels; });
  }  // ends before its timeout
  EXPECT_EQ(cancels, 1);
}

// A call made on the stream's behalf (the Prefill that waits on the same worker) is cancelled
// with the stream while it is linked, at once when linked after the watch fired, and never once
// its link is gone.
TEST(StallWatch, LinkedCallsAreCancelledWithTheStream) {
  using std::chrono::milliseconds;
  std::atomic<int> cancels{0}, linked{0};
  {
    StallWatch w(
        milliseconds(100), [] { return true; }, [&] { ++cancels; });
    {
      const StallWatch::Link gone = w.link([&] { linked += 100; });
    }  // unlinked before the timeout
    {
      const StallWatch::Link l = w.link([&] { ++linked; });
      for (int i = 0; i < 100 && !w.fired(); ++i) std::this_thread::sleep_for(milliseconds(10));
      EXPECT_TRUE(w.fired());
    }
    EXPECT_EQ(linked, 1);
    const StallWatch::Link late = w.link([&] { ++linked; });
    EXPECT_EQ(linked, 2);
  }
  EXPECT_EQ(cancels, 1);
  EXPECT_EQ(linked, 2);
}

}  // namespace
}  // namespace yoco
