#include "router/workers.h"

#include <algorithm>

#include "common/log.h"
#include "router/worker_calls.h"

namespace yoco {

WorkerGroup::WorkerGroup(WorkerRole role, std::vector<Target> targets, WorkerGroupOptions options, Resolver resolver)
    : role_(role), discovery_(std::move(targets), std::move(resolver)), opt_(options) {}

WorkerGroup::~WorkerGroup() { stop(); }

void WorkerGroup::start(WorkerCalls& calls) {
  calls_ = &calls;
  if (Status st = discovery_.refresh(); !st.ok())
    YOCO_LOG(LogLevel::kWarn, "discovery failed", LogFields().kv("error", st.message()));
  poll_all();
  thread_ = std::thread([this] { loop(); });
}

void WorkerGroup::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void WorkerGroup::loop() {
  auto next_dns = std::chrono::steady_clock::now() + opt_.dns_refresh;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, opt_.poll_interval, [&] { return stopping_; })) return;
    }
    if (std::chrono::steady_clock::now() >= next_dns) {
      if (Status st = discovery_.refresh(); !st.ok())
        YOCO_LOG(LogLevel::kWarn, "discovery failed", LogFields().kv("error", st.message()));
      next_dns = std::chrono::steady_clock::now() + opt_.dns_refresh;
    }
    poll_all();
  }
}

std::shared_ptr<grpc::Channel> WorkerGroup::channel(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& ch = channels_[address];
  if (!ch) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetMaxReceiveMessageSize(64 << 20);
    if (!opt_.tls_server_name.empty()) args.SetSslTargetNameOverride(opt_.tls_server_name);
    ch = grpc::CreateCustomChannel(address, opt_.credentials, args);
  }
  return ch;
}

void WorkerGroup::poll_all() {
  const std::vector<std::string> addrs = discovery_.addresses();
  std::map<std::string, Worker> fresh;
  for (const auto& a : addrs) {
    Worker w;
    w.snap.address = a;
    if (role_ == WorkerRole::kPrefill) {
      internal::v1::PrefillLoad load;
      auto st = calls_->prefill_load(a, opt_.poll_timeout, &load);
      w.answered = st.ok();
      w.snap.healthy = st.ok() && load.serving();
      w.snap.queued_tokens = load.queued_tokens();
      w.snap.fingerprint = load.fingerprint();
    } else {
      internal::v1::DecodeLoad load;
      auto st = calls_->decode_load(a, opt_.poll_timeout, &load);
      w.answered = st.ok();
      w.snap.healthy = st.ok() && load.serving();
      w.snap.free_kv_blocks = load.free_kv_blocks();
      w.snap.kv_block_rows = load.block_size();
      w.snap.running = load.running();
      w.snap.fingerprint = load.fingerprint();
      w.snap.total_kv_blocks = load.total_kv_blocks();
      w.snap.kept_kv_blocks = load.kept_kv_blocks();
      if (st.ok() && load.resident_blocks_size() > 0)
        w.snap.resident = std::make_shared<const std::unordered_set<uint64_t>>(load.resident_blocks().begin(),
                                                                               load.resident_blocks().end());
    }
    fresh[a] = std::move(w);
  }
  std::unique_lock<std::mutex> lock(mu_);
  for (auto& [a, w] : fresh) {
    auto old = workers_.find(a);
    if (old != workers_.end() && old->second.snap.healthy != w.snap.healthy)
      YOCO_LOG(LogLevel::kInfo, w.snap.healthy ? "worker healthy" : "worker unhealthy",
               LogFields().kv("role", role_ == WorkerRole::kPrefill ? "prefill" : "decode").kv("address", a));
  }
  workers_ = std::move(fresh);
  for (auto it = channels_.begin(); it != channels_.end();)  // forget workers discovery dropped
    it = workers_.count(it->first) ? std::next(it) : channels_.erase(it);
  lock.unlock();
  if (on_poll_) on_poll_();
}

std::vector<WorkerSnapshot> WorkerGroup::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerSnapshot> out;
  for (const auto& [a, w] : workers_) {
    WorkerSnapshot s = w.snap;
    if (role_ == WorkerRole::kPrefill) s.queued_tokens += w.pending;
    else {
      s.free_kv_blocks = std::max<int64_t>(0, s.free_kv_blocks - w.pending);
      // The blocks of requests that finished since the poll are kept prefixes now (until the
      // next report says what the pool really kept).
      s.kept_kv_blocks = std::min(s.free_kv_blocks, s.kept_kv_blocks + std::max<int64_t>(0, w.sent - w.pending));
    }
    out.push_back(std::move(s));
  }
  return out;
}

void WorkerGroup::add_pending(const std::string& address, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(address);
  // A poll in between resets the count (the worker's own figure then includes the work), so
  // the release of work sent before it must not go below zero.
  if (it == workers_.end()) return;
  it->second.pending = std::max<int64_t>(0, it->second.pending + n);
  if (n > 0) it->second.sent += n;
}

void WorkerGroup::add_resident(const std::string& address, std::span<const uint64_t> keys) {
  if (keys.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(address);
  if (it == workers_.end()) return;
  // Copy on write: snapshots already handed out keep the set they saw.
  auto& held = it->second.snap.resident;
  auto grown =
      held ? std::make_shared<std::unordered_set<uint64_t>>(*held) : std::make_shared<std::unordered_set<uint64_t>>();
  grown->insert(keys.begin(), keys.end());
  held = std::move(grown);
}

void WorkerGroup::mark_failed(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(address);
  if (it != workers_.end()) it->second.snap.healthy = false;
}

bool WorkerGroup::healthy(const std::string& address) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(address);
  return it != workers_.end() && it->second.snap.healthy;
}

bool WorkerGroup::answering(const std::string& address) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(address);
  return it != workers_.end() && it->second.answered;
}

int WorkerGroup::healthy_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [a, w] : workers_) n += w.snap.healthy;
  return n;
}

}  // namespace yoco
