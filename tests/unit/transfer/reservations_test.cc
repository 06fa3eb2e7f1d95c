// The decode side's reservation table alone (transfer/reservations.*): control messages in,
// acknowledgements and phases out, over an in-memory pool. No transport, no threads but the
// caller's: each case runs in well under a millisecond. The same rules end to end over UCX are
// in tests/unit/transfer_test.cc.
#include "transfer/reservations.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "common/checksum.h"
#include "handoff/state_blob.h"

namespace yoco::transfer_detail {
namespace {

using Clock = TransferClock;
using std::chrono::milliseconds;

constexpr uint64_t kFp = 0x5eed5eed12345678ull;
constexpr int kBlockSize = 4, kKvDim = 4, kBlocks = 16;

// A pool of kBlocks blocks handed out lowest id first (so a fresh reservation is contiguous).
class TestPool final : public KvBlockPool {
 public:
  TestPool() : k_(kBlocks * kBlockSize * kKvDim), v_(k_.size()), held_(kBlocks, 0) {}
  int block_size() const override { return kBlockSize; }
  int row_floats() const override { return kKvDim; }
  int total_blocks() const override { return kBlocks; }
  float* k_base() override { return k_.data(); }
  float* v_base() override { return v_.data(); }
  Result<std::vector<int32_t>> allocate_blocks(int64_t rows) override {
    const int64_t n = (rows + kBlockSize - 1) / kBlockSize;
    std::vector<int32_t> out;
    for (int32_t b = 0; b < kBlocks && static_cast<int64_t>(out.size()) < n; ++b)
      if (held_[b] == 0) out.push_back(b);
    if (static_cast<int64_t>(out.size()) < n) return Status(StatusCode::kResourceExhausted, "pool full");
    for (int32_t b : out) ++held_[b];
    return out;
  }
  void release_blocks(std::span<const int32_t> blocks) override {
    for (int32_t b : blocks) --held_[b];
  }
  int free_blocks() const { return static_cast<int>(std::count(held_.begin(), held_.end(), 0)); }

 private:
  std::vector<float> k_, v_;
  std::vector<int> held_;
};

StateShape shape() {
  StateShape s;
  s.kv_dim = kKvDim;
  s.dim = 4;
  s.n_loops = 1;
  s.n_self_layers = 1;
  s.n_self_heads = 1;
  s.self_head_dim = 2;
  return s;
}

std::vector<uint8_t> state_blob(int64_t position) {
  StateBlobHeader h;
  h.fingerprint = kFp;
  h.position = position;
  h.shape = shape();
  h.has_last_hidden = true;
  StateBlobWriter w(h);
  const float retention[4] = {1, 2, 3, 4}, hidden[4] = {5, 6, 7, 8};
  w.put_retention(retention);
  w.put_last_hidden(hidden);
  return w.finish();
}

ReservationTableOptions options() {
  ReservationTableOptions o;
  o.fingerprint = kFp;
  o.state_shape = shape();
  o.max_rows = kBlocks * kBlockSize;
  return o;
}

TransferError reason(const Status& st) { return st.ok() ? TransferError::kNone : transfer_error_of(st); }
int64_t refused(const ReservationTable& t, TransferRefusal r) {
  return t.metrics().snapshot().refused[static_cast<int>(r)];
}

constexpr ReplyTo kReply = 0x1234;

// A sender's side of one reservation: the messages it would send, built from the descriptor.
struct Sender {
  ReservationDescriptor d;
  std::vector<uint8_t> blob;

