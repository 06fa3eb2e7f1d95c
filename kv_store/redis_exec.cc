#include "kv_store/redis_exec.h"

#include <cstring>
#include <utility>

#include "kv_store/store.h"

namespace yoco::redis {

bool is_ok_status(const redisReply* r) {
  return r->type == REDIS_REPLY_STATUS && r->len == 2 && std::memcmp(r->str, "OK", 2) == 0;
}
std::string reply_text(const redisReply* r) { return std::string(r->str ? r->str : "", r->str ? r->len : 0); }

NodePool::~NodePool() = default;

Result<std::unique_ptr<Connection>> NodePool::connect() {
  YOCO_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                        Connection::open(host_, port_, opt_.connect_timeout, opt_.command_timeout, opt_.tls));
  Connection* c = conn.get();
  if (!opt_.password.empty()) {
    if (opt_.user.empty()) c->append({"AUTH", opt_.password});
    else c->append({"AUTH", opt_.user, opt_.password});
  }
  const std::string db = std::to_string(opt_.db);
  if (opt_.db != 0) c->append({"SELECT", db});
  if (c->pending() > 0) {
    auto replies = c->run("connection setup");
    Status st;
    if (!replies.ok()) {
      st = replies.status();
    } else {
      for (size_t i = 0; i < replies->size() && st.ok(); ++i) {
        const redisReply* r = (*replies)[i].get();
        if (is_ok_status(r)) continue;
        const bool auth = !opt_.password.empty() && i == 0;
        // The message names the command, never the secret.
        st =
            failed_precondition(std::string("redis ") + (auth ? "AUTH" : "SELECT " + db) + " failed: " + reply_text(r));
      }
    }
    if (!st.ok()) return st;
  }
  return conn;
}

Result<NodePool::Lease> NodePool::borrow() {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + opt_.command_timeout;
  while (idle_.empty() && open_ >= opt_.pool_size) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && idle_.empty() && open_ >= opt_.pool_size)
      return kv_deadline_exceeded("redis: no free connection in the pool of " + std::to_string(opt_.pool_size) +
                                  " within " + std::to_string(opt_.command_timeout.count()) + " ms");
  }
  if (!idle_.empty()) {
    std::unique_ptr<Connection> c = std::move(idle_.back());
    idle_.pop_back();
    return Lease(this, std::move(c));
  }
  ++open_;
  lock.unlock();
  auto c = connect();
  if (!c.ok()) {
    lock.lock();
    --open_;
    cv_.notify_one();
    return c.status();
  }
  return Lease(this, std::move(*c));
}

void NodePool::give_back(std::unique_ptr<Connection> c) {
  std::vector<std::unique_ptr<Connection>> stale;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!c->broken()) {
      idle_.push_back(std::move(c));
      cv_.notify_one();
      return;
    }
    // A broken connection usually means the server went away: its idle siblings are as dead,
    // so they go too and the next call connects afresh.
    stale.swap(idle_);
    open_ -= 1 + static_cast<int>(stale.size());
    cv_.notify_all();
  }
  // c and stale close here, outside the lock.
}

Replies NodePool::run(const std::vector<Command>& cmds, const std::string& what) {
  Replies out;
  out.reserve(cmds.size());
  auto fail_all = [&](const Status& st) {
    out.clear();
    for (size_t i = 0; i < cmds.size(); ++i) out.push_back(st);
    return std::move(out);
  };
  if (cmds.empty()) return out;
  auto lease = borrow();
  if (!lease.ok()) return fail_all(lease.status());
  Connection* c = lease->get();
  for (const auto& cmd : cmds) c->append(cmd.args);
  auto r = c->run(what);
  if (!r.ok()) return fail_all(r.status());
  for (auto& reply : *r) out.emplace_back(std::move(reply));
  return out;
}

}  // namespace yoco::redis
