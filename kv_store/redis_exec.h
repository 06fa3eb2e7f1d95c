// How the redis backend sends its commands (docs/design.md §5, store backends): a batch of commands, each
// naming the key that routes it, run by an Executor that pipelines them. SingleExecutor sends the
// whole batch over one pooled connection to one server (redis://); the cluster executor
// (redis_cluster.h) groups it per node by hash slot and follows redirections (redis-cluster://).
// The store's logic (manifests, chunks, checks) is the same over both.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kv_store/redis_conn.h"
#include "kv_store/stats.h"

namespace yoco::redis {

struct Command {
  std::vector<std::string_view> args;
  size_t key_arg = 1;  // the argument that routes it (its hash slot); args[1] for GET/SET/DEL/SADD
};

// Commands in the order they are to run. Arguments are views: into strings the batch keeps
// (keep) or into the caller's data, which must outlive run.
class Batch {
 public:
  std::string_view keep(std::string s) { return arena_.emplace_back(std::move(s)); }
  void add(std::initializer_list<std::string_view> args, size_t key_arg = 1) { cmds_.push_back({args, key_arg}); }
  void add(std::vector<std::string_view> args, size_t key_arg = 1) { cmds_.push_back({std::move(args), key_arg}); }
  size_t size() const { return cmds_.size(); }
  bool empty() const { return cmds_.empty(); }
  const std::vector<Command>& commands() const { return cmds_; }
  void clear() { cmds_.clear(); }

 private:
  std::deque<std::string> arena_;  // a deque: adding never moves the strings views point into
  std::vector<Command> cmds_;
};

// One result per command: its reply (which may be a Redis error reply), or why no reply came.
using Replies = std::vector<Result<ReplyPtr>>;

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs the batch (pipelined) and clears it. A failure to reach a server fails the commands
  // that were for it (UNAVAILABLE / DEADLINE_EXCEEDED), not the others.
  virtual Replies run(Batch& batch, const std::string& what) = 0;
  // A server's failure is a miss for the gets it fails (cluster: one node down must not fail
  // requests; docs/design.md §5), instead of an error.
  virtual bool node_failure_is_miss() const { return false; }
  // The executor's own counters (the cluster's per-node breakers); the store adds its own.
  virtual KvStoreStatsSnapshot stats() const { return {}; }
};

// Connection setup shared by all connections of a store.
struct ConnectOptions {
  std::string user, password;
  int db = 0;
  std::chrono::milliseconds connect_timeout{500};
  std::chrono::milliseconds command_timeout{500};
  int pool_size = 4;
  std::shared_ptr<TlsContext> tls;  // null: plain TCP
};

// A small pool of connections to one server, with AUTH and SELECT done on connect.
class NodePool {
 public:
  NodePool(std::string host, int port, const ConnectOptions& opt) : host_(std::move(host)), port_(port), opt_(opt) {}
  ~NodePool();

  // A pooled connection, returned on destruction (dropped, with its idle siblings, if it broke).
  class Lease {
   public:
    Lease(NodePool* p, std::unique_ptr<Connection> c) : p_(p), c_(std::move(c)) {}
    Lease(Lease&& o) noexcept = default;
    Lease(const Lease&) = delete;
    ~Lease() {
      if (c_) p_->give_back(std::move(c_));
    }
    Connection* get() const { return c_.get(); }

   private:
    NodePool* p_;
    std::unique_ptr<Connection> c_;
  };

  // Waits at most the command timeout for a free connection (DEADLINE_EXCEEDED).
  Result<Lease> borrow();
  // Runs the commands on one connection; a failure fails them all.
  Replies run(const std::vector<Command>& cmds, const std::string& what);

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }

 private:
  void give_back(std::unique_ptr<Connection> c);
  Result<std::unique_ptr<Connection>> connect();

  const std::string host_;
  const int port_;
  const ConnectOptions opt_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Connection>> idle_;
  int open_ = 0;
};

class SingleExecutor final : public Executor {
 public:
  SingleExecutor(std::string host, int port, const ConnectOptions& opt) : pool_(std::move(host), port, opt) {}
  Replies run(Batch& batch, const std::string& what) override {
    Replies r = pool_.run(batch.commands(), what);
    batch.clear();
    return r;
  }

 private:
  NodePool pool_;
};

bool is_ok_status(const redisReply* r);
std::string reply_text(const redisReply* r);

}  // namespace yoco::redis