  RowsMsg rows(int which, int64_t row, int64_t n) const { return {d.reservation_id, d.secret, uint8_t(which), row, n}; }
  std::vector<float> data(int64_t n) const {
    std::vector<float> x(n * kKvDim);
    std::iota(x.begin(), x.end(), 1.0f);
    return x;
  }
  StateMsg state() const { return {d.reservation_id, d.secret, blob.size(), crc32c(blob.data(), blob.size())}; }
  CommitMsg commit() const {
    CommitMsg m;
    m.reservation_id = d.reservation_id;
    m.secret = d.secret;
    m.request_id = d.request_id;
    m.fingerprint = kFp;
    m.rows_written = d.rows;
    m.state_bytes = blob.size();
    m.state_crc = crc32c(blob.data(), blob.size());
    m.has_rows_crc = false;
    return m;
  }
  AbortMsg abort() const { return {d.reservation_id, d.secret, TransferError::kAborted, "gave up"}; }
};

class Reservations : public ::testing::Test {
 protected:
  Sender reserve(int64_t rows, milliseconds lease = milliseconds(60000)) {
    auto d = table.reserve("req-1", rows, Clock::now() + lease, {});
    YOCO_CHECK(d.ok());
    return Sender{*d, state_blob(rows)};
  }
  // Every row as eager messages (K and V) and the state inline: what a whole transfer sends.
  void send_all(const Sender& s) {
    for (int which = 0; which < 2; ++which) {
      const auto x = s.data(s.d.rows - s.d.resident_rows);
      EXPECT_TRUE(table
                      .rows_landed(s.rows(which, s.d.resident_rows, s.d.rows - s.d.resident_rows), x.data(),
                                   x.size() * sizeof(float))
                      .empty());
    }
    Acks acks;
    ASSERT_EQ(table.state_announced(s.state(), s.blob.size(), true, 7, acks),
              ReservationTable::StateAdmission::kInline);
    EXPECT_TRUE(table.state_arrived(s.state(), s.blob, "").empty());
  }
  Result<CommittedSequence> claim(const Sender& s) { return table.wait_committed(s.d.reservation_id, Clock::now()); }

  TestPool pool;
  ReservationTable table{pool, options()};
};

TEST_F(Reservations, AWholeTransferIsAdmittedAndHandedOverOnce) {
  const Sender s = reserve(6);
  EXPECT_EQ(pool.free_blocks(), kBlocks - 2);
  send_all(s);
  const Acks acks = table.commit(s.commit(), kReply);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].to, kReply);
  EXPECT_TRUE(acks[0].status.ok()) << acks[0].status.to_string();
  auto c = claim(s);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rows, 6);
  EXPECT_EQ(c->blocks, s.d.blocks);
  EXPECT_EQ(c->state_blob, s.blob);
  EXPECT_EQ(pool.free_blocks(), kBlocks - 2);  // the blocks are the claimant's now
  // A replay after the hand-over names no reservation.
  const Acks again = table.commit(s.commit(), kReply);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(reason(again[0].status), TransferError::kUnknownReservation);
  EXPECT_EQ(refused(table, TransferRefusal::kReplay), 1);
}

TEST_F(Reservations, ASecondCommitOfACommittedReservationIsAReplay) {
  const Sender s = reserve(4);
  send_all(s);
  ASSERT_TRUE(table.commit(s.commit(), kReply)[0].status.ok());
  const Acks again = table.commit(s.commit(), kReply);
  EXPECT_EQ(reason(again[0].status), TransferError::kAlreadyCommitted);
  EXPECT_EQ(refused(table, TransferRefusal::kReplay), 1);
}

TEST_F(Reservations, MessagesWithoutTheSecretChangeNothing) {
  const Sender s = reserve(4);
  Sender forged = s;
  forged.d.secret[0] ^= 1;
  EXPECT_TRUE(table.abort(forged.abort()).empty());
  EXPECT_TRUE(table.begin(BeginMsg{forged.d.reservation_id, forged.d.secret, kFp + 1}, 3).empty());
  const auto x = forged.data(4);
  EXPECT_TRUE(table.rows_landed(forged.rows(0, 0, 4), x.data(), x.size() * 4).empty());
  Acks acks;
  EXPECT_EQ(table.state_announced(forged.state(), s.blob.size(), true, 3, acks),
            ReservationTable::StateAdmission::kRefused);
  int failed = 0;
  EXPECT_EQ(table.connection_failed(3, "gone", &failed).size(), 0u);
  EXPECT_EQ(failed, 0);
  const Acks c = table.commit(forged.commit(), kReply);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(reason(c[0].status), TransferError::kInvalid);
  EXPECT_EQ(refused(table, TransferRefusal::kBadSecret), 5);
  // Still open: the real sender's transfer goes through.
  send_all(s);
  EXPECT_TRUE(table.commit(s.commit(), kReply)[0].status.ok());
}

