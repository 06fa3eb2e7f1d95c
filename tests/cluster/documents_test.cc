// RAG pre-caching through the cluster (issue 5): a cached document + a question generates
// exactly what the uncached full prompt does, for gRet, SWA and YOCO-U models, with the
// memory, dir and redis KV stores (and redis over TLS); ordinary prompts reuse their cached prefix; the document
// RPCs' bad inputs get the right status. Real processes on 127.0.0.1, real redis-server.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>

#include "model/generate.h"
#include "model/random_model.h"
#include "tests/support/cluster_harness.h"
#include "tests/unit/test_pki.h"

namespace yoco {
namespace {

using std::chrono::milliseconds;
using test::greedy;
using test::LocalCluster;
using test::reference;

const std::string kGret = std::string(YOCO_SOURCE_DIR) + "/models/kjv-yoco";
const std::string kYocoU = std::string(YOCO_SOURCE_DIR) + "/models/kjv-yoco-u";

// A redis-server on a free loopback port for the life of the test; with a PKI, TLS only and a
// client certificate required.
class RedisServer {
 public:
  // port 0: a free one.
  explicit RedisServer(const std::string& dir, int port = 0, const test::TestPki* tls = nullptr) : port_(port) {
    if (port_ == 0) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t len = sizeof a;
      bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
      port_ = ntohs(a.sin_port);
      close(fd);
    }
    pid_ = fork();
    if (pid_ == 0) {
      freopen((dir + "/redis.log").c_str(), "w", stdout);
      const std::string port = std::to_string(port_);
      std::vector<std::string> args{"redis-server", "--bind", "127.0.0.1", "--save", "",
                                    "--appendonly", "no",     "--dir",     dir,      "--enable-debug-command",
                                    "local"};
      const std::vector<std::string> listen =
          tls ? tls->redis_server_args(port_) : std::vector<std::string>{"--port", port};
      args.insert(args.end(), listen.begin(), listen.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("redis-server", argv.data());
      _exit(127);
    }
    for (int i = 0; i < 100 && !up(); ++i) std::this_thread::sleep_for(milliseconds(50));
  }
  ~RedisServer() {
    if (pid_ > 0) {
      kill(pid_, SIGCONT);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool up() const {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    return ok;
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  int port_ = 0;
  pid_t pid_ = -1;
};

struct Case {
  std::string model, backend;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.model << " + " << c.backend; }
};

class ClusterDocuments : public ::testing::TestWithParam<Case> {};

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::vector<int32_t> out(n);
  for (auto& t : out) t = static_cast<int32_t>((seed = seed * 1664525u + 1013904223u) >> 8) % vocab;
  return out;
}

TEST_P(ClusterDocuments, CachedDocumentPlusQuestionEqualsUncachedPrompt) {
  test::TempDir tmp;
  std::string dir = GetParam().model;
  if (dir == "tiny-swa") {
    auto cfg = find_preset("tiny-swa");
    ASSERT_TRUE(cfg.ok());
    ASSERT_TRUE(write_random_model(tmp.sub("model"), cfg.value(), 3, DType::kF32).ok());
    dir = tmp.sub("model");
  }
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  const int vocab = (*model)->config().vocab_size;

  std::optional<test::TestPki> pki;
  std::unique_ptr<RedisServer> redis;
  std::string store;
  int prefill_workers = 2;
  if (GetParam().backend == "memory") {
    store = "memory:64MiB";
    prefill_workers = 1;  // a memory store is per process
  } else if (GetParam().backend == "dir") {
    store = "dir://" + tmp.sub("kv") + "?max_bytes=256MiB";
  } else if (GetParam().backend == "redis") {
    redis = std::make_unique<RedisServer>(tmp.path());
    ASSERT_TRUE(redis->up()) << test::read_file(tmp.sub("redis.log"));
    store = "redis://127.0.0.1:" + std::to_string(redis->port()) + "/0?timeout_ms=500";
  } else {  // rediss: TLS with a client certificate, as a managed Redis would be reached
    pki = test::TestPki::make(tmp.path());
    ASSERT_TRUE(pki.has_value()) << "openssl could not make the test certificates";
    redis = std::make_unique<RedisServer>(tmp.path(), 0, &*pki);
    ASSERT_TRUE(redis->up()) << test::read_file(tmp.sub("redis.log"));
    store = "rediss://127.0.0.1:" + std::to_string(redis->port()) + "/0?timeout_ms=500&" + pki->redis_url_query();
  }
  LocalCluster c({.model = dir,
                  .prefill = prefill_workers,
                  .decode = 1,
                  .prefill_args = {"--kv-store=" + store, "--kv-block-tokens=32", "--chunk-tokens=64"}});
  ASSERT_TRUE(c.ready()) << c.logs();
  auto stub = c.stub();

  // Cache a document (several blocks and a partial one), twice: the second finds it stored.
  const std::vector<int32_t> doc = random_tokens(150, vocab, 17);
  v1::Document d1, d2;
  {
    v1::CacheDocumentRequest req;
    req.mutable_tokens()->mutable_ids()->Add(doc.begin(), doc.end());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto st = stub->CacheDocument(&ctx, req, &d1);
    ASSERT_TRUE(st.ok()) << st.error_message() << c.logs();
    grpc::ClientContext ctx2;
    ASSERT_TRUE(stub->CacheDocument(&ctx2, req, &d2).ok());
  }
  EXPECT_EQ(d1.token_count(), doc.size());
  EXPECT_GT(d1.stored_bytes(), doc.size() * 2 * 4 * (*model)->config().kv_dim() / 2);
  EXPECT_FALSE(d1.already_cached());
  EXPECT_EQ(d2.id(), d1.id());
  EXPECT_TRUE(d2.already_cached());

  // Document + question: exactly the uncached full prompt's tokens, and the document's tokens
  // are reported as cached.
  for (int q = 0; q < 3; ++q) {
    const std::vector<int32_t> question = random_tokens(10 + 17 * q, vocab, 100 + q);
    v1::GenerateRequest req = greedy(question, 10);
    req.add_document_ids(d1.id());
    auto g = test::run_generate(*stub, req, milliseconds(60000));
    ASSERT_TRUE(g.status.ok()) << g.status.error_message() << c.logs();
    std::vector<int32_t> full = doc;
    full.insert(full.end(), question.begin(), question.end());
    EXPECT_EQ(g.ids, reference(**model, full, 10)) << "question " << q;
    EXPECT_EQ(g.final.usage().prompt_tokens(), full.size());
    EXPECT_EQ(g.final.usage().cached_tokens(), doc.size()) << "question " << q;
  }

  // Automatic prefix caching: the same long prompt twice; the second resumes at its last
  // whole block and still generates the same tokens.
  const std::vector<int32_t> prompt = random_tokens(200, vocab, 7);
  auto first = test::run_generate(*stub, greedy(prompt, 8), milliseconds(60000));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  auto second = test::run_generate(*stub, greedy(prompt, 8), milliseconds(60000));
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_EQ(first.ids, reference(**model, prompt, 8));
  EXPECT_EQ(second.ids, first.ids);
  EXPECT_EQ(second.final.usage().cached_tokens(), 192u);  // floor(200 / 32) blocks

  // List, get, delete; then the id is unknown.
  {
    grpc::ClientContext ctx;
    v1::ListDocumentsResponse list;
    ASSERT_TRUE(stub->ListDocuments(&ctx, v1::ListDocumentsRequest(), &list).ok());
    bool found = false;
    for (const auto& x : list.documents()) found |= x.id() == d1.id();
    EXPECT_TRUE(found);
    grpc::ClientContext ctx2;
    v1::DeleteDocumentRequest del;
    del.set_id(d1.id());
    v1::DeleteDocumentResponse dr;
    ASSERT_TRUE(stub->DeleteDocument(&ctx2, del, &dr).ok());
    EXPECT_TRUE(dr.deleted());
    grpc::ClientContext ctx3;
    v1::GetDocumentRequest get;
    get.set_id(d1.id());
    v1::Document gd;
    EXPECT_EQ(stub->GetDocument(&ctx3, get, &gd).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  v1::GenerateRequest unknown = greedy({1, 2, 3}, 4);
  unknown.add_document_ids(d1.id());
  auto g = test::run_generate(*stub, unknown, milliseconds(20000));
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(g.status.error_message().find("document_ids[0]"), std::string::npos) << g.status.error_message();
  // Bad documents.
  auto cache_status = [&](const std::vector<int32_t>& ids) {
    v1::CacheDocumentRequest req;
    req.mutable_tokens()->mutable_ids()->Add(ids.begin(), ids.end());
    grpc::ClientContext ctx;
    v1::Document out;
    return stub->CacheDocument(&ctx, req, &out);
  };
  auto st = cache_status({});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("content"), std::string::npos);
  st = cache_status(random_tokens(static_cast<int>((*model)->config().max_seq_len), vocab, 1));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  st = cache_status({1, vocab});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("content.tokens[1]"), std::string::npos) << st.error_message();
}

// Redis killed, stopped (SIGSTOP) and restarted under a load of requests: every request
// succeeds (the prefill worker recomputes what the store cannot give), and once Redis is
// back, cache hits resume.
TEST(ClusterStore, RedisFailuresNeverFailARequestAndHitsResume) {
  test::TempDir tmp;
  auto model = Model::load(kGret);
  ASSERT_TRUE(model.ok());
  auto redis = std::make_unique<RedisServer>(tmp.path());
  ASSERT_TRUE(redis->up());
  const int port = redis->port();
  const std::string store = "redis://127.0.0.1:" + std::to_string(port) +
                            "/0?timeout_ms=300&breaker_cooldown_ms=300&breaker_max_cooldown_ms=600";
  LocalCluster c(
      {.model = kGret, .prefill = 1, .decode = 1, .prefill_args = {"--kv-store=" + store, "--kv-block-tokens=32"}});
  ASSERT_TRUE(c.ready()) << c.logs();
  auto stub = c.stub();
  const int vocab = (*model)->config().vocab_size;
  const std::vector<int32_t> shared = random_tokens(96, vocab, 5);
  auto run_load = [&](int n, uint32_t seed) {
    std::vector<test::Generated> got(n);
    std::vector<std::vector<int32_t>> prompts(n);
    std::vector<std::thread> th;
    for (int i = 0; i < n; ++i) {
      prompts[i] = shared;
      const auto tail = random_tokens(5 + i, vocab, seed + i);
      prompts[i].insert(prompts[i].end(), tail.begin(), tail.end());
      th.emplace_back([&, i] { got[i] = test::run_generate(*stub, greedy(prompts[i], 6), milliseconds(60000)); });
    }
    for (auto& t : th) t.join();
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(got[i].status.ok()) << got[i].status.error_message();
      EXPECT_EQ(got[i].ids, reference(**model, prompts[i], 6)) << "request " << i;
    }
  };
  auto hits = [&] {
    return test::metric_value(test::http_get_body(test::port_of(c.prefill()[0].metrics), "/metrics"),
                              "yoco_kv_store_hits_total");
  };
  run_load(6, 100);  // warms the store with the shared prefix
  const double warm_hits = hits();
  run_load(6, 200);
  EXPECT_GT(hits(), warm_hits);  // the shared prefix comes from Redis

