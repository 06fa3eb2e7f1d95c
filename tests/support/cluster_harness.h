// A local cluster for tests: deploy/local/cluster.py (the same launcher the README uses)
// starts router + prefill + decode workers as real processes on 127.0.0.1 with ports chosen
// at run time; the harness reads their addresses from cluster.json and stops everything when
// it goes out of scope, also when a test fails. With $YOCO_CLUSTER_SECURE=1 (or Options::secure)
// the launcher runs --secure: TLS everywhere, mTLS to the workers, API keys; stub() then speaks TLS
// with the test client's certificate and sends the admin key on every call.
#pragma once

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "model/generate.h"
#include "tests/unit/http_get.h"
#include "tests/unit/test_util.h"
#include "yoco/v1/yoco.grpc.pb.h"

namespace yoco::test {

struct ProcInfo {
  std::string grpc, metrics, ucx;
  std::string http;  // the router's OpenAI-compatible HTTP API (--http-port), when it has one
  pid_t pid = -1;
};

inline int port_of(const std::string& addr) { return std::stoi(addr.substr(addr.rfind(':') + 1)); }

// The value of an unlabelled sample ("name value") in a Prometheus exposition; NaN if absent.
inline double metric_value(const std::string& text, const std::string& name) {
  size_t pos = 0;
  while ((pos = text.find(name + " ", pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == '\n') return std::stod(text.substr(pos + name.size() + 1));
    pos += name.size();
  }
  return std::nan("");
}

class LocalCluster {
 public:
  struct Options {
    std::string model;
    int prefill = 2, decode = 2;
    int kv_blocks = 1024;
    std::string ucx_tls = "tcp";
    std::vector<std::string> prefill_args = {}, decode_args = {}, router_args = {};
    bool secure = secure_from_env();
  };

  static bool secure_from_env() {
    const char* s = std::getenv("YOCO_CLUSTER_SECURE");
    return s && std::string(s) == "1";
  }

  // The files and key of a --secure cluster (cluster.json "tls" and "api_keys").
  struct Secure {
    std::string dir, ca, ca_key, client_cert, client_key, internal_ca;
    std::string admin_key, tenant_key;  // empty: the router takes no API keys
  };

  explicit LocalCluster(const Options& o) {
    state_dir_ = dir_.path();
    // $YOCO_BINARY_DIR and $YOCO_PYTHON, when set, replace the build's binaries and /usr/bin/python3.
    const char* bin = std::getenv("YOCO_BINARY_DIR");
    const char* py = std::getenv("YOCO_PYTHON");
    std::vector<std::string> args = {py && *py ? py : "/usr/bin/python3",
                                     source_dir() + "/deploy/local/cluster.py",
                                     "--bin-dir",
                                     bin && *bin ? bin : YOCO_BINARY_DIR,
                                     "--model",
                                     o.model,
                                     "--prefill",
                                     std::to_string(o.prefill),
                                     "--decode",
                                     std::to_string(o.decode),
                                     "--state-dir",
                                     state_dir_,
                                     "--threads",
                                     "1",
                                     "--ucx-tls",
                                     o.ucx_tls,
                                     "--kv-blocks",
                                     std::to_string(o.kv_blocks)};
    if (o.secure) args.push_back("--secure");
    for (const auto& a : o.prefill_args) args.push_back("--prefill-arg=" + a);
    for (const auto& a : o.decode_args) args.push_back("--decode-arg=" + a);
    for (const auto& a : o.router_args) args.push_back("--router-arg=" + a);
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      freopen((state_dir_ + "/launcher.out").c_str(), "w", stdout);
      freopen((state_dir_ + "/launcher.err").c_str(), "w", stderr);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    const std::string cj = state_dir_ + "/cluster.json";
    for (int i = 0; i < 2400 && !std::filesystem::exists(cj); ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    auto j = Json::parse(read_file(cj));
    if (!j.ok()) return;
    auto proc = [](const Json& p) {
      ProcInfo x;
      x.grpc = p.find("grpc")->as_string();
      x.metrics = p.find("metrics")->as_string();
      if (const Json* u = p.find("ucx")) x.ucx = u->as_string();
      if (const Json* h = p.find("http")) x.http = h->as_string();
      x.pid = static_cast<pid_t>(p.find("pid")->as_int());
      return x;
    };
    router_ = proc(*j->find("router"));
    for (const auto& p : j->find("prefill")->as_array()) prefill_.push_back(proc(p));
    for (const auto& p : j->find("decode")->as_array()) decode_.push_back(proc(p));
    if (const Json* t = j->find("tls")) {
      auto str = [&](const char* k) { return t->find(k) ? t->find(k)->as_string() : std::string(); };
      secure_ = Secure{str("dir"), str("ca"), str("ca_key"), str("client_cert"), str("client_key"), str("internal_ca"),
                       "",         ""};
      if (const Json* k = j->find("api_keys")) {
        secure_->admin_key = k->find("admin") ? k->find("admin")->as_string() : "";
        secure_->tenant_key = k->find("tenant") ? k->find("tenant")->as_string() : "";
      }
    }
    ready_ = o.secure == secure_.has_value();
  }

  ~LocalCluster() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);  // the launcher stops its children (SIGTERM, then SIGKILL)
    int status = 0;
    for (int i = 0; i < 800; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(-pid_, SIGKILL);
    for (const auto* group : {&prefill_, &decode_})
      for (const auto& p : *group) kill(p.pid, SIGKILL);
    kill(router_.pid, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }

  bool ready() const { return ready_; }
  std::string logs() const {
    std::string out = read_file(state_dir_ + "/launcher.err");
    for (const auto& e : std::filesystem::directory_iterator(state_dir_))
      if (e.path().extension() == ".log") {
        const std::string t = read_file(e.path().string());
        out += "\n== " + e.path().filename().string() + "\n" + t.substr(t.size() > 3000 ? t.size() - 3000 : 0);
      }
    return out;
  }
  // Every process's whole log by file name ("router.log", "prefill-0.log", ...).
  std::map<std::string, std::string> process_logs() const {
    std::map<std::string, std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(state_dir_))
      if (e.path().extension() == ".log") out[e.path().filename().string()] = read_file(e.path().string());
    return out;
  }
  const ProcInfo& router() const { return router_; }
  const std::vector<ProcInfo>& prefill() const { return prefill_; }
  const std::vector<ProcInfo>& decode() const { return decode_; }
  std::unique_ptr<v1::Yoco::Stub> stub() const { return v1::Yoco::NewStub(channel(router_.grpc)); }
  // A channel as the tests' client: plaintext, or TLS with the client certificate and the admin key.
  std::shared_ptr<grpc::Channel> channel(const std::string& target) const {
    return grpc::CreateChannel(target, credentials());
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials() const {
    if (!secure_) return grpc::InsecureChannelCredentials();
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = read_file(secure_->ca);
    o.pem_cert_chain = read_file(secure_->client_cert);
    o.pem_private_key = read_file(secure_->client_key);
    auto tls = grpc::SslCredentials(o);
    if (secure_->admin_key.empty()) return tls;
    return grpc::CompositeChannelCredentials(
        tls, grpc::MetadataCredentialsFromPlugin(std::make_unique<BearerKey>(secure_->admin_key)));
  }
  const std::optional<Secure>& secure() const { return secure_; }
  const std::string& state_dir() const { return state_dir_; }

 private:
  TempDir dir_;
  std::string state_dir_;
  pid_t pid_ = -1;
  bool ready_ = false;
  ProcInfo router_;
  std::vector<ProcInfo> prefill_, decode_;
  std::optional<Secure> secure_;

  // `authorization: Bearer <key>` on every call of a channel.
  class BearerKey : public grpc::MetadataCredentialsPlugin {
   public:
    explicit BearerKey(std::string key) : key_(std::move(key)) {}
    grpc::Status GetMetadata(grpc::string_ref, grpc::string_ref, const grpc::AuthContext&,
                             std::multimap<grpc::string, grpc::string>* metadata) override {
      metadata->insert({"authorization", "Bearer " + key_});
      return grpc::Status::OK;
    }

   private:
    std::string key_;
  };
};

// Greedy generation of `prompt` in process: what the cluster must reproduce.
inline std::vector<int32_t> reference(const Model& m, const std::vector<int32_t>& prompt, int max_tokens) {
  GenerateOptions opt;
  opt.max_tokens = max_tokens;
  opt.sampling.temperature = 0;
  auto r = generate(m, prompt, opt);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r->tokens : std::vector<int32_t>{};
}

// A greedy Generate request for token ids, EOS ignored (every run produces max_tokens).
inline v1::GenerateRequest greedy(const std::vector<int32_t>& prompt, int max_tokens) {
  v1::GenerateRequest req;
  for (int32_t t : prompt) req.mutable_tokens()->add_ids(t);
  req.set_max_tokens(max_tokens);
  req.mutable_sampling()->set_temperature(0);
  req.set_ignore_eos(true);
  return req;
}

struct Generated {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;  // the chosen tokens' log-probabilities, when the request asked for them
  std::string text;
  grpc::Status status;
  bool final_seen = false;
  v1::Final final;
};

// Runs one Generate to completion. `on_delta` (optional) sees each delta as it arrives and may
// cancel through the context.
inline Generated run_generate(v1::Yoco::Stub& stub, const v1::GenerateRequest& req, std::chrono::milliseconds deadline,
                              const std::function<void(grpc::ClientContext&, const Generated&)>& on_delta = {},
                              grpc::ClientContext* external = nullptr) {
  grpc::ClientContext own;
  grpc::ClientContext& ctx = external ? *external : own;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  Generated g;
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    if (resp.has_delta()) {
      g.ids.insert(g.ids.end(), resp.delta().token_ids().begin(), resp.delta().token_ids().end());
      g.text += resp.delta().text();
      for (const auto& lp : resp.delta().logprobs()) g.logprobs.push_back(lp.chosen().logprob());
      if (on_delta) on_delta(ctx, g);
    } else if (resp.has_final()) {
      g.final_seen = true;
      g.final = resp.final();
    }
  }
  g.status = reader->Finish();
  return g;
}

// Runs every request as a stream on a thread of its own; once each has 3 tokens (or 12 s pass)
// calls `while_streaming` (kill a worker, ...), then waits for all of them. Results in order.
inline std::vector<Generated> run_streams(v1::Yoco::Stub& stub, const std::vector<v1::GenerateRequest>& reqs,
                                          std::chrono::milliseconds deadline,
                                          const std::function<void()>& while_streaming) {
  const int n = static_cast<int>(reqs.size());
  std::vector<Generated> got(reqs.size());
  std::atomic<int> streaming{0};
  std::vector<std::thread> th;
  for (int i = 0; i < n; ++i)
    th.emplace_back([&, i] {
      bool counted = false;
      got[i] = run_generate(stub, reqs[i], deadline, [&](grpc::ClientContext&, const Generated& s) {
        if (!counted && s.ids.size() >= 3) {
          counted = true;
          ++streaming;
        }
      });
    });
  for (int i = 0; i < 1200 && streaming < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (while_streaming) while_streaming();
  for (auto& t : th) t.join();
  return got;
}

}  // namespace yoco::test