TEST_F(Reservations, RowsOutsideTheReservationFailItAndWriteNothing) {
  const Sender s = reserve(6);
  const auto x = s.data(4);
  EXPECT_EQ(table.rows_landed(s.rows(0, 4, 4), x.data(), x.size() * 4).size(), 0u);  // rows 4..7 of 6
  EXPECT_EQ(refused(table, TransferRefusal::kOutOfRange), 1);
  EXPECT_EQ(pool.free_blocks(), kBlocks);
  EXPECT_TRUE(
      std::all_of(pool.k_base(), pool.k_base() + kBlocks * kBlockSize * kKvDim, [](float f) { return f == 0; }));
  auto c = claim(s);
  EXPECT_EQ(reason(c.status()), TransferError::kInvalid);
}

TEST_F(Reservations, RowsAcrossBlocksThatAreNotAdjacentAreRefused) {
  const Sender hole = reserve(4);   // block 0
  const Sender other = reserve(4);  // block 1
  table.cancel(hole.d.reservation_id);
  const Sender s = reserve(8);  // blocks 0 and 2: not one run
  ASSERT_EQ(s.d.blocks, (std::vector<int32_t>{0, 2}));
  Acks acks;
  EXPECT_EQ(table.rows_announced(s.rows(1, 0, 8), 8 * kKvDim * 4, acks), nullptr);
  EXPECT_EQ(reason(claim(s).status()), TransferError::kInvalid);
  EXPECT_NE(table.rows_announced(other.rows(0, 0, 4), 4 * kKvDim * 4, acks), nullptr);
}

TEST_F(Reservations, ACommitWaitsForRowsStillArrivingThenAdmits) {
  const Sender s = reserve(4);
  Acks acks;
  float* k = table.rows_announced(s.rows(0, 0, 4), 4 * kKvDim * 4, acks);
  float* v = table.rows_announced(s.rows(1, 0, 4), 4 * kKvDim * 4, acks);
  ASSERT_NE(k, nullptr);
  ASSERT_NE(v, nullptr);
  ASSERT_EQ(table.state_announced(s.state(), s.blob.size(), true, 0, acks), ReservationTable::StateAdmission::kInline);
  EXPECT_TRUE(table.state_arrived(s.state(), s.blob, "").empty());
  EXPECT_TRUE(table.commit(s.commit(), kReply).empty());  // deferred: rows on the wire
  EXPECT_TRUE(table.rows_arrived(s.rows(0, 0, 4), "").empty());
  const Acks done = table.rows_arrived(s.rows(1, 0, 4), "");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].to, kReply);
  EXPECT_TRUE(done[0].status.ok()) << done[0].status.to_string();
}

TEST_F(Reservations, ACommitMissingARowIsRefused) {
  const Sender s = reserve(4);
  Acks acks;
  ASSERT_NE(table.rows_announced(s.rows(0, 0, 4), 4 * kKvDim * 4, acks), nullptr);
  EXPECT_TRUE(table.rows_arrived(s.rows(0, 0, 4), "").empty());  // K only
  ASSERT_EQ(table.state_announced(s.state(), s.blob.size(), true, 0, acks), ReservationTable::StateAdmission::kInline);
  EXPECT_TRUE(table.state_arrived(s.state(), s.blob, "").empty());
  const Acks c = table.commit(s.commit(), kReply);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(reason(c[0].status), TransferError::kRowsIncomplete);
}

