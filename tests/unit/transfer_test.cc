// The KV transfer engine: descriptor and message formats, the run planner, and the UCX engine
// end to end — in one process (two UCX contexts) and across two processes over tcp and shared
// memory, with a sender killed mid-transfer, every rejection reason, and leases that expire.
// Servers listen on 127.0.0.1 on ports picked at run time; every wait has a deadline, and
// alarm() ends a stuck test (its peer processes die with it: PR_SET_PDEATHSIG).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <tuple>

#include "common/checksum.h"
#include "handoff/bytes.h"
#include "model/kv_pool.h"
#include "model/random_model.h"
#include "tests/transfer/transfer_data.h"
#include "transfer/messages.h"
#include "transfer/transport.h"
#include "transfer/ucx_transport.h"

extern char** environ;

namespace yoco {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = TransferClock;

constexpr uint64_t kFp = 0xfeedbeef12345678ull;

Clock::time_point in(milliseconds d) { return Clock::now() + d; }

// Rows land in the pool on the receiver's progress thread, which then takes the receiver's lock
// to record them. A test that looks into the pool directly takes that lock first (a zero-wait
// wait_committed on an open reservation changes nothing), so the rows written before are ordered
// before its read (what TSan checks: sleeping is no ordering).
void sync_with_receiver(KvReceiver& r, uint64_t reservation_id) {
  (void)r.wait_committed(reservation_id, in(milliseconds(0)));
}

// The transports of one engine: UCX_TLS for this engine only.
const char* kTcp = "tcp";

// How two processes talk. Shared memory: UCX 1.13 selects no shared-memory lane for endpoints
// with peer error handling, so those run without it (a dead sender is still seen through the
// connection manager, else by its lease), and the listener's connection manager needs tcp on
// the loopback device.
struct Transport {
  const char* name;
  const char* tls;
  bool peer_errors;
  UcxRowPath path;
};
const Transport kTcpPull{"tcp_pull", "tcp", true, UcxRowPath::kPull};
const Transport kTcpPush{"tcp_push", "tcp", true, UcxRowPath::kPush};
const Transport kShmPull{"shm_pull", "posix,sysv,cma,self,tcp", false, UcxRowPath::kPull};
const Transport kShmPush{"shm_push", "posix,sysv,cma,self,tcp", false, UcxRowPath::kPush};

ModelConfig preset(const std::string& name) {
  auto c = find_preset(name);
  YOCO_CHECK(c.ok());
  return c.value();
}

ReservationDescriptor sample_descriptor() {
  ReservationDescriptor d;
  d.reservation_id = 77;
  d.request_id = "req-77";
  d.fingerprint = kFp;
  d.kv_dim = 8;
  d.block_size = 4;
  d.pool_blocks = 16;
  d.rows = 10;
  d.blocks = {5, 6, 2};
  d.address = "127.0.0.1:4242";
  d.k_base = 0x10000;
  d.v_base = 0x90000;
  d.k_rkey = {1, 2, 3};
  d.v_rkey = {4, 5};
  d.lease_deadline_unix_ms = 1700000000000;
  return d;
}

// ---- formats ----------------------------------------------------------------------------

TEST(TransferDescriptor, RoundTripsAndRejectsEveryTamperedByte) {
  const ReservationDescriptor d = sample_descriptor();
  const auto bytes = d.serialize();
  auto p = ReservationDescriptor::parse(bytes);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->serialize(), bytes);
  EXPECT_EQ(p->blocks, d.blocks);
  EXPECT_EQ(p->request_id, d.request_id);
  EXPECT_EQ(p->k_rkey, d.k_rkey);
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto t = bytes;
    t[i] ^= 0x10;
    EXPECT_FALSE(ReservationDescriptor::parse(t).ok()) << "byte " << i;
  }
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(ReservationDescriptor::parse(std::span<const uint8_t>(bytes.data(), n)).ok()) << n;
  auto longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(ReservationDescriptor::parse(longer).ok());
}

TEST(TransferDescriptor, ValidatesFieldsEvenWithAGoodChecksum) {
  auto check = [](auto mutate, const std::string& field) {
    ReservationDescriptor d = sample_descriptor();
    mutate(d);
    auto p = ReservationDescriptor::parse(d.serialize());
    ASSERT_FALSE(p.ok()) << field;
    EXPECT_NE(p.status().message().find(field), std::string::npos) << p.status().message();
  };
  check([](auto& d) { d.blocks = {5, 5, 2}; }, "duplicate block");
  check([](auto& d) { d.blocks = {5, 16, 2}; }, "block id out of range");
  check([](auto& d) { d.blocks = {5, 6}; }, "blocks");
  check([](auto& d) { d.rows = 0; }, "rows");
  check([](auto& d) { d.kv_dim = 0; }, "kv_dim");
  check([](auto& d) { d.address = "nohost"; }, "address");
  check([](auto& d) { d.address = "h:70000"; }, "address");
  check([](auto& d) { d.k_rkey.clear(); }, "k_rkey");
  check([](auto& d) { d.request_id.clear(); }, "request_id");
  check([](auto& d) { d.k_base = ~0ull - 10; }, "base address");
}

TEST(TransferDescriptor, ResidentRowsTravelAsVersion3AndVersion2StaysAsItWas) {
  ReservationDescriptor d = sample_descriptor();  // block_size 4, rows 10
  const auto v2 = d.serialize();
  EXPECT_EQ(v2[8], 2);  // no resident rows: byte for byte the version 2 form
  d.resident_rows = 8;
  const auto v3 = d.serialize();
  EXPECT_EQ(v3[8], 3);
  EXPECT_EQ(v3.size(), v2.size() + 8);
  auto p = ReservationDescriptor::parse(v3);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->resident_rows, 8);
  EXPECT_EQ(p->serialize(), v3);
  EXPECT_EQ(ReservationDescriptor::parse(v2)->resident_rows, 0);
  for (int64_t bad : {int64_t{3}, int64_t{12}}) {
    d.resident_rows = bad;
    auto q = ReservationDescriptor::parse(d.serialize());
    ASSERT_FALSE(q.ok()) << bad;
    EXPECT_NE(q.status().message().find("resident_rows"), std::string::npos) << q.status().message();
  }
}

TEST(TransferDescriptor, A16BitPoolTravelsAsVersion4) {
  ReservationDescriptor d = sample_descriptor();
  const auto v2 = d.serialize();
  d.kv_dtype = KvDType::kBF16;
  const auto v4 = d.serialize();
  EXPECT_EQ(v4[8], 4);
  EXPECT_EQ(v4.size(), v2.size() + 12);  // resident_rows (0 here) and the dtype
  auto p = ReservationDescriptor::parse(v4);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->kv_dtype, KvDType::kBF16);
  EXPECT_EQ(p->resident_rows, 0);
  EXPECT_EQ(p->row_bytes(), d.kv_dim * 2);
  EXPECT_EQ(p->serialize(), v4);
  d.resident_rows = 8;
  auto q = ReservationDescriptor::parse(d.serialize());
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(q->resident_rows, 8);
  EXPECT_EQ(q->kv_dtype, KvDType::kBF16);
  // An fp32 descriptor is never written as version 4; a version 4 naming f32 or an unknown dtype is refused.
  EXPECT_EQ(ReservationDescriptor::parse(v2)->kv_dtype, KvDType::kF32);
  for (uint32_t dtype : {0u, 7u}) {
    auto bytes = v4;
    store_le<uint32_t>(bytes.data() + bytes.size() - 8, dtype);
    store_le<uint32_t>(bytes.data() + bytes.size() - 4, crc32c(bytes.data(), bytes.size() - 4));
    auto r = ReservationDescriptor::parse(bytes);
    ASSERT_FALSE(r.ok()) << dtype;
    EXPECT_NE(r.status().message().find("kv_dtype"), std::string::npos) << r.status().message();
  }
}

TEST(TransferDescriptor, RunsAreWholeBlocksMergedAcrossAdjacentIds) {
  ReservationDescriptor d = sample_descriptor();  // block_size 4, blocks {5, 6, 2}, rows 10
  const uint64_t rb = d.row_bytes();
  auto runs = d.contiguous_runs(0, 10);
  ASSERT_EQ(runs.size(), 2u);  // blocks 5 and 6 are adjacent in the pool: one run
  EXPECT_EQ(runs[0].row, 0);
  EXPECT_EQ(runs[0].rows, 8);
  EXPECT_EQ(runs[0].offset, 5 * 4 * rb);
  EXPECT_EQ(runs[1].row, 8);
  EXPECT_EQ(runs[1].rows, 2);
  EXPECT_EQ(runs[1].offset, 2 * 4 * rb);
  runs = d.contiguous_runs(3, 6);  // unaligned start, spans three blocks
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].row, 3);
  EXPECT_EQ(runs[0].rows, 5);
  EXPECT_EQ(runs[0].offset, (5 * 4 + 3) * rb);
  EXPECT_EQ(runs[1].rows, 1);
}

