// The CPU decode attention kernel alone (cpu::decode_attention, docs/design.md §2.4), fp32 rows
// against bf16 rows (16-bit K/V), interleaved: one call per layer of --layers distinct K/V sets
// (each --context rows in 32-row blocks, as a pool holds them), so the rows come from memory as
// in a decode step, not from cache. Prints JSON: per dtype the median (and min, max) over --reps
// rounds of µs per layer call and the K/V bytes read per second. Never asserts speed.
//   build/bench/decode_attention_bench [--context 2048] [--heads 16] [--kv-heads 4] [--head-dim 64]
//                                      [--layers 16] [--reps 15] [--threads 2]
// The defaults are the mid-gret Transformer's layers (YOCO: --layers 8, its cross-decoder).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <vector>

#include "common/flags.h"
#include "common/json.h"
#include "handoff/kv_rows.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

using namespace yoco;

int main(int argc, char** argv) {
  Flags f(
      "decode_attention_bench", "the CPU decode attention kernel over fp32 and bf16 K/V rows",
      {flag::integer("context", "rows attended", 2048, 1, 1 << 24), flag::integer("heads", "query heads", 16, 1, 1024),
       flag::integer("kv-heads", "K/V heads", 4, 1, 1024), flag::integer("head-dim", "head size", 64, 1, 1024),
       flag::integer("layers", "distinct K/V sets, one call each per round", 16, 1, 4096),
       flag::integer("reps", "rounds (each: every layer in fp32, then in bf16, or the reverse)", 15, 1, 100000),
       flag::integer("threads", "kernel threads", 2, 1, 4096)});
  if (Status s = f.parse(argc, argv, 1); !s.ok()) {
    std::cerr << s.to_string() << "\n";
    return 2;
  }
  const int n = static_cast<int>(f.integer("context")), hq = static_cast<int>(f.integer("heads")),
            hkv = static_cast<int>(f.integer("kv-heads")), hd = static_cast<int>(f.integer("head-dim")),
            layers = static_cast<int>(f.integer("layers")), reps = static_cast<int>(f.integer("reps"));
  if (hq % hkv != 0) {
    std::cerr << "--heads must be a multiple of --kv-heads\n";
    return 2;
  }
  cpu::set_num_threads(static_cast<int>(f.integer("threads")));
  const int kv_dim = hkv * hd, bs = 32;
  const size_t per_layer = static_cast<size_t>(n) * kv_dim;
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  std::vector<float> k(per_layer * layers), v(k.size()), q(static_cast<size_t>(hq) * hd), out(q.size());
  for (auto* x : {&k, &v, &q})
    for (float& e : *x) e = nd(g);
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k16[i] = f32_to_bf16(k[i]);
    v16[i] = f32_to_bf16(v[i]);
  }
  // Block pointers per layer, 32 rows each.
  std::vector<std::vector<const float*>> kb(layers), vb(layers);
  std::vector<std::vector<const uint16_t*>> kb16(layers), vb16(layers);
  for (int l = 0; l < layers; ++l)
    for (int r = 0; r < n; r += bs) {
      const size_t off = l * per_layer + static_cast<size_t>(r) * kv_dim;
      kb[l].push_back(&k[off]);
      vb[l].push_back(&v[off]);
      kb16[l].push_back(&k16[off]);
      vb16[l].push_back(&v16[off]);
    }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto run = [&](bool bf16) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int l = 0; l < layers; ++l) {
      cpu::KvBlocks blocks{kb[l].data(), vb[l].data(), bs, n};
      if (bf16) {
        blocks.k16_blocks = kb16[l].data();
        blocks.v16_blocks = vb16[l].data();
      }
      cpu::decode_attention(q.data(), blocks, out.data(), hq, hkv, hd, scale);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e6 / layers;
  };
  run(false);  // warm-up: pages touched, threads started
  run(true);
  std::vector<double> us[2];
  for (int r = 0; r < reps; ++r)
    for (int i = 0; i < 2; ++i) {
      const bool bf16 = (i == 0) == (r % 2 == 1);  // alternate which goes first
      us[bf16].push_back(run(bf16));
    }
  Json::Object o;
  o["context"] = Json(static_cast<int64_t>(n));
  o["heads"] = Json(static_cast<int64_t>(hq));
  o["kv_heads"] = Json(static_cast<int64_t>(hkv));
  o["head_dim"] = Json(static_cast<int64_t>(hd));
  o["layers"] = Json(static_cast<int64_t>(layers));
  o["threads"] = Json(static_cast<int64_t>(cpu::num_threads()));
  o["isa"] = Json(cpu::isa_path());
  for (int i = 0; i < 2; ++i) {
    std::vector<double> s = us[i];
    std::sort(s.begin(), s.end());
    const double med = s[s.size() / 2];
    const double bytes = 2.0 * static_cast<double>(per_layer) * (i ? 2 : 4);
    Json::Object d;
    d["us_per_layer_median"] = Json(med);
    d["us_per_layer_min"] = Json(s.front());
    d["us_per_layer_max"] = Json(s.back());
    d["kv_gb_per_s_median"] = Json(bytes / med / 1e3);
    o[i ? "bf16" : "f32"] = Json(std::move(d));
  }
  std::cout << Json(std::move(o)).dump() << "\n";
  return 0;
}
