// GenerateCall's retry, migration and stall stages (router/generate_call.h) over in-memory workers
// (fake_workers.h) and an in-memory client: no server, no process, each case in milliseconds. The
// WorkerGroups, the model cache, RouterCore and the StallWatch are the production ones.
#include "router/generate_call.h"

#include <gtest/gtest.h>

#include "common/metrics.h"
#include "router/model_info.h"
#include "tests/unit/router/fake_workers.h"

namespace yoco {
namespace {

using test::DecodeScript;
using test::FakeClient;
using test::FakeWorkers;
using test::PrefillScript;

constexpr int64_t kStallMs = 50;

std::vector<Target> targets(const std::string& prefix, int n) {
  std::vector<Target> out;
  for (int i = 0; i < n; ++i) out.push_back({prefix + std::to_string(i), 7000, false});
  return out;
}

WorkerGroupOptions fast_polls() {
  WorkerGroupOptions o;
  o.poll_interval = std::chrono::milliseconds(5);
  return o;
}

// A router over `n_prefill` and `n_decode` fake workers, started as main.cc starts one.
struct Router {
  Router(int n_prefill, int n_decode)
      : prefill(WorkerRole::kPrefill, targets("p", n_prefill), fast_polls()),
        decode(WorkerRole::kDecode, targets("d", n_decode), fast_polls()) {
    RouterLimits lim;
    lim.stall_timeout_ms = kStallMs;
    decode.set_on_poll([this] { model.refresh(); });
    prefill.start(workers);
    decode.start(workers);
    core = std::make_unique<RouterCore>(nullptr, prefill, decode, model, workers, lim, metrics, /*colocated=*/false);
  }
  ~Router() {
    prefill.stop();
    decode.stop();
  }

  grpc::Status generate(FakeClient& client) {
    v1::GenerateRequest req;
    req.mutable_tokens()->mutable_ids()->Add(prompt.begin(), prompt.end());
    req.set_max_tokens(5);
    return GenerateCall(*core, client, req).run();
  }
  // A counter's value in the router's metrics, 0 when it was never counted.
  double counter(const std::string& series) const {
    const std::string text = registry.expose();
    const size_t at = text.find("\n" + series + " ");
    return at == std::string::npos ? 0 : std::stod(text.substr(at + series.size() + 2));
  }

