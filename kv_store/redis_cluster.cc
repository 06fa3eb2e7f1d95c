#include "kv_store/redis_cluster.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "kv_store/store.h"

namespace yoco::redis {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRefreshEvery = std::chrono::milliseconds(100);
constexpr int kMaxRedirects = 5;
constexpr auto kTryAgainPause = std::chrono::milliseconds(20);
constexpr size_t kRefreshTries = 3;  // nodes asked per reload: bounds the caller that reloads

bool starts_with(const redisReply* r, std::string_view prefix) {
  return r->type == REDIS_REPLY_ERROR && static_cast<size_t>(r->len) >= prefix.size() &&
         std::string_view(r->str, prefix.size()) == prefix;
}

// "MOVED 3999 127.0.0.1:6381" / "ASK ...": the slot and the address (an empty host: the node
// that answered).
bool parse_redirect(std::string_view text, const std::string& from_host, int& slot, std::string& host, int& port) {
  const size_t a = text.find(' ');
  const size_t b = a == std::string_view::npos ? a : text.find(' ', a + 1);
  if (b == std::string_view::npos) return false;
  const std::string_view s = text.substr(a + 1, b - a - 1), addr = text.substr(b + 1);
  const size_t colon = addr.rfind(':');
  if (colon == std::string_view::npos) return false;
  if (std::from_chars(s.data(), s.data() + s.size(), slot).ec != std::errc() || slot < 0 || slot >= kClusterSlots)
    return false;
  const std::string_view p = addr.substr(colon + 1);
  if (std::from_chars(p.data(), p.data() + p.size(), port).ec != std::errc() || port < 1 || port > 65535) return false;
  host = colon == 0 ? from_host : std::string(addr.substr(0, colon));
  return true;
}

class ClusterExecutor final : public Executor {
 public:
  ClusterExecutor(std::vector<std::pair<std::string, int>> seeds, const ConnectOptions& opt,
                  std::optional<CircuitBreakerOptions> breaker)
      : seeds_(std::move(seeds)), opt_(opt), breaker_(breaker) {
    slots_.fill(nullptr);
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [h, p] : seeds_) node_locked(h, p);
  }

  Replies run(Batch& batch, const std::string& what) override;
  bool node_failure_is_miss() const override { return true; }
  KvStoreStatsSnapshot stats() const override {
    KvStoreStatsSnapshot s = stats_.snapshot();
    std::lock_guard<std::mutex> lock(mu_);
    s.breaker_open = 0;
    for (const auto& [_, n] : nodes_) s.breaker_open += n->open ? 1 : 0;
    return s;
  }

 private:
  struct Node {
    std::unique_ptr<NodePool> pool;
    // The node's breaker, under mu_.
    bool open = false;
    bool probing = false;
    int failures = 0;
    Clock::time_point retry_at{};
    std::chrono::milliseconds cooldown{0};
  };
  struct Pending {
    size_t index;
    Node* node;
    bool asking;
  };

  Node* node_locked(const std::string& host, int port) {
    auto& n = nodes_[host + ":" + std::to_string(port)];
    if (!n) {
      n = std::make_unique<Node>();
      n->pool = std::make_unique<NodePool>(host, port, opt_);
      if (breaker_) n->cooldown = breaker_->cooldown;
    }
    return n.get();
  }
  void refresh(bool must_load);
  Status load_from(Node* n);
  // Whether a call may go to the node; `probe`: this call probes an open node after its cool-down.
  bool admit(Node* n, bool& probe);
  void record(Node* n, bool probe, bool failed, Clock::duration elapsed);
  void trip_locked(Node* n, Clock::time_point now);

  const std::vector<std::pair<std::string, int>> seeds_;
  const ConnectOptions opt_;
  const std::optional<CircuitBreakerOptions> breaker_;
  mutable std::mutex mu_;                               // the map, the nodes and their breakers
  std::map<std::string, std::unique_ptr<Node>> nodes_;  // by "host:port"; never removed
  std::array<Node*, kClusterSlots> slots_;              // the master of each slot
  bool loaded_ = false;
  bool stale_ = false;
  Clock::time_point last_refresh_{};
  std::mutex refresh_mu_;     // one refresher at a time (it does I/O without mu_)
  size_t refresh_start_ = 0;  // under refresh_mu_
  KvStoreStats stats_;
};