  // Delayed: the server sleeps 1 s at a time (DEBUG SLEEP) while requests run.
  {
    std::atomic<bool> stop{false};
    std::thread sleeper([&] {
      const std::string cmd = "redis-cli -p " + std::to_string(port) + " DEBUG SLEEP 1 > /dev/null 2>&1";
      while (!stop) std::system(cmd.c_str());
    });
    std::this_thread::sleep_for(milliseconds(100));
    run_load(6, 250);
    stop = true;
    sleeper.join();
  }
  // Killed: requests still succeed.
  redis.reset();
  run_load(6, 300);
  // Stopped (every call times out until the breaker opens): still succeed.
  redis = std::make_unique<RedisServer>(tmp.path(), port);
  ASSERT_TRUE(redis->up());
  kill(redis->pid(), SIGSTOP);
  run_load(6, 400);
  kill(redis->pid(), SIGCONT);
  // Back: after the breaker's write-then-read probe, hits resume (the restarted Redis is empty:
  // the first loads write the prefix again; a slow machine may need a few rounds).
  std::this_thread::sleep_for(milliseconds(1500));
  const double before = hits();
  for (int round = 0; round < 8 && hits() <= before; ++round) run_load(4, 500 + 10 * round);
  EXPECT_GT(hits(), before) << test::http_get_body(test::port_of(c.prefill()[0].metrics), "/metrics");
}

// Corruption of stored blocks and states (bit flips, then truncation): detected, counted,
// and the answer is still the uncached prompt's, recomputed.
TEST(ClusterStore, CorruptedObjectsAreMissesAndOutputStaysCorrect) {
  test::TempDir tmp;
  auto model = Model::load(kGret);
  ASSERT_TRUE(model.ok());
  const std::string kv = tmp.sub("kv");
  LocalCluster c({.model = kGret,
                  .prefill = 1,
                  .decode = 1,
                  .prefill_args = {"--kv-store=dir://" + kv, "--kv-block-tokens=32", "--no-prompt-cache"}});
  ASSERT_TRUE(c.ready()) << c.logs();
  auto stub = c.stub();
  const int vocab = (*model)->config().vocab_size;
  const std::vector<int32_t> doc = random_tokens(130, vocab, 21), question = random_tokens(12, vocab, 22);
  std::vector<int32_t> full = doc;
  full.insert(full.end(), question.begin(), question.end());
  const std::vector<int32_t> expected = reference(**model, full, 8);
  auto cache_doc = [&] {
    v1::CacheDocumentRequest req;
    req.mutable_tokens()->mutable_ids()->Add(doc.begin(), doc.end());
    grpc::ClientContext ctx;
    v1::Document d;
    EXPECT_TRUE(stub->CacheDocument(&ctx, req, &d).ok());
    return d.id();
  };
  auto ask = [&](const std::string& id) {
    v1::GenerateRequest req = greedy(question, 8);
    req.add_document_ids(id);
    return test::run_generate(*stub, req, milliseconds(60000));
  };
  // Every block and state file: `damage` is applied to its bytes.
  auto damage_all = [&](const std::function<void(std::string&)>& damage) {
    int n = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(kv)) {
      const std::string name = e.path().filename().string();
      if (!e.is_regular_file() || (name.rfind("kv%3A", 0) != 0 && name.rfind("state%3A", 0) != 0)) continue;
      std::string bytes = test::read_file(e.path().string());
      damage(bytes);
      test::write_file(e.path().string(), bytes);
      ++n;
    }
    return n;
  };
  auto corrupt_count = [&] {
    return test::metric_value(test::http_get_body(test::port_of(c.prefill()[0].metrics), "/metrics"),
                              "yoco_kv_store_corrupt_total");
  };

