// Engine benchmark: prefill tokens/s over prompt lengths, decode tokens/s over batch sizes,
// peak RSS and state bytes per token. Prints a table, or JSON with --json. Never asserts speed.
//   engine_bench --model DIR | --preset NAME (e.g. small-gret, small-transformer)  [--threads N] [--prefill-lens 1024,4096]
//                [--decode-batches 1,8,32] [--decode-context 512] [--decode-steps 16] [--repeats 3] [--dtype fp32|bf16]
//                [--kv-dtype f32|bf16] [--kv-pool]
// With --preset, the config may be changed before the random weights are made (bench/paper/ uses
// these for the Transformer and YOCO-U of a preset's sizes): --transformer (the Transformer
// baseline of the same sizes), --loops T, --nope (no RoPE in the cross-decoder). --write-model DIR
// only writes that model; --describe only prints the config and its KV bytes per token (JSON).
// Two more modes, each alone in its process (peak RSS is per process), always JSON
// (bench_modes.h): --memory-context N (KV pool accounting + peak RSS for one sequence of N tokens)
// and --throughput-context N (prompt + --generate tokens at the batch a memory budget allows).
// Debugging: --trace-out FILE runs one prefill of the first --prefill-lens length, its logits and
// one decode step, writes every named intermediate of the layer program (docs/design.md §2.9) to
// FILE (bench/trace_file.h) and exits; nothing is timed.
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <span>

#include "bench/bench_modes.h"
#include "bench/trace_file.h"
#include "common/flags.h"
#include "common/json.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/kv_pool.h"
#include "model/model.h"
#include "model/random_model.h"
#include "model/trace.h"

using namespace yoco;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// User + system CPU seconds of the whole process: a load-independent measure of the work done on
// a shared machine (a thread waiting for its CPU is not charged; a spinning one is).
double process_cpu_seconds() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double peak_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(g() % vocab);
  return t;
}

// A mixture of experts' decode step reads only the experts some sequence chose (docs/design.md
// §2.5). The experts it read, measured from one (untimed) step's routing: per layer, the union of
// the chosen experts over the batch and the layer's loops; and the formula for independent
// uniform choices, E · (1 − (1 − k/E)^(B·T)) per layer (T = n_loops for a self-decoder layer).
struct MoeStepBytes {
  int64_t measured = 0;  // bytes of the routed experts read
  double formula = 0;
  int64_t experts = 0;  // distinct (layer, expert) pairs read
};

Result<MoeStepBytes> moe_step_bytes(const Model& model, std::span<SequenceState* const> seqs,
                                    std::span<const int32_t> next, float* logits) {
  const ModelConfig& c = model.config();
  std::map<std::string, std::set<int>> chosen;  // "self.<layer>" / "cross.<layer>" -> experts
  {
    TraceScope scope([&](const TraceRows& t) {
      const std::string name(t.name);
      if (name.size() < 8 || name.compare(name.size() - 8, 8, ".experts") != 0) return;
      // self.<loop>.<layer>.experts or cross.<layer>.experts (layer.<layer>. for a transformer)
      const std::string head = name.substr(0, name.size() - 8);
      const size_t dot = head.rfind('.');
      const std::string key = head.substr(0, head.find('.')) + "." + head.substr(dot + 1);
      for (int i = 0; i < t.rows * t.cols; ++i) chosen[key].insert(static_cast<int>(t.data[i]));
    });
    if (Status s = model.decode_step(seqs, next, logits); !s.ok()) return s;
  }
  const int64_t elt = model.bf16_weights() ? 2 : 4;
  const int64_t per_expert = 3LL * c.expert_hidden_dim * c.dim * elt;
  MoeStepBytes out;
  for (const auto& [_, experts] : chosen) out.experts += static_cast<int64_t>(experts.size());
  out.measured = out.experts * per_expert;
  const double B = static_cast<double>(seqs.size()), E = c.n_experts, k = c.n_experts_per_token;
  const int self = c.is_transformer() ? c.n_layers : c.n_self_layers, loops = c.is_transformer() ? 1 : c.n_loops;
  out.formula = per_expert * E *
                (self * (1 - std::pow(1 - k / E, B * loops)) + c.n_cross_layers() * (1 - std::pow(1 - k / E, B)));
  if (c.is_transformer()) out.formula = per_expert * E * c.n_layers * (1 - std::pow(1 - k / E, B));
  return out;
}

