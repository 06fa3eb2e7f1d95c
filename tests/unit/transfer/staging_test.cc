// The sender's staging buffers alone (transfer/staging.*): the budget that makes put_rows
// wait, and the cache of recent buffers. No transport.
#include "transfer/staging.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "transfer/transport.h"

namespace yoco::transfer_detail {
namespace {

using std::chrono::milliseconds;

TEST(Staging, ABufferOverTheBudgetWaitsUntilAnotherIsReleased) {
  StagingBuffers s(1000);
  auto a = s.acquire(600, milliseconds(0));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(s.staged_bytes(), 600);
  auto refused = s.acquire(600, milliseconds(1));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(transfer_error_of(refused.status()), TransferError::kTimeout);
  std::thread release([&] {
    std::this_thread::sleep_for(milliseconds(5));
    a->reset();
  });
  auto b = s.acquire(600, milliseconds(5000));
  release.join();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(s.staged_bytes(), 600);
}

TEST(Staging, OneRequestLargerThanTheBudgetStillGoesAlone) {
  StagingBuffers s(100);
  auto big = s.acquire(400, milliseconds(0));
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE(s.acquire(4, milliseconds(0)).ok());
}

TEST(Staging, ReleasedBuffersAreReusedForTheSameSize) {
  StagingBuffers s(1 << 20);
  float* first = nullptr;
  {
    auto a = s.acquire(4096, milliseconds(0));
    ASSERT_TRUE(a.ok());
    first = (*a)->data();
  }
  EXPECT_EQ(s.staged_bytes(), 0);
  EXPECT_EQ(s.cached_bytes(), 4096);
  auto b = s.acquire(4096, milliseconds(0));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->data(), first);
  EXPECT_EQ(s.cached_bytes(), 0);
}

TEST(Staging, TheCacheKeepsTheNewestBuffersUpToHalfTheBudget) {
  StagingBuffers s(1000);
  for (int64_t bytes : {100, 200, 250}) {
    auto a = s.acquire(bytes, milliseconds(0));
    ASSERT_TRUE(a.ok());
  }
  EXPECT_EQ(s.cached_bytes(), 200 + 250);          // 100 went out first: 100 + 200 + 250 > 500
  { auto big = s.acquire(600, milliseconds(0)); }  // over half the budget: never cached
  EXPECT_EQ(s.cached_bytes(), 200 + 250);
}

}  // namespace
}  // namespace yoco::transfer_detail