  std::string id = cache_doc();
  auto g = ask(id);
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  EXPECT_EQ(g.ids, expected);
  EXPECT_EQ(g.final.usage().cached_tokens(), doc.size());

  // A bit flip in the middle of every block and state.
  ASSERT_GT(damage_all([](std::string& b) { b[b.size() / 2] ^= 0x10; }), 4);
  g = ask(id);
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  EXPECT_EQ(g.ids, expected);
  EXPECT_EQ(g.final.usage().cached_tokens(), 0u);
  const double after_flip = corrupt_count();
  EXPECT_GT(after_flip, 0);

  // Cached again (the damaged objects were deleted), then truncated.
  id = cache_doc();
  g = ask(id);
  EXPECT_EQ(g.final.usage().cached_tokens(), doc.size());
  ASSERT_GT(damage_all([](std::string& b) { b.resize(b.size() / 2); }), 4);
  g = ask(id);
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  EXPECT_EQ(g.ids, expected);
  EXPECT_EQ(g.final.usage().cached_tokens(), 0u);
  EXPECT_GT(corrupt_count(), after_flip);
}

// Decode workers hold the whole blocks of a common prefix once: two concurrent questions over
// one cached document share the document's pool blocks, and both answers are still exact.
TEST(ClusterStore, ConcurrentPromptsShareDecodePoolBlocksOfTheirCommonPrefix) {
  test::TempDir tmp;
  auto model = Model::load(kGret);
  ASSERT_TRUE(model.ok());
  LocalCluster c({.model = kGret,
                  .prefill = 1,
                  .decode = 1,
                  .kv_blocks = 256,
                  .prefill_args = {"--kv-store=memory:64MiB", "--kv-block-tokens=32"}});
  ASSERT_TRUE(c.ready()) << c.logs();
  auto stub = c.stub();
  const int vocab = (*model)->config().vocab_size;
  const std::vector<int32_t> doc = random_tokens(320, vocab, 31);  // 10 whole pool blocks
  v1::CacheDocumentRequest creq;
  creq.mutable_tokens()->mutable_ids()->Add(doc.begin(), doc.end());
  v1::Document d;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->CacheDocument(&ctx, creq, &d).ok());
  }
  const int max_tokens = 800;  // long enough that both are decoding at once
  std::vector<std::vector<int32_t>> questions = {random_tokens(9, vocab, 1), random_tokens(14, vocab, 2)};
  std::vector<test::Generated> got(2);
  std::vector<std::thread> th;
  for (int i = 0; i < 2; ++i)
    th.emplace_back([&, i] {
      v1::GenerateRequest req = greedy(questions[i], max_tokens);
      req.add_document_ids(d.id());
      got[i] = test::run_generate(*stub, req, milliseconds(120000));
    });
  for (auto& t : th) t.join();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    std::vector<int32_t> full = doc;
    full.insert(full.end(), questions[i].begin(), questions[i].end());
    EXPECT_EQ(got[i].ids, reference(**model, full, max_tokens)) << "question " << i;
  }
  const std::string m = test::http_get_body(test::port_of(c.decode()[0].metrics), "/metrics");
  EXPECT_EQ(test::metric_value(m, "yoco_kv_blocks_shared_total"), 10) << m;  // the second one's 10 document blocks
  EXPECT_EQ(test::metric_value(m, "yoco_kv_cache_blocks_free"), 256);
  EXPECT_EQ(test::metric_value(m, "yoco_kv_cache_shared_blocks"), 0);
}