Status ClusterExecutor::load_from(Node* n) {
  std::vector<Command> cmds{{{"CLUSTER", "SLOTS"}, 0}};
  Replies r = n->pool->run(cmds, "CLUSTER SLOTS");
  if (!r[0].ok()) return r[0].status();
  const redisReply* a = r[0]->get();
  if (a->type != REDIS_REPLY_ARRAY)
    return kv_unavailable("redis CLUSTER SLOTS from " + n->pool->address() + ": " + reply_text(a));
  struct Range {
    int lo, hi;
    std::string host;
    int port;
  };
  std::vector<Range> ranges;
  for (size_t i = 0; i < a->elements; ++i) {
    const redisReply* e = a->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2 || e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
      return kv_unavailable("redis CLUSTER SLOTS from " + n->pool->address() + ": unexpected reply");
    const redisReply* master = e->element[2];  // the first node of a range is its master
    std::string host = reply_text(master->element[0]);
    if (host.empty() || host == "?") host = n->pool->host();
    ranges.push_back({static_cast<int>(e->element[0]->integer), static_cast<int>(e->element[1]->integer),
                      std::move(host), static_cast<int>(master->element[1]->integer)});
  }
  if (ranges.empty()) return kv_unavailable("redis CLUSTER SLOTS from " + n->pool->address() + ": no slots");
  std::lock_guard<std::mutex> lock(mu_);
  slots_.fill(nullptr);
  for (const auto& rg : ranges) {
    Node* m = node_locked(rg.host, rg.port);
    for (int s = std::max(rg.lo, 0); s <= std::min(rg.hi, kClusterSlots - 1); ++s) slots_[s] = m;
  }
  loaded_ = true;
  stale_ = false;
  return Status::Ok();
}

// Reloads the map if it is stale (at most every kRefreshEvery) or was never loaded. Asks the
// nodes without recent failures first (a stopped node would cost the caller a timeout), at most
// kRefreshTries of them; the first answer wins.
void ClusterExecutor::refresh(bool must_load) {
  std::unique_lock<std::mutex> busy(refresh_mu_, std::defer_lock);
  if (must_load) busy.lock();  // without a map no command can be routed: wait for the loader
  else if (!busy.try_lock()) return;
  std::vector<Node*> ask;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = Clock::now();
    if (loaded_ && !stale_) return;
    if (now - last_refresh_ < kRefreshEvery) return;  // also after a failed first load: calls stay fast
    last_refresh_ = now;
    std::vector<Node*> later;
    for (auto& [_, n] : nodes_) (n->open || n->failures > 0 ? later : ask).push_back(n.get());
    ask.insert(ask.end(), later.begin(), later.end());
  }
  // Round-robin over the candidates, so a reload that finds the first few down tries others next.
  for (size_t i = 0; i < std::min(ask.size(), kRefreshTries); ++i)
    if (load_from(ask[(refresh_start_ + i) % ask.size()]).ok()) return;
  refresh_start_ += kRefreshTries;
}

bool ClusterExecutor::admit(Node* n, bool& probe) {
  probe = false;
  if (!breaker_) return true;
  std::lock_guard<std::mutex> lock(mu_);
  if (!n->open) return true;
  if (n->probing || Clock::now() < n->retry_at) return false;
  n->probing = probe = true;  // this call probes the node; the others keep getting fast misses
  return true;
}

void ClusterExecutor::trip_locked(Node* n, Clock::time_point now) {
  if (!n->open) stats_.breaker_tripped();
  n->open = true;
  n->failures = 0;
  n->retry_at = now + n->cooldown;
}

void ClusterExecutor::record(Node* n, bool probe, bool failed, Clock::duration elapsed) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed) stale_ = true;  // the node may have failed over: reload the map soon
  if (!breaker_) return;
  const auto now = Clock::now();
  if (probe) {
    n->probing = false;
    if (failed || elapsed > breaker_->slow_call) {
      n->cooldown = std::min(n->cooldown * 2, breaker_->max_cooldown);
      trip_locked(n, now);
    } else {
      n->open = false;
      n->cooldown = breaker_->cooldown;
    }
    return;
  }
  if (n->open) return;  // admitted before another call tripped it
  if (failed) {
    if (++n->failures >= breaker_->failure_threshold) trip_locked(n, now);
  } else if (elapsed > breaker_->slow_call) {
    trip_locked(n, now);
  } else {
    n->failures = 0;
  }
}

