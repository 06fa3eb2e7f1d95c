// The prefill scheduler against a real UCX receiver in this process (tcp on 127.0.0.1): prompts
// interleaved chunk by chunk land in the decode side's reserved blocks and decode bitwise like
// an in-process prefill over the same chunks; cancellation, deadlines and refusals at every
// phase end with the right code and give the decode side its blocks back. A gate in front of
// the real sender holds a job at a known row, so "queued" and "mid-prefill" are not races.
#include "prefill_service/scheduler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "kv_store/factory.h"
#include "model/kv_pool.h"
#include "model/random_model.h"
#include "tests/transfer/transfer_data.h"
#include "tests/unit/test_util.h"
#include "transfer/ucx_transport.h"

namespace yoco {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = TransferClock;

Clock::time_point in(milliseconds d) { return Clock::now() + d; }

// Forwards to the real sender; once closed at row R, put_rows of rows from R on waits until
// open() (the scheduler's compute thread stands still there).
class GatedSender final : public KvSender {
 public:
  explicit GatedSender(KvSender& inner) : inner_(inner) {}
  void close_at(int64_t row) {
    std::lock_guard<std::mutex> lock(mu_);
    gate_row_ = row;
    open_ = false;
    held_ = false;
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait_held(seconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return held_; });
  }
  // commit() waits before it reaches the real sender until release_commits().
  void hold_commits() {
    std::lock_guard<std::mutex> lock(mu_);
    commits_open_ = false;
    commit_held_ = false;
  }
  void release_commits() {
    std::lock_guard<std::mutex> lock(mu_);
    commits_open_ = true;
    cv_.notify_all();
  }
  bool wait_commit_held(seconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return commit_held_; });
  }

  // The lowest row any put_rows asked for since the last reset (INT64_MAX: none).
  int64_t lowest_row() {
    std::lock_guard<std::mutex> lock(mu_);
    return lowest_row_;
  }
  void reset_lowest_row() {
    std::lock_guard<std::mutex> lock(mu_);
    lowest_row_ = INT64_MAX;
  }
  Status put_rows(const ReservationDescriptor& d, int64_t row_begin, int n_rows, const float* k,
                  const float* v) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      lowest_row_ = std::min(lowest_row_, row_begin);
      if (!open_ && row_begin >= gate_row_) {
        held_ = true;
        cv_.notify_all();
        cv_.wait_for(lock, seconds(60), [&] { return open_; });
      }
    }
    return inner_.put_rows(d, row_begin, n_rows, k, v);
  }
  Status put_state(const ReservationDescriptor& d, std::span<const uint8_t> blob) override {
    return inner_.put_state(d, blob);
  }
  Status commit(const ReservationDescriptor& d, int64_t rows, Clock::time_point deadline) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!commits_open_) {
        commit_held_ = true;
        cv_.notify_all();
        cv_.wait_for(lock, seconds(60), [&] { return commits_open_; });
      }
    }
    return inner_.commit(d, rows, deadline);
  }
  void abort(const ReservationDescriptor& d, const std::string& reason) override { inner_.abort(d, reason); }
  int64_t in_flight() const override { return inner_.in_flight(); }
  const TransferMetrics& metrics() const override { return inner_.metrics(); }

 private:
  KvSender& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t gate_row_ = 0;
  int64_t lowest_row_ = INT64_MAX;
  bool open_ = true, held_ = false;
  bool commits_open_ = true, commit_held_ = false;
};

// Outcomes by the caller's key, as the scheduler reports them.
class Outcomes {
 public:
  PrefillCallback callback(int key) {
    return [this, key](const PrefillOutcome& o) {
      std::lock_guard<std::mutex> lock(mu_);
      EXPECT_EQ(done_.count(key), 0u) << "completed twice: " << key;
      done_[key] = o;
      cv_.notify_all();
    };
  }
  std::optional<PrefillOutcome> wait(int key, seconds limit = seconds(30)) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, limit, [&] { return done_.count(key) > 0; })) return std::nullopt;
    return done_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, PrefillOutcome> done_;
};

// A decode side (full model, pool, UCX receiver) and a prefill side (prefill weights, UCX
// sender behind the gate) in this process.
struct Cluster {
  test::TempDir dir;
  std::unique_ptr<Model> full, prefill;
  std::unique_ptr<KvPool> pool;
  std::unique_ptr<KvReceiver> receiver;
  std::unique_ptr<KvSender> ucx;
  std::unique_ptr<GatedSender> sender;

  explicit Cluster(const std::string& preset, int blocks = 64) {
    auto cfg = find_preset(preset);
    YOCO_CHECK(cfg.ok());
    YOCO_CHECK(write_random_model(dir.path(), cfg.value(), 7, DType::kF32).ok());
    full = std::move(Model::load(dir.path(), WeightSet::kFull).value());
    prefill = std::move(Model::load(dir.path(), WeightSet::kPrefill).value());
    YOCO_CHECK(full->fingerprint() == prefill->fingerprint());
    pool = std::move(KvPool::create(blocks, 32, full->config().kv_dim()).value());
    UcxReceiverOptions ro;
    ro.listen_host = "127.0.0.1";
    ro.transports = "tcp";
    receiver = std::move(test::make_receiver(*pool, full->config(), full->fingerprint(), ro).value());
    UcxSenderOptions so;
    so.fingerprint = prefill->fingerprint();
    so.transports = "tcp";
    so.op_timeout = seconds(10);
    ucx = std::move(make_ucx_sender(so).value());
    sender = std::make_unique<GatedSender>(*ucx);
  }

