// GPU engine benchmark (model/cuda/cuda_engine.h): self-decoder prefill time and achieved TFLOP/s over
// prompt lengths, decode-step time over batch sizes and contexts with the bytes-moved roofline.
// Prints a short table (never asserts speed). Weights: --model DIR (uploaded from the CPU loader)
// or --preset NAME, generated on the device (cuda::fill_normal), so yoco-3b needs no host copy.
//   cuda_engine_bench [--preset yoco-3b | --model DIR] [--prefill-lens 1024,4096,16384]
//                     [--chunk-tokens 4096] [--decode-batches 1,8,16,32,64]
//                     [--decode-contexts 1024,8192] [--decode-steps 16] [--repeats 3]
//                     [--peak-gbps 3350] [--device 0] [--cuda-graphs]
//   cuda_engine_bench --compare-prefill yoco-3b,transformer-3b [--compare-lens 4096,16384,65536,262144]
//                     [--chunk-tokens 4096] [--device 0]
//     YOCO vs its Transformer baseline (docs/design.md §2.6) on the same engine: YOCO's prefill (self-decoder
//     + global K/V, early exit) against the Transformer's full prefill (every layer, causal
//     attention over its per-layer paged K/V), each preset alone on the device (random weights),
//     one run per length after a warm-up; lengths whose KV pool does not fit next to the weights
//     (free device memory after the weights, less a 4 GiB margin) are skipped and named. Prints
//     time, TFLOP/s (FLOP counts below), the speed-up, and KV bytes per token from the engine's
//     pool accounting (kv_bytes_used() / tokens after the prefill, whole blocks).
//   --json adds one JSON line per table row (bench/paper/run.py reads them; lines starting with
//   '{'); --loops T overrides a --preset's self-decoder loops (YOCO-U's cost of loops).
// Timing is wall clock around the engine's synchronous calls, after one warm-up call per shape
// (cuBLASLt heuristics and scratch allocation happen there); decode leaves the logits on the
// device (no host copy). L2 is not flushed: the weights of every benchmark preset are far larger.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/json.h"
#include "kernels/cuda/ops.h"
#include "model/cuda/cuda_engine.h"
#include "model/model.h"
#include "model/random_model.h"

using namespace yoco;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

std::vector<int32_t> random_tokens(int64_t n, int vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(g() % vocab);
  return t;
}

int die(const Status& s) {
  std::fprintf(stderr, "cuda_engine_bench: %s\n", s.to_string().c_str());
  return 2;
}

// FLOPs (2 per multiply-add) of a self-decoder prefill of n tokens in calls of `chunk` tokens.
struct PrefillFlops {
  double proj = 0, mixer = 0;
};
PrefillFlops prefill_flops(const ModelConfig& c, int64_t n, int chunk, int retention_chunk) {
  const double D = c.dim, H = c.hidden_dim, KV = c.kv_dim(), hd = c.self_head_dim(), Hs = c.n_self_heads;
  const double P = c.self_qkv_rows() + (c.is_swa() ? 0 : Hs);
  const double layers = static_cast<double>(c.n_loops) * c.n_self_layers;
  PrefillFlops f;
  f.proj = static_cast<double>(n) * (layers * (2 * D * P + 2 * D * D + 6 * D * H) + 2 * D * 2 * KV);
  for (int64_t off = 0; off < n; off += chunk) {
    const int64_t m = std::min<int64_t>(chunk, n - off);
    if (!c.is_swa()) {
      // Chunkwise retention as executed: per chunk of cc tokens and head, q·kᵀ and P·v over the
      // whole cc×cc block (4·cc²·hd) plus the cross term q·S and the update kᵀv (4·cc·hd²).
      for (int64_t t = 0; t < m; t += retention_chunk) {
        const double cc = static_cast<double>(std::min<int64_t>(retention_chunk, m - t));
        f.mixer += layers * Hs * (4 * cc * cc * hd + 4 * cc * hd * hd);
      }
    } else {
      // Useful SWA work: the query at position p sees min(p + 1, W) keys (q·kᵀ and p·v).
      const int64_t W = c.sliding_window;
      double keys = 0;
      for (int64_t p = off; p < off + m; ++p) keys += static_cast<double>(std::min<int64_t>(p + 1, W));
      f.mixer += layers * Hs * 4 * hd * keys;
    }
  }
  return f;
}