TEST_F(Reservations, BlocksOfAFailedReservationReturnOnlyAfterItsReceivesEnd) {
  const Sender s = reserve(4);
  Acks acks;
  ASSERT_NE(table.rows_announced(s.rows(0, 0, 4), 4 * kKvDim * 4, acks), nullptr);
  EXPECT_TRUE(table.abort(s.abort()).empty());
  EXPECT_EQ(reason(claim(s).status()), TransferError::kAborted);
  EXPECT_EQ(pool.free_blocks(), kBlocks - 1);  // a receive still writes into block 0
  EXPECT_TRUE(table.rows_arrived(s.rows(0, 0, 4), "").empty());
  EXPECT_EQ(pool.free_blocks(), kBlocks);
}

TEST_F(Reservations, ALeaseThatEndsFailsTheReservationAndAnswersItsWaitingCommit) {
  const Sender s = reserve(4, milliseconds(50));
  Acks acks;
  ASSERT_NE(table.rows_announced(s.rows(0, 0, 4), 4 * kKvDim * 4, acks), nullptr);
  EXPECT_TRUE(table.commit(s.commit(), kReply).empty());  // deferred
  EXPECT_TRUE(table.expire(Clock::now()).empty());        // not yet
  const Acks expired = table.expire(Clock::now() + milliseconds(100));
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].to, kReply);
  EXPECT_EQ(reason(expired[0].status), TransferError::kLeaseExpired);
  EXPECT_EQ(reason(claim(s).status()), TransferError::kLeaseExpired);
  EXPECT_EQ(table.metrics().snapshot().failures, 1);
}

TEST_F(Reservations, ACancelAnswersNoCommitAndFreesTheBlocks) {
  const Sender s = reserve(4);
  table.cancel(s.d.reservation_id);
  EXPECT_EQ(pool.free_blocks(), kBlocks);
  const Acks c = table.commit(s.commit(), kReply);
  EXPECT_EQ(reason(c[0].status), TransferError::kCancelled);
}

TEST_F(Reservations, CommitChecksFingerprintRequestRowsAndState) {
  auto refused_for = [&](auto mutate) {
    const Sender s = reserve(4);
    send_all(s);
    CommitMsg m = s.commit();
    mutate(m);
    const Acks c = table.commit(m, kReply);
    EXPECT_EQ(pool.free_blocks(), kBlocks);
    return c.empty() ? TransferError::kNone : reason(c[0].status);
  };
  EXPECT_EQ(refused_for([](CommitMsg& m) { m.fingerprint ^= 1; }), TransferError::kFingerprintMismatch);
  EXPECT_EQ(refused_for([](CommitMsg& m) { m.request_id = "other"; }), TransferError::kRequestMismatch);
  EXPECT_EQ(refused_for([](CommitMsg& m) { m.rows_written = 3; }), TransferError::kRowCountMismatch);
  EXPECT_EQ(refused_for([](CommitMsg& m) { m.state_crc ^= 1; }), TransferError::kBadChecksum);
  EXPECT_EQ(refused_for([](CommitMsg& m) {
              m.has_rows_crc = true;
              m.rows_crc = 42;
            }),
            TransferError::kBadChecksum);
}

TEST_F(Reservations, AStateBlobForAnotherPositionIsRefused) {
  Sender s = reserve(4);
  s.blob = state_blob(5);
  send_all(s);
  EXPECT_EQ(reason(table.commit(s.commit(), kReply)[0].status), TransferError::kBadState);
}

TEST_F(Reservations, ASecondStateBlobFailsTheReservation) {
  const Sender s = reserve(4);
  send_all(s);
  Acks acks;
  EXPECT_EQ(table.state_announced(s.state(), s.blob.size(), true, 0, acks), ReservationTable::StateAdmission::kRefused);
  EXPECT_EQ(reason(claim(s).status()), TransferError::kInvalid);
}