  std::unique_ptr<PrefillScheduler> scheduler(PrefillLimits lim) {
    auto s = PrefillScheduler::create(*prefill, *sender, lim);
    YOCO_CHECK(s.ok());
    return std::move(s.value());
  }
  ReservationDescriptor reserve(const std::string& request_id, int64_t rows, milliseconds lease = seconds(60)) {
    auto d = receiver->reserve(request_id, rows, in(lease));
    YOCO_CHECK(d.ok());
    // As it travels inside the Prefill RPC.
    auto parsed = ReservationDescriptor::parse(d->serialize());
    YOCO_CHECK(parsed.ok());
    return parsed.value();
  }
  std::vector<int32_t> prompt(int len, int salt) const {
    std::vector<int32_t> t(len);
    for (int i = 0; i < len; ++i) t[i] = (i * 37 + salt * 101 + 5) % full->config().vocab_size;
    return t;
  }
  PrefillJob job(const ReservationDescriptor& d, std::vector<int32_t> tokens,
                 Clock::time_point deadline = Clock::time_point::max()) const {
    return PrefillJob{d.request_id, std::move(tokens), d, deadline};
  }
  // The reservation failed on the decode side (nothing admitted).
  void expect_reservation_failed(const ReservationDescriptor& d) {
    auto c = receiver->wait_committed(d.reservation_id, in(seconds(10)));
    EXPECT_FALSE(c.ok()) << "reservation " << d.reservation_id << " was admitted";
    if (c.ok()) pool->release_blocks(c->blocks);
    else EXPECT_NE(transfer_error_of(c.status()), TransferError::kTimeout) << c.status().to_string();
  }
  // Blocks return once in-flight receives finish: poll, bounded.
  bool pool_idle(seconds limit = seconds(10)) {
    const auto end = Clock::now() + limit;
    while (pool->free_blocks() != pool->total_blocks() || receiver->in_flight() != 0) {
      if (Clock::now() > end) return false;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return true;
  }
};

class PrefillSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override { alarm(100); }  // a stuck wait ends the test, not the suite's timeout
  void TearDown() override { alarm(0); }
};

// ---- 1. interleaved prompts decode like an in-process prefill -----------------------------

class PrefillSchedulerPresets : public PrefillSchedulerTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(PrefillSchedulerPresets, InterleavedPromptsDecodeBitwiseLikeALocalPrefill) {
  Cluster c(GetParam());
  PrefillLimits lim;
  lim.chunk_tokens = 64;
  lim.max_active = 3;
  auto s = c.scheduler(lim);
  const std::vector<int> lengths = {1, 31, 33, 100, 700};
  std::vector<ReservationDescriptor> descs;
  std::vector<std::vector<int32_t>> prompts;
  Outcomes out;
  // Queued before start: the first step sees all of them, so the slices are known exactly.
  for (size_t i = 0; i < lengths.size(); ++i) {
    descs.push_back(c.reserve("req-" + std::to_string(i), lengths[i]));
    prompts.push_back(c.prompt(lengths[i], static_cast<int>(i)));
    auto id = s->submit(c.job(descs[i], prompts[i], in(seconds(60))), out.callback(static_cast<int>(i)));
    ASSERT_TRUE(id.ok()) << id.status().to_string();
  }
  EXPECT_EQ(s->load().queued_tokens, 1 + 31 + 33 + 100 + 700);
  EXPECT_EQ(s->load().waiting, 5);
  s->start();

  std::vector<CommittedSequence> committed;
  std::vector<PrefillOutcome> outcomes;
  for (size_t i = 0; i < lengths.size(); ++i) {
    auto cs = c.receiver->wait_committed(descs[i].reservation_id, in(seconds(30)));
    ASSERT_TRUE(cs.ok()) << i << ": " << cs.status().to_string();
    EXPECT_EQ(cs->request_id, descs[i].request_id);
    committed.push_back(std::move(cs.value()));
    auto o = out.wait(static_cast<int>(i));
    ASSERT_TRUE(o.has_value()) << i;
    ASSERT_TRUE(o->status.ok()) << i << ": " << o->status.to_string();
    outcomes.push_back(*o);
  }
  // Step 1 shares the 64-token budget between the first three; step 2 finishes the third and
  // starts the fourth; from then on the last two share it, then the last runs alone.
  EXPECT_EQ(outcomes[0].stats.chunks, std::vector<int>({1}));
  EXPECT_EQ(outcomes[1].stats.chunks, std::vector<int>({31}));
  EXPECT_EQ(outcomes[2].stats.chunks, std::vector<int>({32, 1}));
  EXPECT_EQ(outcomes[3].stats.chunks, std::vector<int>({63, 37}));
  ASSERT_FALSE(outcomes[4].stats.chunks.empty());
  EXPECT_EQ(outcomes[4].stats.chunks.front(), 27);

