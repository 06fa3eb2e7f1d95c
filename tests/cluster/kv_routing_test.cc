// KV-aware decode routing (docs/design.md §3.3): two decode workers, repeated documents. A request
// whose prompt starts with a document goes to the decode worker that holds the document's blocks
// even when the other one has more free blocks (the free-blocks-only router sends it there
// instead); a worker that lost the prefix (evicted, or killed) is not assumed to hold it beyond
// its next load report, and the request is served correctly either way.
#include <signal.h>

#include <cmath>

#include "handoff/prefix_chain.h"
#include "tests/support/cluster_harness.h"
#include "yoco/internal/v1/worker.grpc.pb.h"

namespace yoco {
namespace {

using std::chrono::milliseconds;
using test::LocalCluster;
using test::reference;

const std::string kModel = std::string(YOCO_SOURCE_DIR) + "/models/kjv-yoco";
constexpr int kBlocks = 80;  // per decode worker; blocks of 32 rows
constexpr int kMaxTokens = 4;
constexpr int kPollMs = 100;        // the router's --health-interval-ms
constexpr int kReportWaitMs = 600;  // a few polls: the router has the workers' latest reports

std::vector<int32_t> random_tokens(int n, uint64_t seed) {
  std::vector<int32_t> out(n);
  uint64_t x = seed;
  for (auto& t : out) t = static_cast<int32_t>((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 33) % 4096;
  return out;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

double metric(const test::ProcInfo& p, const std::string& name) {
  const double v = test::metric_value(test::http_get_body(test::port_of(p.metrics), "/metrics"), name);
  return std::isnan(v) ? 0 : v;
}

// A Decode opened on one decode worker directly that reserves `rows` rows and waits for a commit
// that never comes: load (blocks held) on that worker until it goes out of scope.
class HeldReservation {
 public:
  HeldReservation(const std::string& address, int rows) {
    stub_ = internal::v1::DecodeWorker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    internal::v1::DecodeRequest req;
    req.set_request_id("held-" + std::to_string(rows));
    for (int32_t t : random_tokens(rows, 99)) req.add_prompt(t);
    req.set_max_tokens(1);
    req.mutable_sampling()->set_temperature(0);
    req.set_lease_ms(30000);
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    reader_ = stub_->Decode(&ctx_, req);
    internal::v1::DecodeEvent ev;
    reserved_ = reader_->Read(&ev) && ev.kind_case() == internal::v1::DecodeEvent::kReservation;
  }
  ~HeldReservation() {
    ctx_.TryCancel();
    internal::v1::DecodeEvent ev;
    while (reader_->Read(&ev)) {
    }
    reader_->Finish();
  }
  bool reserved() const { return reserved_; }

 private:
  std::unique_ptr<internal::v1::DecodeWorker::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<internal::v1::DecodeEvent>> reader_;
  bool reserved_ = false;
};

struct Fixture {
  explicit Fixture(const std::string& routing, std::vector<std::string> decode_args = {})
      : cluster({.model = kModel,
                 .prefill = 1,
                 .decode = 2,
                 .kv_blocks = kBlocks,
                 .decode_args = std::move(decode_args),
                 .router_args = {"--health-interval-ms=" + std::to_string(kPollMs), "--decode-routing=" + routing},
                 .secure = false}) {}
  LocalCluster cluster;
  std::unique_ptr<Model> model;
  const std::vector<int32_t> doc = random_tokens(1024, 1);  // 32 whole blocks

  // Greedy doc + question through the router, checked against the in-process engine; returns the
  // index of the decode worker whose residency counters moved.
  int ask(uint64_t question) {
    const auto prompt = concat(doc, random_tokens(16, 1000 + question));
    std::vector<double> before;
    for (const auto& d : cluster.decode()) before.push_back(metric(d, "yoco_kv_residency_blocks_total"));
    auto stub = cluster.stub();
    const test::Generated g = test::run_generate(*stub, test::greedy(prompt, kMaxTokens), milliseconds(120000));
    EXPECT_TRUE(g.status.ok()) << g.status.error_message() << cluster.logs();
    EXPECT_EQ(g.ids, reference(*model, prompt, kMaxTokens)) << "question " << question;
    for (size_t i = 0; i < cluster.decode().size(); ++i)
      if (kill(cluster.decode()[i].pid, 0) == 0 &&
          metric(cluster.decode()[i], "yoco_kv_residency_blocks_total") > before[i])
        return static_cast<int>(i);
    return -1;
  }
  double hits(int worker) { return metric(cluster.decode()[worker], "yoco_kv_resident_blocks_total"); }
  double predicted() { return metric(cluster.router(), "yoco_router_residency_predicted_hits_total"); }
};

void settle() { std::this_thread::sleep_for(milliseconds(kReportWaitMs)); }

TEST(ClusterKvRouting, SamePrefixGoesToTheHoldingWorkerAndALostPrefixStillServes) {
  Fixture f("kv");
  ASSERT_TRUE(f.cluster.ready()) << f.cluster.logs();
  auto m = Model::load(kModel);
  ASSERT_TRUE(m.ok());
  f.model = std::move(m).value();

  const int x = f.ask(1);
  ASSERT_GE(x, 0) << f.cluster.logs();
  const int y = 1 - x;
  settle();
  // The other worker has more free blocks (x carries a held reservation of 10 blocks), but x holds
  // the document's 32 blocks: cost 0 + 10 on x against 32 + 0 on y.
  {
    HeldReservation load(f.cluster.decode()[x].grpc, 320);
    ASSERT_TRUE(load.reserved());
    settle();
    for (uint64_t q = 2; q <= 4; ++q) {
      const double h = f.hits(x), p = f.predicted();
      EXPECT_EQ(f.ask(q), x) << "question " << q;
      EXPECT_EQ(f.hits(x) - h, 32) << "question " << q;  // the whole document was resident
      EXPECT_EQ(f.predicted() - p, 32) << "question " << q;
    }
    EXPECT_EQ(f.hits(y), 0);
  }
  // Eviction: a reservation of the whole pool takes x's retained blocks. After x's next report
  // the router predicts nothing for the document, and the request is served by a normal transfer.
  settle();
  {
    HeldReservation all(f.cluster.decode()[x].grpc, kBlocks * 32);
    ASSERT_TRUE(all.reserved());
  }
  settle();
  const double p = f.predicted(), hx = f.hits(x), hy = f.hits(y);
  const int z = f.ask(5);
  ASSERT_GE(z, 0);
  EXPECT_EQ(f.predicted() - p, 0);
  EXPECT_EQ(f.hits(x) + f.hits(y) - hx - hy, 0);
  // Restart: the worker now holding the document dies; the router may still bet on it until its
  // next poll, and the request moves to the other worker (a normal transfer) with the same tokens.
  settle();
  ASSERT_EQ(kill(f.cluster.decode()[z].pid, SIGKILL), 0);
  EXPECT_EQ(f.ask(6), 1 - z);
}

// The old choice stays selectable: --decode-routing=free-blocks sends the same request to the
// worker with more free blocks, whatever the other holds. And the residency summary is bounded:
// with --residency-keys=8 GetLoad lists the document's first 8 chain keys, in chain order.
TEST(ClusterKvRouting, FreeBlocksOnlyIgnoresResidencyAndTheSummaryIsBounded) {
  Fixture f("free-blocks", {"--residency-keys=8"});
  ASSERT_TRUE(f.cluster.ready()) << f.cluster.logs();
  auto m = Model::load(kModel);
  ASSERT_TRUE(m.ok());
  f.model = std::move(m).value();
  const int x = f.ask(1);
  ASSERT_GE(x, 0) << f.cluster.logs();
  {
    auto stub = internal::v1::DecodeWorker::NewStub(
        grpc::CreateChannel(f.cluster.decode()[x].grpc, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    internal::v1::DecodeLoad load;
    ASSERT_TRUE(stub->GetLoad(&ctx, internal::v1::LoadRequest(), &load).ok());
    std::vector<uint64_t> want;
    for (const BlockKey& k : chain_keys(f.doc, 32, f.model->fingerprint())) want.push_back(k.fold64());
    want.resize(8);
    EXPECT_EQ(std::vector<uint64_t>(load.resident_blocks().begin(), load.resident_blocks().end()), want);
  }
  settle();
  HeldReservation load(f.cluster.decode()[x].grpc, 320);
  ASSERT_TRUE(load.reserved());
  settle();
  EXPECT_EQ(f.ask(2), 1 - x);
}

}  // namespace
}  // namespace yoco
