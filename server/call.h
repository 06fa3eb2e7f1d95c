// What a gRPC handler does with its call's deadline and cancellation, written once:
// the client's deadline on the steady clock the services schedule with, and a wait on a
// condition that also notices a cancelled client (polled every 20 ms; gRPC has no cancellation
// callback a condition variable can wait on).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>

namespace yoco {

// The call's deadline converted to `SteadyClock`; nullopt when the client set none.
template <class SteadyClock = std::chrono::steady_clock>
std::optional<typename SteadyClock::time_point> steady_deadline(const grpc::ServerContext& ctx) {
  const auto deadline = ctx.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return std::nullopt;
  return SteadyClock::now() +
         std::chrono::duration_cast<typename SteadyClock::duration>(deadline - std::chrono::system_clock::now());
}

// True once the call's deadline has passed.
inline bool deadline_passed(const grpc::ServerContext& ctx) { return std::chrono::system_clock::now() >= ctx.deadline(); }

// The slice a cancellable wait sleeps between looks at the client.
inline constexpr std::chrono::milliseconds kCancelPollInterval{20};

// Waits on `cv` (with `lock` held on entry and exit) until `ready()`. When the client cancels,
// `on_cancel` runs once (without the lock) and the wait goes on: the caller's work still has to
// finish and report (e.g. a scheduler that frees resources, then completes the job).
template <class Ready>
void wait_cancellable(const grpc::ServerContext& ctx, std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                      Ready ready, const std::function<void()>& on_cancel) {
  bool cancel_sent = false;
  while (!cv.wait_for(lock, kCancelPollInterval, ready)) {
    if (cancel_sent || !ctx.IsCancelled()) continue;
    cancel_sent = true;
    if (on_cancel) {
      lock.unlock();
      on_cancel();
      lock.lock();
    }
  }
}

}  // namespace yoco