  const ModelConfig& cfg = c.full->config();
  const int kv_dim = cfg.kv_dim(), vocab = cfg.vocab_size;
  const PrefillOptions opt{lim.chunk_tokens, lim.retention_chunk};
  for (size_t i = 0; i < lengths.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i) + " of " + std::to_string(lengths[i]) + " tokens");
    const PrefillStats& st = outcomes[i].stats;
    EXPECT_EQ(std::accumulate(st.chunks.begin(), st.chunks.end(), 0), lengths[i]);
    for (int n : st.chunks) EXPECT_TRUE(n > 0 && n <= lim.chunk_tokens) << n;
    EXPECT_EQ(st.rows, lengths[i]);
    EXPECT_TRUE(st.started);
    EXPECT_GE(st.queue_seconds, 0);
    EXPECT_GE(st.prefill_seconds, 0);
    EXPECT_GT(st.transfer_seconds, 0);
    EXPECT_FALSE(st.transfer_failed);

    // The same tokens over the same slices, in this process, with the full model.
    SequenceState local = c.full->new_sequence();
    int64_t at = 0;
    for (int n : st.chunks) {
      ASSERT_TRUE(c.full->prefill(local, std::span<const int32_t>(prompts[i]).subspan(at, n), opt).ok());
      at += n;
    }
    StateBlobOptions so;
    so.include_kv = false;
    EXPECT_EQ(st.bytes, int64_t{lengths[i]} * kv_dim * 8 +
                            static_cast<int64_t>(serialize_state(local, cfg, c.full->fingerprint(), so).size()));
    SequenceState remote = test::admitted_state(committed[i], cfg, c.full->fingerprint(), *c.pool);
    ASSERT_EQ(remote.position, lengths[i]);
    for (int64_t r = 0; r < lengths[i]; ++r) {
      ASSERT_EQ(0, std::memcmp(remote.k_row(r, kv_dim), local.k_row(r, kv_dim), kv_dim * 4)) << "K row " << r;
      ASSERT_EQ(0, std::memcmp(remote.v_row(r, kv_dim), local.v_row(r, kv_dim), kv_dim * 4)) << "V row " << r;
    }
    std::vector<float> lr(vocab), ll(vocab);
    SequenceState* rp = &remote;
    SequenceState* lp = &local;
    ASSERT_TRUE(c.full->logits(std::span<SequenceState* const>(&rp, 1), lr.data()).ok());
    ASSERT_TRUE(c.full->logits(std::span<SequenceState* const>(&lp, 1), ll.data()).ok());
    ASSERT_EQ(0, std::memcmp(lr.data(), ll.data(), vocab * 4)) << "next-token logits differ";
    if (i == 3) {  // a few greedy decode steps from the shipped state
      ASSERT_TRUE(c.pool->reserve(*remote.pages, lengths[i] + 4).ok());
      for (int step = 0; step < 4; ++step) {
        const int32_t tok = static_cast<int32_t>(std::max_element(ll.begin(), ll.end()) - ll.begin());
        ASSERT_TRUE(
            c.full->decode_step(std::span<SequenceState* const>(&rp, 1), std::span<const int32_t>(&tok, 1), lr.data())
                .ok());
        ASSERT_TRUE(
            c.full->decode_step(std::span<SequenceState* const>(&lp, 1), std::span<const int32_t>(&tok, 1), ll.data())
                .ok());
        ASSERT_EQ(0, std::memcmp(lr.data(), ll.data(), vocab * 4)) << "decode step " << step;
      }
    }
    c.pool->release(*remote.pages);
  }
  const PrefillSchedulerLoad l = s->load();
  EXPECT_EQ(l.queued_tokens, 0);
  EXPECT_EQ(l.waiting + l.active + l.committing, 0);
  EXPECT_GT(s->tokens_per_second(), 0);
  EXPECT_EQ(c.sender->metrics().snapshot().transfers, 5);
  EXPECT_TRUE(c.pool_idle());
}

