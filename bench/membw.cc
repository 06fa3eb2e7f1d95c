// The machine's limits that the CPU engine's decode and the KV transfer are judged against
// (bench/README.md, "Memory bandwidth, threads and checksums"). Prints JSON.
//
//   build/bench/membw [--gib 2] [--reps 5] [--threads 1,2] [--crc-mib 64] [--huge-pages]
//
// --huge-pages: the read buffer and decode_gemm's matrices in transparent huge pages, as a trial
//         of the engine's weights had them (common/huge_pages.h; "huge_page_bytes" and
//         "huge_page_seconds" say how many bytes moved and how long moving them took).
//         Without it they stay in 4 KiB pages: the read roof of the tables in bench/README.md.
//
// read:   STREAM-like read of a buffer far larger than the last-level cache (sum of floats),
//         GB/s = 10⁹ B/s, best of --reps, per thread count: the best of a few read patterns
//         (one stream; several in lockstep, with and without software prefetch), each also printed.
// copy:   memcpy of half the buffer into the other half, counted as bytes copied (read + write
//         is twice that), one thread (what one transfer thread does).
// fma:    a compute-bound loop (16 independent FMA chains in registers, no memory) per thread
//         count: if 2 threads reach 2x one thread, the two vCPUs are two cores; if ~1x, they are
//         the two hyperthreads of one core. Also per second of each thread's own CPU time, which
//         other processes on a shared machine do not distort (only a hyperthread sibling does).
// decode_gemm (with --preset NAME, default mid-gret): the matrix products of one decode step of
//         that model (every weight matrix once, y = x·Wᵀ for m = batch rows) at --threads' last
//         count, per batch size in --batches: ms per step and the weights' bytes / time in GB/s,
//         to set against `read` (bench/README.md, decode at memory speed), and the same with the
//         weights in bf16 (bf16_*: half the bytes); with OpenBLAS also
//         the same products through cblas_sgemm (what the engine did for batches 2..16 before).
// crc32c: the checksum alone over --crc-mib of cache-warm and of cold data, the library's
//         crc32c() (hardware, interleaved) and the one-stream hardware loop it replaced.
#include <omp.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "common/checksum.h"
#include "common/flags.h"
#include "common/huge_pages.h"
#include "common/json.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/random_model.h"

#if defined(YOCO_HAVE_CBLAS)
#include <cblas.h>
#endif

using namespace yoco;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Sum of all floats, each thread over its own contiguous slice, read as `streams` equal runs in
// lockstep (a few 64-byte lines of each per round, prefetched `prefetch` bytes ahead when nonzero):
// one stream is the textbook loop; several streams with prefetch is how the decode kernel reads
// its weight tiles (kernels/cpu/gemv.cc), and the machine's read roof is the best of the patterns.
template <int S>
float read_slice(const float* p, int64_t lo, int64_t hi, int64_t prefetch) {
  constexpr int kLine = 16;              // floats per 64-byte line
  constexpr int U = S >= 8 ? 1 : 8 / S;  // lines per stream per round: 8 accumulators in flight
  const int64_t run = (hi - lo) / S / (kLine * U) * (kLine * U);
  const int64_t ahead = prefetch / 4;
  float acc[S * U][kLine] = {};
  for (int64_t i = 0; i < run; i += kLine * U) {
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const float* q = p + lo + s * run + i;
      if (ahead) __builtin_prefetch(q + ahead, 0, 3);
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) {
#pragma omp simd
        for (int j = 0; j < kLine; ++j) acc[s * U + u][j] += q[u * kLine + j];
      }
    }
  }
  float total = 0;
  for (int64_t i = lo + S * run; i < hi; ++i) total += p[i];
  for (const auto& a : acc)
    for (float v : a) total += v;
  return total;
}

float read_sum(const float* p, int64_t n, int threads, int streams, int64_t prefetch) {
  float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
    total += streams == 1   ? read_slice<1>(p, lo, hi, prefetch)
             : streams == 4 ? read_slice<4>(p, lo, hi, prefetch)
                            : read_slice<8>(p, lo, hi, prefetch);
  }
  return total;
}

