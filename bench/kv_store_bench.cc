// KV store throughput and latency for any store spec (kv_store/factory.h):
//
//   build/bench/kv_store_bench --store SPEC [--value-bytes 1048576] [--values 64] [--reps 5]
//                              [--small-gets 2000]
//
// put: --values values of --value-bytes, one put each (what a prefill worker's write-back does);
// get_many: all of them in one call (a prompt's cached blocks); small get: one 64-byte value read
// --small-gets times (a round trip). Reported: the median over --reps rounds (MB/s = 10^6 bytes/s)
// and the p50/p99 small-get latency. bench/kv_store_bench.sh runs it against Redis over TCP and TLS.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kv_store/factory.h"

using namespace yoco;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int usage(const char* why) {
  std::fprintf(stderr,
               "kv_store_bench: %s\nusage: kv_store_bench --store SPEC [--value-bytes N] [--values N] [--reps N] "
               "[--small-gets N]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string spec;
  long value_bytes = 1 << 20, values = 64, reps = 5, small_gets = 2000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(("missing value for " + a).c_str());
    const char* v = argv[++i];
    if (a == "--store") spec = v;
    else if (a == "--value-bytes") value_bytes = std::atol(v);
    else if (a == "--values") values = std::atol(v);
    else if (a == "--reps") reps = std::atol(v);
    else if (a == "--small-gets") small_gets = std::atol(v);
    else return usage(("unknown flag " + a).c_str());
  }
  if (spec.empty() || value_bytes <= 0 || values <= 0 || reps <= 0 || small_gets <= 0) return usage("bad arguments");
  auto made = make_kv_store(spec);
  if (!made.ok()) {
    std::fprintf(stderr, "kv_store_bench: --store: %s\n", made.status().to_string().c_str());
    return 1;
  }
  KvStore& s = **made;
  std::mt19937_64 rng(1);
  std::vector<std::string> keys, vals;
  for (long i = 0; i < values; ++i) {
    keys.push_back("bench:" + std::to_string(i));
    std::string v(static_cast<size_t>(value_bytes), '\0');
    for (size_t j = 0; j + 8 <= v.size(); j += 8) {
      const uint64_t r = rng();
      std::memcpy(v.data() + j, &r, 8);
    }
    vals.push_back(std::move(v));
  }
  const double total = static_cast<double>(value_bytes) * static_cast<double>(values);
  std::vector<double> put_mbs, get_mbs;
  for (long r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    for (long i = 0; i < values; ++i) {
      Status st = s.put(keys[i], vals[i], std::chrono::seconds(600));
      if (!st.ok()) {
        std::fprintf(stderr, "kv_store_bench: put: %s\n", st.to_string().c_str());
        return 1;
      }
    }
    put_mbs.push_back(total / seconds_since(t0) / 1e6);
    t0 = Clock::now();
    auto got = s.get_many(keys);
    const double dt = seconds_since(t0);
    for (long i = 0; i < values; ++i) {
      if (!got[i].ok() || !got[i]->has_value() || **got[i] != vals[i]) {
        std::fprintf(stderr, "kv_store_bench: get_many: value %ld wrong or missing\n", i);
        return 1;
      }
    }
    get_mbs.push_back(total / dt / 1e6);
  }
  if (!s.put("bench:small", std::string(64, 'x'), std::chrono::seconds(600)).ok()) return 1;
  std::vector<double> lat;
  for (long i = 0; i < small_gets; ++i) {
    const auto t0 = Clock::now();
    auto g = s.get("bench:small");
    lat.push_back(seconds_since(t0) * 1e6);
    if (!g.ok() || !g->has_value()) {
      std::fprintf(stderr, "kv_store_bench: small get failed\n");
      return 1;
    }
  }
  std::sort(lat.begin(), lat.end());
  for (const auto& k : keys) (void)s.del(k);
  (void)s.del("bench:small");
  std::printf("store=%s value_bytes=%ld values=%ld put_MBps=%.0f get_many_MBps=%.0f small_get_us_p50=%.0f p99=%.0f\n",
              s.name().c_str(), value_bytes, values, median(put_mbs), median(get_mbs), lat[lat.size() / 2],
              lat[lat.size() * 99 / 100]);
  return 0;
}