INSTANTIATE_TEST_SUITE_P(Presets, PrefillSchedulerPresets, ::testing::Values("tiny-gret", "tiny-swa", "tiny-yocou"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// ---- 2. cancellation ------------------------------------------------------------------------

TEST_F(PrefillSchedulerTest, AFinishedPromptIsCommittedWithoutWaitingForTheRestOfItsStep) {
  Cluster c("tiny-gret");
  PrefillLimits lim;
  lim.chunk_tokens = 64;
  lim.max_active = 2;
  lim.inject_slice_delay = milliseconds(400);  // every slice takes at least this long
  auto s = c.scheduler(lim);
  // One step runs the short prompt's only slice, then the long one's first slice.
  auto da = c.reserve("req-short", 8), db = c.reserve("req-long", 100);
  Outcomes out;
  ASSERT_TRUE(s->submit(c.job(da, c.prompt(8, 1), in(seconds(60))), out.callback(0)).ok());
  ASSERT_TRUE(s->submit(c.job(db, c.prompt(100, 2), in(seconds(60))), out.callback(1)).ok());
  s->start();
  for (const auto* d : {&da, &db}) {
    auto cs = c.receiver->wait_committed(d->reservation_id, in(seconds(30)));
    ASSERT_TRUE(cs.ok()) << cs.status().to_string();
    c.pool->release_blocks(cs->blocks);
  }
  auto a = out.wait(0), b = out.wait(1);
  ASSERT_TRUE(a.has_value() && b.has_value());
  ASSERT_TRUE(a->status.ok()) << a->status.to_string();
  ASSERT_TRUE(b->status.ok()) << b->status.to_string();
  EXPECT_EQ(a->stats.chunks, std::vector<int>({8}));
  EXPECT_EQ(b->stats.chunks, std::vector<int>({56, 44}));
  // Its commit ran while the other prompt's slice of the same step computed, instead of after it
  // (which took 400 ms more).
  EXPECT_LT(a->stats.transfer_seconds, 0.2);
}

TEST_F(PrefillSchedulerTest, CancelQueuedAndMidPrefillJobsFreesTheirBlocks) {
  Cluster c("tiny-gret");
  PrefillLimits lim;
  lim.chunk_tokens = 32;
  lim.max_active = 1;  // the second job stays queued behind the first
  auto s = c.scheduler(lim);
  s->start();
  c.sender->close_at(64);  // the first job stops in its third slice: two slices already shipped
  const auto da = c.reserve("a", 200), db = c.reserve("b", 50);
  Outcomes out;
  auto a = s->submit(c.job(da, c.prompt(200, 1)), out.callback(0));
  auto b = s->submit(c.job(db, c.prompt(50, 2)), out.callback(1));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(c.sender->wait_held(seconds(20)));
  EXPECT_EQ(s->load().waiting, 1);
  EXPECT_EQ(s->load().active, 1);

  s->cancel(b.value());  // queued
  auto ob = out.wait(1, seconds(5));
  ASSERT_TRUE(ob.has_value());
  EXPECT_EQ(ob->status.code(), StatusCode::kCancelled) << ob->status.to_string();
  EXPECT_FALSE(ob->stats.started);
  c.expect_reservation_failed(db);

  s->cancel(a.value());  // mid-prefill: ends at the slice boundary
  c.sender->open();
  auto oa = out.wait(0, seconds(20));
  ASSERT_TRUE(oa.has_value());
  EXPECT_EQ(oa->status.code(), StatusCode::kCancelled) << oa->status.to_string();
  EXPECT_TRUE(oa->stats.started);
  c.expect_reservation_failed(da);

  s->cancel(a.value());  // finished ids: no-op
  EXPECT_EQ(s->load().queued_tokens, 0);
  EXPECT_TRUE(c.pool_idle());
  EXPECT_EQ(c.receiver->metrics().snapshot().transfers, 0);
}

TEST_F(PrefillSchedulerTest, CancelWhileWaitingForTheAcknowledgement) {
  Cluster c("tiny-swa");
  auto s = c.scheduler(PrefillLimits{});
  s->start();
  c.sender->hold_commits();
  const auto d = c.reserve("committing", 40);
  Outcomes out;
  auto id = s->submit(c.job(d, c.prompt(40, 5)), out.callback(0));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(c.sender->wait_commit_held(seconds(20)));
  EXPECT_EQ(s->load().committing, 1);
  EXPECT_EQ(s->load().queued_tokens, 0);  // computed: no longer queued work
  s->cancel(id.value());                  // the abort ends the commit's wait for the acknowledgement
  c.sender->release_commits();
  auto o = out.wait(0, seconds(20));
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->status.code(), StatusCode::kCancelled) << o->status.to_string();
  EXPECT_FALSE(o->stats.transfer_failed);
  c.expect_reservation_failed(d);
  EXPECT_EQ(s->load().committing, 0);
  EXPECT_TRUE(c.pool_idle());
}

// ---- transfer failures keep the transfer engine's reason --------------------------------------

TEST_F(PrefillSchedulerTest, DecodeSideFailuresComeBackWithTheirReason) {
  Cluster c("tiny-gret");
  PrefillLimits lim;
  lim.chunk_tokens = 32;
  lim.max_active = 1;
  auto s = c.scheduler(lim);
  s->start();
  Outcomes out;
  // The decode side drops the reservation while the prompt is mid-prefill.
  c.sender->close_at(32);
  const auto d = c.reserve("dropped", 100);
  // Queued behind it with a short lease: it runs out before the job is admitted.
  const auto short_lease = c.reserve("short-lease", 20, milliseconds(300));
  ASSERT_TRUE(s->submit(c.job(d, c.prompt(100, 6)), out.callback(0)).ok());
  ASSERT_TRUE(s->submit(c.job(short_lease, c.prompt(20, 7)), out.callback(1)).ok());
  ASSERT_TRUE(c.sender->wait_held(seconds(20)));
  c.receiver->cancel(d.reservation_id);
  std::this_thread::sleep_for(milliseconds(400));
  c.sender->open();

  auto o = out.wait(0, seconds(20));
  ASSERT_TRUE(o.has_value());
  EXPECT_FALSE(o->status.ok());
  EXPECT_NE(transfer_error_of(o->status), TransferError::kInvalid) << "untagged: " << o->status.to_string();
  EXPECT_TRUE(o->stats.transfer_failed);
  auto o2 = out.wait(1, seconds(20));
  ASSERT_TRUE(o2.has_value());
  EXPECT_EQ(transfer_error_of(o2->status), TransferError::kLeaseExpired) << o2->status.to_string();
  EXPECT_FALSE(o2->stats.started);  // nothing computed for a reservation already gone
  EXPECT_TRUE(o2->stats.transfer_failed);
  c.expect_reservation_failed(short_lease);
  EXPECT_TRUE(c.pool_idle());
  EXPECT_EQ(s->load().queued_tokens, 0);
}

// ---- 3. deadlines ---------------------------------------------------------------------------

TEST_F(PrefillSchedulerTest, ExpiredDeadlinesEndWithDeadlineExceededAndFreeTheBlocks) {
  Cluster c("tiny-swa");
  PrefillLimits lim;
  lim.chunk_tokens = 32;
  auto s = c.scheduler(lim);
  s->start();
  Outcomes out;

  // Already over at submit: refused, and the reservation aborted at once.
  const auto d0 = c.reserve("late", 40);
  auto r0 = s->submit(c.job(d0, c.prompt(40, 3), in(milliseconds(-1))), out.callback(0));
  ASSERT_FALSE(r0.ok());
  EXPECT_EQ(r0.status().code(), StatusCode::kDeadlineExceeded) << r0.status().to_string();
  c.expect_reservation_failed(d0);

  // Passes mid-prefill.
  c.sender->close_at(32);
  const auto d1 = c.reserve("slow", 100);
  auto r1 = s->submit(c.job(d1, c.prompt(100, 4), in(milliseconds(300))), out.callback(1));
  ASSERT_TRUE(r1.ok());
  ASSERT_TRUE(c.sender->wait_held(seconds(20)));
  std::this_thread::sleep_for(milliseconds(400));
  c.sender->open();
  auto o1 = out.wait(1, seconds(20));
  ASSERT_TRUE(o1.has_value());
  EXPECT_EQ(o1->status.code(), StatusCode::kDeadlineExceeded) << o1->status.to_string();
  c.expect_reservation_failed(d1);
  EXPECT_TRUE(c.pool_idle());
}

// ---- 4. refusals ----------------------------------------------------------------------------

TEST_F(PrefillSchedulerTest, BadInputIsRefusedWithTheFieldNamed) {
  Cluster c("tiny-gret");
  PrefillLimits lim;
  lim.chunk_tokens = 32;
  lim.max_queued_tokens = 100;
  auto s = c.scheduler(lim);
  s->start();
  Outcomes out;
  const auto d = c.reserve("bad", 10);
  auto expect_refused = [&](PrefillJob job, StatusCode code, const std::string& field) {
    auto r = s->submit(std::move(job), out.callback(99));
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().to_string();
  };
  expect_refused(c.job(d, c.prompt(9, 0)), StatusCode::kInvalidArgument, "tokens");
  expect_refused(c.job(d, c.prompt(11, 0)), StatusCode::kInvalidArgument, "reservation.rows");
  expect_refused(c.job(d, {}), StatusCode::kInvalidArgument, "tokens: empty");
  auto bad_token = c.prompt(10, 0);
  bad_token[3] = c.full->config().vocab_size;
  expect_refused(c.job(d, bad_token), StatusCode::kInvalidArgument, "tokens[3]");
  bad_token[3] = -1;
  expect_refused(c.job(d, bad_token), StatusCode::kInvalidArgument, "tokens[3]");
  auto other_model = d;
  other_model.fingerprint ^= 1;
  expect_refused(c.job(other_model, c.prompt(10, 0)), StatusCode::kFailedPrecondition, "reservation.fingerprint");
  auto other_dim = d;
  other_dim.kv_dim *= 2;
  expect_refused(c.job(other_dim, c.prompt(10, 0)), StatusCode::kFailedPrecondition, "reservation.kv_dim");
  auto wrong_request = c.job(d, c.prompt(10, 0));
  wrong_request.request_id = "someone-else";
  expect_refused(wrong_request, StatusCode::kInvalidArgument, "request_id");
  auto broken = d;
  broken.blocks.clear();
  expect_refused(c.job(broken, c.prompt(10, 0)), StatusCode::kInvalidArgument, "reservation");

  // The queue bound counts tokens not yet computed.
  const auto big = c.reserve("big", 120);
  expect_refused(c.job(big, c.prompt(120, 0)), StatusCode::kResourceExhausted, "tokens");
  c.sender->close_at(0);  // the first job holds its 60 tokens in the queue
  const auto d60 = c.reserve("sixty", 60), d50 = c.reserve("fifty", 50), d40 = c.reserve("forty", 40);
  ASSERT_TRUE(s->submit(c.job(d60, c.prompt(60, 1)), out.callback(0)).ok());
  ASSERT_TRUE(c.sender->wait_held(seconds(20)));
  EXPECT_EQ(s->load().queued_tokens, 60);
  expect_refused(c.job(d50, c.prompt(50, 2)), StatusCode::kResourceExhausted, "tokens");
  ASSERT_TRUE(s->submit(c.job(d40, c.prompt(40, 3)), out.callback(1)).ok());
  c.sender->open();
  for (int key : {0, 1}) {
    auto o = out.wait(key);
    ASSERT_TRUE(o.has_value());
    EXPECT_TRUE(o->status.ok()) << o->status.to_string();
  }
  for (const auto& ok : {d60, d40}) {
    auto cs = c.receiver->wait_committed(ok.reservation_id, in(seconds(10)));
    ASSERT_TRUE(cs.ok()) << cs.status().to_string();
    c.pool->release_blocks(cs->blocks);
  }
  // Refusals send nothing: those reservations are the caller's to drop (or retry elsewhere).
  for (const auto& refused : {d, big, d50}) c.receiver->cancel(refused.reservation_id);
  EXPECT_TRUE(c.pool_idle());
  EXPECT_EQ(c.sender->metrics().snapshot().failures, 0);
}

// A KV store whose writes of K/V blocks ("kv:" keys) wait at a gate until open() (or a minute, so
// that a wrong order fails its test instead of hanging it). Everything else goes straight through.
class GatedBlockStore final : public KvStore {
 public:
  explicit GatedBlockStore(KvStore& inner) : inner_(inner) {}
  KvGetResult get(std::string_view key) override { return inner_.get(key); }
  Status put(std::string_view key, std::string_view value, std::chrono::seconds ttl) override {
    if (key.starts_with("kv:")) {
      std::unique_lock<std::mutex> lock(mu_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait_for(lock, seconds(60), [&] { return open_; });
      --waiting_;
    }
    return inner_.put(key, value, ttl);
  }
  Status del(std::string_view key) override { return inner_.del(key); }
  Status set_add(std::string_view set, std::string_view member) override { return inner_.set_add(set, member); }
  Status set_remove(std::string_view set, std::string_view member) override { return inner_.set_remove(set, member); }
  Result<std::vector<std::string>> set_members(std::string_view set) override { return inner_.set_members(set); }
  std::string name() const override { return "gated(" + inner_.name() + ")"; }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait_block_write(seconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return waiting_ > 0; });
  }

 private:
  KvStore& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int waiting_ = 0;
};