// The read patterns measured; the best is the roof.
struct ReadPattern {
  const char* name;
  int streams;
  int64_t prefetch;
};
constexpr ReadPattern kReadPatterns[] = {{"1 stream", 1, 0},
                                         {"4 streams", 4, 0},
                                         {"4 streams + prefetch 4 KiB", 4, 4096},
                                         {"8 streams + prefetch 4 KiB", 8, 4096}};

// 16 independent FMA chains of 16 floats each (registers only), `iters` rounds: 2 · 256 · iters
// flops per thread. Returns {GFLOP/s by the wall clock, GFLOP per second of each thread's own CPU
// time}: the second does not depend on other processes taking turns on the CPUs, only on what
// shares the core while the thread runs (a hyperthread sibling halves it).
typedef float fv16 __attribute__((vector_size(64)));
std::pair<double, double> fma_gflops(int threads, int64_t iters) {
  double best = 0, best_cpu = 0;
  for (int rep = 0; rep < 3; ++rep) {
    float sink = 0;
    double cpu_rate = 1e30;
    auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink) reduction(min : cpu_rate)
    {
      timespec c0{}, c1{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
      fv16 x[16];
      const fv16 a = fv16{} + 0.999999f, b = fv16{} + 1e-7f;
      for (int j = 0; j < 16; ++j) x[j] = fv16{} + static_cast<float>(j + omp_get_thread_num());
      for (int64_t it = 0; it < iters; ++it)
        for (int j = 0; j < 16; ++j) x[j] = x[j] * a + b;
      for (int j = 0; j < 16; ++j)
        for (int l = 0; l < 16; ++l) sink += x[j][l];
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
      const double cpu_s =
          static_cast<double>(c1.tv_sec - c0.tv_sec) + 1e-9 * static_cast<double>(c1.tv_nsec - c0.tv_nsec);
      cpu_rate = 2.0 * 256 * static_cast<double>(iters) / cpu_s / 1e9;
    }
    const double s = since(t0);
    if (sink == 42.0f) std::fprintf(stderr, " ");
    best = std::max(best, 2.0 * 256 * iters * threads / s / 1e9);
    best_cpu = std::max(best_cpu, cpu_rate);
  }
  return {best, best_cpu};
}

// The one-stream hardware loop common/checksum.cc used before the interleaved version.
#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_one_stream(const unsigned char* p, size_t n) {
  uint64_t c = 0xffffffffu;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}
#endif

// The weight matrices [rows, cols] one decode step multiplies by (model/weights.h's fused layout).
std::vector<std::pair<int, int>> decode_matrices(const ModelConfig& c) {
  const int D = c.dim, H = c.hidden_dim;
  std::vector<std::pair<int, int>> m;
  for (int l = 0; l < c.n_self_layers; ++l) {
    m.push_back({c.self_qkv_rows(), D});
    if (!c.is_swa()) m.push_back({c.n_self_heads, D});
    m.insert(m.end(), {{D, D}, {2 * H, D}, {D, H}});
  }
  m.push_back({2 * c.kv_dim(), D});
  for (int l = 0; l < c.n_cross_layers(); ++l) m.insert(m.end(), {{D, D}, {D, D}, {2 * H, D}, {D, H}});
  m.push_back({c.vocab_size, D});
  return m;
}

int64_t g_huge_page_bytes = 0;  // what --huge-pages moved, and the seconds it took
double g_huge_page_seconds = 0;
bool g_huge_pages = false;

