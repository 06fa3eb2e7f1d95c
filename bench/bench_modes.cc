#include "bench/bench_modes.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "model/engine.h"
#include "model/kv_pool.h"
#include "model/random_model.h"

namespace yoco {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// One line of /proc/self/status ("VmHWM:   1234 kB") in MB; 0 where it cannot be read.
double proc_status_mb(const char* key) {
  FILE* fp = std::fopen("/proc/self/status", "r");
  if (!fp) return 0;
  char line[256];
  double mb = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, fp)) {
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      mb = std::atof(line + n + 1) / 1024.0;
      break;
    }
  }
  std::fclose(fp);
  return mb;
}

std::vector<int32_t> random_tokens(int64_t n, int vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(g() % vocab);
  return t;
}

constexpr int64_t kMax = std::numeric_limits<int32_t>::max();

}  // namespace

FlagTable bench_mode_flags() {
  return flag::grouped(
      "model and modes",
      {flag::str("preset", "random-weight model preset (model/presets), used without --model", "small-gret"),
       flag::boolean("transformer", "with --preset: the Transformer baseline of the preset's sizes"),
       flag::optional_integer("loops", "with --preset: self-decoder loops T (YOCO-U)", 1, 1024),
       flag::boolean("nope", "with --preset: no RoPE in the cross-decoder"),
       flag::optional_integer("memory-context", "memory mode: KV pool accounting and peak RSS of one N-token sequence",
                              1, kMax),
       flag::optional_integer("memory-prefill", "memory mode: tokens prefilled for real (default: --memory-context)", 1,
                              kMax),
       flag::integer("block-size", "memory mode: KV pool block rows", 64, 1, 1 << 20),
       flag::optional_integer("throughput-context", "throughput mode: prompt tokens per sequence", 1, kMax),
       flag::integer("generate", "throughput mode: tokens generated per sequence", 128, 1, kMax),
       flag::integer("memory-budget-mb", "throughput mode: KV memory budget in MiB", 1024, 1, kMax),
       flag::integer("max-batch", "throughput mode: largest batch", 64, 1, kMax)});
}

double proc_peak_rss_mb() { return proc_status_mb("VmHWM"); }

bool reset_peak_rss() {
  FILE* fp = std::fopen("/proc/self/clear_refs", "w");
  if (!fp) return false;
  const bool ok = std::fputs("5", fp) >= 0;
  return std::fclose(fp) == 0 && ok;
}
double proc_rss_mb() { return proc_status_mb("VmRSS"); }

Result<ModelConfig> preset_config(const Flags& f) {
  auto cfg = find_preset(f.str("preset"));
  if (!cfg.ok()) return cfg.status();
  ModelConfig c = cfg.value();
  if (f.boolean("transformer")) c = transformer_of(c);  // the baseline of the same sizes, as the presets make it
  if (f.has("loops")) {
    if (c.is_transformer()) return invalid_argument("--loops: a Transformer has no self-decoder to loop");
    c.n_loops = static_cast<int>(f.integer("loops"));
  }
  if (f.boolean("nope")) c.cross_decoder_rope = false;
  if (Status s = validate_model_config(c); !s.ok()) return s;
  return c;
}

std::string config_suffix(const Flags& f) {
  std::string s;
  if (f.boolean("transformer")) s += "-transformer";
  if (f.has("loops")) s += "-loops" + std::to_string(f.integer("loops"));
  if (f.boolean("nope")) s += "-nope";
  return s;
}

Json describe_config(const std::string& preset, const ModelConfig& c) {
  Json::Object o;
  o["preset"] = Json(preset);
  o["config"] = c.to_json();
  o["kv_bytes_per_token_f32"] = Json(c.kv_bytes_per_token());
  o["transformer_kv_bytes_per_token_f32"] = Json(int64_t{2} * c.kv_dim() * 4 * c.n_layers);
  // Self-decoder state of one sequence (constant in the context length).
  o["self_state_bytes"] = Json(make_sequence_state(c).self_state_bytes());
  return Json(std::move(o));
}

