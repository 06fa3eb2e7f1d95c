#include "common/process.h"

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <thread>

namespace yoco {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_installed{false};
void on_signal(int) { g_stop = true; }

}  // namespace

Status write_port_file(const std::string& path, const Json& fields) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << fields.dump() << "\n";
    if (!out) return invalid_argument("--port-file: cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return invalid_argument("--port-file: cannot rename to " + path);
  return Status::Ok();
}

void install_shutdown_signal_handlers() {
  if (g_installed.exchange(true)) return;
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
}

void wait_for_shutdown_signal() {
  install_shutdown_signal_handlers();
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

long raise_open_file_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return rl.rlim_cur == RLIM_INFINITY ? -1 : static_cast<long>(rl.rlim_cur);
}

}  // namespace yoco