template <class T>
void maybe_collapse(std::vector<T>& v) {
  if (!g_huge_pages) return;
  const auto t0 = std::chrono::steady_clock::now();
  g_huge_page_bytes += static_cast<int64_t>(collapse_to_huge_pages(v.data(), v.size() * sizeof(T)));
  g_huge_page_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Json decode_gemm(const ModelConfig& c, const std::vector<int64_t>& batches, int64_t reps) {
  const auto shapes = decode_matrices(c);
  std::vector<std::vector<float>> w;
  std::vector<std::vector<cpu::bf16>> wb;  // the same matrices in bf16 (--dtype bf16's products)
  int64_t bytes = 0;
  int max_k = 0, max_n = 0;
  for (auto [n, k] : shapes) {
    w.emplace_back(static_cast<size_t>(n) * k, 1e-3f);
    wb.emplace_back(static_cast<size_t>(n) * k, cpu::bf16{0x3a83});  // ~1e-3
    maybe_collapse(w.back());
    maybe_collapse(wb.back());
    bytes += static_cast<int64_t>(n) * k * 4;
    max_k = std::max(max_k, k);
    max_n = std::max(max_n, n);
  }
  const int64_t max_m = *std::max_element(batches.begin(), batches.end());
  std::vector<float> x(static_cast<size_t>(max_m) * max_k, 1.0f), y(static_cast<size_t>(max_m) * max_n);
  Json::Array rows;
  auto step_seconds = [&](int64_t m, bool blas, bool bf16 = false) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      for (size_t i = 0; i < shapes.size(); ++i) {
        const auto [n, k] = shapes[i];
        if (bf16) {
          cpu::linear_bf16(x.data(), wb[i].data(), y.data(), static_cast<int>(m), n, k);
          continue;
        }
#if defined(YOCO_HAVE_CBLAS)
        if (blas) {  // what gemm() did for m >= 2 before the small-m path
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), n, k, 1.0f, x.data(), k,
                      w[i].data(), k, 0.0f, y.data(), n);
          continue;
        }
#endif
        cpu::linear(x.data(), w[i].data(), y.data(), static_cast<int>(m), n, k);
      }
      best = std::min(best, since(t0));
    }
    return best;
  };
  for (int64_t m : batches) {
    const double best = step_seconds(m, false);
    Json::Object row;
    row["batch"] = Json(m);
    row["ms_per_step"] = Json(best * 1e3);
    row["weight_gb_s"] = Json(bytes / best / 1e9);
    row["tokens_per_s"] = Json(m / best);
    // bf16 weights (half the bytes; widened in registers where the CPU has no bf16 matmul).
    const double best_bf16 = step_seconds(m, false, true);
    row["bf16_ms_per_step"] = Json(best_bf16 * 1e3);
    row["bf16_weight_gb_s"] = Json(bytes / 2 / best_bf16 / 1e9);
    row["bf16_speedup"] = Json(best / best_bf16);
#if defined(YOCO_HAVE_CBLAS)
    if (m <= 2 * cpu::kSmallM) row["openblas_ms_per_step"] = Json(step_seconds(m, true) * 1e3);
#endif
    rows.push_back(Json(std::move(row)));
  }
  Json::Object out;
  out["weight_bytes_per_step"] = Json(bytes);
  out["threads"] = Json(cpu::num_threads());
  out["isa"] = Json(std::string(cpu::isa_path()));
  out["bf16_widened"] = Json(cpu::linear_bf16_widens());
  out["rows"] = Json(std::move(rows));
  return Json(std::move(out));
}