// Every matrix a decode step reads whatever the routing: all weights (the embedding one row when
// untied) but an MoE's routed experts.
int64_t decode_base_bytes(const Model& model) {
  const ModelConfig& c = model.config();
  const int64_t elt = model.bf16_weights() ? 2 : 4;
  const int64_t embed_bytes = static_cast<int64_t>(c.vocab_size) * c.dim * elt;
  const int64_t experts = static_cast<int64_t>(c.n_layers) * c.n_experts * 3LL * c.expert_hidden_dim * c.dim * elt;
  return model.weight_bytes() - (model.weights().tied ? 0 : embed_bytes) - experts;
}

int die(const Status& s) {
  std::fprintf(stderr, "engine_bench: %s\n", s.message().c_str());
  return 2;
}

FlagTable engine_bench_flags() {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  FlagTable t = {
      flag::str("model", "model directory to load (default: random weights of --preset)"),
      flag::integer("threads", "CPU threads (0: the runtime's default)", 0, 0, 4096),
      flag::int_list("prefill-lens", "prompt lengths timed for prefill (--trace-out: the first, default 64)", 1, kMax,
                     "1024,4096"),
      flag::int_list("decode-batches", "batch sizes timed for decode", 1, 1 << 20, "1,8,32"),
      flag::integer("decode-context", "context length of every decoding sequence", 512, 1, kMax),
      flag::integer("decode-steps", "timed decode steps per batch", 16, 1, kMax),
      flag::integer("repeats", "prefill runs per length below 16384 tokens, best kept", 3, 1, 1 << 20),
      flag::boolean("json", "print JSON instead of a table"),
      flag::integer("chunk-tokens", "prefill chunk size in tokens", PrefillOptions{}.chunk_tokens, 1, kMax),
      flag::str("write-model", "with --preset: only write the random model to this directory"),
      flag::boolean("describe", "with --preset: only print the config and its KV bytes per token (JSON)"),
      flag::str("dtype", "weights held as fp32 or bf16", "fp32"),
      flag::str("kv-dtype",
                "decode's K/V rows: f32, or bf16 (16-bit K/V, in a paged pool as a decode worker keeps them)", "f32"),
      flag::boolean("kv-pool", "decode from a paged K/V pool (as a decode worker) even with --kv-dtype f32"),
      flag::str("trace-out", "write every named intermediate of one prefill + one decode step to this file"),
      flag::boolean("score",
                    "also time Model::score over each --prefill-lens prompt (the full forward: self-decoder, "
                    "cross-decoder and head on every row, log-softmax; once per length)"),
  };
  for (FlagSpec& s : bench_mode_flags()) t.push_back(std::move(s));
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f("engine_bench", "CPU engine benchmark: prefill and decode tokens/s, peak RSS, KV bytes per token",
          engine_bench_flags());
  if (Status s = f.parse(argc, argv, 1); !s.ok()) return die(s);
  cpu::set_num_threads(static_cast<int>(f.integer("threads")));

  std::string dir = f.str("model");
  if (dir.empty()) {
    auto cfg = preset_config(f);
    if (!cfg.ok()) return die(cfg.status());
    if (f.boolean("describe")) {
      std::cout << describe_config(f.str("preset"), cfg.value()).dump() << "\n";
      return 0;
    }
    dir = f.has("write-model") ? f.str("write-model") : "/tmp/yoco-bench-" + f.str("preset") + config_suffix(f);
    if (Status s = write_random_model(dir, cfg.value(), 1, DType::kBF16); !s.ok()) return die(s);
    if (f.has("write-model")) return 0;
  }
  auto m = Model::load(dir);
  if (!m.ok()) return die(m.status());
  if (Status s = apply_dtype_flag(**m, f.str("dtype"), -1); !s.ok()) return die(s);
  const Model& model = **m;
  const ModelConfig& c = model.config();

  PrefillOptions popt;
  popt.chunk_tokens = static_cast<int>(f.integer("chunk-tokens"));
  if (f.has("memory-context") || f.has("throughput-context")) {
    auto out = f.has("memory-context") ? memory_mode(model, f, popt) : throughput_mode(model, f, popt);
    if (!out.ok()) return die(out.status());
    Json::Object& o = out->mutable_object();
    o["model"] = Json(dir);
    o["threads"] = Json(cpu::num_threads());
    std::cout << out->dump() << "\n";
    return 0;
  }
  if (f.has("trace-out")) {
    const std::vector<int64_t> lens = f.has("prefill-lens") ? f.int_list("prefill-lens") : std::vector<int64_t>{64};
    if (lens.empty()) return die(invalid_argument("--prefill-lens: empty"));
    const auto toks = random_tokens(static_cast<int>(lens.front()), c.vocab_size, 11);
    bench::TraceFile trace;
    {
      TraceScope scope(trace.sink());
      SequenceState st = model.new_sequence();
      SequenceState* one[1] = {&st};
      std::vector<float> logits(c.vocab_size);
      const int32_t next[1] = {1};
      if (Status s = model.prefill(st, toks, popt); !s.ok()) return die(s);
      if (Status s = model.logits(one, logits.data()); !s.ok()) return die(s);
      if (Status s = model.decode_step(one, next, logits.data()); !s.ok()) return die(s);
    }
    if (Status s = trace.write(f.str("trace-out")); !s.ok()) return die(s);
    std::printf("%zu named intermediates of %lld tokens + 1 step -> %s\n", trace.names(),
                static_cast<long long>(lens.front()), f.str("trace-out").c_str());
    return 0;
  }
  const int64_t repeats = f.integer("repeats"), ctx = f.integer("decode-context"), steps = f.integer("decode-steps");
  const std::vector<int64_t> lens = f.int_list("prefill-lens"), batches = f.int_list("decode-batches");

  Json::Array prefill_rows, decode_rows;
  for (int64_t n : lens) {
    const auto toks = random_tokens(static_cast<int>(n), c.vocab_size, static_cast<uint32_t>(n));
    // Long prompts are timed once; short ones take the best of `repeats`.
    const int reps = n >= 16384 ? 1 : static_cast<int>(repeats);
    double best = 1e30;
    int64_t state_bytes = 0, kv_bytes = 0;
    for (int r = 0; r < reps; ++r) {
      // Timed like a time-to-first-token: self-decoder prefill plus the last position's logits.
      SequenceState st = model.new_sequence();
      SequenceState* one[1] = {&st};
      std::vector<float> logits(c.vocab_size);
      auto t0 = clock_type::now();
      if (Status s = model.prefill(st, toks, popt); !s.ok()) return die(s);
      if (Status s = model.logits(one, logits.data()); !s.ok()) return die(s);
      best = std::min(best, seconds_since(t0));
      state_bytes = st.self_state_bytes();
      kv_bytes = st.kv_bytes();
    }
    Json::Object row;
    row["tokens"] = Json(n);
    row["seconds"] = Json(best);
    row["tokens_per_s"] = Json(n / best);
    row["kv_bytes"] = Json(kv_bytes);
    row["self_state_bytes"] = Json(state_bytes);
    if (f.boolean("score")) {  // what a Score costs in the engine, beside the prefill of the same prompt
      auto t0 = clock_type::now();
      Result<std::vector<float>> lp = model.score(toks, popt);
      if (!lp.ok()) return die(lp.status());
      row["score_seconds"] = Json(seconds_since(t0));
    }
    prefill_rows.push_back(Json(std::move(row)));
  }
  // One context prefilled once, then cloned: the batch decodes sequences of equal length.
  SequenceState base = model.new_sequence();
  if (Status s = model.prefill(base, random_tokens(static_cast<int>(ctx), c.vocab_size, 7), popt); !s.ok())
    return die(s);
  auto kv_dtype = parse_kv_dtype(f.str("kv-dtype"));
  if (!kv_dtype.ok()) return die(kv_dtype.status());
  const bool paged = f.boolean("kv-pool") || *kv_dtype == KvDType::kBF16;
  const int W = c.kv_row_floats();
  const int64_t base_rows = static_cast<int64_t>(base.k.size()) / W;  // a transformer's last chunk whole
  for (int64_t b : batches) {
    std::vector<SequenceState> seqs(b, base);
    std::vector<SequenceState*> ptrs;
    for (auto& s : seqs) ptrs.push_back(&s);
    std::unique_ptr<KvPool> pool;
    if (paged) {  // every sequence's rows copied (rounded to bf16) into its own pool blocks
      const int bs = 64;
      const int64_t per_seq = (ctx + steps + 2 + kKvChunkRows + bs - 1) / bs + 1;
      auto p = KvPool::create(static_cast<int>(per_seq * b), bs, W, *kv_dtype);
      if (!p.ok()) return die(p.status());
      pool = std::move(p).value();
      for (auto& s : seqs) {
        s.k.clear();
        s.v.clear();
        s.pages = pool->new_pages();
        if (Status st = pool->reserve(*s.pages, ctx + steps + 2 + kKvChunkRows); !st.ok()) return die(st);
        for (int64_t r = 0; r < base_rows; ++r) s.write_kv(r, W, 0, W, base.k_row(r, W), base.v_row(r, W));
      }
    }
    std::vector<float> logits(static_cast<size_t>(b) * c.vocab_size);
    std::vector<int32_t> next(b, 1);
    if (Status s = model.decode_step(ptrs, next, logits.data()); !s.ok()) return die(s);  // warm-up
    auto t0 = clock_type::now();
    const double cpu0 = process_cpu_seconds();
    for (int64_t i = 0; i < steps; ++i) {
      for (int64_t j = 0; j < b; ++j) next[j] = static_cast<int32_t>((i * 131 + j) % c.vocab_size);
      if (Status s = model.decode_step(ptrs, next, logits.data()); !s.ok()) return die(s);
    }
    const double sec = seconds_since(t0);
    const double cpu_sec = process_cpu_seconds() - cpu0;
    Json::Object row;
    row["batch"] = Json(b);
    row["context"] = Json(ctx);
    row["kv_dtype"] = Json(kv_dtype_name(*kv_dtype));
    row["kv_paged"] = Json(paged);
    row["steps"] = Json(steps);
    row["seconds"] = Json(sec);
    row["tokens_per_s"] = Json(static_cast<double>(b * steps) / sec);
    row["ms_per_step"] = Json(sec * 1e3 / static_cast<double>(steps));
    row["cpu_ms_per_step"] = Json(cpu_sec * 1e3 / static_cast<double>(steps));
    if (c.is_moe()) {
      auto bytes = moe_step_bytes(model, ptrs, next, logits.data());
      if (!bytes.ok()) return die(bytes.status());
      row["moe_experts_read"] = Json(bytes->experts);
      row["moe_expert_bytes_measured"] = Json(bytes->measured);
      row["moe_expert_bytes_formula"] = Json(bytes->formula);
      row["decode_active_weight_bytes"] = Json(decode_base_bytes(model) + bytes->measured);
    }
    decode_rows.push_back(Json(std::move(row)));
  }

  // Per-token KV of this model (a transformer preset, e.g. --preset small-transformer, is the
  // baseline itself): YOCO keeps one K/V pair; a Transformer of the same size one per layer.
  const int64_t kv_per_token = c.kv_bytes_per_token();
  const int64_t transformer_kv_per_token = static_cast<int64_t>(2) * c.kv_dim() * 4 * c.n_layers;
  Json::Object out;
  out["impl"] = Json("yoco-engine");
  out["model"] = Json(dir);
  out["config"] = c.to_json();
  out["threads"] = Json(cpu::num_threads());
  out["blas"] = Json(cpu::gemm_uses_blas());
  out["gemm_library"] = Json(cpu::gemm_library());
  out["isa"] = Json(cpu::isa_path());
  out["bf16_widened"] = Json(model.bf16_weights() && cpu::linear_bf16_widens());
  out["dtype"] = Json(model.bf16_weights() ? "bf16" : "fp32");
  out["weight_bytes"] = Json(model.weight_bytes());
  out["prefill"] = Json(std::move(prefill_rows));
  out["decode"] = Json(std::move(decode_rows));
  out["kv_bytes_per_token_f32"] = Json(kv_per_token);
  out["transformer_kv_bytes_per_token_f32"] = Json(transformer_kv_per_token);
  out["peak_rss_mb"] = Json(peak_rss_mb());
  // What one decode step must read from memory at least: every weight matrix once (the
  // embedding only one row when untied), whatever the batch (bench/README.md, decode at memory speed).
  // With --dtype bf16 the matrices, the embedding included, are held in bf16 only.
  // An MoE's step reads its chosen experts only: decode_active_weight_bytes per batch above.
  const int64_t embed_bytes =
      static_cast<int64_t>(model.config().vocab_size) * model.config().dim * (model.bf16_weights() ? 2 : 4);
  out["decode_weight_bytes_per_step"] = Json(model.weight_bytes() - (model.weights().tied ? 0 : embed_bytes));
  if (c.is_moe()) out["decode_non_expert_weight_bytes"] = Json(decode_base_bytes(model));
  if (f.boolean("json")) {
    std::cout << Json(std::move(out)).dump() << "\n";
    return 0;
  }
  std::printf("model %s  threads %d  blas %s\n", dir.c_str(), cpu::num_threads(), cpu::gemm_uses_blas() ? "yes" : "no");
  std::printf("%-10s %12s %14s%s\n", "prefill", "seconds", "tokens/s", f.boolean("score") ? "  score seconds" : "");
  for (const auto& r : out["prefill"].as_array()) {
    std::printf("%-10lld %12.3f %14.1f", static_cast<long long>(r.find("tokens")->as_int()),
                r.find("seconds")->as_double(), r.find("tokens_per_s")->as_double());
    if (const Json* sc = r.find("score_seconds")) std::printf("  %13.3f", sc->as_double());
    std::printf("\n");
  }
  std::printf("%-10s %12s %14s %12s%s\n", "decode B", "seconds", "tokens/s", "ms/step",
              c.is_moe() ? "  experts read  active MB (measured)  expert MB (formula)" : "");
  for (const auto& r : out["decode"].as_array()) {
    std::printf("%-10lld %12.3f %14.1f %12.2f", static_cast<long long>(r.find("batch")->as_int()),
                r.find("seconds")->as_double(), r.find("tokens_per_s")->as_double(),
                r.find("ms_per_step")->as_double());
    if (c.is_moe())
      std::printf("  %12lld  %20.1f  %19.1f", static_cast<long long>(r.find("moe_experts_read")->as_int()),
                  r.find("decode_active_weight_bytes")->as_double() / 1e6,
                  r.find("moe_expert_bytes_formula")->as_double() / 1e6);
    std::printf("\n");
  }
  std::printf("KV bytes/token (f32): %lld (a Transformer of the same size: %lld)  peak RSS %.0f MB\n",
              static_cast<long long>(kv_per_token), static_cast<long long>(transformer_kv_per_token), peak_rss_mb());
  return 0;
}