  const std::vector<int32_t> prompt{1, 2, 3, 4, 5, 6, 7, 8};
  FakeWorkers workers;
  MetricsRegistry registry;
  RouterMetrics metrics{registry};
  WorkerGroup prefill, decode;
  ModelInfoCache model{decode, workers};
  std::unique_ptr<RouterCore> core;
};

std::vector<int32_t> ids(const google::protobuf::RepeatedField<int32_t>& f) { return {f.begin(), f.end()}; }

const std::string kPrefillRetries = "yoco_router_retries_total{kind=\"prefill\"}";
const std::string kMigrations = "yoco_router_retries_total{kind=\"migration\"}";
const std::string kStalls = "yoco_router_stalled_streams_total";

TEST(GenerateCall, PrefillUnavailableThenOkElsewhere) {
  Router r(/*n_prefill=*/2, /*n_decode=*/1);
  r.workers.script_decode({});  // its reservation is given back when the prefill fails
  r.workers.script_decode({.tokens = {11, 12, 13, 14, 15}});
  r.workers.script_prefill({.status = {grpc::StatusCode::UNAVAILABLE, "prefill worker down"}});
  r.workers.script_prefill({});
  FakeClient client;
  const grpc::Status st = r.generate(client);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(client.tokens(), (std::vector<int32_t>{11, 12, 13, 14, 15}));
  EXPECT_TRUE(client.has_final());
  const auto prefills = r.workers.prefills();
  ASSERT_EQ(prefills.size(), 2u);
  EXPECT_NE(prefills[1].address, prefills[0].address) << "retried on the worker that failed";
  const auto decodes = r.workers.decodes();
  ASSERT_EQ(decodes.size(), 2u);
  EXPECT_TRUE(decodes[0].cancelled) << "the failed attempt's reservation was kept";
  EXPECT_FALSE(decodes[1].cancelled);
  EXPECT_EQ(r.counter(kPrefillRetries), 1);
  EXPECT_EQ(r.counter(kMigrations), 0);
}

TEST(GenerateCall, PrefillFailuresEndAfterTheAttemptLimit) {
  Router r(3, 1);  // one worker per attempt: none is left healthy only until the next poll
  for (int i = 0; i < 3; ++i) r.workers.script_prefill({.status = {grpc::StatusCode::UNAVAILABLE, "down"}});
  FakeClient client;
  const grpc::Status st = r.generate(client);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(st.error_message().find("prefill failed on 3 attempts"), std::string::npos) << st.error_message();
  EXPECT_EQ(r.workers.prefills().size(), 3u);
  for (const auto& d : r.workers.decodes()) EXPECT_TRUE(d.cancelled);
}

TEST(GenerateCall, DecodeDiesAfterThreeTokens) {
  Router r(1, 2);
  r.workers.script_decode({.tokens = {11, 12, 13}, .end = {grpc::StatusCode::UNAVAILABLE, "worker lost"}});
  r.workers.script_decode({.tokens = {14, 15}});
  FakeClient client;
  const grpc::Status st = r.generate(client);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(client.tokens(), (std::vector<int32_t>{11, 12, 13, 14, 15})) << "a token lost or repeated";
  const auto decodes = r.workers.decodes();
  ASSERT_EQ(decodes.size(), 2u);
  EXPECT_NE(decodes[1].address, decodes[0].address);
  EXPECT_EQ(ids(decodes[1].req.generated()), (std::vector<int32_t>{11, 12, 13}));
  const auto prefills = r.workers.prefills();
  ASSERT_EQ(prefills.size(), 2u);  // prompt + the tokens already streamed, prefilled again
  std::vector<int32_t> again = r.prompt;
  again.insert(again.end(), {11, 12, 13});
  EXPECT_EQ(ids(prefills[1].req.tokens()), again);
  EXPECT_EQ(r.counter(kMigrations), 1);
  EXPECT_EQ(r.counter(kStalls), 0);
}

TEST(GenerateCall, DecodeSilentPastTheStallTimeout) {
  Router r(1, 2);
  r.workers.script_decode({.tokens = {11, 12}, .silent_after_tokens = true, .worker_hangs = true});
  r.workers.script_decode({.tokens = {13, 14, 15}});
  FakeClient client;
  const auto t0 = std::chrono::steady_clock::now();
  const grpc::Status st = r.generate(client);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(kStallMs));
  EXPECT_EQ(client.tokens(), (std::vector<int32_t>{11, 12, 13, 14, 15}));
  const auto decodes = r.workers.decodes();
  ASSERT_EQ(decodes.size(), 2u);
  EXPECT_TRUE(decodes[0].cancelled);
  EXPECT_NE(decodes[1].address, decodes[0].address);
  EXPECT_EQ(ids(decodes[1].req.generated()), (std::vector<int32_t>{11, 12}));
  EXPECT_EQ(r.counter(kStalls), 1);
  EXPECT_EQ(r.counter(kMigrations), 1);
}

// Silence alone is not a hang: a worker that answers its polls is slow, and is left alone.
TEST(GenerateCall, DecodeSilentButAnsweringIsLeftAlone) {
  Router r(1, 2);
  r.workers.script_decode(
      {.tokens = {11, 12, 13, 14, 15}, .silence_before_tokens = std::chrono::milliseconds(3 * kStallMs)});
  FakeClient client;
  const grpc::Status st = r.generate(client);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(client.tokens(), (std::vector<int32_t>{11, 12, 13, 14, 15}));
  ASSERT_EQ(r.workers.decodes().size(), 1u);
  EXPECT_EQ(r.counter(kStalls), 0);
}

// The stall watch covers the Prefill call (StallWatch::Link): a decode worker that hangs after its
// reservation, while the prefill waits for its commit acknowledgement, cancels both calls, and
// the request is prefilled again elsewhere; the prefill worker is not blamed.
TEST(GenerateCall, DecodeHungDuringPrefillBeforeTheFirstToken) {
  Router r(1, 2);
  r.workers.script_decode({.worker_hangs = true});
  r.workers.script_decode({.tokens = {11, 12, 13, 14, 15}});
  r.workers.script_prefill({.hang = true});
  r.workers.script_prefill({});
  FakeClient client;
  const grpc::Status st = r.generate(client);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(client.tokens(), (std::vector<int32_t>{11, 12, 13, 14, 15}));
  const auto prefills = r.workers.prefills();
  ASSERT_EQ(prefills.size(), 2u);
  EXPECT_TRUE(prefills[0].cancelled) << "the linked Prefill call was not cancelled";
  const auto decodes = r.workers.decodes();
  ASSERT_EQ(decodes.size(), 2u);
  EXPECT_TRUE(decodes[0].cancelled);
  EXPECT_NE(decodes[1].address, decodes[0].address);
  EXPECT_TRUE(decodes[1].req.generated().empty());
  EXPECT_EQ(r.counter(kStalls), 1);
  EXPECT_EQ(r.counter(kMigrations), 1);
  EXPECT_EQ(r.counter(kPrefillRetries), 0) << "a hung decode worker counted as a prefill failure";
}

TEST(GenerateCall, DecodeHungBeforeItsReservation) {
  Router r(1, 2);
  r.workers.script_decode({.silent_from_start = true, .worker_hangs = true});
  r.workers.script_decode({.tokens = {11, 12, 13, 14, 15}});
  FakeClient client;
  const grpc::Status st = r.generate(client);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(client.tokens(), (std::vector<int32_t>{11, 12, 13, 14, 15}));
  EXPECT_EQ(r.workers.prefills().size(), 1u);  // only the second attempt got a reservation
  const auto decodes = r.workers.decodes();
  ASSERT_EQ(decodes.size(), 2u);
  EXPECT_TRUE(decodes[0].cancelled);
  EXPECT_EQ(r.counter(kStalls), 1);
}

// A long prefill while the decode worker answers its polls: the reservation wait is not a hang.
TEST(GenerateCall, SlowPrefillWithAnAnsweringDecodeWorkerIsNotStalled) {
  Router r(1, 2);
  r.workers.script_decode({.tokens = {11, 12, 13, 14, 15}});
  r.workers.script_prefill({.delay = std::chrono::milliseconds(3 * kStallMs)});
  FakeClient client;
  const grpc::Status st = r.generate(client);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(r.workers.decodes().size(), 1u);
  ASSERT_EQ(r.workers.prefills().size(), 1u);
  EXPECT_FALSE(r.workers.prefills()[0].cancelled);
  EXPECT_EQ(r.counter(kStalls), 0);
}

TEST(GenerateCall, ClientCancelsDuringPrefill) {
  Router r(2, 2);
  FakeClient client;
  r.workers.script_prefill({.hang = true, .on_start = [&client] { client.cancel(); }});
  const grpc::Status st = r.generate(client);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED) << st.error_message();
  EXPECT_FALSE(client.has_final());
  EXPECT_EQ(r.workers.prefills().size(), 1u) << "retried for a client that went away";
  const auto decodes = r.workers.decodes();
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_TRUE(decodes[0].cancelled) << "the reservation was kept";
  EXPECT_EQ(r.counter(kPrefillRetries), 0);
  EXPECT_EQ(r.counter(kMigrations), 0);
}

}  // namespace
}  // namespace yoco