int die(const Status& s) {
  std::fprintf(stderr, "membw: %s\n", s.message().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f("membw", "the machine's memory bandwidth, FMA rate, checksum speed and decode GEMMs (JSON)",
          {flag::integer("gib", "GiB of the read buffer (far larger than the last-level cache)", 2, 1, 1024),
           flag::integer("reps", "repeats per measurement, best kept", 5, 1, 1 << 20),
           flag::int_list("threads", "thread counts of the read and fma rows; decode_gemm runs at the last", 1, 4096,
                          "1,2"),
           flag::integer("crc-mib", "MiB checksummed per CRC measurement", 64, 1, 1 << 20),
           flag::str("preset", "model preset whose decode-step products decode_gemm times", "mid-gret"),
           flag::int_list("batches", "decode_gemm batch sizes", 1, 1 << 20, "1,2,4,8,16,32,64"),
           flag::boolean("huge-pages", "the read buffer and decode_gemm's matrices in transparent huge pages")});
  if (Status s = f.parse(argc, argv, 1); !s.ok()) return die(s);
  const int64_t gib = f.integer("gib"), reps = f.integer("reps"), crc_mib = f.integer("crc-mib");
  const std::vector<int64_t> threads = f.int_list("threads"), batches = f.int_list("batches");
  auto preset = find_preset(f.str("preset"));
  if (!preset.ok()) return die(preset.status());

  const int64_t bytes = gib << 30, n = bytes / 4;
  std::vector<float> buf(n);
  // First touch in parallel, so pages are spread like the model's weights are.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 1023) * 1e-3f;
  g_huge_pages = f.boolean("huge-pages");
  maybe_collapse(buf);

  cpu_set_t set;
  CPU_ZERO(&set);
  const int affinity = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;

  Json::Object out;
  out["buffer_bytes"] = Json(bytes);
  out["affinity_cpus"] = Json(affinity);
  out["physical_cores"] = Json(cpu::physical_cores());
  Json::Array read_rows, fma_rows;
  for (int64_t t : threads) {
    double best = 1e30;
    float sink = 0;
    Json::Object patterns;
    for (const ReadPattern& rp : kReadPatterns) {
      double best_here = 1e30;
      for (int r = 0; r < reps; ++r) {
        auto t0 = Clock::now();
        sink += read_sum(buf.data(), n, static_cast<int>(t), rp.streams, rp.prefetch);
        best_here = std::min(best_here, since(t0));
      }
      patterns[rp.name] = Json(bytes / best_here / 1e9);
      best = std::min(best, best_here);
    }
    Json::Object row;
    row["threads"] = Json(t);
    row["read_gb_s"] = Json(bytes / best / 1e9);
    row["read_gb_s_by_pattern"] = Json(std::move(patterns));
    row["checksum"] = Json(static_cast<double>(sink));
    read_rows.push_back(Json(std::move(row)));
    Json::Object frow;
    frow["threads"] = Json(t);
    const auto [wall, per_cpu] = fma_gflops(static_cast<int>(t), 20000000);
    frow["fma_gflops"] = Json(wall);
    frow["fma_gflops_per_thread_cpu_s"] = Json(per_cpu);
    fma_rows.push_back(Json(std::move(frow)));
  }
  out["read"] = Json(std::move(read_rows));
  out["fma"] = Json(std::move(fma_rows));

  {
    const int64_t half = bytes / 2;
    char* src = reinterpret_cast<char*>(buf.data());
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      std::memcpy(src + half, src, half);
      best = std::min(best, since(t0));
    }
    out["memcpy_1thread_gb_s"] = Json(half / best / 1e9);
  }

  // The checksum alone: warm (a slice that fits in L2/L3) and cold (the whole buffer).
  auto crc_rate = [&](auto&& fn, const unsigned char* p, int64_t len) {
    double best = 1e30;
    uint32_t sink = 0;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      sink ^= fn(p, len);
      best = std::min(best, since(t0));
    }
    if (sink == 0x12345678u) std::fprintf(stderr, " ");
    return len / best / 1e9;
  };
  const auto* bytes_p = reinterpret_cast<const unsigned char*>(buf.data());
  const int64_t warm = std::min<int64_t>(crc_mib << 20, bytes);
  auto lib = [](const unsigned char* p, int64_t len) { return crc32c(p, static_cast<size_t>(len)); };
  Json::Object crc;
  crc["warm_bytes"] = Json(warm);
  crc["crc32c_warm_gb_s"] = Json(crc_rate(lib, bytes_p, warm));
  crc["crc32c_cold_gb_s"] = Json(crc_rate(lib, bytes_p, bytes));
  // The transfer's shape: one CRC per 2 KiB K (or V) row of the warm slice.
  auto rows2k = [](const unsigned char* p, int64_t len) {
    uint32_t x = 0;
    for (int64_t off = 0; off + 2048 <= len; off += 2048) x ^= crc32c(p + off, 2048);
    return x;
  };
  crc["crc32c_2k_rows_warm_gb_s"] = Json(crc_rate(rows2k, bytes_p, warm));
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) {
    auto one = [](const unsigned char* p, int64_t len) { return crc32c_one_stream(p, static_cast<size_t>(len)); };
    crc["one_stream_warm_gb_s"] = Json(crc_rate(one, bytes_p, warm));
    crc["one_stream_cold_gb_s"] = Json(crc_rate(one, bytes_p, bytes));
  }
#endif
  out["crc32c"] = Json(std::move(crc));
  buf = {};
  cpu::set_num_threads(static_cast<int>(threads.back()));
  out["preset"] = Json(f.str("preset"));
  out["decode_gemm"] = decode_gemm(preset.value(), batches, reps);
  out["huge_page_bytes"] = Json(g_huge_page_bytes);
  out["huge_page_seconds"] = Json(g_huge_page_seconds);
  std::cout << Json(std::move(out)).dump() << "\n";
  return 0;
}
