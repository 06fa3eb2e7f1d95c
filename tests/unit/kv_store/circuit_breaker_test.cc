// kv_store/circuit_breaker.h: opens on failures and slow calls, drops calls while open, recovers
// through its write-then-read probe.
#include "kv_store/circuit_breaker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/unit/kv_store/test_util.h"

namespace yoco {
namespace {

using namespace kv_test;

CircuitBreakerOptions fast_breaker() {
  CircuitBreakerOptions o;
  o.failure_threshold = 3;
  o.slow_call = 150ms;
  o.cooldown = 200ms;
  o.max_cooldown = 1000ms;
  return o;
}

TEST(KvStoreBreaker, OpensOnFailuresDropsCallsAndRecoversThroughTheProbe) {
  auto fake = std::make_unique<FakeStore>();
  FakeStore* f = fake.get();
  CircuitBreaker b(std::move(fake), fast_breaker());
  ASSERT_TRUE(b.put("k", "v", 0s).ok());
  EXPECT_TRUE(b.get("k")->has_value());
  f->fail = true;
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(b.get("k").ok());
  EXPECT_TRUE(b.is_open());
  const int calls = f->calls;
  auto r = b.get("k");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());                                     // a miss, at once
  EXPECT_EQ(b.put("k", "v", 0s).code(), StatusCode::kUnavailable);  // dropped
  EXPECT_EQ(f->calls, calls);                                       // the backend was not touched
  auto s = b.stats();
  EXPECT_EQ(s.breaker_trips, 1u);
  EXPECT_EQ(s.breaker_open, 1u);
  EXPECT_EQ(s.dropped, 2u);
  // Cool-down passes while the backend is still down: the probe fails, it stays open.
  std::this_thread::sleep_for(250ms);
  EXPECT_FALSE(b.get("k")->has_value());
  EXPECT_TRUE(b.is_open());
  // Healed: after the (doubled) cool-down the probe's write-then-read closes it.
  f->fail = false;
  std::this_thread::sleep_for(450ms);
  auto h = b.get("k");
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->has_value());
  EXPECT_FALSE(b.is_open());
  EXPECT_EQ(b.stats().breaker_open, 0u);
  EXPECT_EQ(f->size(), 1u);  // the probe cleaned up after itself
}

TEST(KvStoreBreaker, SlowCallOpensAndALyingBackendStaysOpen) {
  auto fake = std::make_unique<FakeStore>();
  FakeStore* f = fake.get();
  CircuitBreaker b(std::move(fake), fast_breaker());
  f->delay_ms = 200;
  EXPECT_TRUE(b.get("k").ok());  // slow but fine: still trips
  EXPECT_TRUE(b.is_open());
  f->delay_ms = 0;
  const int calls = f->calls;
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(b.get("k")->has_value());
  EXPECT_EQ(f->calls, calls);  // none reached the backend
  // The backend answers, but with other bytes than the probe wrote: not closed.
  f->lie = true;
  std::this_thread::sleep_for(250ms);
  EXPECT_FALSE(b.get("k")->has_value());
  EXPECT_TRUE(b.is_open());
  f->lie = false;
  std::this_thread::sleep_for(450ms);
  (void)b.get("k");
  EXPECT_FALSE(b.is_open());
}

TEST(KvStoreBreaker, ConcurrentCallersNeverWaitWhileOpen) {
  auto fake = std::make_unique<FakeStore>();
  FakeStore* f = fake.get();
  CircuitBreakerOptions o = fast_breaker();
  o.cooldown = 5000ms;
  CircuitBreaker b(std::move(fake), o);
  f->fail = true;
  for (int i = 0; i < 3; ++i) (void)b.get("k");
  ASSERT_TRUE(b.is_open());
  f->delay_ms = 1000;  // were any call to reach it, it would take a second
  std::vector<std::thread> th;
  std::atomic<double> worst{0};
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        const auto t0 = Clock::now();
        (void)b.get("k");
        (void)b.put("k", "v", 0s);
        double ms = ms_since(t0), w = worst.load();
        while (ms > w && !worst.compare_exchange_weak(w, ms)) {
        }
      }
    });
  for (auto& x : th) x.join();
  EXPECT_LT(worst.load(), 250.0);  // a call reaching the backend would take 1000 ms
}

}  // namespace
}  // namespace yoco
