// The YOCO engine on the CPU: prefill (self-decoder only, early exit), batched decode steps,
// next-token logits from a state, and the full forward used by Score.
//
// Invariant of a SequenceState after n tokens: K/V rows 0..n−1, self-decoder state for every
// (loop, layer), and last_hidden = the self-decoder output at n−1. `logits()` runs the
// cross-decoder for position n−1 from exactly that, so the state can be shipped between
// processes at any point and decoding goes on identically.
//
// The same class runs the Transformer baseline (arch "transformer", docs/design.md §2.6) with the same
// kernels and numerics: prefill runs every layer (there is no early exit) and stores each
// layer's K/V rows; last_hidden is the last layer's output at n−1, so logits() is the final
// norm and output head; decode_step runs every layer for one token per sequence. The state
// layout is in model/state.h. Not supported for a transformer (refused, naming the arch):
// tensor parallelism (world > 1) and serialize_state / deserialize_state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/state.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace yoco {

struct PrefillOptions {
  int chunk_tokens = 512;    // tokens per self-decoder pass: the prefill token budget
  int retention_chunk = 64;  // C of the chunkwise gated-retention form
};

class Model;
// The `--dtype` flag of the workers, yoco-cli and engine_bench: "fp32" (the default) or "bf16"
// (Model::use_bf16_weights), on the CPU engine only (device < 0: EngineOptions::device); the
// CUDA engine always computes in bf16 from the fp32 tensors. Errors name --dtype.
// With device < 0 it then logs the CPU engine's path (model/cpu_path.h).
Status apply_dtype_flag(Model& model, const std::string& dtype, int device);