Result<Json> memory_mode(const Model& model, const Flags& f, const PrefillOptions& popt) {
  const ModelConfig& c = model.config();
  const int64_t n = f.integer("memory-context");
  const int64_t p = f.has("memory-prefill") ? f.integer("memory-prefill") : n;
  const int64_t bs = f.integer("block-size");
  const int64_t prefill = std::min(p, n);
  const double rss_loaded = proc_rss_mb(), load_peak = proc_peak_rss_mb();
  // Loading converts the checkpoint with temporary copies; its peak is not the serving memory.
  // Resetting the high-water mark (Linux ≥ 4.0) makes peak_rss_mb this sequence's own peak.
  const bool reset = reset_peak_rss();

  // The pool holds exactly the blocks N tokens need (it allocates, and touches, all of them).
  const int64_t blocks = (n + bs - 1) / bs;
  auto pool = KvPool::create(static_cast<int>(blocks), static_cast<int>(bs), c.kv_row_floats());
  if (!pool.ok()) return pool.status();
  EngineOptions eo;
  eo.threads = cpu::num_threads();
  auto engine = make_engine(model, pool->get(), eo);
  if (!engine.ok()) return engine.status();
  Engine& e = **engine;
  SequenceState fresh = model.new_sequence();
  auto id = e.adopt(fresh);
  if (!id.ok()) return id.status();
  if (Status s = e.reserve(*id, n); !s.ok()) return s;
  const auto toks = random_tokens(prefill, c.vocab_size, 11);
  std::vector<float> logits(c.vocab_size);
  const Engine::SeqId ids[1] = {*id};
  const auto t0 = clock_type::now();
  if (Status s = e.prefill(*id, toks, popt); !s.ok()) return s;
  if (Status s = e.logits(ids, logits.data()); !s.ok()) return s;
  const double secs = seconds_since(t0);
  SequenceState snap;
  if (Status s = e.snapshot(*id, snap); !s.ok()) return s;

  const int used = (*pool)->total_blocks() - (*pool)->free_blocks();
  const int64_t block_bytes = int64_t{2} * bs * c.kv_row_floats() * 4;  // K and V, fp32
  Json::Object o;
  o["mode"] = Json("memory");
  o["config"] = c.to_json();
  o["context"] = Json(n);
  o["prefill_tokens"] = Json(prefill);
  o["prefill_seconds"] = Json(secs);
  o["block_size"] = Json(bs);
  o["pool_blocks_used"] = Json(used);
  o["kv_bytes"] = Json(used * block_bytes);
  o["kv_bytes_per_token_f32"] = Json(c.kv_bytes_per_token());
  o["self_state_bytes"] = Json(snap.self_state_bytes());
  o["rss_after_load_mb"] = Json(rss_loaded);
  o["load_peak_rss_mb"] = Json(load_peak);
  o["peak_rss_mb"] = Json(proc_peak_rss_mb());
  o["peak_rss_since_load"] = Json(reset);
  o["rss_end_mb"] = Json(proc_rss_mb());
  return Json(std::move(o));
}

Result<Json> throughput_mode(const Model& model, const Flags& f, const PrefillOptions& popt) {
  const ModelConfig& c = model.config();
  const int64_t n = f.integer("throughput-context"), g = f.integer("generate");
  const int64_t budget = f.integer("memory-budget-mb"), max_batch = f.integer("max-batch");

  SequenceState base = model.new_sequence();
  SequenceState* one[1] = {&base};
  std::vector<float> logits(c.vocab_size);
  const auto t0 = clock_type::now();
  if (Status s = model.prefill(base, random_tokens(n, c.vocab_size, 13), popt); !s.ok()) return s;
  if (Status s = model.logits(one, logits.data()); !s.ok()) return s;
  const double prefill_s = seconds_since(t0);

  const int64_t per_seq = c.kv_bytes_per_token() * (n + g) + base.self_state_bytes();
  const int64_t b = std::min(max_batch, budget * (int64_t{1} << 20) / per_seq);
  double decode_s = 0;
  if (b > 0) {
    // Room for every generated row up front, so decoding never reallocates (no 2× copies).
    const size_t rows = static_cast<size_t>(n + g + kKvChunkRows) * c.kv_row_floats();
    std::vector<SequenceState> seqs(static_cast<size_t>(b), base);
    std::vector<SequenceState*> ptrs;
    for (auto& s : seqs) {
      s.k.reserve(rows);
      s.v.reserve(rows);
      ptrs.push_back(&s);
    }
    std::vector<float> out(static_cast<size_t>(b) * c.vocab_size);
    std::vector<int32_t> next(static_cast<size_t>(b), 1);
    const auto t1 = clock_type::now();
    for (int64_t i = 0; i < g; ++i) {
      for (int64_t j = 0; j < b; ++j) next[j] = static_cast<int32_t>((i * 131 + j) % c.vocab_size);
      if (Status s = model.decode_step(ptrs, next, out.data()); !s.ok()) return s;
    }
    decode_s = seconds_since(t1);
  }
  const double total = b * prefill_s + decode_s;
  Json::Object o;
  o["mode"] = Json("throughput");
  o["config"] = c.to_json();
  o["context"] = Json(n);
  o["generate"] = Json(g);
  o["memory_budget_mb"] = Json(budget);
  o["bytes_per_sequence"] = Json(per_seq);
  o["batch"] = Json(b);
  o["prefill_seconds"] = Json(prefill_s);
  o["decode_seconds"] = Json(decode_s);
  o["tokens_per_s"] = Json(b > 0 ? static_cast<double>(b * g) / total : 0.0);
  o["peak_rss_mb"] = Json(proc_peak_rss_mb());
  return Json(std::move(o));
}

}  // namespace yoco