// One identity for a cached prefix (issue 16, part 2): the prefix chain names document blocks,
// prompt-prefix blocks and states alike, so a plain prompt that extends a cached document
// resumes from the document's blocks and the state at its last whole block, and a repeated
// [A, B] resumes after B (its state is stored under the concatenation's key the first time).
// The bundled gRet and YOCO-U models, or a random tiny-swa model written into `tmp`.
std::string model_dir(const std::string& name, test::TempDir& tmp) {
  if (name != "tiny-swa") return name;
  auto cfg = find_preset("tiny-swa");
  YOCO_CHECK(cfg.ok());
  YOCO_CHECK(write_random_model(tmp.sub("model"), cfg.value(), 3, DType::kF32).ok());
  return tmp.sub("model");
}

class ClusterPrefixIdentity : public ::testing::TestWithParam<std::string> {};

TEST_P(ClusterPrefixIdentity, PlainPromptAndDocumentPairsReuseTheSameCache) {
  test::TempDir tmp;
  const std::string dir = model_dir(GetParam(), tmp);
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  LocalCluster c({.model = dir,
                  .prefill = 1,
                  .decode = 1,
                  .prefill_args = {"--kv-store=memory:64MiB", "--kv-block-tokens=32", "--chunk-tokens=64"}});
  ASSERT_TRUE(c.ready()) << c.logs();
  auto stub = c.stub();
  const int vocab = (*model)->config().vocab_size;
  auto cache_doc = [&](const std::vector<int32_t>& ids) {
    v1::CacheDocumentRequest req;
    req.mutable_tokens()->mutable_ids()->Add(ids.begin(), ids.end());
    grpc::ClientContext ctx;
    v1::Document d;
    EXPECT_TRUE(stub->CacheDocument(&ctx, req, &d).ok());
    return d.id();
  };
  auto ask = [&](const std::vector<std::string>& docs, const std::vector<int32_t>& prompt,
                 const std::vector<int32_t>& full, const std::string& what) {
    v1::GenerateRequest req = greedy(prompt, 8);
    for (const auto& id : docs) req.add_document_ids(id);
    auto g = test::run_generate(*stub, req, milliseconds(60000));
    EXPECT_TRUE(g.status.ok()) << what << ": " << g.status.error_message() << c.logs();
    EXPECT_EQ(g.ids, reference(**model, full, 8)) << what;
    EXPECT_EQ(g.final.usage().prompt_tokens(), full.size()) << what;
    return static_cast<int64_t>(g.final.usage().cached_tokens());
  };
  auto cat = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<int32_t> a = random_tokens(150, vocab, 41), b = random_tokens(90, vocab, 42);
  const std::string id_a = cache_doc(a), id_b = cache_doc(b);

  // A plain prompt = A's tokens + a question: A's whole blocks and the state at its last one.
  const auto q0 = random_tokens(11, vocab, 50);
  EXPECT_EQ(ask({}, cat(a, q0), cat(a, q0), "plain A + question"), 128);  // floor(150 / 32) blocks

  // [A, B]: the first time only A's state is usable (B's was computed without A before it)...
  const auto q1 = random_tokens(7, vocab, 51), q2 = random_tokens(23, vocab, 52);
  EXPECT_EQ(ask({id_a, id_b}, q1, cat(cat(a, b), q1), "[A, B] first"), 150);
  // ... then the whole [A, B] prefix is.
  EXPECT_EQ(ask({id_a, id_b}, q2, cat(cat(a, b), q2), "[A, B] again"), 240);
  // And a plain prompt spelling out A + B resumes inside it (the last whole block below 240).
  const auto q3 = random_tokens(5, vocab, 53);
  EXPECT_EQ(ask({}, cat(cat(a, b), q3), cat(cat(a, b), q3), "plain A + B + question"), 224);
}

