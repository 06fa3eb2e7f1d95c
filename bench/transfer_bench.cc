// KV transfer bandwidth vs message size: KvSender::put_rows between two processes over UCX
// (tcp and shared memory), against plain memcpy in one process on the same host.
//
//   build/bench/transfer_bench [--transports tcp,shm] [--paths push,pull] [--min-bytes 4096]
//                              [--max-bytes 67108864] [--reps 3] [--kv-dim 512] [--no-row-crc] [--in-place]
//                              [--json]
//
// One message = one put_rows call carrying K and V rows (2 · kv_dim · 4 bytes per row). For
// each size the sender (a child process: this binary with --role sender) fills one 64 MiB
// reservation with messages of that size, sends the state and commits; the time runs from the
// first put to the commit's acknowledgement, so it includes staging, the row checksums, the
// flush, the receiver's validation and one round trip. Reported: the median over --reps
// reservations. Compare with `ucx_perftest -t ucp_put_bw` (bench/README.md).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/json.h"
#include "model/kv_pool.h"
#include "model/random_model.h"
#include "transfer/ucx_transport.h"

extern char** environ;

using namespace yoco;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kFingerprint = 0x7a11be7c4ull;
constexpr int kBlockRows = 256;

struct TransportSpec {
  std::string name, tls;
  bool peer_errors;
};

TransportSpec transport(const std::string& name) {
  if (name == "shm") return {"shm", "posix,sysv,cma,self,tcp", false};  // see transfer/ucx_transport.h
  return {"tcp", "tcp", true};
}

ModelConfig bench_config(int kv_dim) {
  ModelConfig c = find_preset("small-gret").value();  // head dim 64
  c.n_attn_kv_heads = kv_dim / c.cross_head_dim();
  return c;
}

std::string hex(const std::vector<uint8_t>& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) s += {d[x >> 4], d[x & 15]};
  return s;
}

std::vector<uint8_t> unhex(const std::string& s) {
  auto v = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::vector<uint8_t> b(s.size() / 2);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(v(s[2 * i]) * 16 + v(s[2 * i + 1]));
  return b;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ---- sender process ---------------------------------------------------------------------

int run_sender(const TransportSpec& t, const std::string& path, int kv_dim, bool row_crc, bool in_place) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The protocol with the parent runs on the original stdout; UCX's own log lines go to stderr.
  FILE* proto = fdopen(dup(1), "w");
  dup2(2, 1);
  UcxSenderOptions opt;
  opt.fingerprint = kFingerprint;
  opt.transports = t.tls;
  opt.peer_error_handling = t.peer_errors;
  opt.row_checksums = row_crc;
  opt.row_path = path == "pull" ? UcxRowPath::kPull : UcxRowPath::kPush;
  auto sender = make_ucx_sender(opt);
  if (!sender.ok()) {
    std::fprintf(stderr, "sender: %s\n", sender.status().to_string().c_str());
    return 1;
  }
  const ModelConfig cfg = bench_config(kv_dim);
  std::vector<float> k, v;
  std::string cmd;
  while (std::cin >> cmd && cmd == "RUN") {
    int64_t rows_per_put = 0;
    std::string desc_hex;
    std::cin >> rows_per_put >> desc_hex;
    auto d = ReservationDescriptor::parse(unhex(desc_hex));
    if (!d.ok()) return 1;
    if (static_cast<int64_t>(k.size()) < d->rows * kv_dim) {
      k.assign(d->rows * kv_dim, 0.5f);
      v.assign(d->rows * kv_dim, -0.5f);
    }
    SequenceState st = make_sequence_state(cfg);
    st.position = d->rows;
    st.last_hidden.assign(cfg.dim, 0.0f);
    StateBlobOptions so;
    so.include_kv = false;
    const auto blob = serialize_state(st, cfg, kFingerprint, so);

    const auto t0 = Clock::now();
    Status s;
    for (int64_t r = 0; r < d->rows && s.ok(); r += rows_per_put) {
      const int n = static_cast<int>(std::min(rows_per_put, d->rows - r));
      if (in_place)  // k and v live until the commit below returns, which waits for every put
        s = (*sender)->put_rows_in_place(*d, r, n, k.data() + r * kv_dim, v.data() + r * kv_dim,
                                         std::shared_ptr<const void>(k.data(), [](const void*) {}));
      else s = (*sender)->put_rows(*d, r, n, k.data() + r * kv_dim, v.data() + r * kv_dim);
    }
    if (s.ok()) s = (*sender)->put_state(*d, blob);
    if (s.ok()) s = (*sender)->commit(*d, d->rows, Clock::now() + std::chrono::seconds(60));
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::fprintf(proto, "%s %.9f\n", s.ok() ? "DONE" : "FAIL", secs);
    std::fflush(proto);
    if (!s.ok()) std::fprintf(stderr, "sender: %s\n", s.to_string().c_str());
  }
  return 0;
}