TEST(TransferMessages, RoundTripAndChecksum) {
  using namespace transfer_detail;
  CommitMsg c{42, {}, "req", kFp, 100, 999, 0xabcd, 0x1234};
  c.secret[3] = 0x5a;
  auto b = encode(c);
  auto back = decode_commit(b);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->rows_written, 100);
  EXPECT_EQ(back->request_id, "req");
  EXPECT_TRUE(secret_equal(back->secret, c.secret));
  EXPECT_EQ(peek_reservation_id(b), 42u);
  for (size_t i = 0; i < b.size(); ++i) {
    auto t = b;
    t[i] ^= 1;
    auto r = decode_commit(t);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(transfer_error_of(r.status()), TransferError::kBadChecksum) << i;
  }
  EXPECT_FALSE(decode_ack(b).ok());  // another kind
  auto a = decode_ack(encode(AckMsg{7, TransferError::kLeaseExpired, "[lease_expired] late"}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->reason, TransferError::kLeaseExpired);
}

TEST(TransferErrors, TagsRoundTrip) {
  Status st = transfer_error(TransferError::kRowCountMismatch, "3 != 4");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(transfer_error_of(st), TransferError::kRowCountMismatch);
  EXPECT_EQ(transfer_error_of(Status::Ok()), TransferError::kNone);
  EXPECT_EQ(transfer_error_of(invalid_argument("x")), TransferError::kInvalid);
}

// ---- engine fixtures --------------------------------------------------------------------

// A decode-side pool + receiver and a prefill-side sender in this process.
struct Engines {
  ModelConfig cfg;
  std::unique_ptr<KvPool> pool;
  std::unique_ptr<KvReceiver> receiver;
  std::unique_ptr<KvSender> sender;

  // verify_threads > 1: the receiver checks the rows' checksum on that many threads, whatever the size.
  Engines(const std::string& preset_name, const char* tls, UcxRowPath path = UcxRowPath::kPull, int blocks = 32,
          uint64_t sender_fp = kFp, int verify_threads = 1, KvDType kv_dtype = KvDType::kF32)
      : cfg(preset(preset_name)) {
    pool = std::move(KvPool::create(blocks, 32, cfg.kv_dim(), kv_dtype).value());
    UcxReceiverOptions ro;
    ro.listen_host = "127.0.0.1";
    ro.transports = tls;
    ro.allow_push = path == UcxRowPath::kPush;
    ro.verify_threads = verify_threads;
    if (verify_threads > 1) ro.verify_bytes_per_thread = 1;
    auto r = test::make_receiver(*pool, cfg, kFp, ro);
    YOCO_CHECK(r.ok());
    receiver = std::move(r.value());
    sender = make_sender(sender_fp, tls, path);
  }
  static std::unique_ptr<KvSender> make_sender(uint64_t fp, const char* tls, UcxRowPath path = UcxRowPath::kPull) {
    UcxSenderOptions so;
    so.fingerprint = fp;
    so.transports = tls;
    so.row_path = path;
    so.op_timeout = seconds(10);
    auto s = make_ucx_sender(so);
    YOCO_CHECK(s.ok());
    return std::move(s.value());
  }
  int kv_dim() const { return cfg.kv_dim(); }
};

// Puts rows [begin, end) of the deterministic source with `seed`.
Status put_range(KvSender& s, const ReservationDescriptor& d, uint64_t seed, int64_t begin, int64_t end) {
  auto k = test::kv_rows(seed, 0, begin, end - begin, d.kv_dim);
  auto v = test::kv_rows(seed, 1, begin, end - begin, d.kv_dim);
  return s.put_rows(d, begin, static_cast<int>(end - begin), k.data(), v.data());
}

// Rows lent to put_rows_in_place: when the sender drops its hold they are poisoned (NaN), so a
// hold dropped before the rows were read would corrupt what lands (and fail the commit's check).
struct LentRows {
  std::vector<float> k, v;
  std::atomic<bool> released{false};
};
std::shared_ptr<const void> lend(const std::shared_ptr<LentRows>& rows) {
  return std::shared_ptr<const void>(rows.get(), [rows](const void*) {
    std::fill(rows->k.begin(), rows->k.end(), std::nanf(""));
    std::fill(rows->v.begin(), rows->v.end(), std::nanf(""));
    rows->released = true;
  });
}

// put_range without the staging copy; the returned rows say when the sender let them go.
std::shared_ptr<LentRows> put_range_in_place(KvSender& s, const ReservationDescriptor& d, uint64_t seed, int64_t begin,
                                             int64_t end, Status* st) {
  auto rows = std::make_shared<LentRows>();
  rows->k = test::kv_rows(seed, 0, begin, end - begin, d.kv_dim);
  rows->v = test::kv_rows(seed, 1, begin, end - begin, d.kv_dim);
  *st = s.put_rows_in_place(d, begin, static_cast<int>(end - begin), rows->k.data(), rows->v.data(), lend(rows));
  return rows;
}

bool released_by(const LentRows& rows, Clock::time_point deadline) {
  while (!rows.released && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(2));
  return rows.released;
}

// The admitted sequence holds exactly the source rows and a state that restores.
void expect_sequence(const CommittedSequence& c, const ModelConfig& cfg, uint64_t seed, int64_t rows, KvPool& pool) {
  const int kv_dim = cfg.kv_dim();
  ASSERT_EQ(c.rows, rows);
  const SequenceState st = test::admitted_state(c, cfg, kFp, pool);
  ASSERT_EQ(st.position, rows);
  ASSERT_GE(st.pages->capacity(), rows);
  auto k = test::kv_rows(seed, 0, 0, rows, kv_dim);
  auto v = test::kv_rows(seed, 1, 0, rows, kv_dim);
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_EQ(0, std::memcmp(st.k_row(r, kv_dim), k.data() + r * kv_dim, kv_dim * 4)) << "K row " << r;
    ASSERT_EQ(0, std::memcmp(st.v_row(r, kv_dim), v.data() + r * kv_dim, kv_dim * 4)) << "V row " << r;
  }
  StateBlobOptions opt;
  opt.include_kv = false;
  EXPECT_EQ(serialize_state(st, cfg, kFp, opt), test::test_state_blob(cfg, kFp, seed, rows));
}

class TransferTest : public ::testing::Test {
 protected:
  void SetUp() override { alarm(120); }
  void TearDown() override { alarm(0); }
};

// ---- 1. one process, two UCX contexts, tcp ----------------------------------------------

class TransferInProcess : public TransferTest,
                          public ::testing::WithParamInterface<std::tuple<std::string, UcxRowPath>> {};

TEST_P(TransferInProcess, PipelinedChunksLandInTheReservedBlocks) {
  Engines e(std::get<0>(GetParam()), kTcp, std::get<1>(GetParam()));
  // Fragment the pool so the block table is out of order and partly adjacent.
  KvPages filler = e.pool->new_pages(), filler2 = e.pool->new_pages();
  ASSERT_TRUE(e.pool->reserve(filler, 3 * 32).ok());
  ASSERT_TRUE(e.pool->reserve(filler2, 32).ok());
  e.pool->release(filler);
  const int64_t rows = 203;  // 7 blocks of 32, the last one partial
  auto desc = e.receiver->reserve("req-1", rows, in(seconds(30)));
  ASSERT_TRUE(desc.ok()) << desc.status().to_string();
  EXPECT_EQ(e.receiver->in_flight(), 1);
  // The descriptor travels as bytes (later inside an RPC).
  auto d = ReservationDescriptor::parse(desc->serialize());
  ASSERT_TRUE(d.ok());

  const uint64_t seed = 11;
  for (auto [b, en] : {std::pair<int64_t, int64_t>{0, 70}, {70, 141}, {141, 203}}) {  // not block-aligned
    Status st = put_range(*e.sender, *d, seed, b, en);
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  auto blob = test::test_state_blob(e.cfg, kFp, seed, rows);
  ASSERT_TRUE(e.sender->put_state(*d, blob).ok());
  Status st = e.sender->commit(*d, rows, in(seconds(20)));
  ASSERT_TRUE(st.ok()) << st.to_string();

  auto c = e.receiver->wait_committed(d->reservation_id, in(seconds(10)));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->request_id, "req-1");
  expect_sequence(*c, e.cfg, seed, rows, *e.pool);
  EXPECT_EQ(e.receiver->in_flight(), 0);
  EXPECT_EQ(e.sender->in_flight(), 0);
  const auto rm = e.receiver->metrics().snapshot(), sm = e.sender->metrics().snapshot();
  EXPECT_EQ(rm.transfers, 1);
  EXPECT_EQ(sm.transfers, 1);
  EXPECT_EQ(rm.failures, 0);
  EXPECT_EQ(sm.bytes, rows * e.kv_dim() * 8 + static_cast<int64_t>(blob.size()));
  EXPECT_EQ(rm.bytes, sm.bytes);
  EXPECT_GT(sm.seconds, 0);
  // Handed over once.
  EXPECT_EQ(transfer_error_of(e.receiver->wait_committed(d->reservation_id, in(milliseconds(10))).status()),
            TransferError::kUnknownReservation);

  e.pool->release_blocks(c->blocks);
  e.pool->release(filler2);
  EXPECT_EQ(e.pool->free_blocks(), e.pool->total_blocks());
}