// A document stays where it is already decoded (issue 16, part 3): the decode worker tells the
// prefill side which leading whole blocks it already holds, and only the rest is shipped. The
// answers stay exact; when other prompts evict the kept blocks, the rows are shipped again.
class ClusterResidentPrefix : public ::testing::TestWithParam<std::string> {};

TEST_P(ClusterResidentPrefix, QuestionsOverOneDocumentShipOnlyTheQuestion) {
  test::TempDir tmp;
  const std::string dir = model_dir(GetParam(), tmp);
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  LocalCluster c({.model = dir,
                  .prefill = 1,
                  .decode = 1,
                  .kv_blocks = 40,
                  .prefill_args = {"--kv-store=memory:64MiB", "--kv-block-tokens=32"}});
  ASSERT_TRUE(c.ready()) << c.logs();
  auto stub = c.stub();
  const int vocab = (*model)->config().vocab_size;
  const int64_t row_bytes = 8 * (*model)->config().kv_dim();
  const std::vector<int32_t> doc = random_tokens(320, vocab, 61);  // 10 whole pool blocks
  v1::CacheDocumentRequest creq;
  creq.mutable_tokens()->mutable_ids()->Add(doc.begin(), doc.end());
  v1::Document d;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->CacheDocument(&ctx, creq, &d).ok());
  }
  auto decode_metric = [&](const std::string& name) {
    return test::metric_value(test::http_get_body(test::port_of(c.decode()[0].metrics), "/metrics"), name);
  };
  // Bytes the decode worker received for one question (rows past the resident ones, and the state).
  auto ask = [&](uint32_t seed) {
    const std::vector<int32_t> q = random_tokens(9 + static_cast<int>(seed % 7), vocab, seed);
    v1::GenerateRequest req = greedy(q, 6);
    req.add_document_ids(d.id());
    const double before = decode_metric("yoco_kv_transfer_request_bytes_sum");
    auto g = test::run_generate(*stub, req, milliseconds(60000));
    EXPECT_TRUE(g.status.ok()) << g.status.error_message() << c.logs();
    std::vector<int32_t> full = doc;
    full.insert(full.end(), q.begin(), q.end());
    EXPECT_EQ(g.ids, reference(**model, full, 6)) << "seed " << seed;
    EXPECT_EQ(g.final.usage().cached_tokens(), doc.size()) << "seed " << seed;
    return static_cast<int64_t>(decode_metric("yoco_kv_transfer_request_bytes_sum") - before);
  };
  const int64_t doc_bytes = 320 * row_bytes;
  const int64_t first = ask(1);  // ships the document, the question and the state
  EXPECT_GT(first, doc_bytes);
  // Later ones: the state and their question's rows only (questions are 9..15 tokens).
  const int64_t question_only = first - doc_bytes + 6 * row_bytes;
  for (uint32_t seed = 2; seed <= 4; ++seed) EXPECT_LE(ask(seed), question_only) << "seed " << seed;
  EXPECT_EQ(decode_metric("yoco_kv_resident_blocks_total"), 30);
  EXPECT_EQ(decode_metric("yoco_kv_cache_blocks_free"), 40);  // kept blocks count as free
  EXPECT_EQ(decode_metric("yoco_kv_cache_blocks_kept"), 10);

  // Another prompt that needs the whole pool (1268 + 4 rows: 40 blocks) evicts the kept blocks:
  // the next question ships the document again, and is still exact.
  const std::vector<int32_t> other = random_tokens(39 * 32 + 20, vocab, 70);
  auto g = test::run_generate(*stub, greedy(other, 4), milliseconds(60000));
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  EXPECT_EQ(g.ids, reference(**model, other, 4));
  EXPECT_GT(ask(5), doc_bytes);
  EXPECT_EQ(decode_metric("yoco_kv_resident_blocks_total"), 30);
  EXPECT_LE(ask(6), question_only);
}