// ---- bench process ----------------------------------------------------------------------

struct Child {
  pid_t pid = -1;
  FILE* in = nullptr;   // its stdin
  FILE* out = nullptr;  // its stdout
  ~Child() {
    if (in) std::fclose(in);
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (out) std::fclose(out);
  }
};

bool spawn_sender(Child& c, const TransportSpec& t, const std::string& path, int kv_dim, bool row_crc, bool in_place) {
  int to[2], from[2];
  if (pipe(to) != 0 || pipe(from) != 0) return false;
  std::vector<std::string> args = {"/proc/self/exe", "--role", "sender",   "--transports",        t.name,
                                   "--paths",        path,     "--kv-dim", std::to_string(kv_dim)};
  if (!row_crc) args.push_back("--no-row-crc");
  if (in_place) args.push_back("--in-place");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from[1], 1);
  for (int fd : {to[0], to[1], from[0], from[1]}) posix_spawn_file_actions_addclose(&fa, fd);
  const int rc = posix_spawn(&c.pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(to[0]);
  close(from[1]);
  c.in = fdopen(to[1], "w");
  c.out = fdopen(from[0], "r");
  return rc == 0;
}

// put_rows bandwidth (GB/s) per message size over one transport.
std::map<int64_t, double> bench_transport(const TransportSpec& t, const std::string& path,
                                          const std::vector<int64_t>& sizes, int kv_dim, int reps, bool row_crc,
                                          bool in_place, int64_t rows) {
  std::map<int64_t, double> out;
  const ModelConfig cfg = bench_config(kv_dim);
  const int blocks = static_cast<int>(rows / kBlockRows) + 1;
  auto pool = std::move(KvPool::create(blocks, kBlockRows, kv_dim).value());
  UcxReceiverOptions ro;
  ro.listen_host = "127.0.0.1";
  ro.transports = t.tls;
  ro.peer_error_handling = t.peer_errors;
  ro.verify_rows = row_crc;
  ro.allow_push = path == "push";
  ro.fingerprint = kFingerprint;
  ro.state_shape = state_shape(cfg);
  ro.max_rows = cfg.max_seq_len;
  auto receiver = make_ucx_receiver(*pool, ro);
  if (!receiver.ok()) {
    std::fprintf(stderr, "receiver: %s\n", receiver.status().to_string().c_str());
    return out;
  }
  Child child;
  if (!spawn_sender(child, t, path, kv_dim, row_crc, in_place)) return out;
  const int64_t row_bytes = 2LL * kv_dim * 4;
  for (int64_t size : sizes) {
    const int64_t rows_per_put = std::max<int64_t>(1, size / row_bytes);
    std::vector<double> gbps;
    for (int rep = 0; rep < reps; ++rep) {
      auto d = (*receiver)->reserve("bench", rows, Clock::now() + std::chrono::seconds(120));
      if (!d.ok()) return out;
      std::fprintf(child.in, "RUN %lld %s\n", static_cast<long long>(rows_per_put), hex(d->serialize()).c_str());
      std::fflush(child.in);
      char status[16] = {0};
      double secs = 0;
      if (std::fscanf(child.out, "%15s %lf", status, &secs) != 2 || std::strcmp(status, "DONE") != 0) {
        std::fprintf(stderr, "transfer_bench: sender failed (%s)\n", status);
        return out;
      }
      auto c = (*receiver)->wait_committed(d->reservation_id, Clock::now() + std::chrono::seconds(10));
      if (!c.ok()) return out;
      pool->release_blocks(c->blocks);
      gbps.push_back(static_cast<double>(rows * row_bytes) / secs / 1e9);
    }
    out[size] = median(gbps);
    std::fprintf(stderr, "  %s %s %8lld B: %.3f GB/s\n", t.name.c_str(), path.c_str(), static_cast<long long>(size),
                 out[size]);
  }
  std::fprintf(child.in, "QUIT\n");
  std::fflush(child.in);
  return out;
}