// tiny-gret: a state blob small enough to go eagerly; small-swa: hundreds of KiB (rendezvous).
INSTANTIATE_TEST_SUITE_P(Presets, TransferInProcess,
                         ::testing::Combine(::testing::Values("tiny-gret", "small-swa"),
                                            ::testing::Values(UcxRowPath::kPull, UcxRowPath::kPush)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) +
                                           (std::get<1>(info.param) == UcxRowPath::kPull ? "_pull" : "_push");
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// ---- 16-bit K/V: a bf16 pool (docs/design.md, 16-bit K/V) ---------------------------------

class TransferInto16BitPool : public TransferTest, public ::testing::WithParamInterface<UcxRowPath> {};

TEST_P(TransferInto16BitPool, RowsLandRoundedAndChecksummedAsTheyLie) {
  Engines e("tiny-gret", kTcp, GetParam(), 32, kFp, 1, KvDType::kBF16);
  const int kv_dim = e.kv_dim();
  const int64_t rows = 150;
  auto desc = e.receiver->reserve("req-16", rows, in(seconds(30)));
  ASSERT_TRUE(desc.ok()) << desc.status().to_string();
  auto d = ReservationDescriptor::parse(desc->serialize());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->kv_dtype, KvDType::kBF16);
  const uint64_t seed = 5;
  ASSERT_TRUE(put_range(*e.sender, *d, seed, 0, 70).ok());
  Status st;
  auto lent = put_range_in_place(*e.sender, *d, seed, 70, rows, &st);  // staged: the pool takes bf16
  ASSERT_TRUE(st.ok()) << st.to_string();
  const auto blob = test::test_state_blob(e.cfg, kFp, seed, rows);
  ASSERT_TRUE(e.sender->put_state(*d, blob).ok());
  st = e.sender->commit(*d, rows, in(seconds(20)));
  ASSERT_TRUE(st.ok()) << st.to_string();
  auto c = e.receiver->wait_committed(d->reservation_id, in(seconds(10)));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const SequenceState got = test::admitted_state(*c, e.cfg, kFp, *e.pool);
  ASSERT_TRUE(got.kv16());
  const auto k = test::kv_rows(seed, 0, 0, rows, kv_dim), v = test::kv_rows(seed, 1, 0, rows, kv_dim);
  for (int64_t r = 0; r < rows; ++r)
    for (int i = 0; i < kv_dim; ++i) {
      ASSERT_EQ(got.k_row16(r)[i], f32_to_bf16(k[r * kv_dim + i])) << r << " " << i;
      ASSERT_EQ(got.v_row16(r)[i], f32_to_bf16(v[r * kv_dim + i])) << r << " " << i;
    }
  // Half the bytes of an fp32 transfer.
  EXPECT_EQ(e.sender->metrics().snapshot().bytes, rows * kv_dim * 4 + static_cast<int64_t>(blob.size()));
  EXPECT_EQ(e.receiver->metrics().snapshot().bytes, e.sender->metrics().snapshot().bytes);
  e.pool->release_blocks(c->blocks);

  // One changed bf16 value in the pool fails the commit's checksum.
  auto d2 = e.receiver->reserve("req-16b", 40, in(seconds(30)));
  ASSERT_TRUE(d2.ok());
  ASSERT_TRUE(put_range(*e.sender, *d2, seed, 0, 40).ok());
  ASSERT_TRUE(e.sender->put_state(*d2, test::test_state_blob(e.cfg, kFp, seed, 40)).ok());
  std::this_thread::sleep_for(milliseconds(100));
  sync_with_receiver(*e.receiver, d2->reservation_id);
  e.pool->k16_data()[(static_cast<int64_t>(d2->blocks[1]) * d2->block_size + 3) * kv_dim + 1] ^= 1;
  st = e.sender->commit(*d2, 40, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(st), TransferError::kBadChecksum) << st.to_string();
  EXPECT_FALSE(e.receiver->wait_committed(d2->reservation_id, in(seconds(10))).ok());
  EXPECT_EQ(e.pool->free_blocks(), e.pool->total_blocks());
}

INSTANTIATE_TEST_SUITE_P(Paths, TransferInto16BitPool, ::testing::Values(UcxRowPath::kPull, UcxRowPath::kPush),
                         [](const auto& info) { return info.param == UcxRowPath::kPull ? "pull" : "push"; });

TEST_F(TransferTest, SenderReusesItsEndpointAndReconnectsAfterTheReceiverRestarts) {
  ModelConfig cfg = preset("tiny-gret");
  auto pool = std::move(KvPool::create(16, 32, cfg.kv_dim()).value());
  auto sender = Engines::make_sender(kFp, kTcp);
  for (int round = 0; round < 3; ++round) {  // a new receiver (new port, new rkeys) each round
    UcxReceiverOptions ro;
    ro.listen_host = "127.0.0.1";
    ro.transports = kTcp;
    auto receiver = std::move(test::make_receiver(*pool, cfg, kFp, ro).value());
    for (int i = 0; i < 2; ++i) {
      auto d = receiver->reserve("r", 40, in(seconds(20)));
      ASSERT_TRUE(d.ok());
      ASSERT_TRUE(put_range(*sender, *d, round * 10 + i, 0, 40).ok());
      ASSERT_TRUE(sender->put_state(*d, test::test_state_blob(cfg, kFp, round * 10 + i, 40)).ok());
      Status st = sender->commit(*d, 40, in(seconds(20)));
      ASSERT_TRUE(st.ok()) << "round " << round << ": " << st.to_string();
      auto c = receiver->wait_committed(d->reservation_id, in(seconds(10)));
      ASSERT_TRUE(c.ok());
      expect_sequence(*c, cfg, round * 10 + i, 40, *pool);
      pool->release_blocks(c->blocks);
    }
  }
  EXPECT_EQ(pool->free_blocks(), pool->total_blocks());
}

TEST_F(TransferTest, ConcurrentTransfersFromSeveralThreads) {
  Engines e("tiny-gret", kTcp);
  constexpr int kThreads = 4, kEach = 3;
  std::vector<std::thread> threads;
  std::vector<Status> results(kThreads * kEach);
  std::vector<std::optional<CommittedSequence>> seqs(kThreads * kEach);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const int slot = t * kEach + i;
        const int64_t rows = 20 + 7 * slot;
        auto d = e.receiver->reserve("c" + std::to_string(slot), rows, in(seconds(30)));
        if (!d.ok()) {
          results[slot] = d.status();
          continue;
        }
        Status st = put_range(*e.sender, *d, slot, 0, rows / 2);
        if (st.ok()) st = put_range(*e.sender, *d, slot, rows / 2, rows);
        if (st.ok()) st = e.sender->put_state(*d, test::test_state_blob(e.cfg, kFp, slot, rows));
        if (st.ok()) st = e.sender->commit(*d, rows, in(seconds(20)));
        results[slot] = st;
        if (!st.ok()) continue;
        auto c = e.receiver->wait_committed(d->reservation_id, in(seconds(10)));
        if (c.ok()) seqs[slot] = std::move(c.value());
        else results[slot] = c.status();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int slot = 0; slot < kThreads * kEach; ++slot) {
    ASSERT_TRUE(results[slot].ok()) << slot << ": " << results[slot].to_string();
    ASSERT_TRUE(seqs[slot].has_value());
    expect_sequence(*seqs[slot], e.cfg, slot, 20 + 7 * slot, *e.pool);
    e.pool->release_blocks(seqs[slot]->blocks);
  }
  EXPECT_EQ(e.pool->free_blocks(), e.pool->total_blocks());
  EXPECT_EQ(e.receiver->metrics().snapshot().transfers, kThreads * kEach);
}