// FLOPs of a Transformer prefill of n tokens (docs/design.md §2.6): per layer q|k|v, out_proj and the FFN,
// plus causal attention (q·kᵀ and p·v: 4·hd per (query, key seen), query p seeing p + 1 keys).
// No output head (prefill ends at last_hidden, as YOCO's).
PrefillFlops transformer_prefill_flops(const ModelConfig& c, int64_t n) {
  const double D = c.dim, H = c.hidden_dim, KV = c.kv_dim(), L = c.n_layers;
  const double keys = 0.5 * static_cast<double>(n) * (static_cast<double>(n) + 1);
  PrefillFlops f;
  f.proj = static_cast<double>(n) * L * (2 * D * (D + 2 * KV) + 2 * D * D + 6 * D * H);
  f.mixer = L * 4.0 * c.cross_head_dim() * c.n_attn_heads * keys;
  return f;
}

struct CompareRow {
  bool ran = false;
  double seconds = 0, tflops = 0, kv_bytes_per_token = 0;
};

// One preset alone on the device: prefill of each length (one sequence), after a warm-up.
Status run_prefill_series(const std::string& preset, const std::vector<int64_t>& lens, int chunk, int device,
                          std::vector<CompareRow>& rows, int64_t& weight_bytes, int64_t& kv_per_token) {
  YOCO_ASSIGN_OR_RETURN(ModelConfig cfg, find_preset(preset));
  CudaEngineOptions opt;
  opt.device = device;
  opt.max_batch = 1;
  opt.max_sequences = 1;
  opt.max_chunk_tokens = chunk;
  opt.kv_block_size = 64;
  // Weights first (a probe engine with a one-block pool), then the pool the free memory allows.
  int64_t fits = 0;
  {
    opt.max_context = chunk;
    opt.kv_blocks = 1;
    YOCO_ASSIGN_OR_RETURN(auto probe, CudaEngine::create_random(cfg, 1, opt));
    weight_bytes = probe->weight_bytes();
    kv_per_token = probe->kv_bytes_per_token();
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return internal_error("cudaMemGetInfo failed");
    const int64_t margin = int64_t{4} << 30;  // activations, cuBLASLt workspace, attention scratch
    fits = std::max<int64_t>(0, (static_cast<int64_t>(free_b) - margin) / kv_per_token);
  }
  int64_t longest = 0;
  for (int64_t n : lens)
    if (n <= fits) longest = std::max(longest, n);
  rows.assign(lens.size(), CompareRow{});
  if (longest == 0) return Status::Ok();
  opt.max_context = longest;
  opt.kv_blocks = static_cast<int>((longest + opt.kv_block_size - 1) / opt.kv_block_size);
  YOCO_ASSIGN_OR_RETURN(auto eng, CudaEngine::create_random(cfg, 1, opt));
  bool warmed = false;
  for (size_t i = 0; i < lens.size(); ++i) {
    const int64_t n = lens[i];
    if (n > longest) continue;
    const auto toks = random_tokens(n, cfg.vocab_size, static_cast<uint32_t>(n));
    for (int r = warmed ? 1 : 0; r <= 1; ++r) {  // r = 0: the warm-up (first length only)
      YOCO_ASSIGN_OR_RETURN(CudaEngine::SeqId id, eng->new_sequence());
      const auto t0 = clock_type::now();
      YOCO_RETURN_IF_ERROR(eng->prefill(id, toks, chunk));
      const double t = seconds_since(t0);
      if (r == 1) {
        const PrefillFlops fl =
            cfg.arch == Arch::kTransformer ? transformer_prefill_flops(cfg, n) : prefill_flops(cfg, n, chunk, 64);
        rows[i] = {true, t, (fl.proj + fl.mixer) / t / 1e12,
                   static_cast<double>(eng->kv_bytes_used()) / static_cast<double>(n)};
      }
      YOCO_RETURN_IF_ERROR(eng->release(id));
    }
    warmed = true;
  }
  return Status::Ok();
}