// A stale claim cannot happen: the blocks a reservation maps from the pool are pinned from the
// reservation on. Here the commit is held back (1.5 s) while another prompt asks for more blocks
// than are truly free: it may not evict the document's claimed blocks, so the question's answer
// stays exact (the other prompt waits for room or is refused, never served wrong).
TEST(ClusterResidentPrefix, ClaimedBlocksArePinnedUntilTheCommit) {
  test::TempDir tmp;
  auto model = Model::load(kGret);
  ASSERT_TRUE(model.ok());
  LocalCluster c(
      {.model = kGret,
       .prefill = 1,
       .decode = 1,
       .kv_blocks = 40,
       .prefill_args = {"--kv-store=memory:64MiB", "--kv-block-tokens=32", "--inject-commit-delay-ms=1500"}});
  ASSERT_TRUE(c.ready()) << c.logs();
  auto stub = c.stub();
  const int vocab = (*model)->config().vocab_size;
  const std::vector<int32_t> doc = random_tokens(320, vocab, 81);  // 10 whole pool blocks
  v1::CacheDocumentRequest creq;
  creq.mutable_tokens()->mutable_ids()->Add(doc.begin(), doc.end());
  v1::Document d;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->CacheDocument(&ctx, creq, &d).ok());
  }
  auto question = [&](uint32_t seed) {
    const std::vector<int32_t> q = random_tokens(10, vocab, seed);
    v1::GenerateRequest req = greedy(q, 6);
    req.add_document_ids(d.id());
    auto g = test::run_generate(*stub, req, milliseconds(60000));
    std::vector<int32_t> full = doc;
    full.insert(full.end(), q.begin(), q.end());
    EXPECT_TRUE(g.status.ok()) << g.status.error_message();
    EXPECT_EQ(g.ids, reference(**model, full, 6)) << "seed " << seed;
  };
  question(1);  // the document's blocks are now kept in the decode pool
  std::thread asked([&] { question(2); });
  for (int i = 0; i < 100 && test::metric_value(test::http_get_body(test::port_of(c.decode()[0].metrics), "/metrics"),
                                                "yoco_kv_transfer_in_flight") < 1;
       ++i)
    std::this_thread::sleep_for(milliseconds(10));
  // 35 blocks while 29 are truly free and the 10 kept ones are claimed by the question.
  const std::vector<int32_t> other = random_tokens(34 * 32 + 20, vocab, 90);
  auto g = test::run_generate(*stub, greedy(other, 4), milliseconds(60000));
  if (g.status.ok()) {
    EXPECT_EQ(g.ids, reference(**model, other, 4));
  }
  asked.join();
  question(3);  // and the document is still (or again) usable
}