TEST_F(TransferTest, StagingBudgetHoldsPutRowsBack) {
  ModelConfig cfg = preset("small-gret");  // kv_dim 128: 1 KiB of K+V per row
  auto pool = std::move(KvPool::create(16, 32, cfg.kv_dim()).value());
  UcxReceiverOptions ro;
  ro.listen_host = "127.0.0.1";
  ro.transports = kTcp;
  auto receiver = std::move(test::make_receiver(*pool, cfg, kFp, ro).value());
  UcxSenderOptions so;
  so.fingerprint = kFp;
  so.transports = kTcp;
  so.max_staging_bytes = 16 * 1024;  // one 16-row chunk at a time
  auto sender = std::move(make_ucx_sender(so).value());
  const int64_t rows = 16 * 20;
  auto d = receiver->reserve("budget", rows, in(seconds(30)));
  ASSERT_TRUE(d.ok());
  for (int64_t r = 0; r < rows; r += 16) ASSERT_TRUE(put_range(*sender, *d, 9, r, r + 16).ok());
  ASSERT_TRUE(sender->put_state(*d, test::test_state_blob(cfg, kFp, 9, rows)).ok());
  ASSERT_TRUE(sender->commit(*d, rows, in(seconds(20))).ok());
  auto c = receiver->wait_committed(d->reservation_id, in(seconds(10)));
  ASSERT_TRUE(c.ok());
  expect_sequence(*c, cfg, 9, rows, *pool);
  pool->release_blocks(c->blocks);
}

// ---- 3. validation: every rejection has its reason, nothing is admitted, no block leaks ----

// How the validation tests put their rows: the row path, and pull with the rows lent in place
// (put_rows_in_place) to a receiver that checks them on several threads.
struct RowMode {
  UcxRowPath path = UcxRowPath::kPull;
  bool in_place = false;
  operator UcxRowPath() const { return path; }
};

class TransferValidation : public TransferTest, public ::testing::WithParamInterface<RowMode> {
 protected:
  Engines e{"tiny-gret", kTcp, GetParam(), 32, kFp, GetParam().in_place ? 3 : 1};
  const int64_t rows = 50;

  ReservationDescriptor reserve(milliseconds lease = seconds(30)) {
    auto d = e.receiver->reserve("req-v", rows, in(lease));
    YOCO_CHECK(d.ok());
    return *d;
  }
  void put_all(KvSender& s, const ReservationDescriptor& d, uint64_t seed = 3) {
    if (GetParam().in_place) {
      Status st;
      lent.push_back(put_range_in_place(s, d, seed, 0, 20, &st));
      ASSERT_TRUE(st.ok()) << st.to_string();
      lent.push_back(put_range_in_place(s, d, seed, 20, rows, &st));
      ASSERT_TRUE(st.ok()) << st.to_string();
      return;
    }
    ASSERT_TRUE(put_range(s, d, seed, 0, 20).ok());
    ASSERT_TRUE(put_range(s, d, seed, 20, rows).ok());
  }
  std::vector<std::shared_ptr<LentRows>> lent;  // in place: the rows put_all lent
  std::vector<uint8_t> blob(int64_t position = -1) {
    return test::test_state_blob(e.cfg, kFp, 3, position < 0 ? rows : position);
  }
  int64_t refused(TransferRefusal r) const { return e.receiver->metrics().snapshot().refused[static_cast<int>(r)]; }
  // The reservation failed with `want` on the decode side and its blocks went back.
  void expect_failed(const ReservationDescriptor& d, TransferError want) {
    auto c = e.receiver->wait_committed(d.reservation_id, in(seconds(10)));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(transfer_error_of(c.status()), want) << c.status().to_string();
    EXPECT_EQ(e.pool->free_blocks(), e.pool->total_blocks());
    EXPECT_EQ(e.receiver->in_flight(), 0);
    EXPECT_EQ(e.receiver->metrics().snapshot().transfers, 0);
  }
};

TEST_P(TransferValidation, SenderRefusesAnotherModelsReservationAndTheReceiverFreesIt) {
  auto other = Engines::make_sender(kFp + 1, kTcp, GetParam());
  auto d = reserve();
  auto k = test::kv_rows(1, 0, 0, rows, e.kv_dim());
  Status st = other->put_rows(d, 0, rows, k.data(), k.data());
  EXPECT_EQ(transfer_error_of(st), TransferError::kFingerprintMismatch) << st.to_string();
  expect_failed(d, TransferError::kFingerprintMismatch);  // the sender's abort reached the receiver
}

TEST_P(TransferValidation, ReceiverRejectsAForgedFingerprint) {
  auto other = Engines::make_sender(kFp + 1, kTcp, GetParam());
  auto d = reserve();
  ReservationDescriptor forged = d;
  forged.fingerprint = kFp + 1;  // passes the sender's own check
  put_all(*other, forged);
  ASSERT_TRUE(other->put_state(forged, test::test_state_blob(e.cfg, kFp + 1, 3, rows)).ok());
  Status st = other->commit(forged, rows, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(st), TransferError::kFingerprintMismatch) << st.to_string();
  expect_failed(d, TransferError::kFingerprintMismatch);
}

TEST_P(TransferValidation, WrongRowCountIsRejected) {
  auto d = reserve();
  put_all(*e.sender, d);
  ASSERT_TRUE(e.sender->put_state(d, blob(rows - 1)).ok());
  Status st = e.sender->commit(d, rows - 1, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(st), TransferError::kRowCountMismatch) << st.to_string();
  expect_failed(d, TransferError::kRowCountMismatch);
}

TEST_P(TransferValidation, UnwrittenRowsAreNeverCommitted) {
  auto d = reserve();
  ASSERT_TRUE(put_range(*e.sender, d, 3, 0, 20).ok());
  ASSERT_TRUE(put_range(*e.sender, d, 3, 21, rows).ok());  // row 20 missing
  ASSERT_TRUE(e.sender->put_state(d, blob()).ok());
  Status st = e.sender->commit(d, rows, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(st), TransferError::kRowsIncomplete) << st.to_string();
  e.sender->abort(d, "prefill gave up");
  expect_failed(d, TransferError::kAborted);
}

TEST_P(TransferValidation, ExpiredLeaseIsRejected) {
  auto d = reserve(milliseconds(400));
  put_all(*e.sender, d);
  ASSERT_TRUE(e.sender->put_state(d, blob()).ok());
  std::this_thread::sleep_for(milliseconds(600));
  Status st = e.sender->commit(d, rows, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(st), TransferError::kLeaseExpired) << st.to_string();
  // Past the lease the sender refuses to write into blocks that may belong to someone else.
  auto k = test::kv_rows(1, 0, 0, 1, e.kv_dim());
  EXPECT_EQ(transfer_error_of(e.sender->put_rows(d, 0, 1, k.data(), k.data())), TransferError::kLeaseExpired);
  expect_failed(d, TransferError::kLeaseExpired);
}

TEST_P(TransferValidation, CommitAfterAbortIsRejected) {
  auto d = reserve();
  put_all(*e.sender, d);
  ASSERT_TRUE(e.sender->put_state(d, blob()).ok());
  e.sender->abort(d, "client cancelled");
  Status st = e.sender->commit(d, rows, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(st), TransferError::kAborted) << st.to_string();
  // Another sender that still holds the descriptor gets the receiver's verdict.
  auto late = Engines::make_sender(kFp, kTcp, GetParam());
  // Wait for the abort to land, so the late commit cannot win the race.
  for (auto t = in(seconds(5)); e.receiver->in_flight() != 0 && Clock::now() < t;)
    std::this_thread::sleep_for(milliseconds(5));
  put_all(*late, d);
  ASSERT_TRUE(late->put_state(d, blob()).ok());
  st = late->commit(d, rows, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(st), TransferError::kAborted) << st.to_string();
  expect_failed(d, TransferError::kAborted);
}

TEST_P(TransferValidation, StateThatDoesNotRestoreIsRejected) {
  auto d = reserve();
  put_all(*e.sender, d);
  auto bad = blob();
  bad[40] ^= 0xff;  // the blob's own checksum fails in deserialize_state
  ASSERT_TRUE(e.sender->put_state(d, bad).ok());
  Status st = e.sender->commit(d, rows, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(st), TransferError::kBadState) << st.to_string();
  expect_failed(d, TransferError::kBadState);
}

TEST_P(TransferValidation, CommitWithoutStateIsRejected) {
  auto d = reserve();
  put_all(*e.sender, d);
  Status st = e.sender->commit(d, rows, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(st), TransferError::kMissingState) << st.to_string();
  expect_failed(d, TransferError::kMissingState);
}

TEST_P(TransferValidation, CorruptedRowsAreDetected) {
  auto d = reserve();
  put_all(*e.sender, d);
  ASSERT_TRUE(e.sender->put_state(d, blob()).ok());
  // Wait until the puts have surely landed (the commit below flushes them anyway), then corrupt
  // one value in the decode worker's pool, as a broken link or a stray write would.
  std::this_thread::sleep_for(milliseconds(100));
  sync_with_receiver(*e.receiver, d.reservation_id);
  e.pool->k_data()[(static_cast<int64_t>(d.blocks[1]) * d.block_size + 5) * d.kv_dim + 3] += 1.0f;
  Status st = e.sender->commit(d, rows, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(st), TransferError::kBadChecksum) << st.to_string();
  expect_failed(d, TransferError::kBadChecksum);
}