Replies ClusterExecutor::run(Batch& batch, const std::string& what) {
  const std::vector<Command>& cmds = batch.commands();
  Replies out;
  out.reserve(cmds.size());
  for (size_t i = 0; i < cmds.size(); ++i) out.push_back(kv_unavailable("redis " + what + ": not run"));
  bool loaded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    loaded = loaded_;
  }
  refresh(!loaded);
  std::vector<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < cmds.size(); ++i) {
      const Command& c = cmds[i];
      Node* n = c.key_arg < c.args.size() ? slots_[key_slot(c.args[c.key_arg])] : nullptr;
      if (n) {
        pending.push_back({i, n, false});
      } else {
        out[i] = kv_unavailable("redis-cluster " + what + ": no node serves the key's slot (map not loaded)");
        stats_.error();
        stale_ = true;
      }
    }
  }
  for (int round = 0; round <= kMaxRedirects && !pending.empty(); ++round) {
    std::vector<Pending> next;
    // Group by node, keeping each node's commands in batch order (a value's chunks before its manifest).
    std::vector<Node*> order;
    for (const auto& p : pending)
      if (std::find(order.begin(), order.end(), p.node) == order.end()) order.push_back(p.node);
    bool try_again = false;
    for (Node* n : order) {
      std::vector<size_t> idx;
      std::vector<Command> group;
      for (const auto& p : pending) {
        if (p.node != n) continue;
        if (p.asking) group.push_back({{"ASKING"}, 0});
        idx.push_back(p.index);
        group.push_back(cmds[p.index]);
      }
      bool probe = false;
      if (!admit(n, probe)) {
        for (size_t i : idx) {
          stats_.dropped();
          out[i] = kv_unavailable("redis-cluster node " + n->pool->address() + ": breaker open, call dropped");
        }
        std::lock_guard<std::mutex> lock(mu_);
        stale_ = true;  // its slots may have a new master by now
        continue;
      }
      const auto t0 = Clock::now();
      Replies r = n->pool->run(group, what);
      const bool failed = !r.empty() && !r[0].ok();
      record(n, probe, failed, Clock::now() - t0);
      size_t k = 0;
      for (size_t j = 0; j < group.size(); ++j) {
        if (group[j].args.size() == 1 && group[j].args[0] == "ASKING") continue;
        const size_t i = idx[k++];
        if (failed) {
          stats_.error();
          out[i] = r[j].status();
          continue;
        }
        const redisReply* reply = r[j]->get();
        int slot = 0, port = 0;
        std::string host;
        const bool moved = starts_with(reply, "MOVED "), ask = starts_with(reply, "ASK ");
        if ((moved || ask) && parse_redirect(reply_text(reply), n->pool->host(), slot, host, port)) {
          std::lock_guard<std::mutex> lock(mu_);
          Node* to = node_locked(host, port);
          if (moved) {
            slots_[slot] = to;
            stale_ = true;  // a slot moved: others may have too
          }
          next.push_back({i, to, ask});
        } else if (starts_with(reply, "TRYAGAIN")) {
          // A multi-key command during a slot's migration: its keys are split for a moment.
          next.push_back({i, n, false});
          try_again = true;
        } else {
          if (starts_with(reply, "CLUSTERDOWN")) {
            std::lock_guard<std::mutex> lock(mu_);
            stale_ = true;  // the cluster is re-forming: its map may change
          }
          out[i] = std::move(r[j]);
        }
      }
    }
    std::sort(next.begin(), next.end(), [](const Pending& a, const Pending& b) { return a.index < b.index; });
    pending = std::move(next);
    if (try_again) std::this_thread::sleep_for(kTryAgainPause);
  }
  for (const auto& p : pending)
    out[p.index] =
        kv_unavailable("redis-cluster " + what + ": more than " + std::to_string(kMaxRedirects) + " redirections");
  batch.clear();
  return out;
}

}  // namespace

std::unique_ptr<Executor> make_cluster_executor(std::vector<std::pair<std::string, int>> seeds,
                                                const ConnectOptions& opt,
                                                std::optional<CircuitBreakerOptions> breaker) {
  return std::make_unique<ClusterExecutor>(std::move(seeds), opt, breaker);
}

}  // namespace yoco::redis