auto model_name = [](const auto& info) {
  const std::string& m = info.param;
  return std::string(m == kGret ? "gret_kjv" : m == kYocoU ? "yocou_kjv" : "tiny_swa");
};
INSTANTIATE_TEST_SUITE_P(Models, ClusterPrefixIdentity, ::testing::Values(kGret, "tiny-swa", kYocoU), model_name);
INSTANTIATE_TEST_SUITE_P(Models, ClusterResidentPrefix, ::testing::Values(kGret, "tiny-swa", kYocoU), model_name);

INSTANTIATE_TEST_SUITE_P(ModelsAndStores, ClusterDocuments,
                         ::testing::Values(Case{kGret, "memory"}, Case{kGret, "dir"}, Case{kGret, "redis"},
                                           Case{"tiny-swa", "memory"}, Case{"tiny-swa", "dir"},
                                           Case{"tiny-swa", "redis"}, Case{kYocoU, "memory"}, Case{kYocoU, "dir"},
                                           Case{kYocoU, "redis"}, Case{kGret, "rediss"}),
                         [](const auto& info) {
                           const std::string& m = info.param.model;
                           const std::string name = m == kGret ? "gret_kjv" : m == kYocoU ? "yocou_kjv" : "tiny_swa";
                           return name + "_" + info.param.backend;
                         });

}  // namespace
}  // namespace yoco
