#include "kv_store/circuit_breaker.h"

#include <algorithm>

#include "kv_store/util.h"

namespace yoco {

CircuitBreaker::CircuitBreaker(std::unique_ptr<KvStore> inner, CircuitBreakerOptions opt)
    : inner_(std::move(inner)), opt_(opt), cooldown_(opt.cooldown) {
  YOCO_CHECK(inner_ != nullptr);
}

bool CircuitBreaker::is_failure(const Status& st) {
  // Caller mistakes (a value too large, a bad key) say nothing about the backend's health.
  return !st.ok() && st.code() != StatusCode::kInvalidArgument && st.code() != StatusCode::kResourceExhausted &&
         st.code() != StatusCode::kNotFound;
}

bool CircuitBreaker::is_open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ != State::kClosed;
}

void CircuitBreaker::trip_locked(Clock::time_point now) {
  state_ = State::kOpen;
  retry_at_ = now + cooldown_;
  consecutive_failures_ = 0;
  stats_.breaker_tripped();
  stats_.set_breaker_open(true);
}

bool CircuitBreaker::admit() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kClosed) return true;
    if (state_ == State::kProbing || Clock::now() < retry_at_) return false;
    state_ = State::kProbing;  // this caller probes; the others keep getting fast misses
  }
  const bool ok = probe();
  std::lock_guard<std::mutex> lock(mu_);
  if (ok) {
    state_ = State::kClosed;
    consecutive_failures_ = 0;
    cooldown_ = opt_.cooldown;
    stats_.set_breaker_open(false);
    return true;
  }
  state_ = State::kOpen;
  cooldown_ = std::min(cooldown_ * 2, opt_.max_cooldown);
  retry_at_ = Clock::now() + cooldown_;
  return false;
}

bool CircuitBreaker::probe() {
  const std::string key = "__yoco_probe__:" + kv::random_hex();
  std::string value;
  for (int i = 0; i < 4; ++i) {
    const uint64_t r = kv::random64();
    value.append(reinterpret_cast<const char*>(&r), sizeof(r));
  }
  if (!inner_->put(key, value, std::chrono::seconds(60)).ok()) return false;
  KvGetResult back = inner_->get(key);
  (void)inner_->del(key);
  return back.ok() && back->has_value() && **back == value;
}

void CircuitBreaker::record(const Status& st, Clock::duration elapsed) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kClosed) return;  // admitted before another call tripped it
  const auto now = Clock::now();
  if (is_failure(st)) {
    if (++consecutive_failures_ >= opt_.failure_threshold) trip_locked(now);
  } else if (elapsed > opt_.slow_call) {
    trip_locked(now);
  } else if (st.ok()) {
    consecutive_failures_ = 0;
  }
}

KvGetResult CircuitBreaker::get(std::string_view key) {
  if (!admit()) {
    stats_.dropped();
    stats_.miss();
    return kv_miss();
  }
  const auto t0 = Clock::now();
  KvGetResult r = inner_->get(key);
  record(r.status(), Clock::now() - t0);
  return r;
}

std::vector<KvGetResult> CircuitBreaker::get_many(std::span<const std::string> keys) {
  std::vector<KvGetResult> out;
  if (!admit()) {
    out.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      stats_.dropped();
      stats_.miss();
      out.push_back(kv_miss());
    }
    return out;
  }
  const auto t0 = Clock::now();
  out = inner_->get_many(keys);
  Status worst;
  for (const auto& r : out)
    if (is_failure(r.status())) {
      worst = r.status();
      break;
    }
  record(worst, Clock::now() - t0);
  return out;
}

Status CircuitBreaker::put(std::string_view key, std::string_view value, std::chrono::seconds ttl) {
  if (!admit()) {
    stats_.dropped();
    return kv_unavailable("kv store " + inner_->name() + ": circuit open, put dropped");
  }
  const auto t0 = Clock::now();
  Status st = inner_->put(key, value, ttl);
  record(st, Clock::now() - t0);
  return st;
}

Status CircuitBreaker::del(std::string_view key) {
  if (!admit()) {
    stats_.dropped();
    return kv_unavailable("kv store " + inner_->name() + ": circuit open, delete dropped");
  }
  const auto t0 = Clock::now();
  Status st = inner_->del(key);
  record(st, Clock::now() - t0);
  return st;
}

Status CircuitBreaker::set_add(std::string_view set, std::string_view member) {
  if (!admit()) {
    stats_.dropped();
    return kv_unavailable("kv store " + inner_->name() + ": circuit open, set change dropped");
  }
  const auto t0 = Clock::now();
  Status st = inner_->set_add(set, member);
  record(st, Clock::now() - t0);
  return st;
}

Status CircuitBreaker::set_remove(std::string_view set, std::string_view member) {
  if (!admit()) {
    stats_.dropped();
    return kv_unavailable("kv store " + inner_->name() + ": circuit open, set change dropped");
  }
  const auto t0 = Clock::now();
  Status st = inner_->set_remove(set, member);
  record(st, Clock::now() - t0);
  return st;
}

Result<std::vector<std::string>> CircuitBreaker::set_members(std::string_view set) {
  if (!admit()) {
    stats_.dropped();
    return kv_unavailable("kv store " + inner_->name() + ": circuit open");
  }
  const auto t0 = Clock::now();
  auto r = inner_->set_members(set);
  record(r.status(), Clock::now() - t0);
  return r;
}

KvStoreStatsSnapshot CircuitBreaker::stats() const {
  KvStoreStatsSnapshot s = inner_->stats();
  s += stats_.snapshot();
  return s;
}

}  // namespace yoco