TEST_P(TransferValidation, CancelledReservationRejectsItsCommit) {
  auto d = reserve();
  put_all(*e.sender, d);
  ASSERT_TRUE(e.sender->put_state(d, blob()).ok());
  e.receiver->cancel(d.reservation_id);
  EXPECT_EQ(e.pool->free_blocks(), e.pool->total_blocks());
  Status st = e.sender->commit(d, rows, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(st), TransferError::kCancelled) << st.to_string();
  expect_failed(d, TransferError::kCancelled);
}

TEST_P(TransferValidation, UnknownReservationIsRejected) {
  auto d = reserve();
  e.receiver->cancel(d.reservation_id);
  auto c = e.receiver->wait_committed(d.reservation_id, in(seconds(1)));
  ASSERT_FALSE(c.ok());  // consumed: the reservation is gone now
  put_all(*e.sender, d);
  ASSERT_TRUE(e.sender->put_state(d, blob()).ok());
  Status st = e.sender->commit(d, rows, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(st), TransferError::kUnknownReservation) << st.to_string();
  EXPECT_EQ(e.pool->free_blocks(), e.pool->total_blocks());
}

TEST_P(TransferValidation, PulledRowsMustFitTheReceiversOwnBlockTable) {
  if (GetParam() == UcxRowPath::kPush) GTEST_SKIP() << "pushed rows go where the descriptor says";
  // Fragment the pool: the reservation gets blocks {a, c} with c != a + 1.
  KvPages a = e.pool->new_pages(), b = e.pool->new_pages();
  ASSERT_TRUE(e.pool->reserve(a, 32).ok());
  ASSERT_TRUE(e.pool->reserve(b, 32).ok());
  e.pool->release(a);
  auto d = e.receiver->reserve("frag", 64, in(seconds(30)));
  ASSERT_TRUE(d.ok());
  ASSERT_NE(d->blocks[1], d->blocks[0] + 1);
  // A descriptor that claims the blocks are adjacent (a bug or a forgery) would make a pushed
  // run spill into block a + 1, which belongs to someone else; pulled rows are checked first.
  // Rewritten on the wire with its CRC recomputed: it parses, and is refused all the same.
  ReservationDescriptor rewritten = *d;
  rewritten.blocks[1] = rewritten.blocks[0] + 1;
  auto parsed = ReservationDescriptor::parse(rewritten.serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  const ReservationDescriptor forged = *parsed;
  auto k = test::kv_rows(1, 0, 0, 64, e.kv_dim());
  const std::vector<float> other_before(e.pool->k_data() + static_cast<int64_t>(b.blocks[0]) * 32 * e.kv_dim(),
                                        e.pool->k_data() + static_cast<int64_t>(b.blocks[0] + 1) * 32 * e.kv_dim());
  ASSERT_TRUE(e.sender->put_rows(forged, 0, 64, k.data(), k.data()).ok());
  Status st = e.sender->commit(forged, 64, in(seconds(10)));
  EXPECT_FALSE(st.ok());
  auto c = e.receiver->wait_committed(d->reservation_id, in(seconds(10)));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(transfer_error_of(c.status()), TransferError::kInvalid) << c.status().to_string();
  EXPECT_EQ(0, std::memcmp(other_before.data(), e.pool->k_data() + static_cast<int64_t>(b.blocks[0]) * 32 * e.kv_dim(),
                           other_before.size() * 4));
  EXPECT_GE(refused(TransferRefusal::kOutOfRange), 1);
  e.pool->release(b);
  EXPECT_EQ(e.pool->free_blocks(), e.pool->total_blocks());
}

// Resident rows (docs/design.md, resident prefixes): the reservation starts with blocks the
// decode worker already holds; the sender puts only the rows after them, and the receiver
// refuses any row that would land in them (shared blocks other sequences read).
TEST_P(TransferValidation, ResidentRowsAreNeitherPutNorOverwritten) {
  const uint64_t seed = 5;
  KvPages held = e.pool->new_pages();
  ASSERT_TRUE(e.pool->reserve(held, 32).ok());
  const auto k0 = test::kv_rows(seed, 0, 0, 32, e.kv_dim()), v0 = test::kv_rows(seed, 1, 0, 32, e.kv_dim());
  for (int r = 0; r < 32; ++r) {
    std::memcpy(e.pool->k_data() + held.offset(r), k0.data() + r * e.kv_dim(), e.kv_dim() * 4);
    std::memcpy(e.pool->v_data() + held.offset(r), v0.data() + r * e.kv_dim(), e.kv_dim() * 4);
  }
  auto d = e.receiver->reserve_over("resident", rows, in(seconds(30)), held.blocks);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->resident_rows, 32);
  EXPECT_EQ(d->blocks[0], held.blocks[0]);
  auto k = test::kv_rows(seed, 0, 0, rows, e.kv_dim());
  EXPECT_EQ(transfer_error_of(e.sender->put_rows(*d, 16, 20, k.data(), k.data())), TransferError::kInvalid);
  ASSERT_TRUE(put_range(*e.sender, *d, seed, 32, rows).ok());
  const auto state = test::test_state_blob(e.cfg, kFp, seed, rows);
  ASSERT_TRUE(e.sender->put_state(*d, state).ok());
  ASSERT_TRUE(e.sender->commit(*d, rows, in(seconds(10))).ok());
  auto c = e.receiver->wait_committed(d->reservation_id, in(seconds(10)));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  expect_sequence(*c, e.cfg, seed, rows, *e.pool);
  // Only the shipped rows count as transferred.
  EXPECT_EQ(e.receiver->metrics().snapshot().bytes, (rows - 32) * e.kv_dim() * 8 + static_cast<int64_t>(state.size()));

  if (GetParam() == UcxRowPath::kPush) return;  // pushed rows go where the descriptor says
  // A descriptor rewritten to claim no resident rows: pulled rows into them are refused.
  KvPages held2 = e.pool->new_pages();
  ASSERT_TRUE(e.pool->reserve(held2, 32).ok());
  const std::vector<float> before(e.pool->k_data() + held2.offset(0),
                                  e.pool->k_data() + held2.offset(0) + 32 * e.kv_dim());
  auto d2 = e.receiver->reserve_over("resident-2", rows, in(seconds(30)), held2.blocks);
  ASSERT_TRUE(d2.ok());
  ReservationDescriptor forged = *d2;
  forged.resident_rows = 0;
  ASSERT_TRUE(e.sender->put_rows(forged, 0, rows, k.data(), k.data()).ok());
  EXPECT_FALSE(e.sender->commit(forged, rows, in(seconds(10))).ok());
  auto c2 = e.receiver->wait_committed(d2->reservation_id, in(seconds(10)));
  ASSERT_FALSE(c2.ok());
  EXPECT_EQ(0, std::memcmp(before.data(), e.pool->k_data() + held2.offset(0), before.size() * 4));
  EXPECT_GE(refused(TransferRefusal::kOutOfRange), 1);
}

// ---- 3b. the reservation secret (docs/design.md §4.5) --------------------------------------

TEST(TransferDescriptor, SecretsAreFreshAndCompareInFull) {
  const ReservationSecret a = mint_reservation_secret(), b = mint_reservation_secret();
  EXPECT_FALSE(secret_equal(a, b));
  EXPECT_TRUE(secret_equal(a, a));
  ReservationSecret c = a;
  c[15] ^= 0x80;
  EXPECT_FALSE(secret_equal(a, c));
}

TEST_P(TransferValidation, ForgedSecretIsRefusedCountedAndLeavesTheReservationIntact) {
  auto d = reserve();
  EXPECT_FALSE(std::all_of(d.secret.begin(), d.secret.end(), [](uint8_t x) { return x == 0; }));
  // An attacker who learned everything but the secret (the id, the blocks, the rkeys) writes
  // other rows and commits from its own endpoint.
  ReservationDescriptor forged = d;
  forged.secret[0] ^= 1;
  auto attacker = Engines::make_sender(kFp, kTcp, UcxRowPath::kPull);
  put_all(*attacker, forged, 99);
  ASSERT_TRUE(attacker->put_state(forged, test::test_state_blob(e.cfg, kFp, 99, rows)).ok());
  Status st = attacker->commit(forged, rows, in(seconds(10)));
  EXPECT_FALSE(st.ok());
  EXPECT_GE(refused(TransferRefusal::kBadSecret), 4);  // begin, rows, state, commit
  EXPECT_EQ(e.receiver->in_flight(), 1);               // nothing the attacker sent touched it
  // The real sender's transfer is admitted with its own rows (the attacker's pulled rows never landed).
  put_all(*e.sender, d);
  ASSERT_TRUE(e.sender->put_state(d, blob()).ok());
  ASSERT_TRUE(e.sender->commit(d, rows, in(seconds(10))).ok());
  auto c = e.receiver->wait_committed(d.reservation_id, in(seconds(10)));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  expect_sequence(*c, e.cfg, 3, rows, *e.pool);
  e.pool->release_blocks(c->blocks);
}

