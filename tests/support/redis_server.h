// A redis-server process for tests (the KV store's redis cases, tests/unit/kv_store/): started on
// 127.0.0.1 at a port the test chose, plain or TLS-only (a TestPki), killed by the destructor,
// also when the test fails. Needs Debian's redis-server and redis-tools.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/test_pki.h"

namespace yoco::test {

// The path of an executable on $PATH; "" when there is none.
inline std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string cand = p.substr(start, end - start) + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    start = end + 1;
  }
  return "";
}

// A loopback port nobody listens on now (the kernel's pick; free until someone binds it).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Whether something accepts connections on 127.0.0.1:port.
inline bool port_accepts(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// A redis-server on 127.0.0.1 owned by the test: killed by the destructor, also on failure.
// With a PKI, it listens only on a TLS port and requires a client certificate signed by the CA.
class RedisServer {
 public:
  RedisServer(int port, std::string password, const TestPki* tls = nullptr, std::vector<std::string> extra = {})
      : port_(port), password_(std::move(password)), tls_(tls), extra_(std::move(extra)) {}
  ~RedisServer() { stop(); }

  bool start() {
    const std::string bin = find_program("redis-server");
    if (bin.empty()) return false;
    pid_ = fork();
    if (pid_ == 0) {
      int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      std::vector<std::string> args{bin,  "--bind",      "127.0.0.1", "--save",           "",  "--appendonly",
                                    "no", "--daemonize", "no",        "--protected-mode", "no"};
      const std::vector<std::string> listen =
          tls_ ? tls_->redis_server_args(port_) : std::vector<std::string>{"--port", std::to_string(port_)};
      args.insert(args.end(), listen.begin(), listen.end());
      args.insert(args.end(), extra_.begin(), extra_.end());
      if (!password_.empty()) {
        args.push_back("--requirepass");
        args.push_back(password_);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      _exit(127);
    }
    for (int i = 0; i < 250; ++i) {
      if (port_accepts(port_)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::kill(pid_, SIGCONT);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  int port() const { return port_; }
  bool running() const { return pid_ > 0; }

  // redis-cli's --raw output of one command (tests poke at chunks with it); cluster: -c follows
  // redirections.
  std::string cli(const std::string& command, bool cluster = false) const {
    std::string cmd =
        "redis-cli " + std::string(cluster ? "-c " : "") + "-h 127.0.0.1 -p " + std::to_string(port_) +
        (password_.empty() ? "" : " -a " + password_ + " --no-auth-warning") +
        (tls_ ? " --tls --cacert " + tls_->ca + " --cert " + tls_->client_cert + " --key " + tls_->client_key : "") +
        " --raw " + command + " 2>&1";
    std::string out;
    if (FILE* f = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
      ::pclose(f);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
  }

 private:
  int port_;
  std::string password_;
  const TestPki* tls_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
};

}  // namespace yoco::test