int compare_prefill(const std::string& spec, const std::vector<int64_t>& lens, int chunk, int device, bool json) {
  const size_t comma = spec.find(',');
  if (comma == std::string::npos)
    return die(invalid_argument("--compare-prefill: want YOCO_PRESET,TRANSFORMER_PRESET"));
  const std::string names[2] = {spec.substr(0, comma), spec.substr(comma + 1)};
  std::vector<CompareRow> rows[2];
  int64_t weights[2] = {0, 0}, per_token[2] = {0, 0};
  for (int e = 0; e < 2; ++e)
    if (Status s = run_prefill_series(names[e], lens, chunk, device, rows[e], weights[e], per_token[e]); !s.ok())
      return die(s);
  if (json) {
    for (int e = 0; e < 2; ++e)
      for (size_t i = 0; i < lens.size(); ++i) {
        const CompareRow& r = rows[e][i];
        Json::Object o;
        o["preset"] = Json(names[e]);
        o["role"] = Json(e == 0 ? "yoco" : "transformer");
        o["tokens"] = Json(lens[i]);
        o["ran"] = Json(r.ran);
        o["seconds"] = Json(r.seconds);
        o["tflops"] = Json(r.tflops);
        o["kv_bytes_per_token"] = Json(r.ran ? r.kv_bytes_per_token : static_cast<double>(per_token[e]));
        o["weight_bytes"] = Json(weights[e]);
        std::cout << Json(std::move(o)).dump() << "\n";
      }
  }
  std::printf(
      "prefill: %s (self-decoder + global K/V, early exit) vs %s (every layer, causal attention); calls of "
      "%d tokens\n",
      names[0].c_str(), names[1].c_str(), chunk);
  for (int e = 0; e < 2; ++e)
    std::printf("  %-16s weights %.2f GB, KV %lld bytes/token (fp32 K+V, pool accounting)\n", names[e].c_str(),
                weights[e] / 1e9, static_cast<long long>(per_token[e]));
  std::printf(
      "  TFLOP/s counts: YOCO as the plain prefill table (projections, FFN, global K/V, chunkwise gRet as executed);\n"
      "  Transformer n*L*(2*D*(D+2*KV) + 2*D^2 + 6*D*H)"
      " + L*4*hd*heads*n(n+1)/2\n\n");
  std::printf("  %8s %12s %9s %12s %12s %9s %12s %9s\n", "tokens", "yoco ms", "TFLOP/s", "KV B/tok", "tf ms", "TFLOP/s",
              "KV B/tok", "speedup");
  for (size_t i = 0; i < lens.size(); ++i) {
    const CompareRow &y = rows[0][i], &t = rows[1][i];
    auto cell = [](const CompareRow& r, char* buf, int what) -> const char* {
      if (!r.ran) return "skipped";
      const double v = what == 0 ? r.seconds * 1e3 : what == 1 ? r.tflops : r.kv_bytes_per_token;
      std::snprintf(buf, 32, what == 2 ? "%.0f" : "%.1f", v);
      return buf;
    };
    char b[6][32];
    char speed[32] = "-";
    if (y.ran && t.ran) std::snprintf(speed, sizeof speed, "%.2fx", t.seconds / y.seconds);
    std::printf("  %8lld %12s %9s %12s %12s %9s %12s %9s\n", static_cast<long long>(lens[i]), cell(y, b[0], 0),
                cell(y, b[1], 1), cell(y, b[2], 2), cell(t, b[3], 0), cell(t, b[4], 1), cell(t, b[5], 2), speed);
  }
  for (int e = 0; e < 2; ++e)
    for (size_t i = 0; i < lens.size(); ++i)
      if (!rows[e][i].ran)
        std::printf("  %s at %lld tokens skipped: its KV (%.1f GB) does not fit next to the weights on this device\n",
                    names[e].c_str(), static_cast<long long>(lens[i]),
                    static_cast<double>(lens[i]) * per_token[e] / 1e9);
  return 0;
}

