// Watches one Decode stream for a hung worker (SIGSTOPped, a stuck device): when no event has
// arrived for `timeout` and the router's health polls find the worker unhealthy, the stream's
// call is cancelled so GenerateCall migrates it like a crashed one. Silence alone is not enough:
// a worker that answers its load polls may be legitimately slow (a long prefill it waits for, a
// long colocated prefill, a queue, a preemption), and is left alone (docs/design.md §3.3, hung
// decode workers). One watch covers the stream's whole life on a worker: the reservation, the
// Prefill call that fills it (linked: cancelled with the stream), the commit, the admission and
// the tokens.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace yoco {

class StallWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // `unhealthy` is asked only once the stream has been silent for `timeout`; `cancel` runs at
  // most once, on the watcher's thread.
  StallWatch(std::chrono::milliseconds timeout, std::function<bool()> unhealthy, std::function<void()> cancel);
  ~StallWatch();  // stops the watcher (never cancels after it returns)
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  // While a Link lives, firing also runs its `cancel`: for a call made on the stream's behalf
  // that waits on the same worker (the Prefill, which waits for the worker's commit
  // acknowledgement). Linked after the watch fired, it runs at once; never after the Link is gone.
  class Link {
   public:
    ~Link();
    Link(const Link&) = delete;
    Link& operator=(const Link&) = delete;

   private:
    friend class StallWatch;
    explicit Link(StallWatch& w) : w_(w) {}
    StallWatch& w_;
  };
  [[nodiscard]] Link link(std::function<void()> cancel);

  void heard();        // an event arrived: the silence starts again
  bool fired() const;  // the stream was cancelled as stalled

 private:
  void loop();

  const std::chrono::milliseconds timeout_;
  const std::function<bool()> unhealthy_;
  const std::function<void()> cancel_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Clock::time_point last_ = Clock::now();
  bool stopping_ = false, fired_ = false;
  std::function<void()> linked_;  // the live Link's cancel
  std::thread thread_;
};

}  // namespace yoco