TEST_P(TransferValidation, ReplayedCommitIsRefusedAndCounted) {
  auto d = reserve();
  put_all(*e.sender, d);
  ASSERT_TRUE(e.sender->put_state(d, blob()).ok());
  ASSERT_TRUE(e.sender->commit(d, rows, in(seconds(10))).ok());
  // A second commit of the same transfer (replayed by someone who saw the descriptor) before the
  // decode side took the sequence, then another after it did: both refused, the sequence kept.
  auto replay = [&] {
    auto again = Engines::make_sender(kFp, kTcp, UcxRowPath::kPull);
    put_all(*again, d);
    EXPECT_TRUE(again->put_state(d, blob()).ok());
    return again->commit(d, rows, in(seconds(10)));
  };
  Status second = replay();
  EXPECT_EQ(transfer_error_of(second), TransferError::kAlreadyCommitted) << second.to_string();
  EXPECT_EQ(refused(TransferRefusal::kReplay), 1);
  auto c = e.receiver->wait_committed(d.reservation_id, in(seconds(10)));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  expect_sequence(*c, e.cfg, 3, rows, *e.pool);
  Status after = replay();
  EXPECT_EQ(transfer_error_of(after), TransferError::kUnknownReservation) << after.to_string();
  EXPECT_EQ(refused(TransferRefusal::kReplay), 2);
  e.pool->release_blocks(c->blocks);
  EXPECT_EQ(e.pool->free_blocks(), e.pool->total_blocks());
}

TEST_F(TransferTest, AReceiverWithoutPushHandsOutNoRkeysAndRefusesOneSidedWrites) {
  // The default receiver (the decode worker's): rows only through the checked pull path.
  ModelConfig cfg = preset("tiny-gret");
  auto pool = std::move(KvPool::create(8, 32, cfg.kv_dim()).value());
  UcxReceiverOptions ro;
  ro.listen_host = "127.0.0.1";
  ro.transports = kTcp;
  auto receiver = std::move(test::make_receiver(*pool, cfg, kFp, ro).value());
  auto d = receiver->reserve("no-push", 40, in(seconds(30)));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->k_rkey.empty());
  EXPECT_TRUE(d->v_rkey.empty());
  auto parsed = ReservationDescriptor::parse(d->serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  auto pusher = Engines::make_sender(kFp, kTcp, UcxRowPath::kPush);
  ASSERT_TRUE(put_range(*pusher, *parsed, 3, 0, 40).ok());  // pipelined: the failure shows at commit
  Status st = pusher->commit(*parsed, 40, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(st), TransferError::kInvalid) << st.to_string();
  // Pulled rows still work on it.
  auto puller = Engines::make_sender(kFp, kTcp, UcxRowPath::kPull);
  ASSERT_TRUE(put_range(*puller, *parsed, 3, 0, 40).ok());
  ASSERT_TRUE(puller->put_state(*parsed, test::test_state_blob(cfg, kFp, 3, 40)).ok());
  ASSERT_TRUE(puller->commit(*parsed, 40, in(seconds(10))).ok());
  auto c = receiver->wait_committed(d->reservation_id, in(seconds(10)));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  expect_sequence(*c, cfg, 3, 40, *pool);
  pool->release_blocks(c->blocks);
}

TEST_P(TransferValidation, ReserveIsAllOrNothing) {
  EXPECT_EQ(e.receiver->reserve("big", 33 * 32, in(seconds(5))).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(e.pool->free_blocks(), e.pool->total_blocks());
  EXPECT_EQ(transfer_error_of(e.receiver->reserve("late", 10, Clock::now() - milliseconds(1)).status()),
            TransferError::kInvalid);
  EXPECT_EQ(transfer_error_of(e.receiver->reserve("", 10, in(seconds(5))).status()), TransferError::kInvalid);
  EXPECT_EQ(e.receiver->in_flight(), 0);
}

// ---- 4. deadlines -------------------------------------------------------------------------

TEST_P(TransferValidation, ACommitThatNeverComesExpiresByItself) {
  // The lease is long enough that a loaded machine still gets the puts and the early waiter in
  // before it (300 ms failed now and then under ctest -j2 beside builds).
  auto d = reserve(milliseconds(1500));
  ASSERT_TRUE(put_range(*e.sender, d, 3, 0, 20).ok());  // prefill starts, then goes silent
  EXPECT_LT(e.pool->free_blocks(), e.pool->total_blocks());
  // A waiter with a shorter deadline gets a timeout; the reservation stays under its lease.
  auto early = e.receiver->wait_committed(d.reservation_id, in(milliseconds(50)));
  EXPECT_EQ(transfer_error_of(early.status()), TransferError::kTimeout);
  EXPECT_EQ(e.receiver->in_flight(), 1);
  // Nobody calls anything: the blocks come back by themselves.
  for (auto t = in(seconds(10)); e.pool->free_blocks() != e.pool->total_blocks() && Clock::now() < t;)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(e.pool->free_blocks(), e.pool->total_blocks());
  expect_failed(d, TransferError::kLeaseExpired);
  EXPECT_EQ(e.receiver->metrics().snapshot().failures, 1);
}

TEST_P(TransferValidation, RowsLentInPlaceAreHeldUntilTheirOperationsComplete) {
  if (!GetParam().in_place) GTEST_SKIP() << "rows put in place only";
  // Committed: the lent rows are released by the time commit returns, and what landed is the
  // source (rows poisoned before they were read would not be).
  auto d = reserve();
  put_all(*e.sender, d);  // seed 3, as blob()'s
  ASSERT_TRUE(e.sender->put_state(d, blob()).ok());
  Status st = e.sender->commit(d, rows, in(seconds(10)));
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (auto& l : lent) EXPECT_TRUE(l->released);
  auto c = e.receiver->wait_committed(d.reservation_id, in(seconds(10)));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  expect_sequence(*c, e.cfg, 3, rows, *e.pool);
  e.pool->release_blocks(c->blocks);
  lent.clear();

  // Aborted: released once the operations are done, commit or not.
  auto d2 = reserve();
  put_all(*e.sender, d2, 6);
  e.sender->abort(d2, "test");
  for (auto& l : lent) EXPECT_TRUE(released_by(*l, in(seconds(10))));
  auto c2 = e.receiver->wait_committed(d2.reservation_id, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(c2.status()), TransferError::kAborted) << c2.status().to_string();
  EXPECT_EQ(e.pool->free_blocks(), e.pool->total_blocks());
  lent.clear();

  // A sender torn down mid-transfer lets them go too.
  auto d3 = reserve();
  put_all(*e.sender, d3, 7);
  e.sender.reset();
  for (auto& l : lent) EXPECT_TRUE(l->released);
}

// Messages large enough for rendezvous, where the data is read well after put_rows_in_place
// returned (the receiver fetches it): lent rows released early would be poisoned by then.
TEST_F(TransferTest, RowsLentInPlaceStayUntilTheReceiverHasReadThem) {
  for (const char* tls : {kTcp, "posix,sysv,cma,self,tcp"}) {
    SCOPED_TRACE(tls);
    const bool shm = std::string(tls) != kTcp;
    ModelConfig cfg = preset("small-gret");
    auto pool = std::move(KvPool::create(24, 32, cfg.kv_dim()).value());
    UcxReceiverOptions ro;
    ro.listen_host = "127.0.0.1";
    ro.transports = tls;
    ro.peer_error_handling = !shm;  // UCX 1.13 has no shared-memory lane otherwise
    ro.verify_threads = 2;
    ro.verify_bytes_per_thread = 1;
    auto receiver = test::make_receiver(*pool, cfg, kFp, ro);
    ASSERT_TRUE(receiver.ok()) << receiver.status().to_string();
    UcxSenderOptions so;
    so.fingerprint = kFp;
    so.transports = tls;
    so.peer_error_handling = !shm;
    auto sender = make_ucx_sender(so);
    ASSERT_TRUE(sender.ok()) << sender.status().to_string();
    const int64_t rows = 700;  // K and V runs of hundreds of KiB each
    auto d = (*receiver)->reserve("req-lent", rows, in(seconds(30)));
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    Status st;
    auto a = put_range_in_place(**sender, *d, 3, 0, 300, &st);
    ASSERT_TRUE(st.ok()) << st.to_string();
    auto b = put_range_in_place(**sender, *d, 3, 300, rows, &st);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE((*sender)->put_state(*d, test::test_state_blob(cfg, kFp, 3, rows)).ok());
    st = (*sender)->commit(*d, rows, in(seconds(20)));
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(a->released);
    EXPECT_TRUE(b->released);
    auto c = (*receiver)->wait_committed(d->reservation_id, in(seconds(10)));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    expect_sequence(*c, cfg, 3, rows, *pool);
    pool->release_blocks(c->blocks);
  }
}

INSTANTIATE_TEST_SUITE_P(RowPaths, TransferValidation,
                         ::testing::Values(RowMode{UcxRowPath::kPull}, RowMode{UcxRowPath::kPush},
                                           RowMode{UcxRowPath::kPull, true}),
                         [](const auto& info) {
                           if (info.param.in_place) return std::string("pull_in_place");
                           return std::string(info.param.path == UcxRowPath::kPull ? "pull" : "push");
                         });

TEST_F(TransferTest, CommitToAPeerThatIsGoneFailsByItsDeadline) {
  ModelConfig cfg = preset("tiny-gret");
  auto pool = std::move(KvPool::create(8, 32, cfg.kv_dim()).value());
  UcxReceiverOptions ro;
  ro.listen_host = "127.0.0.1";
  ro.transports = kTcp;
  auto receiver = std::move(test::make_receiver(*pool, cfg, kFp, ro).value());
  auto d = receiver->reserve("gone", 10, in(seconds(30)));
  ASSERT_TRUE(d.ok());
  receiver.reset();  // the decode worker goes away
  auto sender = Engines::make_sender(kFp, kTcp);
  const auto t0 = Clock::now();
  Status st = put_range(*sender, *d, 1, 0, 10);
  if (st.ok()) st = sender->put_state(*d, test::test_state_blob(cfg, kFp, 1, 10));
  if (st.ok()) st = sender->commit(*d, 10, in(seconds(3)));
  EXPECT_FALSE(st.ok());
  const auto err = transfer_error_of(st);
  EXPECT_TRUE(err == TransferError::kPeerFailed || err == TransferError::kTimeout) << st.to_string();
  EXPECT_LT(Clock::now() - t0, seconds(5));
  EXPECT_EQ(sender->in_flight(), 0);
}

// A socket that listens and never accepts: a stopped receiver (its kernel completes the
// connection, nothing answers). Returns the descriptor (-1 on failure) and sets `address`.
int hung_listener(std::string& address) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  return fd;
}