// Bytes one decode step must move at least: every bf16 matrix it uses once (the self-decoder's
// once per loop), the K/V rows attended (fp32), and the self-decoder state read (+ written).
struct DecodeBytes {
  double weights = 0, kv = 0, state = 0;
};
DecodeBytes decode_bytes(const ModelConfig& c, int batch, int64_t context) {
  const double D = c.dim, H = c.hidden_dim, KV = c.kv_dim(), hd = c.self_head_dim(), Hs = c.n_self_heads,
               V = c.vocab_size;
  const double P = c.self_qkv_rows() + (c.is_swa() ? 0 : Hs);
  const double self_layer = 2 * (P * D + D * D + 3 * H * D);
  const double cross_layer = 2 * (D * D + D * D + 3 * H * D);
  DecodeBytes b;
  b.weights = static_cast<double>(c.n_loops) * c.n_self_layers * self_layer + 2 * (2 * KV * D) +
              c.n_cross_layers() * cross_layer + 2 * V * D;
  // Each cross layer attends over the one global K/V (docs/design.md §2.4): Lc reads of it per step.
  b.kv = static_cast<double>(c.n_cross_layers()) * batch * static_cast<double>(context + 1) * 2 * KV * 4;
  const double per_state = c.is_swa() ? 2.0 * std::min<int64_t>(context + 1, c.sliding_window) * D * 4  // read
                                      : 2.0 * Hs * hd * hd * 4;                                         // read + write
  b.state = static_cast<double>(batch) * c.n_loops * c.n_self_layers * per_state;
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  Flags f("cuda_engine_bench", "GPU engine benchmark: prefill TFLOP/s, decode step time against the bytes roofline",
          {flag::str("model", "model directory uploaded from the CPU loader (instead of --preset)"),
           flag::str("preset", "model preset, random weights generated on the device", "yoco-3b"),
           flag::optional_integer("loops", "with --preset: self-decoder loops T (YOCO presets only)", 1, 1024),
           flag::int_list("prefill-lens", "prompt lengths timed for prefill", 1, kMax, "1024,4096,16384"),
           flag::integer("chunk-tokens", "prefill chunk size in tokens", 4096, 1, kMax),
           flag::int_list("decode-batches", "batch sizes timed for decode", 1, 1 << 20, "1,8,16,32,64"),
           flag::int_list("decode-contexts", "context lengths timed for decode", 1, kMax, "1024,8192"),
           flag::integer("decode-steps", "timed decode steps per batch and context", 16, 1, kMax),
           flag::integer("repeats", "timed prefills per length (after one warm-up), best kept", 3, 1, 1 << 20),
           flag::number("peak-gbps", "the device's memory bandwidth for the roofline, GB/s", 3350, 0, 1e6),
           flag::integer("device", "CUDA device", 0, 0, 1024),
           flag::integer("seed", "seed of the random weights", 1, 0, std::numeric_limits<int64_t>::max()),
           flag::str("compare-prefill", "two presets (YOCO,Transformer): compare their prefill and exit"),
           flag::int_list("compare-lens", "--compare-prefill's prompt lengths", 1, kMax, "4096,16384,65536,262144"),
           flag::boolean("cuda-graphs", "decode steps as CUDA graphs (CudaEngineOptions::cuda_graphs)"),
           flag::boolean("json", "also print one JSON line per table row")});
  if (Status s = f.parse(argc, argv, 1); !s.ok()) return die(s);
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "cuda_engine_bench: no CUDA device\n");
    return 1;
  }
  const std::vector<int64_t> lens = f.int_list("prefill-lens"), batches = f.int_list("decode-batches"),
                             contexts = f.int_list("decode-contexts");
  const int64_t chunk = f.integer("chunk-tokens"), steps = f.integer("decode-steps"), repeats = f.integer("repeats");
  const int64_t device = f.integer("device"), seed = f.integer("seed");
  const double peak = f.number("peak-gbps");

  if (f.has("compare-prefill"))
    return compare_prefill(f.str("compare-prefill"), f.int_list("compare-lens"), static_cast<int>(chunk),
                           static_cast<int>(device), f.boolean("json"));
  const int64_t max_len = *std::max_element(lens.begin(), lens.end());
  const int64_t max_ctx = *std::max_element(contexts.begin(), contexts.end());
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  const int64_t extra = 2 + steps;  // warm-up + timed steps past the context
  CudaEngineOptions opt;
  opt.device = static_cast<int>(device);
  opt.max_batch = static_cast<int>(max_batch);
  opt.max_sequences = static_cast<int>(max_batch) + 1;
  opt.max_chunk_tokens = static_cast<int>(chunk);
  opt.max_context = std::max(max_len, max_ctx + extra);
  opt.kv_block_size = 64;
  opt.cuda_graphs = f.boolean("cuda-graphs");
  const int64_t per_seq = (max_ctx + extra + opt.kv_block_size - 1) / opt.kv_block_size;
  opt.kv_blocks =
      static_cast<int>(std::max((max_len + opt.kv_block_size - 1) / opt.kv_block_size, per_seq * max_batch) + 1);

  std::unique_ptr<Model> host_model;
  Result<std::unique_ptr<CudaEngine>> eng = internal_error("unset");
  std::string name;
  if (f.has("model")) {
    name = f.str("model");
    auto m = Model::load(name);
    if (!m.ok()) return die(m.status());
    host_model = std::move(m).value();
    eng = CudaEngine::create(*host_model, opt);
  } else {
    name = f.str("preset");
    auto cfg = find_preset(name);
    if (!cfg.ok()) return die(cfg.status());
    if (f.has("loops")) {
      if (cfg->is_transformer()) return die(invalid_argument("--loops: YOCO presets only"));
      cfg->n_loops = static_cast<int>(f.integer("loops"));
    }
    eng = CudaEngine::create_random(cfg.value(), static_cast<uint64_t>(seed), opt);
  }
  if (!eng.ok()) return die(eng.status());
  CudaEngine& e = **eng;
  const ModelConfig& c = e.config();
  const int V = c.vocab_size;

  std::printf("%s: dim %d, %d self layers x %d loops + %d cross layers, %s, heads %d/%d/%d, hidden %d, vocab %d\n",
              name.c_str(), c.dim, c.n_self_layers, c.n_loops, c.n_cross_layers(),
              c.is_swa() ? ("SWA " + std::to_string(c.sliding_window)).c_str() : "gRet", c.n_self_heads, c.n_attn_heads,
              c.n_attn_kv_heads, c.hidden_dim, V);
  std::printf("weights on device: %.2f GB (bf16 matrices, fp32 norms); KV pool %d blocks x %d rows\n\n",
              e.weight_bytes() / 1e9, opt.kv_blocks, opt.kv_block_size);

  // --- prefill ---------------------------------------------------------------------------------
  std::printf("prefill (self-decoder + global K/V, early exit; calls of %lld tokens, retention chunk %d)\n",
              static_cast<long long>(chunk), opt.retention_chunk);
  std::printf(
      "  FLOPs = n * [Ls*T*(2*D*P + 2*D^2 + 6*D*H) + 4*D*KV]   (projections, FFN, global K/V; P = q|k|v(|g|gt) "
      "rows)\n");
  std::printf("        + %s\n\n",
              c.is_swa()
                  ? "Ls*T*Hs*4*hd*sum_p min(p+1, W)   (SWA: q.k and p.v over the window)"
                  : "Ls*T*Hs*sum_chunks (4*C^2*hd + 4*C*hd^2)   (chunkwise gRet as executed, C x C blocks whole)");
  std::printf("  %8s %10s %12s %10s %10s %10s\n", "tokens", "ms", "tokens/s", "TFLOP", "TFLOP/s", "mixer %");
  for (int64_t n : lens) {
    const auto toks = random_tokens(n, V, static_cast<uint32_t>(n));
    double best = 1e30;
    for (int r = 0; r <= repeats; ++r) {  // r = 0: warm-up
      auto id = e.new_sequence();
      if (!id.ok()) return die(id.status());
      const auto t0 = clock_type::now();
      if (Status s = e.prefill(id.value(), toks, static_cast<int>(chunk)); !s.ok()) return die(s);
      const double t = seconds_since(t0);
      if (r > 0) best = std::min(best, t);
      if (Status s = e.release(id.value()); !s.ok()) return die(s);
    }
    const PrefillFlops fl = prefill_flops(c, n, static_cast<int>(chunk), opt.retention_chunk);
    const double total = fl.proj + fl.mixer;
    std::printf("  %8lld %10.2f %12.0f %10.3f %10.1f %10.1f\n", static_cast<long long>(n), best * 1e3, n / best,
                total / 1e12, total / best / 1e12, 100 * fl.mixer / total);
    if (f.boolean("json")) {
      Json::Object o;
      o["op"] = Json("prefill");
      o["tokens"] = Json(n);
      o["seconds"] = Json(best);
      o["tflops"] = Json(total / best / 1e12);
      o["n_loops"] = Json(c.n_loops);
      o["weight_bytes"] = Json(e.weight_bytes());
      o["kv_bytes_per_token"] = Json(e.kv_bytes_per_token());
      std::cout << Json(std::move(o)).dump() << "\n";
    }
  }

  // --- decode ----------------------------------------------------------------------------------
  std::printf("\ndecode step (self-decoder step + 1 K/V row + cross-decoder + output head; equal contexts)\n");
  std::printf(
      "  bytes = weights (bf16, self-decoder once per loop) + Lc*B*(ctx+1)*2*KV*4 (fp32 K/V, read by each of\n"
      "          the Lc = %d cross layers)\n",
      c.n_cross_layers());
  std::printf("        + B*Ls*T*%s; roofline = bytes / %.0f GB/s\n\n",
              c.is_swa() ? "2*min(ctx+1,W)*D*4 (window read)" : "2*Hs*hd^2*4 (S read + write)", peak);
  std::printf("  %6s %8s %10s %12s %10s %10s %10s %12s %10s\n", "batch", "context", "ms/step", "tokens/s", "weights MB",
              "KV MB", "state MB", "roofline ms", "% roof");
  for (int64_t ctx : contexts) {
    // One sequence prefilled to ctx, then copied: download once, upload per batch slot.
    auto base_id = e.new_sequence();
    if (!base_id.ok()) return die(base_id.status());
    if (Status s = e.prefill(base_id.value(), random_tokens(ctx, V, 7), static_cast<int>(chunk)); !s.ok())
      return die(s);
    SequenceState base;
    if (Status s = e.download(base_id.value(), base); !s.ok()) return die(s);
    if (Status s = e.release(base_id.value()); !s.ok()) return die(s);
    for (int64_t b : batches) {
      std::vector<CudaEngine::SeqId> ids;
      for (int64_t i = 0; i < b; ++i) {
        auto id = e.upload(base);
        if (!id.ok()) return die(id.status());
        ids.push_back(id.value());
      }
      std::vector<int32_t> toks(static_cast<size_t>(b));
      for (int64_t i = 0; i < b; ++i) toks[i] = static_cast<int32_t>((i * 131 + 7) % V);
      if (Status s = e.decode_step(ids, toks, nullptr); !s.ok()) return die(s);  // warm-up
      const auto t0 = clock_type::now();
      for (int64_t st = 0; st < steps; ++st)
        if (Status s = e.decode_step(ids, toks, nullptr); !s.ok()) return die(s);
      const double t = seconds_since(t0) / steps;
      const DecodeBytes by = decode_bytes(c, static_cast<int>(b), ctx + 1 + steps / 2);
      const double bytes = by.weights + by.kv + by.state;
      const double roof = bytes / (peak * 1e9);
      std::printf("  %6lld %8lld %10.3f %12.0f %10.1f %10.1f %10.1f %12.3f %10.1f\n", static_cast<long long>(b),
                  static_cast<long long>(ctx), t * 1e3, b / t, by.weights / 1e6, by.kv / 1e6, by.state / 1e6,
                  roof * 1e3, 100 * roof / t);
      if (f.boolean("json")) {
        Json::Object o;
        o["op"] = Json("decode");
        o["batch"] = Json(b);
        o["context"] = Json(ctx);
        o["seconds_per_step"] = Json(t);
        o["cuda_graphs"] = Json(opt.cuda_graphs);
        o["n_loops"] = Json(c.n_loops);
        o["tokens_per_s"] = Json(b / t);
        o["state_bytes"] = Json(by.state);
        std::cout << Json(std::move(o)).dump() << "\n";
      }
      for (auto id : ids)
        if (Status s = e.release(id); !s.ok()) return die(s);
    }
  }
  return 0;
}
