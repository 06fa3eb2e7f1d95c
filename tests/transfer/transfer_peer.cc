// The prefill side of transfer_test's two-process cases: a separate process that pushes
// deterministic rows and a state blob into a reservation it gets on the command line.
//   transfer_peer --descriptor HEX --preset NAME --fingerprint N --seed S --transports TLS
//                 [--peer-errors 0|1] [--row-path push|pull] [--chunks N] [--mode full|stall]
// Prints "PUT <i>" per chunk, "STALLED" (mode stall, then sleeps until killed) and
// "COMMIT OK" or "COMMIT ERROR <message>"; exit status 0 only for an acknowledged commit.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "model/random_model.h"
#include "tests/transfer/transfer_data.h"
#include "transfer/ucx_transport.h"

using namespace yoco;

int main(int argc, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
  // Our lines go to the test on the original stdout; UCX prints its own log lines on stdout.
  FILE* out = fdopen(dup(1), "w");
  dup2(2, 1);
  std::string hex, preset = "tiny-gret", transports, mode = "full";
  uint64_t fingerprint = 0, seed = 1;
  int chunks = 3;
  bool peer_errors = true, push = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--descriptor") hex = v;
    else if (k == "--preset") preset = v;
    else if (k == "--fingerprint") fingerprint = std::stoull(v);
    else if (k == "--seed") seed = std::stoull(v);
    else if (k == "--transports") transports = v;
    else if (k == "--peer-errors") peer_errors = v == "1";
    else if (k == "--row-path") push = v == "push";
    else if (k == "--chunks") chunks = std::stoi(v);
    else if (k == "--mode") mode = v;
  }
  auto cfg = find_preset(preset);
  auto desc = ReservationDescriptor::parse(test::from_hex(hex));
  if (!cfg.ok() || !desc.ok()) {
    std::fprintf(out, "COMMIT ERROR bad arguments: %s\n",
                 desc.ok() ? cfg.status().message().c_str() : desc.status().message().c_str());
    return 2;
  }
  UcxSenderOptions opt;
  opt.fingerprint = fingerprint;
  opt.transports = transports;
  opt.peer_error_handling = peer_errors;
  opt.row_path = push ? UcxRowPath::kPush : UcxRowPath::kPull;
  opt.op_timeout = std::chrono::seconds(20);
  auto sender = make_ucx_sender(opt);
  if (!sender.ok()) {
    std::fprintf(out, "COMMIT ERROR %s\n", sender.status().message().c_str());
    return 1;
  }
  const ReservationDescriptor& d = *desc;
  const int64_t rows = d.rows;
  for (int c = 0; c < chunks; ++c) {
    const int64_t begin = rows * c / chunks, end = rows * (c + 1) / chunks;
    if (end == begin) continue;
    auto k = test::kv_rows(seed, 0, begin, end - begin, d.kv_dim);
    auto v = test::kv_rows(seed, 1, begin, end - begin, d.kv_dim);
    Status st = (*sender)->put_rows(d, begin, static_cast<int>(end - begin), k.data(), v.data());
    if (!st.ok()) {
      std::fprintf(out, "COMMIT ERROR %s\n", st.message().c_str());
      return 1;
    }
    std::fprintf(out, "PUT %d\n", c);
    std::fflush(out);
    if (mode == "stall") {
      std::fprintf(out, "STALLED\n");
      std::fflush(out);
      std::this_thread::sleep_for(std::chrono::seconds(120));
      return 3;
    }
  }
  auto blob = test::test_state_blob(*cfg, fingerprint, seed, rows);
  Status st = (*sender)->put_state(d, blob);
  if (st.ok()) st = (*sender)->commit(d, rows, std::chrono::steady_clock::now() + std::chrono::seconds(20));
  std::fprintf(out, st.ok() ? "COMMIT OK\n" : "COMMIT ERROR %s\n", st.message().c_str());
  std::fflush(out);
  return st.ok() ? 0 : 1;
}