TEST_F(Reservations, ADeadConnectionFailsTheReservationsItWrote) {
  const Sender s = reserve(4), t = reserve(4);
  EXPECT_TRUE(table.begin(BeginMsg{s.d.reservation_id, s.d.secret, kFp}, 9).empty());
  int failed = 0;
  table.connection_failed(9, "peer gone", &failed);
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(reason(claim(s).status()), TransferError::kPeerFailed);
  EXPECT_EQ(reason(claim(t).status()), TransferError::kTimeout);  // still open
}

TEST_F(Reservations, ResidentRowsAreNeitherWrittenNorCheckedButCount) {
  auto held = pool.allocate_blocks(4);
  ASSERT_TRUE(held.ok());
  auto d = table.reserve("req-r", 8, Clock::now() + milliseconds(60000), *held);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->resident_rows, 4);
  const Sender s{*d, state_blob(8)};
  Acks acks;
  EXPECT_EQ(table.rows_announced(s.rows(0, 0, 4), 4 * kKvDim * 4, acks), nullptr);  // below resident
  EXPECT_EQ(reason(claim(s).status()), TransferError::kInvalid);

  auto held2 = pool.allocate_blocks(4);  // the failed reservation gave back the caller's hold too
  ASSERT_TRUE(held2.ok());
  auto d2 = table.reserve("req-r", 8, Clock::now() + milliseconds(60000), *held2);
  ASSERT_TRUE(d2.ok());
  const Sender s2{*d2, state_blob(8)};
  send_all(s2);
  EXPECT_TRUE(table.commit(s2.commit(), kReply)[0].status.ok());
}

TEST_F(Reservations, FailedReservationsAreRememberedUpToTheTombstoneLimit) {
  ReservationTableOptions o = options();
  o.max_tombstones = 2;
  ReservationTable small(pool, o);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    auto d = small.reserve("r", 4, Clock::now() + milliseconds(60000), {});
    ASSERT_TRUE(d.ok());
    ids.push_back(d->reservation_id);
    small.cancel(d->reservation_id);
  }
  EXPECT_EQ(reason(small.wait_committed(ids[0], Clock::now()).status()), TransferError::kUnknownReservation);
  EXPECT_EQ(reason(small.wait_committed(ids[2], Clock::now()).status()), TransferError::kCancelled);
}

TEST_F(Reservations, ReserveRefusesBadArgumentsAndAFullPool) {
  const auto lease = Clock::now() + milliseconds(60000);
  EXPECT_EQ(reason(table.reserve("", 4, lease, {}).status()), TransferError::kInvalid);
  EXPECT_EQ(reason(table.reserve("r", 0, lease, {}).status()), TransferError::kInvalid);
  EXPECT_EQ(reason(table.reserve("r", kBlocks * kBlockSize + 1, lease, {}).status()), TransferError::kInvalid);
  EXPECT_EQ(reason(table.reserve("r", 4, Clock::now() - milliseconds(1), {}).status()), TransferError::kInvalid);
  ASSERT_TRUE(table.reserve("r", kBlocks * kBlockSize, lease, {}).ok());
  EXPECT_FALSE(table.reserve("r", 1, lease, {}).ok());
}

TEST(ReservationFacts, TheLeaseCrossesClocksBothWays) {
  ReservationDescriptor d;
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  d.lease_deadline_unix_ms = lease_deadline_unix_ms(deadline);
  EXPECT_FALSE(lease_over(d));
  EXPECT_LT(std::chrono::abs(lease_deadline_steady(d) - deadline), milliseconds(5));
  d.lease_deadline_unix_ms = lease_deadline_unix_ms(std::chrono::steady_clock::now() - milliseconds(1));
  EXPECT_TRUE(lease_over(d));
  EXPECT_EQ(kv_row_bytes(kKvDim), 2 * kKvDim * 4);
}

}  // namespace
}  // namespace yoco::transfer_detail