// A receiver on loopback tcp over `pool` (the hung-peer cases).
std::unique_ptr<KvReceiver> tcp_receiver(KvPool& pool, const ModelConfig& cfg, bool peer_errors = true) {
  UcxReceiverOptions ro;
  ro.listen_host = "127.0.0.1";
  ro.transports = kTcp;
  ro.peer_error_handling = peer_errors;
  return std::move(test::make_receiver(pool, cfg, kFp, ro).value());
}

// A receiver that hangs before the endpoint is wired up (a stopped process: its kernel accepts
// the connection, nothing answers): the puts and the commit wait for the endpoint. An abort (the
// prefill job cancelled) must end that commit at once, not at its deadline, or the committer and
// the job stay held for as long as the receiver is stopped.
TEST_F(TransferTest, AbortEndsACommitWaitingForAHungPeersEndpoint) {
  ModelConfig cfg = preset("tiny-gret");
  auto pool = std::move(KvPool::create(8, 32, cfg.kv_dim()).value());
  auto receiver = tcp_receiver(*pool, cfg);
  auto d = receiver->reserve("hung", 10, in(seconds(30)));
  ASSERT_TRUE(d.ok());
  const int fd = hung_listener(d->address);
  ASSERT_GE(fd, 0);
  auto d2 = receiver->reserve("hung-too", 10, in(seconds(30)));
  ASSERT_TRUE(d2.ok());
  d2->address = d->address;
  auto sender = Engines::make_sender(kFp, kTcp);
  for (const auto* r : {&*d, &*d2}) {
    ASSERT_TRUE(put_range(*sender, *r, 1, 0, 10).ok());
    ASSERT_TRUE(sender->put_state(*r, test::test_state_blob(cfg, kFp, 1, 10)).ok());
  }
  Status st;
  std::thread committer([&] { st = sender->commit(*d, 10, in(seconds(20))); });
  std::this_thread::sleep_for(milliseconds(300));
  const auto t0 = Clock::now();
  sender->abort(*d, "cancelled");
  committer.join();
  EXPECT_LT(Clock::now() - t0, seconds(2));
  EXPECT_EQ(transfer_error_of(st), TransferError::kAborted) << st.to_string();
  // Aborted before its committer got there: the commit answers at once too.
  const auto t1 = Clock::now();
  sender->abort(*d, "cancelled again");
  st = sender->commit(*d, 10, in(seconds(20)));
  EXPECT_LT(Clock::now() - t1, seconds(2));
  EXPECT_EQ(transfer_error_of(st), TransferError::kAborted) << st.to_string();
  EXPECT_EQ(sender->in_flight(), 0);
  // The other commit still waits for the endpoint, until the "receiver" goes away and the
  // endpoint fails (before the sender's teardown: UCX 1.13 asserts when it closes an endpoint
  // whose wire-up never completed).
  close(fd);
  const Status gone = sender->commit(*d2, 10, in(seconds(10)));
  EXPECT_EQ(transfer_error_of(gone), TransferError::kPeerFailed) << gone.to_string();
  sender.reset();
}

// A sender torn down while its endpoint to a hung receiver is still wiring up (a prefill
// worker's shutdown while a decode worker is stopped): the endpoint is closed by force, the
// destruction returns, nothing aborts, and the receiver serves the next sender.
TEST_F(TransferTest, SenderTeardownWithAHungPeersEndpointReturns) {
  ModelConfig cfg = preset("tiny-gret");
  auto pool = std::move(KvPool::create(8, 32, cfg.kv_dim()).value());
  auto receiver = tcp_receiver(*pool, cfg);
  auto d = receiver->reserve("hung", 10, in(seconds(30)));
  ASSERT_TRUE(d.ok());
  const int fd = hung_listener(d->address);
  ASSERT_GE(fd, 0);
  auto sender = Engines::make_sender(kFp, kTcp);
  ASSERT_TRUE(put_range(*sender, *d, 1, 0, 10).ok());  // parked until the endpoint is wired up
  ASSERT_TRUE(sender->put_state(*d, test::test_state_blob(cfg, kFp, 1, 10)).ok());
  std::this_thread::sleep_for(milliseconds(300));
  const auto t0 = Clock::now();
  sender.reset();
  EXPECT_LT(Clock::now() - t0, seconds(5));
  close(fd);
  receiver->cancel(d->reservation_id);
  auto d2 = receiver->reserve("after", 10, in(seconds(30)));
  ASSERT_TRUE(d2.ok());
  sender = Engines::make_sender(kFp, kTcp);
  ASSERT_TRUE(put_range(*sender, *d2, 2, 0, 10).ok());
  ASSERT_TRUE(sender->put_state(*d2, test::test_state_blob(cfg, kFp, 2, 10)).ok());
  const Status st = sender->commit(*d2, 10, in(seconds(20)));
  EXPECT_TRUE(st.ok()) << st.to_string();
}

// The same without peer error handling (--ucx-no-peer-error-handling, one host's shared
// memory): the endpoint can neither flush nor be closed by force, and destroying the worker
// with it aborts in UCX 1.13, so the sender leaves the worker to the process's exit. In a child
// process (its exit skips the leak check: what is left is left on purpose); it must exit, not abort.
TEST_F(TransferTest, SenderTeardownWithoutPeerErrorsLeavesTheWorkerToTheExit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ModelConfig cfg = preset("tiny-gret");
        auto pool = std::move(KvPool::create(8, 32, cfg.kv_dim()).value());
        auto receiver = tcp_receiver(*pool, cfg, /*peer_errors=*/false);
        auto d = receiver->reserve("hung", 10, in(seconds(30)));
        if (!d.ok()) _exit(2);
        const int fd = hung_listener(d->address);
        if (fd < 0) _exit(3);
        UcxSenderOptions so;
        so.fingerprint = kFp;
        so.transports = kTcp;
        so.peer_error_handling = false;
        auto sender = std::move(make_ucx_sender(so).value());
        if (!put_range(*sender, *d, 1, 0, 10).ok()) _exit(4);
        std::this_thread::sleep_for(milliseconds(300));
        const auto t0 = Clock::now();
        sender.reset();
        _exit(Clock::now() - t0 < seconds(10) ? 0 : 5);
      },
      ::testing::ExitedWithCode(0), "");
}

// ---- 2. two processes ---------------------------------------------------------------------

