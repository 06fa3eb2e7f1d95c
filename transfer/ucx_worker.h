// One UCP context + worker driven by a dedicated progress thread. Every UCX call of a side
// happens on that thread (so the worker runs in UCS_THREAD_MODE_SINGLE); other threads hand it
// work with post(). The thread sleeps on the worker's event fd when idle instead of spinning
// (the hosts we run on share few cores). Internal to transfer/.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace yoco::transfer_detail {

class UcxWorker {
 public:
  // `transports` non-empty overrides UCX_TLS for this context only (tests); empty keeps UCX's
  // own environment. Features: AM + WAKEUP, and RMA when `rma` (without it UCX serves no remote
  // put or get into this process's memory, emulated or not).
  static Result<std::unique_ptr<UcxWorker>> create(const std::string& transports, const std::string& name,
                                                   bool rma = true);
  ~UcxWorker();

  ucp_context_h context() const { return context_; }
  ucp_worker_h worker() const { return worker_; }
  // Registers `cb(arg, ...)` for active messages with `id`, delivered whole.
  Status set_am_handler(unsigned id, ucp_am_recv_callback_t cb, void* arg);

  // Starts the progress thread; `tick` runs on it after every progress round (timers, deferred
  // work) and returns whether it did anything (then the thread goes round again before sleeping).
  void start(std::function<bool()> tick);
  // Runs fn on the progress thread, never inside a UCX callback.
  void post(std::function<void()> fn);
  // Runs the queued commands, then stops and joins the thread. Idempotent.
  void stop();
  // A teardown's last step: progresses until the endpoints' close requests `closing` complete, at
  // most two seconds. Where some do not (a peer that never answered the wire-up or the flush), it
  // logs that for `side` and the destructor leaves the UCP worker and context to the process's
  // exit, as destroying a worker with such an endpoint aborts the process in UCX 1.13 ("pending
  // request ... should have been flushed"). Only from the progress thread.
  void finish_closing(std::vector<void*>& closing, const char* side);
  bool on_progress_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  UcxWorker() = default;
  // Progresses the worker until `done` or the deadline; only from the progress thread (teardown).
  void progress_until(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline);
  void loop();
  void wake();
  bool run_commands();

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int epoll_fd_ = -1, event_fd_ = -1, worker_fd_ = -1;
  std::function<bool()> tick_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  bool abandoned_ = false;
  std::mutex mu_;
  std::vector<std::function<void()>> commands_;
};

// Completion plumbing for non-blocking UCX operations: `on_done` runs exactly once on the
// progress thread with the operation's status, whether it completed at once or later.
struct UcxOp {
  std::function<void(ucs_status_t)> on_done;
  std::vector<uint8_t> header;  // AM headers must outlive the operation
  std::vector<uint8_t> data;
};
// Fills `param` so a later completion calls op->on_done and frees the op and the request.
void ucx_op_param(ucp_request_param_t& param, UcxOp* op);
// Frees the requests that have completed and drops them from `reqs`; true when none is left.
bool reap_requests(std::vector<void*>& reqs);
// Handles the return of a *_nbx call made with ucx_op_param: completes the op now when the call
// did not return a request.
void ucx_op_posted(ucs_status_ptr_t ret, UcxOp* op);

// The sockaddr for host:port (numeric or resolvable host).
Status resolve_sockaddr(const std::string& host, int port, struct sockaddr_storage& out, socklen_t& len);

const char* ucx_status_name(ucs_status_t st);

}  // namespace yoco::transfer_detail
