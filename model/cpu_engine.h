// The CPU engine: yoco::Model (model/model.h) behind the Engine interface, with a table of host
// sequence states (K/V rows contiguous, or in the worker's host KvPool when it has one).
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "model/engine.h"

namespace yoco {

class CpuEngine final : public Engine {
 public:
  // `model` (and `pool`, when given) must outlive the engine. threads: the kernels' thread count,
  // set on each thread that calls the engine (EngineOptions::threads); 0 = cpu::default_threads().
  CpuEngine(const Model& model, KvPool* pool = nullptr, int threads = 0);
  ~CpuEngine() override;

  const ModelConfig& config() const override { return model_.config(); }
  std::string device() const override { return "cpu"; }

  Result<SeqId> adopt(SequenceState& st) override;
  Status release(SeqId id) override;

  int64_t position(SeqId id) const override;
  int64_t capacity(SeqId id) const override;
  Status reserve(SeqId id, int64_t rows) override;

  Status prefill(SeqId id, std::span<const int32_t> tokens, const PrefillOptions& opt) override;
  Status forward(SeqId id, std::span<const int32_t> tokens, const PrefillOptions& opt, float* out) override;
  Status logits(std::span<const SeqId> ids, float* out) override;
  Status decode_step(std::span<const SeqId> ids, std::span<const int32_t> tokens, float* out) override;

  // Copies rows out of the sequence's host state.
  Status read_rows(SeqId id, int64_t first, int64_t n, float* k, float* v) const override;
  Status snapshot(SeqId id, SequenceState& out) const override;
  Result<SeqId> fork(SeqId id) override;

 private:
  SequenceState* find(SeqId id) const;
  Status gather(std::span<const SeqId> ids, std::vector<SequenceState*>& states) const;
  // Sets the kernels' thread count on a thread that computes through the engine for the first time.
  void bind_threads();

  const Model& model_;
  KvPool* const pool_;
  const int threads_;
  std::thread::id bound_thread_;
  std::vector<std::unique_ptr<SequenceState>> slots_;
  std::vector<SeqId> free_;
};

}  // namespace yoco