// Automatic prefix caching writes a prompt's blocks back after its commit has gone out, not
// before (docs/design.md §5): with the store's block writes held, the prompt is still committed;
// once they are let through, the next prompt on the same prefix resumes from them.
TEST_F(PrefillSchedulerTest, APromptsBlocksAreWrittenBackAfterItsCommit) {
  Cluster c("tiny-gret");
  auto mem = make_kv_store("memory:64MiB");
  ASSERT_TRUE(mem.ok());
  GatedBlockStore store(**mem);
  KvCacheOptions co;
  co.fingerprint = c.prefill->fingerprint();
  co.kv_dim = c.prefill->config().kv_dim();
  co.block_tokens = 32;
  KvCache cache(store, co);
  PrefillLimits lim;
  lim.chunk_tokens = 64;
  auto s = PrefillScheduler::create(*c.prefill, *c.sender, lim, &cache, /*write_prompts=*/true);
  ASSERT_TRUE(s.ok());
  (*s)->start();
  Outcomes out;
  const auto prompt = c.prompt(100, 5);
  const auto d1 = c.reserve("first", 100);
  ASSERT_TRUE((*s)->submit(c.job(d1, prompt), out.callback(0)).ok());
  auto o1 = out.wait(0, seconds(20));  // the gate holds the block writes for a minute
  ASSERT_TRUE(o1.has_value()) << "the commit waited for the KV store's block writes";
  ASSERT_TRUE(o1->status.ok()) << o1->status.to_string();
  EXPECT_EQ(o1->stats.cached_tokens, 0);
  EXPECT_TRUE(store.wait_block_write(seconds(20)));  // the write-back is under way, held
  auto c1 = c.receiver->wait_committed(d1.reservation_id, in(seconds(10)));
  ASSERT_TRUE(c1.ok()) << c1.status().to_string();
  c.pool->release_blocks(c1->blocks);
  store.open();
  // Started after the first finished (and after its write-back, on the compute thread): it
  // resumes at the last whole block the first one wrote.
  const auto d2 = c.reserve("second", 100);
  ASSERT_TRUE((*s)->submit(c.job(d2, prompt), out.callback(1)).ok());
  auto o2 = out.wait(1);
  ASSERT_TRUE(o2.has_value() && o2->status.ok()) << (o2 ? o2->status.to_string() : "no outcome");
  EXPECT_EQ(o2->stats.cached_tokens, 96);
  auto c2 = c.receiver->wait_committed(d2.reservation_id, in(seconds(10)));
  ASSERT_TRUE(c2.ok()) << c2.status().to_string();
  c.pool->release_blocks(c2->blocks);
  (*s)->stop();
  EXPECT_TRUE(c.pool_idle());
}