// Tensor parallelism (model/tensor_parallel.h): a Model built with world N > 1 is one rank of
// N. It holds its slice of the weights, its states hold only its heads (and its KV heads of
// the global cache), and every call that computes (prefill, logits, decode_step, forward,
// score) is a collective: each rank makes the same calls in the same order with the same
// tokens, one call at a time. Every rank returns the same full logits. A call whose arguments
// some rank rejects fails on every rank (CANCELLED on the others) before anything is
// computed, and the group stays usable; a collective that fails (the group was aborted)
// leaves the states the call touched unusable.
class Model {
 public:
  static Result<std::unique_ptr<Model>> load(const std::string& dir, WeightSet set = WeightSet::kFull,
                                             const TensorParallel& tp = {});
  // Keeps tp.rank's slice of the loaded full-model weights.
  static Result<std::unique_ptr<Model>> create(LoadedWeights w, const TensorParallel& tp);
  explicit Model(LoadedWeights w);
  Model(const Model&) = delete;  // bf16_ is keyed by the addresses of w_'s vectors
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return cfg_; }
  // The fp32 tensors. After use_bf16_weights() its matrices are empty (their bf16 copies replace
  // them); only the norm vectors remain.
  const ModelWeights& weights() const { return w_; }
  // The bf16 compute path (docs/design.md, CPU compute precision): every matrix (projections,
  // embedding, output head) is rounded to bf16 and its fp32 copy freed, so resident weights halve;
  // products then run bf16 × bf16 with fp32 sums, and norms, softmax, retention state and
  // log-decays stay fp32. Call once, before any engine is made over the model; CPU engine only.
  // `inputs` says how a product takes x: kCpu splits it into two bf16 terms for gRet's
  // self-decoder (below, model_bf16.cc); kOneTerm rounds every x to one bf16 term, as the CUDA
  // engine does, so its tests compare it with a CPU engine of the same roundings (docs/design.md
  // §2.5).
  enum class Bf16Inputs { kCpu, kOneTerm };
  void use_bf16_weights(Bf16Inputs inputs = Bf16Inputs::kCpu);
  bool bf16_weights() const { return !bf16_.empty(); }
  // Bytes of resident weights (fp32 tensors plus bf16 matrices).
  int64_t weight_bytes() const;
  uint64_t fingerprint() const { return fingerprint_; }
  bool has_cross_decoder() const { return w_.set == WeightSet::kFull; }
  const TensorParallel& tensor_parallel() const { return tp_; }
  // This rank's sizes; kv_dim is one layer's K (or V) row of this rank's KV heads.
  const ShardDims& shard() const { return sd_; }
  // Width of one token's K (or V) row in this rank's states and KV pool (the kv_dim to create
  // a KvPool with): shard().kv_dim for YOCO, n_layers · kv_dim for a transformer.
  int kv_row_floats() const { return kv_row_; }

  SequenceState new_sequence() const { return make_sequence_state(cfg_, tp_.world); }

  // Every id in [0, vocab) and the sequence stays within max_seq_len; errors name `field`.
  Status validate_tokens(std::span<const int32_t> tokens, int64_t start_position, const char* field = "tokens") const;

  // Consumes `tokens` into the state, chunk by chunk; resumable (call again with more tokens).
  // Early exit: the cross-decoder does not run.
  Status prefill(SequenceState& st, std::span<const int32_t> tokens, const PrefillOptions& opt = {}) const;

  // Next-token logits [B, vocab] for each state (cross-decoder at position − 1).
  Status logits(std::span<SequenceState* const> states, float* out) const;

  // One token per sequence (sequences of any lengths): self-decoder step, one K/V row, then
  // the cross-decoder. Writes next-token logits [B, vocab].
  Status decode_step(std::span<SequenceState* const> states, std::span<const int32_t> tokens, float* out) const;

  // Prefill with the logits of every row (docs/design.md §2.9, the full forward): consumes
  // `tokens` into the state chunk by chunk as prefill does (same K/V rows, self-decoder state and
  // last_hidden, so it is resumable and mixes with prefill and decode steps), and also runs the
  // cross-decoder and head on each row: out [tokens.size(), vocab] gets each row's next-token
  // logits. The caller bounds tokens.size() (out holds tokens.size() · vocab floats).
  Status forward(SequenceState& st, std::span<const int32_t> tokens, float* out, const PrefillOptions& opt = {}) const;

  // Full forward over a fresh sequence, in chunks: sink(first position, rows, logits[rows, vocab]).
  using LogitsSink = std::function<void(int64_t pos0, int rows, const float* logits)>;
  Status forward(std::span<const int32_t> tokens, const LogitsSink& sink, const PrefillOptions& opt = {}) const;

  // log p(t[i+1] | t[0..i]) for i = 0..n−2.
  Result<std::vector<float>> score(std::span<const int32_t> tokens, const PrefillOptions& opt = {}) const;

 private:
  Model(LoadedWeights w, const TensorParallel& tp);
  // With world > 1: every rank learns whether any rank rejected its arguments, so that all
  // of them go on to the collectives or none does. Returns `local` unchanged with world 1.
  Status agree(const Status& local) const;
  // The CPU backend of the layer program (model/program.h) runs the ops on these weights.
  friend class CpuBackend;
  friend struct MoeCpu;  // the MoE FFN's products (model/moe_cpu.h)
  // h += x·Wᵀ for a row-parallel W [dim, k] (this rank's input columns), summed over ranks.
  Status add_row_parallel(const float* x, const std::vector<float>& w, float* h, int rows, int k) const;
  // Room for `rows` more K/V rows: contiguous states grow; paged states must already own
  // the blocks (RESOURCE_EXHAUSTED otherwise, before anything is consumed).
  Status make_room(SequenceState& st, int64_t rows) const;
  // y = x·Wᵀ (+ y) with W in fp32 or its bf16 copy (model_bf16.cc).
  void linear(const float* x, const std::vector<float>& w, float* y, int rows, int n, int k,
              bool accumulate = false) const;
  // h[i] = √dim · embedding row of ids[i].
  void embed_rows(const int32_t* ids, int n, float* h) const;

  ModelConfig cfg_;
  ModelWeights w_;
  uint64_t fingerprint_ = 0;
  TensorParallel tp_;
  ShardDims sd_;
  int kv_row_ = 0;
  // bf16 copies of w_'s matrices, keyed by the (emptied) fp32 vector they replace.
  std::unordered_map<const std::vector<float>*, std::vector<uint16_t>> bf16_;
  // Of those, the matrices whose products take x as two bf16 terms (cpu::linear_bf16's split_x).
  std::unordered_set<const std::vector<float>*> bf16_split_;
};

}  // namespace yoco
