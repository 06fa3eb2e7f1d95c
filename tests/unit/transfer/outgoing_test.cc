// The sender's bookkeeping alone (transfer/outgoing.*): what a commit checks and carries, the
// commit phases, the ended transfers, the Waiter. No transport.
#include "transfer/outgoing.h"

#include <gtest/gtest.h>

#include <thread>

namespace yoco::transfer_detail {
namespace {

using std::chrono::milliseconds;

ReservationDescriptor descriptor(int64_t rows, int64_t resident_rows = 0) {
  ReservationDescriptor d;
  d.reservation_id = 42;
  d.request_id = "req";
  d.kv_dim = 4;
  d.block_size = 4;
  d.rows = rows;
  d.resident_rows = resident_rows;
  d.lease_deadline_unix_ms = 1000;
  d.secret[3] = 7;
  return d;
}

TEST(OutgoingTransfer, ACommitNeedsEveryRowBelowRowsWritten) {
  OutgoingTransfer t(descriptor(8));
  const std::vector<uint32_t> crcs = {1, 2, 3, 4};
  t.rows_put(0, crcs, 4);
  EXPECT_EQ(t.bytes, 4 * 2 * 4 * 4);
  Status st = t.begin_commit(8, "req", 9, true);
  EXPECT_EQ(transfer_error_of(st), TransferError::kRowsIncomplete);
  EXPECT_NE(st.message().find("row 4 was never put"), std::string::npos) << st.message();
  EXPECT_EQ(t.phase, CommitPhase::kNone);
  EXPECT_EQ(transfer_error_of(t.begin_commit(9, "req", 9, true)), TransferError::kRowsIncomplete);
  EXPECT_EQ(transfer_error_of(t.begin_commit(0, "req", 9, true)), TransferError::kRowsIncomplete);
  ASSERT_TRUE(t.begin_commit(4, "req", 9, true).ok());
  EXPECT_EQ(t.phase, CommitPhase::kDraining);
  EXPECT_EQ(t.commit.rows_written, 4);
  EXPECT_EQ(t.commit.secret, t.secret);
  EXPECT_EQ(t.commit.rows_crc, combine_row_crcs(crcs));
  EXPECT_EQ(transfer_error_of(t.begin_commit(4, "req", 9, true)), TransferError::kInvalid);  // in progress
}

TEST(OutgoingTransfer, ResidentRowsCountAsWrittenAndStayOutOfTheChecksum) {
  OutgoingTransfer t(descriptor(8, 4));
  EXPECT_EQ(transfer_error_of(t.begin_commit(3, "req", 9, true)), TransferError::kRowsIncomplete);
  const std::vector<uint32_t> crcs = {5, 6, 7, 8};
  t.rows_put(4, crcs, 4);
  ASSERT_TRUE(t.begin_commit(8, "req", 9, true).ok());
  EXPECT_EQ(t.commit.rows_crc, combine_row_crcs(crcs));
}

TEST(OutgoingTransfer, TheCommitFlushesOnlyOnceEveryOperationCompleted) {
  OutgoingTransfer t(descriptor(4));
  t.outstanding = 2;
  EXPECT_EQ(t.advance(), OutgoingTransfer::Step::kWait);  // no commit yet
  t.rows_put(0, std::vector<uint32_t>(4, 1), 4);
  ASSERT_TRUE(t.begin_commit(4, "req", 9, false).ok());
  EXPECT_EQ(t.advance(), OutgoingTransfer::Step::kWait);
  --t.outstanding;
  EXPECT_EQ(t.advance(), OutgoingTransfer::Step::kWait);
  --t.outstanding;
  EXPECT_EQ(t.advance(), OutgoingTransfer::Step::kFlush);
  EXPECT_EQ(t.phase, CommitPhase::kFlushing);
  EXPECT_EQ(t.advance(), OutgoingTransfer::Step::kWait);  // flushing: one flush only
  t.error = transfer_error(TransferError::kPeerFailed, "gone");
  EXPECT_EQ(t.advance(), OutgoingTransfer::Step::kFail);
}

TEST(OutgoingTransfer, OnlyUncommittedTransfersGoStale) {
  OutgoingTransfer t(descriptor(4));
  EXPECT_FALSE(t.stale(1000 + 10000, 10000));
  EXPECT_TRUE(t.stale(1001 + 10000, 10000));
  t.rows_put(0, std::vector<uint32_t>(4, 1), 4);
  ASSERT_TRUE(t.begin_commit(4, "req", 9, true).ok());
  EXPECT_FALSE(t.stale(1001 + 10000, 10000));
}

TEST(EndedTransfers, RemembersTheFirstReasonForTheNewestOnes) {
  EndedTransfers e(2);
  EXPECT_TRUE(e.status(1).ok());
  e.remember(1, transfer_error(TransferError::kAborted, "a"));
  e.remember(1, transfer_error(TransferError::kTimeout, "b"));
  EXPECT_EQ(transfer_error_of(e.status(1)), TransferError::kAborted);
  e.remember(2, transfer_error(TransferError::kAborted, "c"));
  e.remember(3, transfer_error(TransferError::kAborted, "d"));
  EXPECT_TRUE(e.status(1).ok());
  EXPECT_FALSE(e.status(3).ok());
}

TEST(Waiter, HandsOverTheFirstResultOrTimesOut) {
  Waiter w;
  Status out;
  EXPECT_FALSE(w.wait(TransferClock::now() + milliseconds(1), out));
  std::thread t([&] {
    w.set(transfer_error(TransferError::kAborted, "first"));
    w.set(Status::Ok());
  });
  EXPECT_TRUE(w.wait(TransferClock::now() + milliseconds(5000), out));
  t.join();
  EXPECT_EQ(transfer_error_of(out), TransferError::kAborted);
}

}  // namespace
}  // namespace yoco::transfer_detail
