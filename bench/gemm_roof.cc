// GEMM roof: GFLOP/s of the engine's matrix products on its real shapes (y = x·Wᵀ, W [n, k]),
// fp32 through gemm() with the library the process chose (YOCO_GEMM_LIBRARY=onednn|openblas,
// kernels/cpu/matmul.h) and bf16 through linear_bf16 (x rounded to bf16 per product, fp32 sums).
// The roof of each precision is its best rate on a large square product. Prints JSON. Never asserts.
//   gemm_roof [--presets small-gret,mid-gret,mid-swa] [--threads N] [--prefill-rows 512,1024,2048]
//             [--decode-rows 1,2,4,8,16,32,64] [--dtypes fp32,bf16] [--min-seconds 0.2]
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <vector>

#include "common/flags.h"
#include "common/json.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/random_model.h"

using namespace yoco;

namespace {

struct Shape {
  std::string name;
  int n, k;
};

// The projections one token passes through (model/weights.h's fused matrices).
std::vector<Shape> model_shapes(const ModelConfig& c) {
  const int D = c.dim;
  if (c.is_moe()) {  // one expert's products (its rows: a chunk's share, m ≈ chunk · k / E), router, shared
    std::vector<Shape> s = {{"wqkvg", c.self_qkv_rows(), D},
                            {"wo", D, D},
                            {"router", c.n_experts, D},
                            {"expert_w13", 2 * c.expert_hidden_dim, D},
                            {"expert_w2", D, c.expert_hidden_dim},
                            {"wkv", 2 * c.kv_dim(), D},
                            {"output", c.vocab_size, D}};
    if (c.shared_expert_hidden_dim > 0) {
      s.push_back({"shared_w13", 2 * c.shared_expert_hidden_dim, D});
      s.push_back({"shared_w2", D, c.shared_expert_hidden_dim});
    }
    return s;
  }
  return {{"wqkvg", c.self_qkv_rows(), D}, {"wo", D, D},
          {"w13", 2 * c.hidden_dim, D},    {"w2", D, c.hidden_dim},
          {"wkv", 2 * c.kv_dim(), D},      {"output", c.vocab_size, D}};
}

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// Best-of-three rate over repeats lasting at least min_s each.
template <class F>
double gflops(int64_t flops, double min_s, F&& f) {
  f();  // builds the primitive, warms caches
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    int iters = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double s = 0;
    do {
      f();
      ++iters;
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (s < min_s / 3);
    best = std::max(best, static_cast<double>(flops) * iters / s / 1e9);
  }
  return best;
}

double run_product(const std::string& dtype, int m, int n, int k, double min_s) {
  const auto x = random_floats(static_cast<int64_t>(m) * k, 1);
  const auto w = random_floats(static_cast<int64_t>(n) * k, 2);
  std::vector<float> y(static_cast<int64_t>(m) * n);
  const int64_t flops = 2LL * m * n * k;
  if (dtype == "bf16") {
    std::vector<cpu::bf16> wb(w.size());
    cpu::to_bf16(w.data(), wb.data(), static_cast<int64_t>(w.size()));
    return gflops(flops, min_s, [&] { cpu::linear_bf16(x.data(), wb.data(), y.data(), m, n, k); });
  }
  return gflops(flops, min_s, [&] { cpu::linear(x.data(), w.data(), y.data(), m, n, k); });
}

int die(const Status& s) {
  std::fprintf(stderr, "gemm_roof: %s\n", s.message().c_str());
  return 2;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) out.push_back(t);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f("gemm_roof", "GFLOP/s of the engine's matrix products on its real shapes (JSON)",
          {flag::str("presets", "comma-separated model presets whose shapes are timed", "small-gret,mid-gret,mid-swa"),
           flag::integer("threads", "CPU threads (0: the runtime's default)", 0, 0, 4096),
           flag::int_list("prefill-rows", "rows m of the prefill products", 1, 1 << 20, "512,1024,2048"),
           flag::int_list("decode-rows", "rows m (batch) of the decode products", 1, 1 << 20, "1,2,4,8,16,32,64"),
           flag::str("dtypes", "comma-separated weight precisions: fp32, bf16", "fp32,bf16"),
           flag::number("min-seconds", "least time of one timed repeat", 0.2, 0, 3600),
           flag::integer("roof-size", "side of the square product that sets each precision's roof", 2048, 1, 1 << 16)});
  if (Status s = f.parse(argc, argv, 1); !s.ok()) return die(s);
  const double min_s = f.number("min-seconds");
  const int64_t roof_n = f.integer("roof-size");
  cpu::set_num_threads(static_cast<int>(f.integer("threads")));
  const std::vector<int64_t> prefill_rows = f.int_list("prefill-rows"), decode_rows = f.int_list("decode-rows");
  const auto presets = split(f.str("presets"));
  const auto dtypes = split(f.str("dtypes"));

  Json::Object root;
  root["library"] = Json(std::string(cpu::gemm_library()));
  root["threads"] = Json(static_cast<int64_t>(cpu::num_threads()));
  Json::Object roofs;
  const int R = static_cast<int>(roof_n);
  for (const auto& dt : dtypes) roofs[dt] = Json(run_product(dt, R, R, R, 3 * min_s));
  root["roof_gflops"] = Json(std::move(roofs));
  root["roof_shape"] = Json(std::to_string(R) + "^3");
  Json::Array rows;
  for (const auto& name : presets) {
    auto cfg = find_preset(name);
    if (!cfg.ok()) return die(cfg.status());
    for (const auto& sh : model_shapes(*cfg)) {
      // Prefill runs the self-decoder and the K/V projection; the output head runs per decoded row.
      const bool prefill = sh.name != "output";
      std::vector<std::pair<std::string, int64_t>> ms;
      if (prefill)
        for (int64_t m : prefill_rows) ms.push_back({"prefill", m});
      for (int64_t m : decode_rows) ms.push_back({"decode", m});
      for (const auto& [phase, m] : ms)
        for (const auto& dt : dtypes) {
          Json::Object r;
          r["preset"] = Json(name);
          r["matrix"] = Json(sh.name);
          r["phase"] = Json(phase);
          r["dtype"] = Json(dt);
          r["m"] = Json(m);
          r["n"] = Json(static_cast<int64_t>(sh.n));
          r["k"] = Json(static_cast<int64_t>(sh.k));
          r["gflops"] = Json(run_product(dt, static_cast<int>(m), sh.n, sh.k, min_s));
          std::fprintf(stderr, "%s %s %s %s m=%ld: %.1f GFLOP/s\n", name.c_str(), sh.name.c_str(), phase.c_str(),
                       dt.c_str(), static_cast<long>(m), r["gflops"].as_double());
          rows.push_back(Json(std::move(r)));
        }
    }
  }
  root["shapes"] = Json(std::move(rows));
  std::printf("%s\n", Json(std::move(root)).dump().c_str());
  return 0;
}
