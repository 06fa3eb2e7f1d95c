// A Redis Cluster for tests: 6 redis-server processes (tests/support/redis_server.h) made into 3
// masters and 3 replicas with redis-cli --cluster create, plus what tests ask of it (CLUSTER NODES
// parsed, the master of a key, waiting for fail-over and replication).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/redis_server.h"
#include "tests/unit/test_util.h"

namespace yoco::test {

// A Redis Cluster of Debian's redis-server on 127.0.0.1 owned by the test: 3 masters and 3
// replicas (redis-cli --cluster create), client and bus ports chosen at run time, every node
// killed by the destructor, also on failure. A short node timeout keeps fail-over quick; full
// coverage is not required, so the healthy masters serve while one is down (as a cache should).
class RedisCluster {
 public:
  static constexpr int kNodes = 6;
  // With a PKI the nodes speak only TLS, to clients and on the cluster bus.
  explicit RedisCluster(const TestPki* tls = nullptr, int node_timeout_ms = 1000)
      : tls_(tls), node_timeout_ms_(node_timeout_ms) {}
  ~RedisCluster() { stop(); }

  bool start() {
    std::string create = "redis-cli" + tls_flags() + " --cluster create";
    for (int i = 0; i < kNodes; ++i) {
      const int port = free_port();
      int bus = free_port();
      while (bus == port) bus = free_port();
      std::vector<std::string> args{"--cluster-enabled",
                                    "yes",
                                    "--cluster-config-file",
                                    dir_.path() + "/nodes-" + std::to_string(port) + ".conf",
                                    "--cluster-node-timeout",
                                    std::to_string(node_timeout_ms_),
                                    "--cluster-port",
                                    std::to_string(bus),
                                    "--cluster-require-full-coverage",
                                    "no",
                                    "--repl-diskless-sync-delay",  // replicas sync at once, not after 5 s
                                    "0",
                                    "--dir",
                                    dir_.path()};
      if (tls_) args.insert(args.end(), {"--tls-cluster", "yes", "--tls-replication", "yes"});
      nodes_.push_back(std::make_unique<RedisServer>(port, "", tls_, std::move(args)));
      if (!nodes_.back()->start()) return false;
      create += " 127.0.0.1:" + std::to_string(port);
    }
    run(create + " --cluster-replicas 1 --cluster-yes >/dev/null 2>&1");
    return wait_ok(std::chrono::seconds(20));
  }
  void stop() {
    for (auto& n : nodes_) n->stop();
  }
  // Until every running node says cluster_state:ok and agrees on 3 masters covering all slots.
  bool wait_ok(std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      bool ok = true;
      for (auto& n : nodes_)
        if (n->running() && n->cli("CLUSTER INFO").find("cluster_state:ok") == std::string::npos) ok = false;
      if (ok && masters().size() == 3) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  RedisServer& node(int i) { return *nodes_[static_cast<size_t>(i)]; }
  RedisServer* by_port(int port) {
    for (auto& n : nodes_)
      if (n->port() == port) return n.get();
    return nullptr;
  }
  // A running node, for commands that any node answers.
  RedisServer& any() {
    for (auto& n : nodes_)
      if (n->running()) return *n;
    return *nodes_[0];
  }
  std::string cli(const std::string& command) { return any().cli(command, true); }

  struct NodeInfo {
    std::string id;
    int port = 0;
    bool master = false;
    bool failed = false;
    std::string master_id;
    int slots = 0;
    std::vector<std::pair<int, int>> ranges;
  };
  // CLUSTER NODES as one running node sees it.
  std::vector<NodeInfo> nodes() {
    std::vector<NodeInfo> out;
    std::istringstream in(any().cli("CLUSTER NODES"));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::vector<std::string> w;
      for (std::string x; f >> x;) w.push_back(x);
      if (w.size() < 8) continue;
      NodeInfo n;
      n.id = w[0];
      n.port = std::atoi(w[1].substr(w[1].rfind(':') + 1).c_str());
      n.master = w[2].find("master") != std::string::npos;
      n.failed = w[2].find("fail") != std::string::npos;
      n.master_id = w[3];
      for (size_t i = 8; i < w.size(); ++i) {
        if (w[i].front() == '[') continue;  // a slot being migrated
        const size_t dash = w[i].find('-');
        const int lo = std::atoi(w[i].c_str()),
                  hi = dash == std::string::npos ? lo : std::atoi(w[i].c_str() + dash + 1);
        n.ranges.emplace_back(lo, hi);
        n.slots += hi - lo + 1;
      }
      out.push_back(n);
    }
    return out;
  }
  // Ports of the healthy masters that serve slots.
  std::vector<int> masters() {
    std::vector<int> out;
    for (const auto& n : nodes())
      if (n.master && !n.failed && n.slots > 0) out.push_back(n.port);
    std::sort(out.begin(), out.end());
    return out;
  }
  // The port of the master serving a key's slot (CLUSTER KEYSLOT, CLUSTER NODES).
  int master_of(const std::string& key) {
    const int slot = std::atoi(cli("CLUSTER KEYSLOT '" + key + "'").c_str());
    for (const auto& n : nodes())
      if (n.master && !n.failed)
        for (const auto& [lo, hi] : n.ranges)
          if (slot >= lo && slot <= hi) return n.port;
    return 0;
  }
  // A node's id (CLUSTER MYID).
  std::string id_of(int port) { return by_port(port)->cli("CLUSTER MYID"); }
  // Until each master's replicas hold as many keys as it does.
  bool wait_replicated(std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      bool ok = true;
      const auto all = nodes();
      for (const auto& m : all) {
        if (!m.master || m.failed || m.slots == 0) continue;
        const std::string keys = by_port(m.port)->cli("DBSIZE");
        for (const auto& r : all)
          if (r.master_id == m.id && !r.failed && by_port(r.port)->cli("DBSIZE") != keys) ok = false;
      }
      if (ok) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // Every key matching a pattern, over all nodes (replicas repeat their masters' keys).
  std::vector<std::string> keys(const std::string& pattern) {
    std::set<std::string> all;
    for (auto& n : nodes_) {
      if (!n->running()) continue;
      std::istringstream in(n->cli("KEYS '" + pattern + "'"));
      for (std::string k; std::getline(in, k);)
        if (!k.empty()) all.insert(k);
    }
    return {all.begin(), all.end()};
  }
  std::string seeds() const {
    std::string s;
    for (size_t i = 0; i < 3; ++i) s += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(nodes_[i]->port());
    return s;
  }
  // redis-cli's TLS options for these nodes ("" without TLS).
  std::string tls_flags() const {
    return tls_ ? " --tls --cacert " + tls_->ca + " --cert " + tls_->client_cert + " --key " + tls_->client_key : "";
  }
  static std::string run(const std::string& cmd) {
    std::string out;
    if (FILE* f = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
      ::pclose(f);
    }
    return out;
  }

 private:
  const TestPki* tls_;
  int node_timeout_ms_;
  TempDir dir_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

}  // namespace yoco::test
