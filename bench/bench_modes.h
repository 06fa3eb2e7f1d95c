// engine_bench's config overrides and its two single-measurement modes, used by bench/paper/
// (bench/paper/README.md). Each mode runs alone in its process, so the peak RSS it reports is its own.
#pragma once

#include <string>

#include "common/flags.h"
#include "common/json.h"
#include "common/status.h"
#include "model/config.h"
#include "model/model.h"

namespace yoco {

// The flags the functions below read (--preset, its overrides, both modes' flags), declared once;
// engine_bench's own table adds them.
FlagTable bench_mode_flags();

// --preset NAME with --transformer, --loops T, --nope applied (the weights are random anyway).
Result<ModelConfig> preset_config(const Flags& f);
// A name suffix telling the overridden configs apart ("" without overrides).
std::string config_suffix(const Flags& f);
// The config and its KV bytes per token (fp32, as the KV pool accounts them), for --describe.
Json describe_config(const std::string& preset, const ModelConfig& c);

// --memory-context N [--memory-prefill P (default N)] [--block-size 64]: a KV pool sized for N
// tokens, one sequence reserving N rows in it through the CPU engine, the first P tokens
// prefilled for real. Reports the pool's own accounting (blocks in use × block bytes), the
// self-decoder state, RSS after loading the model, and the peak RSS from there on (the load's
// own transient peak apart).
Result<Json> memory_mode(const Model& model, const Flags& f, const PrefillOptions& popt);

// --throughput-context N [--generate 128] [--memory-budget-mb 1024] [--max-batch 64]: the batch B
// is as large as the budget holds (B · (KV bytes of N + G tokens + state) ≤ budget, at most
// max-batch); one prompt is prefilled (timed; the CPU engine prefills one sequence at a time, so
// B prompts cost B times that), then B copies decode G tokens together. Throughput = B · G /
// (B · prefill + decode), generated tokens per second, as the paper counts it.
Result<Json> throughput_mode(const Model& model, const Flags& f, const PrefillOptions& popt);

double proc_peak_rss_mb();  // VmHWM
double proc_rss_mb();       // VmRSS
bool reset_peak_rss();      // VmHWM := VmRSS (false where /proc/self/clear_refs refuses)

}  // namespace yoco
