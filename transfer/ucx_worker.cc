#include "transfer/ucx_worker.h"

#include <netdb.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "common/log.h"

namespace yoco::transfer_detail {

namespace {

// Longest sleep between rounds: bounds how late a lease expiry or deadline is noticed.
constexpr int kMaxSleepMs = 5;

void on_send_done(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<UcxOp*>(user_data);
  op->on_done(status);
  delete op;
  ucp_request_free(request);
}

}  // namespace

const char* ucx_status_name(ucs_status_t st) { return ucs_status_string(st); }

void ucx_op_param(ucp_request_param_t& param, UcxOp* op) {
  std::memset(&param, 0, sizeof(param));
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = on_send_done;
  param.user_data = op;
}

void ucx_op_posted(ucs_status_ptr_t ret, UcxOp* op) {
  if (UCS_PTR_IS_PTR(ret)) return;  // the callback completes it
  op->on_done(UCS_PTR_STATUS(ret));
  delete op;
}

Status resolve_sockaddr(const std::string& host, int port, struct sockaddr_storage& out, socklen_t& len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_s = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), port_s.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) return invalid_argument("address " + host + ": " + gai_strerror(rc));
  std::memcpy(&out, res->ai_addr, res->ai_addrlen);
  len = res->ai_addrlen;
  freeaddrinfo(res);
  return Status::Ok();
}

Result<std::unique_ptr<UcxWorker>> UcxWorker::create(const std::string& transports, const std::string& name, bool rma) {
  std::unique_ptr<UcxWorker> w(new UcxWorker());
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return internal_error(std::string("ucp_config_read: ") + ucs_status_string(st));
  if (!transports.empty()) {
    st = ucp_config_modify(config, "TLS", transports.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return invalid_argument("transports '" + transports + "': " + ucs_status_string(st));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
  params.features = (rma ? UCP_FEATURE_RMA : 0) | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  params.name = name.c_str();
  st = ucp_init(&params, config, &w->context_);
  ucp_config_release(config);
  if (st != UCS_OK) return Status(StatusCode::kUnavailable, std::string("ucp_init: ") + ucs_status_string(st));

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  st = ucp_worker_create(w->context_, &wp, &w->worker_);
  if (st != UCS_OK) return Status(StatusCode::kUnavailable, std::string("ucp_worker_create: ") + ucs_status_string(st));
  st = ucp_worker_get_efd(w->worker_, &w->worker_fd_);
  if (st != UCS_OK)
    return Status(StatusCode::kUnavailable, std::string("ucp_worker_get_efd: ") + ucs_status_string(st));

  w->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  w->event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w->epoll_fd_ < 0 || w->event_fd_ < 0) return io_error(std::string("epoll/eventfd: ") + std::strerror(errno));
  for (int fd : {w->worker_fd_, w->event_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(w->epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0)
      return io_error(std::string("epoll_ctl: ") + std::strerror(errno));
  }
  return w;
}

UcxWorker::~UcxWorker() {
  stop();
  if (abandoned_) {  // left to the process's exit (ucx_worker.h, finish_closing); no progress runs on them again
    worker_ = nullptr;
    context_ = nullptr;
  }
  if (worker_) ucp_worker_destroy(worker_);
  if (context_) ucp_cleanup(context_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (event_fd_ >= 0) close(event_fd_);
}

void UcxWorker::start(std::function<bool()> tick) {
  tick_ = std::move(tick);
  thread_ = std::thread([this] { loop(); });
}

void UcxWorker::post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands_.push_back(std::move(fn));
  }
  wake();
}

void UcxWorker::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(event_fd_, &one, sizeof(one));
}

bool UcxWorker::run_commands() {
  std::vector<std::function<void()>> cmds;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cmds.swap(commands_);
  }
  for (auto& c : cmds) c();
  return !cmds.empty();
}

void UcxWorker::loop() {
  while (true) {
    const bool stopping = stop_.load();
    bool busy = run_commands();
    while (ucp_worker_progress(worker_) != 0) busy = true;
    if (tick_ && tick_()) busy = true;
    if (stopping) {
      run_commands();  // work posted while stopping still runs (it may complete waiters)
      return;
    }
    if (busy) continue;
    const ucs_status_t st = ucp_worker_arm(worker_);
    if (st == UCS_ERR_BUSY) continue;
    epoll_event evs[2];
    const int n = epoll_wait(epoll_fd_, evs, 2, kMaxSleepMs);
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.fd == event_fd_) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = read(event_fd_, &v, sizeof(v));
      }
    }
  }
}

void UcxWorker::progress_until(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline) {
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    if (ucp_worker_progress(worker_) == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void UcxWorker::finish_closing(std::vector<void*>& closing, const char* side) {
  progress_until([&] { return reap_requests(closing); }, std::chrono::steady_clock::now() + std::chrono::seconds(2));
  if (closing.empty()) return;
  YOCO_LOG(LogLevel::kWarn, std::string(side) + ": endpoints did not close at shutdown; left to the process's exit",
           LogFields().kv("endpoints", static_cast<int64_t>(closing.size())));
  abandoned_ = true;
}

void UcxWorker::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  wake();
  thread_.join();
}

bool reap_requests(std::vector<void*>& reqs) {
  for (auto it = reqs.begin(); it != reqs.end();) {
    if (ucp_request_check_status(*it) != UCS_INPROGRESS) {
      ucp_request_free(*it);
      it = reqs.erase(it);
    } else {
      ++it;
    }
  }
  return reqs.empty();
}

Status UcxWorker::set_am_handler(unsigned id, ucp_am_recv_callback_t cb, void* arg) {
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                  UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  hp.id = id;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  hp.cb = cb;
  hp.arg = arg;
  const ucs_status_t st = ucp_worker_set_am_recv_handler(worker_, &hp);
  if (st != UCS_OK)
    return Status(StatusCode::kUnavailable, std::string("ucp_worker_set_am_recv_handler: ") + ucs_status_string(st));
  return Status::Ok();
}

}  // namespace yoco::transfer_detail