// CacheDocument's job: computed in the scheduler's slices next to a prompt, then stored whole in
// the KV store; the stored state is the document's state (as a scratch prefill computes it).
// Resident rows (docs/design.md, resident prefixes): the decode worker already holds the
// document's first whole blocks, so the prefill worker neither loads them from the KV store (they
// are deleted there: a load would miss and recompute) nor ships them; the sequence the decode
// worker admits over its own blocks is still the full prompt's.
TEST_F(PrefillSchedulerTest, ResidentRowsAreNeitherLoadedNorShipped) {
  Cluster c("tiny-gret");
  auto store = make_kv_store("memory:64MiB");
  ASSERT_TRUE(store.ok());
  KvCacheOptions co;
  co.fingerprint = c.prefill->fingerprint();
  co.kv_dim = c.prefill->config().kv_dim();
  co.block_tokens = 32;  // the pool's block size
  KvCache cache(**store, co);
  PrefillLimits lim;
  lim.chunk_tokens = 32;
  auto s = PrefillScheduler::create(*c.prefill, *c.sender, lim, &cache, /*write_prompts=*/false);
  ASSERT_TRUE(s.ok());
  (*s)->start();
  Outcomes out;
  PrefillJob doc;
  doc.tokens = c.prompt(100, 3);
  doc.document = true;
  ASSERT_TRUE((*s)->submit(doc, out.callback(0)).ok());
  ASSERT_TRUE(out.wait(0).has_value() && out.wait(0)->status.ok());
  std::vector<int32_t> prompt = doc.tokens;
  const auto question = c.prompt(20, 4);
  prompt.insert(prompt.end(), question.begin(), question.end());
  // The first question ships everything; its first 3 blocks stay with the decode side.
  const auto d1 = c.reserve("first", 120);
  PrefillJob j1 = c.job(d1, prompt);
  j1.cached_prefix_candidates = {100};
  ASSERT_TRUE((*s)->submit(j1, out.callback(1)).ok());
  ASSERT_TRUE(out.wait(1).has_value() && out.wait(1)->status.ok());
  EXPECT_EQ(out.wait(1)->stats.cached_tokens, 100);
  auto c1 = c.receiver->wait_committed(d1.reservation_id, in(seconds(10)));
  ASSERT_TRUE(c1.ok()) << c1.status().to_string();
  std::vector<int32_t> resident(c1->blocks.begin(), c1->blocks.begin() + 3);
  c.pool->release_blocks(std::span<const int32_t>(c1->blocks).subspan(3));
  for (const BlockKey& k : chain_keys(std::span<const int32_t>(prompt).first(96), 32, co.fingerprint))
    ASSERT_TRUE((*store)->del(block_store_key(k)).ok());
  auto d2 = c.receiver->reserve_over("second", 120, in(seconds(60)), resident);
  ASSERT_TRUE(d2.ok()) << d2.status().to_string();
  auto parsed = ReservationDescriptor::parse(d2->serialize());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->resident_rows, 96);
  PrefillJob j2 = c.job(*parsed, prompt);
  j2.cached_prefix_candidates = {100};
  c.sender->reset_lowest_row();
  ASSERT_TRUE((*s)->submit(j2, out.callback(2)).ok());
  auto o = out.wait(2);
  ASSERT_TRUE(o.has_value() && o->status.ok()) << (o ? o->status.to_string() : "no outcome");
  EXPECT_EQ(o->stats.cached_tokens, 100);  // the state and the rows past the resident blocks: loaded
  EXPECT_EQ(o->stats.resident_rows, 96);
  EXPECT_EQ(c.sender->lowest_row(), 96);  // the first row past the resident blocks
  auto c2 = c.receiver->wait_committed(parsed->reservation_id, in(seconds(10)));
  ASSERT_TRUE(c2.ok()) << c2.status().to_string();
  EXPECT_EQ(std::vector<int32_t>(c2->blocks.begin(), c2->blocks.begin() + 3), resident);
  // Every row the decode side holds is the full prompt's, computed in one go here.
  SequenceState want = c.prefill->new_sequence();
  ASSERT_TRUE(c.prefill->prefill(want, prompt, PrefillOptions{lim.chunk_tokens, lim.retention_chunk}).ok());
  const int kv_dim = c.prefill->config().kv_dim();
  for (int64_t r = 0; r < 120; ++r)
    for (int i = 0; i < kv_dim; ++i)
      ASSERT_NEAR(c.pool->k_data()[c.pool->row_offset(c2->blocks, r) + i], want.k[r * kv_dim + i], 1e-4) << r;
  c.pool->release_blocks(c2->blocks);
  EXPECT_TRUE(c.pool_idle());
}

