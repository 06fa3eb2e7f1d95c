#include "router/stall_watch.h"

#include <algorithm>

namespace yoco {

StallWatch::StallWatch(std::chrono::milliseconds timeout, std::function<bool()> unhealthy, std::function<void()> cancel)
    : timeout_(timeout), unhealthy_(std::move(unhealthy)), cancel_(std::move(cancel)) {
  thread_ = std::thread([this] { loop(); });
}

StallWatch::~StallWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StallWatch::heard() {
  std::lock_guard<std::mutex> lock(mu_);
  last_ = Clock::now();
}

StallWatch::Link StallWatch::link(std::function<void()> cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fired_) cancel();
  else linked_ = std::move(cancel);
  return Link(*this);
}

StallWatch::Link::~Link() {
  std::lock_guard<std::mutex> lock(w_.mu_);  // a cancel running on the watcher finishes first
  w_.linked_ = nullptr;
}

bool StallWatch::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

void StallWatch::loop() {
  // Checked a few times per timeout: the migration starts at most a slice after both hold.
  const auto slice = std::clamp<std::chrono::milliseconds>(timeout_ / 4, std::chrono::milliseconds(10),
                                                           std::chrono::milliseconds(250));
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, slice, [&] { return stopping_; })) {
    if (Clock::now() - last_ < timeout_) continue;
    lock.unlock();
    const bool stalled = unhealthy_();
    lock.lock();
    // An event may have arrived while the health was read, or the stream may have ended.
    if (!stalled || stopping_ || Clock::now() - last_ < timeout_) continue;
    fired_ = true;
    cancel_();  // under the lock: the destructor and ~Link cannot return before it is done
    if (linked_) linked_();
    return;
  }
}

}  // namespace yoco
