// The serving engines behind one narrow interface (docs/architecture.md, rule 2), so the prefill and decode
// workers run on the CPU or a CUDA device by flag (`--device cpu|cuda`):
//   cpu   yoco::CpuEngine (model/cpu_engine.h) over the CPU Model; sequence states in host memory,
//         the global K/V rows contiguous or in the worker's host KvPool;
//   cuda  yoco::CudaEngine (model/cuda/cuda_engine.h); states and a paged K/V pool in device memory.
// make_engine picks one from EngineOptions::device.
// Workers hold sequences by handle. Host SequenceStates cross the edge in both directions: a
// fresh, cache-restored or shipped state goes in (adopt), K/V rows and the self-decoder state come
// out to be shipped or stored (read_rows, snapshot). So the transfer path and the KV store stay
// in host memory and the hand-off format does not change with the device.
//
// Not thread-safe: one caller thread (a worker's compute or batcher thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "model/config.h"
#include "model/kv_pool.h"
#include "model/model.h"
#include "model/state.h"

namespace yoco {

// The CUDA engine's sizes (model/cuda/cuda_engine.h).
struct CudaEngineOptions {
  int device = 0;
  int max_sequences = 64;      // device state slots (each holds every (loop, layer) state)
  int max_batch = 64;          // sequences per decode_step / logits call
  int max_chunk_tokens = 512;  // most tokens per prefill pass (activations are sized for it)
  int64_t max_context = 8192;  // longest sequence (sizes the block tables); ≤ max_seq_len applies too
  int kv_blocks = 1024;        // global K/V pool blocks
  int kv_block_size = 64;      // rows per block: a multiple of kKvChunkRows (32)
  int retention_chunk = 64;    // C of the chunkwise gRet prefill: 32 or 64
  // decode_step replays a CUDA graph per (batch size, attention length bucket): the first step
  // of a shape runs eagerly, the second captures, later ones replay. Results are bitwise those
  // of the eager path (the paged attention's empty splits contribute nothing).
  bool cuda_graphs = false;
};

struct EngineOptions {
  // −1: the CPU engine; N ≥ 0: CUDA device N (common/flags.h's parse_device_flag gives it).
  int device = -1;
  // CPU engine: the kernels' thread count, set on each thread that calls the engine (OpenMP's
  // count is a per-thread setting); 0 = one per physical core the process may use (hyperthreads
  // share a core's vector units, and decode is bound by memory: bench/README.md, threads).
  int threads = 0;
  // CUDA engine: its sizes (`cuda.device` is replaced by `device`).
  CudaEngineOptions cuda;
};

class Engine {
 public:
  using SeqId = int32_t;
  virtual ~Engine() = default;

  virtual const ModelConfig& config() const = 0;
  virtual std::string device() const = 0;  // "cpu", "cuda:0", ...

  // Takes a host state: a fresh Model::new_sequence(), one restored from the KV store, or one
  // shipped into the host KvPool the engine was made with (its pages then belong to the engine).
  // The CPU engine moves it out of `st`. A device engine copies it, gives the pages of a paged
  // state back to the pool (st.pages is cleared) and leaves the rest of `st` as it was (a caller
  // may keep contiguous rows as its host mirror). On an error `st` is unchanged;
  // RESOURCE_EXHAUSTED when sequence slots or K/V blocks run out.
  virtual Result<SeqId> adopt(SequenceState& st) = 0;
  // Frees the sequence and its K/V blocks. NOT_FOUND for an unknown id.
  virtual Status release(SeqId id) = 0;

  virtual int64_t position(SeqId id) const = 0;  // tokens consumed; −1 for an unknown id
  // Rows the sequence's K/V storage holds without growing (contiguous host rows: unbounded).
  virtual int64_t capacity(SeqId id) const = 0;
  // Grows the sequence's K/V storage to `rows` rows, all or nothing (RESOURCE_EXHAUSTED).
  virtual Status reserve(SeqId id, int64_t rows) = 0;

  // Self-decoder over more tokens (early exit), resumable; Model::prefill's contract.
  virtual Status prefill(SeqId id, std::span<const int32_t> tokens, const PrefillOptions& opt) = 0;
  // Next-token logits [B, vocab] into host `out`.
  virtual Status logits(std::span<const SeqId> ids, float* out) = 0;
  // Prefill with every row's logits (the full forward, docs/design.md §2.9): consumes `tokens`
  // as prefill does, resumable and interchangeable with it, and writes each consumed row's
  // next-token logits [tokens.size(), vocab] into host `out`; the caller bounds tokens.size().
  // What Score runs on the decode worker (docs/design.md §3.3).
  virtual Status forward(SeqId id, std::span<const int32_t> tokens, const PrefillOptions& opt, float* out) = 0;
  // One token per sequence; next-token logits [B, vocab] into host `out`.
  virtual Status decode_step(std::span<const SeqId> ids, std::span<const int32_t> tokens, float* out) = 0;

  // Copies K/V rows [first, first + n) into the caller's host buffers k and v, [n, kv_dim] each:
  // the one way rows leave an engine, whatever its device (callers never reach into its states).
  virtual Status read_rows(SeqId id, int64_t first, int64_t n, float* k, float* v) const = 0;
  // The state without K/V rows (position, self-decoder states, last_hidden): what
  // serialize_state needs with include_kv = false. `out` is replaced.
  virtual Status snapshot(SeqId id, SequenceState& out) const = 0;
  // A new sequence that continues from where `id` stands (n choices of one prompt share its
  // prefill, docs/design.md §3.4): the self-decoder state and last_hidden are copied; the K/V
  // rows of whole blocks below the position are shared by reference (never written again), the
  // last partial block is copied. Either sequence decodes afterwards exactly as a separately
  // prefilled one would, and releasing one never touches the other. Contiguous host rows are
  // copied. NOT_FOUND for an unknown id; RESOURCE_EXHAUSTED when slots or K/V blocks run out.
  virtual Result<SeqId> fork(SeqId id) = 0;
};

// `model` (and `pool`, when given) must outlive the engine. With a pool, fresh states get their
// K/V rows in pool blocks (reserve grows them); without one they stay contiguous (CPU) and
// shipped states arrive in no pool. A CUDA engine uploads the model's weights as bf16 (a
// tensor-parallel world-1 Model); its prefill takes PrefillOptions::chunk_tokens up to
// cuda.max_chunk_tokens (more is capped) and computes gRet in chunks of cuda.retention_chunk
// whatever the call asks. UNIMPLEMENTED for a CUDA device in a build without YOCO_CUDA; the
// device's own error (no device, out of memory) otherwise.
Result<std::unique_ptr<Engine>> make_engine(const Model& model, KvPool* pool, const EngineOptions& opt);

}  // namespace yoco
