// The router's view of one role's workers (prefill or decode): the addresses discovery yields
// (static or a DNS name re-resolved periodically), a channel per address, and health + load
// from polling each worker's GetLoad. A worker that fails a request is marked unhealthy only
// until its next successful poll: one transient error never takes a healthy worker out for
// good (sglang #13054). The polls go through WorkerCalls (router/worker_calls.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "router/discovery.h"
#include "router/policy.h"

namespace yoco {

class WorkerCalls;

enum class WorkerRole { kPrefill, kDecode };

struct WorkerGroupOptions {
  std::chrono::milliseconds poll_interval{500};
  std::chrono::milliseconds poll_timeout{1000};
  std::chrono::milliseconds dns_refresh{5000};
  // The channels' credentials (server/tls.h: TLS + the router's client certificate, or plaintext).
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  std::string tls_server_name;  // non-empty: the name the workers' certificates are checked for
};

class WorkerGroup {
 public:
  WorkerGroup(WorkerRole role, std::vector<Target> targets, WorkerGroupOptions options,
              Resolver resolver = resolve_with_getaddrinfo);
  ~WorkerGroup();

  // First discovery + poll happen before start returns; every poll asks through `calls`.
  void start(WorkerCalls& calls);
  // Runs after every poll (outside the group's lock); set before start().
  void set_on_poll(std::function<void()> hook) { on_poll_ = std::move(hook); }
  void stop();

  // Snapshots of every known worker, with local adjustments for work sent since the last poll.
  std::vector<WorkerSnapshot> snapshot() const;
  std::shared_ptr<grpc::Channel> channel(const std::string& address);

  // Bookkeeping between polls so a burst of requests spreads instead of herding: added when work
  // is sent, released when it is done (never below zero; each poll starts again from zero).
  void add_pending(const std::string& address, int64_t tokens_or_blocks);
  // Decode residency: `keys` (a prompt's whole-block chain keys) are counted as held by the worker
  // a request was sent to, until its next report replaces them with what it really holds.
  void add_resident(const std::string& address, std::span<const uint64_t> keys);
  void mark_failed(const std::string& address);
  // Polls every worker now (a request found no room in load reports that may be stale).
  void refresh_now() { poll_all(); }
  int healthy_count() const;
  // The last poll's verdict on `address` (or a failure since); false for an unknown address.
  bool healthy(const std::string& address) const;
  // The last poll of `address` got an answer, serving or draining (false: it timed out or the
  // worker is unreachable or unknown). A hung worker fails this; a slow or draining one does not.
  bool answering(const std::string& address) const;

 private:
  struct Worker {
    WorkerSnapshot snap;
    int64_t pending = 0;    // prefill: tokens, decode: blocks, sent since the last poll
    int64_t sent = 0;       // decode: blocks sent since the last poll, finished or not
    bool answered = false;  // the last poll got an answer (healthy or not)
  };
  void loop();
  void poll_all();

  const WorkerRole role_;
  Discovery discovery_;
  const WorkerGroupOptions opt_;
  mutable std::mutex mu_;
  std::map<std::string, Worker> workers_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
  std::function<void()> on_poll_;
  WorkerCalls* calls_ = nullptr;
};

}  // namespace yoco