TEST_F(PrefillSchedulerTest, DocumentJobsAreComputedInSlicesAndStored) {
  Cluster c("tiny-gret");
  auto store = make_kv_store("memory:64MiB");
  ASSERT_TRUE(store.ok());
  KvCacheOptions co;
  co.fingerprint = c.prefill->fingerprint();
  co.kv_dim = c.prefill->config().kv_dim();
  co.block_tokens = 16;
  KvCache cache(**store, co);
  PrefillLimits lim;
  lim.chunk_tokens = 24;  // the document and the prompt share every step
  auto s = PrefillScheduler::create(*c.prefill, *c.sender, lim, &cache, /*write_prompts=*/false);
  ASSERT_TRUE(s.ok());
  (*s)->start();
  Outcomes out;
  const auto d = c.reserve("prompt", 70);
  ASSERT_TRUE((*s)->submit(c.job(d, c.prompt(70, 1)), out.callback(0)).ok());
  PrefillJob doc;
  doc.tokens = c.prompt(100, 2);
  doc.document = true;
  doc.document_ttl = seconds(60);
  ASSERT_TRUE((*s)->submit(doc, out.callback(1)).ok());
  for (int key : {0, 1}) {
    auto o = out.wait(key);
    ASSERT_TRUE(o.has_value());
    ASSERT_TRUE(o->status.ok()) << o->status.to_string();
  }
  const DocumentRecord rec = out.wait(1)->document;
  EXPECT_EQ(rec.id, document_id(doc.tokens, c.prefill->fingerprint()));
  EXPECT_EQ(rec.tokens, doc.tokens);
  EXPECT_GT(out.wait(1)->stats.chunks.size(), 4u);  // sliced, not one call
  auto loaded = cache.load_document(rec.id);
  ASSERT_TRUE(loaded.ok() && loaded->has_value() && (*loaded)->cached);
  SequenceState got;
  ASSERT_TRUE(restore_prefix(cache, *(*loaded)->cached, c.prefill->config(), got).ok());
  SequenceState want = c.prefill->new_sequence();
  ASSERT_TRUE(c.prefill->prefill(want, doc.tokens, PrefillOptions{lim.chunk_tokens, lim.retention_chunk}).ok());
  ASSERT_EQ(got.position, want.position);
  ASSERT_EQ(got.k.size(), want.k.size());
  for (size_t i = 0; i < want.k.size(); ++i) ASSERT_NEAR(got.k[i], want.k[i], 1e-4) << i;
  auto cs = c.receiver->wait_committed(d.reservation_id, in(seconds(10)));
  ASSERT_TRUE(cs.ok()) << cs.status().to_string();
  c.pool->release_blocks(cs->blocks);
  EXPECT_EQ((*s)->load().queued_tokens, 0);

  // Without a KV store there is nowhere to keep a document.
  auto bare = c.scheduler(lim);
  auto r = bare->submit(doc, out.callback(2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("document"), std::string::npos);
  (*s)->stop();
}

TEST_F(PrefillSchedulerTest, StopDrainsInFlightJobsThenRefuses) {
  Cluster c("tiny-gret");
  PrefillLimits lim;
  lim.chunk_tokens = 16;
  lim.max_active = 2;
  auto s = c.scheduler(lim);
  s->start();
  Outcomes out;
  std::vector<ReservationDescriptor> ds;
  for (int i = 0; i < 3; ++i) {
    ds.push_back(c.reserve("drain-" + std::to_string(i), 50 + i));
    ASSERT_TRUE(s->submit(c.job(ds[i], c.prompt(50 + i, i)), out.callback(i)).ok());
  }
  s->stop(seconds(30));
  for (int i = 0; i < 3; ++i) {
    auto o = out.wait(i, seconds(1));  // stop() returned: everything completed
    ASSERT_TRUE(o.has_value());
    EXPECT_TRUE(o->status.ok()) << o->status.to_string();
    auto cs = c.receiver->wait_committed(ds[i].reservation_id, in(seconds(10)));
    ASSERT_TRUE(cs.ok());
    c.pool->release_blocks(cs->blocks);
  }
  const auto late = c.reserve("late", 10);
  auto r = s->submit(c.job(late, c.prompt(10, 9)), out.callback(9));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  c.receiver->cancel(late.reservation_id);
  EXPECT_TRUE(c.pool_idle());
}

TEST_F(PrefillSchedulerTest, StopWithoutDrainEndsHeldJobsUnavailable) {
  Cluster c("tiny-gret");
  PrefillLimits lim;
  lim.chunk_tokens = 16;
  lim.max_active = 1;
  auto s = c.scheduler(lim);
  s->start();
  c.sender->close_at(16);
  Outcomes out;
  const auto da = c.reserve("held", 40), db = c.reserve("queued", 20);
  ASSERT_TRUE(s->submit(c.job(da, c.prompt(40, 1)), out.callback(0)).ok());
  ASSERT_TRUE(s->submit(c.job(db, c.prompt(20, 2)), out.callback(1)).ok());
  ASSERT_TRUE(c.sender->wait_held(seconds(20)));
  std::thread opener([&] {
    std::this_thread::sleep_for(milliseconds(200));
    c.sender->open();
  });
  s->stop();
  opener.join();
  for (int key : {0, 1}) {
    auto o = out.wait(key, seconds(1));
    ASSERT_TRUE(o.has_value());
    EXPECT_EQ(o->status.code(), StatusCode::kUnavailable) << o->status.to_string();
  }
  c.expect_reservation_failed(da);
  c.expect_reservation_failed(db);
  EXPECT_TRUE(c.pool_idle());
}

TEST(PrefillLimits, ValidateNamesTheField) {
  PrefillLimits lim;
  EXPECT_TRUE(lim.validate().ok());
  lim.chunk_tokens = 0;
  EXPECT_NE(lim.validate().message().find("chunk_tokens"), std::string::npos);
  lim = {};
  lim.max_active = -1;
  EXPECT_NE(lim.validate().message().find("max_active"), std::string::npos);
  lim = {};
  lim.max_queued_tokens = 0;
  EXPECT_NE(lim.validate().message().find("max_queued_tokens"), std::string::npos);
}

}  // namespace
}  // namespace yoco
