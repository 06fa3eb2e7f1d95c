// yoco-decode as a real process on loopback: Generate over gRPC is token-identical to the
// in-process engine, bad requests get INVALID_ARGUMENT naming the field, /metrics counts the
// work, and SIGTERM drains and exits 0. The process is killed if the test fails.
#include <arpa/inet.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "model/generate.h"
#include "tests/unit/http_get.h"
#include "tests/unit/test_util.h"
#include "tokenizer/tokenizer.h"
#include "yoco/v1/yoco.grpc.pb.h"

namespace yoco {
namespace {

const std::string kModel = std::string(YOCO_SOURCE_DIR) + "/models/kjv-yoco";

class Worker {
 public:
  explicit Worker(const test::TempDir& dir) {
    port_file_ = dir.sub("ports.json");
    pid_ = fork();
    if (pid_ == 0) {
      freopen(dir.sub("worker.log").c_str(), "w", stderr);
      execl(YOCO_DECODE_BIN, "yoco-decode", "--model", kModel.c_str(), "--listen", "127.0.0.1:0", "--metrics-listen",
            "127.0.0.1:0", "--kv-blocks", "256", "--threads", "1", "--port-file", port_file_.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 600 && !std::filesystem::exists(port_file_); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto j = Json::parse(test::read_file(port_file_));
    if (j.ok()) {
      grpc_port_ = static_cast<int>(j->find("grpc_port")->as_int());
      metrics_port_ = static_cast<int>(j->find("metrics_port")->as_int());
    }
  }
  ~Worker() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // SIGTERM and wait (bounded) for a clean exit; returns the exit status or -1.
  int terminate(std::chrono::seconds limit) {
    kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < limit.count() * 20; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }

 private:
  pid_t pid_ = -1;
  std::string port_file_;
  int grpc_port_ = 0, metrics_port_ = 0;
};

TEST(DecodeServer, GenerateScoreMetricsAndGracefulStop) {
  test::TempDir dir;
  Worker w(dir);
  ASSERT_GT(w.grpc_port(), 0) << test::read_file(dir.sub("worker.log"));
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(w.grpc_port()), grpc::InsecureChannelCredentials());
  auto stub = v1::Yoco::NewStub(channel);

  auto tok = Tokenizer::load(kModel);
  ASSERT_TRUE(tok.ok());
  auto model = Model::load(kModel);
  ASSERT_TRUE(model.ok());
  const std::vector<int32_t> prompt = (*tok)->encode("In the beginning God created");

  // Greedy over gRPC = the in-process engine.
  v1::GenerateRequest req;
  for (int32_t t : prompt) req.mutable_tokens()->add_ids(t);
  req.set_max_tokens(20);
  req.mutable_sampling()->set_temperature(0);
  req.set_ignore_eos(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse resp;
  std::vector<int32_t> got;
  std::string text;
  bool final_seen = false;
  while (reader->Read(&resp)) {
    if (resp.has_delta()) {
      got.insert(got.end(), resp.delta().token_ids().begin(), resp.delta().token_ids().end());
      text += resp.delta().text();
    } else {
      final_seen = true;
      EXPECT_EQ(resp.final().finish_reason(), v1::FINISH_REASON_LENGTH);
      EXPECT_EQ(resp.final().usage().completion_tokens(), 20u);
      EXPECT_EQ(resp.final().usage().prompt_tokens(), prompt.size());
    }
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_TRUE(final_seen);
  GenerateOptions opt;
  opt.max_tokens = 20;
  opt.sampling.temperature = 0;
  auto ref = generate(**model, prompt, opt);
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(got, ref->tokens);
  EXPECT_EQ(text, (*tok)->decode(got));

  // Bad requests: INVALID_ARGUMENT naming the field.
  {
    v1::GenerateRequest bad = req;
    bad.mutable_tokens()->set_ids(1, 5000);
    grpc::ClientContext c;
    auto r = stub->Generate(&c, bad);
    while (r->Read(&resp)) {
    }
    grpc::Status st = r->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("prompt[1]"), std::string::npos) << st.error_message();
  }
  {
    v1::GenerateRequest bad = req;
    bad.mutable_sampling()->set_top_p(0);
    grpc::ClientContext c;
    auto r = stub->Generate(&c, bad);
    while (r->Read(&resp)) {
    }
    grpc::Status st = r->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("sampling.top_p"), std::string::npos) << st.error_message();
  }
  {
    v1::ModelInfo info;
    grpc::ClientContext c;
    ASSERT_TRUE(stub->GetModelInfo(&c, v1::GetModelInfoRequest(), &info).ok());
    EXPECT_EQ(info.vocab_size(), 4096);
    EXPECT_EQ(info.kv_bytes_per_token(), 2 * 128 * 4);
  }
  {
    v1::ScoreRequest sr;
    sr.set_text("And God saw the light, that it was good.");
    v1::ScoreResponse out;
    grpc::ClientContext c;
    ASSERT_TRUE(stub->Score(&c, sr, &out).ok());
    EXPECT_EQ(out.token_logprobs_size() + 1, out.token_ids_size());
  }

  const std::string metrics = test::http_get(w.metrics_port(), "/metrics");
  EXPECT_NE(metrics.find("yoco_generation_tokens_total 20"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("yoco_kv_cache_blocks_free 256"), std::string::npos);  // blocks back to idle
  EXPECT_NE(metrics.find("yoco_requests_total{status=\"invalid_argument\"} 2"), std::string::npos);
  if (std::system("command -v promtool >/dev/null 2>&1") == 0) {
    const size_t body = metrics.find("\r\n\r\n");
    ASSERT_NE(body, std::string::npos);
    test::write_file(dir.sub("metrics.txt"), metrics.substr(body + 4));
    const std::string cmd = "promtool check metrics < " + dir.sub("metrics.txt") + " > " + dir.sub("promtool.txt") + " 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << test::read_file(dir.sub("promtool.txt"));
  }

  EXPECT_EQ(w.terminate(std::chrono::seconds(30)), 0) << test::read_file(dir.sub("worker.log"));
}

}  // namespace
}  // namespace yoco