std::map<int64_t, double> bench_memcpy(const std::vector<int64_t>& sizes, int64_t total, int reps) {
  std::map<int64_t, double> out;
  std::vector<char> src(total, 1), dst(total, 2);
  for (int64_t size : sizes) {
    std::vector<double> gbps;
    for (int rep = 0; rep < reps; ++rep) {
      const auto t0 = Clock::now();
      for (int64_t off = 0; off + size <= total; off += size) std::memcpy(dst.data() + off, src.data() + off, size);
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      gbps.push_back(static_cast<double>(total / size * size) / secs / 1e9);
    }
    out[size] = median(gbps);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string role = "bench", transports = "tcp,shm", paths = "push,pull";
  int64_t min_bytes = 4096, max_bytes = 64LL << 20;
  int reps = 3, kv_dim = 512;
  bool row_crc = true, json = false, in_place = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--role") role = next();
    else if (a == "--transports") transports = next();
    else if (a == "--paths") paths = next();
    else if (a == "--min-bytes") min_bytes = std::stoll(next());
    else if (a == "--max-bytes") max_bytes = std::stoll(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--kv-dim") kv_dim = std::stoi(next());
    else if (a == "--no-row-crc") row_crc = false;
    else if (a == "--in-place") in_place = true;
    else if (a == "--json") json = true;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (kv_dim <= 0 || kv_dim % 64 != 0 || kv_dim > 512) {
    std::fprintf(stderr, "--kv-dim must be a multiple of 64 up to 512\n");
    return 2;
  }
  if (role == "sender") return run_sender(transport(transports), paths, kv_dim, row_crc, in_place);

  const int64_t row_bytes = 2LL * kv_dim * 4;
  const int64_t rows = std::max<int64_t>(max_bytes / row_bytes, 1);  // one reservation holds the largest message
  std::vector<int64_t> sizes;
  for (int64_t s = std::max(min_bytes, row_bytes); s <= max_bytes; s *= 4) sizes.push_back(s);
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    for (size_t p = 0; p <= s.size();) {
      const size_t q = std::min(s.find(',', p), s.size());
      if (q > p) out.push_back(s.substr(p, q - p));
      p = q + 1;
    }
    return out;
  };
  std::vector<std::string> names;  // "tcp push", "shm pull", ...
  for (const auto& t : split(transports))
    for (const auto& p : split(paths)) names.push_back(t + " " + p);

  std::fprintf(
      stderr,
      "transfer_bench: kv_dim %d (%lld B per K+V row), reservation %lld rows (%lld MiB), %d reps, row checksums %s%s\n",
      kv_dim, static_cast<long long>(row_bytes), static_cast<long long>(rows),
      static_cast<long long>(rows * row_bytes >> 20), reps, row_crc ? "on" : "off", in_place ? ", in place" : "");
  auto mem = bench_memcpy(sizes, rows * row_bytes, reps);
  std::vector<std::map<int64_t, double>> results;
  for (const auto& n : names)
    results.push_back(bench_transport(transport(n.substr(0, n.find(' '))), n.substr(n.find(' ') + 1), sizes, kv_dim,
                                      reps, row_crc, in_place, rows));

  if (json) {  // one object: {"row_checksums", "rows": [{"bytes", "memcpy_gb_s", "<transport> <path>": GB/s}]}
    Json::Array rows_out;
    for (int64_t s : sizes) {
      Json::Object row;
      row["bytes"] = Json(s);
      row["memcpy_gb_s"] = Json(mem[s]);
      for (size_t i = 0; i < names.size(); ++i)
        if (results[i].count(s)) row[names[i]] = Json(results[i][s]);
      rows_out.push_back(Json(std::move(row)));
    }
    Json::Object o;
    o["row_checksums"] = Json(row_crc);
    o["in_place"] = Json(in_place);
    o["rows"] = Json(std::move(rows_out));
    std::printf("%s\n", Json(std::move(o)).dump().c_str());
    return 0;
  }
  std::printf("| message | memcpy GB/s |");
  for (const auto& n : names) std::printf(" %s GB/s |", n.c_str());
  std::printf("\n|---|---|");
  for (size_t i = 0; i < names.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (int64_t s : sizes) {
    if (s >= (1 << 20)) std::printf("| %lld MiB | %.2f |", static_cast<long long>(s >> 20), mem[s]);
    else std::printf("| %lld KiB | %.2f |", static_cast<long long>(s >> 10), mem[s]);
    for (auto& r : results) std::printf(r.count(s) ? " %.3f |" : " - |", r.count(s) ? r[s] : 0.0);
    std::printf("\n");
  }
  return 0;
}