// A transfer_peer process with its stdout on a pipe; killed and reaped on destruction.
class Peer {
 public:
  Peer(const ReservationDescriptor& d, const Transport& t, uint64_t seed, const std::string& mode,
       const std::string& preset_name) {
    std::vector<std::string> args = {YOCO_TRANSFER_PEER,
                                     "--descriptor",
                                     test::to_hex(d.serialize()),
                                     "--preset",
                                     preset_name,
                                     "--fingerprint",
                                     std::to_string(kFp),
                                     "--seed",
                                     std::to_string(seed),
                                     "--transports",
                                     t.tls,
                                     "--peer-errors",
                                     t.peer_errors ? "1" : "0",
                                     "--row-path",
                                     t.path == UcxRowPath::kPush ? "push" : "pull",
                                     "--mode",
                                     mode};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    YOCO_CHECK(pipe(fds) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    out_ = fds[0];
    if (rc != 0) pid_ = -1;
  }
  ~Peer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(out_);
  }
  bool started() const { return pid_ > 0; }
  // Reads stdout until a line equal to `want` (true) or EOF / the deadline (false).
  bool wait_line(const std::string& want, Clock::time_point deadline) {
    while (Clock::now() < deadline) {
      size_t nl;
      while ((nl = buf_.find('\n')) != std::string::npos) {
        const std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        log_ += line + "\n";
        if (line == want) return true;
      }
      pollfd p{out_, POLLIN, 0};
      const int ms = static_cast<int>(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
      if (poll(&p, 1, std::max(ms, 1)) <= 0) continue;
      char tmp[4096];
      const ssize_t n = read(out_, tmp, sizeof(tmp));
      if (n <= 0) return false;
      buf_.append(tmp, n);
    }
    return false;
  }
  // Exit status, or −1 if it did not exit by the deadline.
  int wait_exit(Clock::time_point deadline) {
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
    return -1;
  }
  void sigkill() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string output() {
    wait_line("\x01", Clock::now());
    return log_ + buf_;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buf_, log_;
};

class TransferTwoProcess : public TransferTest, public ::testing::WithParamInterface<Transport> {
 protected:
  ModelConfig cfg = preset("tiny-gret");
  std::unique_ptr<KvPool> pool = std::move(KvPool::create(32, 32, cfg.kv_dim()).value());
  std::unique_ptr<KvReceiver> receiver;

  void SetUp() override {
    TransferTest::SetUp();
    UcxReceiverOptions ro;
    ro.listen_host = "127.0.0.1";
    ro.transports = GetParam().tls;
    ro.peer_error_handling = GetParam().peer_errors;
    ro.allow_push = GetParam().path == UcxRowPath::kPush;
    auto r = test::make_receiver(*pool, cfg, kFp, ro);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    receiver = std::move(r.value());
  }
  void TearDown() override {
    receiver.reset();
    TransferTest::TearDown();
  }

  // A whole transfer from a peer process.
  void transfer_from_peer(const std::string& request, int64_t rows, uint64_t seed) {
    auto d = receiver->reserve(request, rows, in(seconds(30)));
    ASSERT_TRUE(d.ok());
    Peer peer(*d, GetParam(), seed, "full", "tiny-gret");
    ASSERT_TRUE(peer.started());
    const int rc = peer.wait_exit(in(seconds(40)));
    ASSERT_EQ(rc, 0) << peer.output();
    auto c = receiver->wait_committed(d->reservation_id, in(seconds(10)));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    expect_sequence(*c, cfg, seed, rows, *pool);
    pool->release_blocks(c->blocks);
    EXPECT_EQ(pool->free_blocks(), pool->total_blocks());
  }
};

TEST_P(TransferTwoProcess, PeerProcessPushesAWholeSequence) { transfer_from_peer("two-proc", 300, 21); }

// Another process holding a descriptor it should not (docs/design.md §4.5): with a forged secret
// nothing it sends is accepted; with its own reservation's descriptor rewritten to name another
// reservation's blocks (the CRC recomputed) its rows land in its own blocks. Either way the other
// reservation's bytes stay as they were, and the forgery is counted.
TEST_P(TransferTwoProcess, AnotherProcessWritesNothingOutsideItsOwnReservation) {
  if (GetParam().path == UcxRowPath::kPush)
    GTEST_SKIP() << "one-sided writes are not gated by the secret: push is for trusted fabrics (allow_push)";
  const int64_t rows = 128;  // 4 blocks each
  auto victim = receiver->reserve("victim", rows, in(seconds(30)));
  auto own = receiver->reserve("attacker", rows, in(seconds(30)));
  ASSERT_TRUE(victim.ok() && own.ok());
  const int kv_dim = cfg.kv_dim();
  auto victim_bytes = [&] {
    std::vector<float> out;
    for (int32_t b : victim->blocks)
      for (const float* base : {pool->k_data(), pool->v_data()})
        out.insert(out.end(), base + static_cast<int64_t>(b) * 32 * kv_dim,
                   base + static_cast<int64_t>(b + 1) * 32 * kv_dim);
    return out;
  };
  const std::vector<float> before = victim_bytes();
  // 1. The victim's descriptor with a guessed secret.
  ReservationDescriptor forged = *victim;
  forged.secret[5] ^= 0x10;
  {
    Peer peer(forged, GetParam(), 77, "full", "tiny-gret");
    ASSERT_TRUE(peer.started());
    EXPECT_NE(peer.wait_exit(in(seconds(40))), 0) << peer.output();
  }
  EXPECT_GE(receiver->metrics().snapshot().refused[static_cast<int>(TransferRefusal::kBadSecret)], 3);
  EXPECT_EQ(receiver->in_flight(), 2);  // the victim's reservation is untouched
  // 2. Its own descriptor pointing at the victim's blocks.
  ReservationDescriptor rewritten = *own;
  rewritten.blocks = victim->blocks;
  {
    Peer peer(rewritten, GetParam(), 78, "full", "tiny-gret");
    ASSERT_TRUE(peer.started());
    const int rc = peer.wait_exit(in(seconds(40)));
    auto c = receiver->wait_committed(own->reservation_id, in(seconds(10)));
    if (rc == 0) {  // admitted: the rows are in its own blocks
      ASSERT_TRUE(c.ok()) << c.status().to_string();
      expect_sequence(*c, cfg, 78, rows, *pool);
      EXPECT_EQ(c->blocks, own->blocks);
      pool->release_blocks(c->blocks);
    } else {
      EXPECT_FALSE(c.ok()) << peer.output();
    }
  }
  EXPECT_TRUE(before == victim_bytes()) << "rows landed in another reservation's blocks";
  receiver->cancel(victim->reservation_id);
  EXPECT_EQ(pool->free_blocks(), pool->total_blocks());
}

TEST_P(TransferTwoProcess, KilledSenderFreesTheBlocksAndTheReceiverKeepsServing) {
  auto d = receiver->reserve("doomed", 300, in(seconds(8)));
  ASSERT_TRUE(d.ok());
  {
    Peer peer(*d, GetParam(), 5, "stall", "tiny-gret");
    ASSERT_TRUE(peer.started());
    ASSERT_TRUE(peer.wait_line("STALLED", in(seconds(30)))) << peer.output();
    // Kill it mid-transfer: once its first chunk (rows 0..99) is in our pool.
    const int kv_dim = cfg.kv_dim();
    const auto last = test::kv_rows(5, 1, 99, 1, kv_dim);
    const float* landed = pool->v_data() + d->row_offset(99) / 4;
    const auto arrived = [&] {
      sync_with_receiver(*receiver, d->reservation_id);
      return std::memcmp(landed, last.data(), kv_dim * 4) == 0;
    };
    std::this_thread::sleep_for(milliseconds(50));  // STALLED: the chunk is sent; let it be recorded
    for (auto t = in(seconds(10)); !arrived() && Clock::now() < t;) std::this_thread::sleep_for(milliseconds(2));
    ASSERT_TRUE(arrived());
    std::this_thread::sleep_for(milliseconds(50));  // and its kBegin has been handled
    EXPECT_LT(pool->free_blocks(), pool->total_blocks());
    peer.sigkill();
  }
  const auto t0 = Clock::now();
  auto c = receiver->wait_committed(d->reservation_id, in(seconds(20)));
  ASSERT_FALSE(c.ok());
  const auto err = transfer_error_of(c.status());
  EXPECT_TRUE(err == TransferError::kPeerFailed || err == TransferError::kLeaseExpired) << c.status().to_string();
  std::printf("[ info     ] killed sender detected as %s after %.2f s\n", transfer_error_name(err),
              std::chrono::duration<double>(Clock::now() - t0).count());
  EXPECT_EQ(pool->free_blocks(), pool->total_blocks());
  EXPECT_EQ(receiver->in_flight(), 0);
  transfer_from_peer("after-kill", 100, 22);  // the same receiver serves the next sender
}

INSTANTIATE_TEST_SUITE_P(Transports, TransferTwoProcess, ::testing::Values(kTcpPull, kTcpPush, kShmPull, kShmPush),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace yoco
