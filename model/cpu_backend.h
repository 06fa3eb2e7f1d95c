// The CPU backend of the layer program (model/program.h): the ops on kernels/cpu in fp32 (or the
// bf16 products of model_bf16.cc) over host SequenceStates, for one call of the CPU Model. It owns
// the call's activations; the per-thread FFN scratch outlives calls (see ffn_scratch in the .cc).
// Private to model/: model.cc binds each chunk or step and runs the program on it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/program.h"
#include "model/trace.h"

namespace yoco {

class CpuBackend {
 public:
  // A [rows, width] view of host floats with row stride ld.
  struct Tensor {
    float* data = nullptr;
    int ld = 0, width = 0;
    Tensor cols(int first, int count) const { return {data + first, ld, count}; }
  };

  // One run of the program: `count` rows, row r at positions[r]. chunk: the rows are consecutive
  // positions of states[0] (prefill, full forward); otherwise row r is states[r]'s one token.
  struct Rows {
    int count = 0;
    const int64_t* positions = nullptr;
    std::span<SequenceState* const> states;
    bool chunk = false;
    const int32_t* tokens = nullptr;  // the rows' token ids (when the pass embeds them)
    float* logits = nullptr;          // [count, vocab], written by the head
  };

  // retention_chunk: C of the chunkwise gated-retention form (PrefillOptions::retention_chunk).
  CpuBackend(const Model& model, int retention_chunk);

  // Sizes the activations for `rows` (reused from one bind to the next).
  void bind(const Rows& rows);

  const ModelConfig& config() const { return model_.cfg_; }
  const program::Widths& widths() const { return widths_; }
  Status status() const { return status_; }
  Tensor hidden() { return {h_.data(), widths_.dim, widths_.dim}; }

  void embed();
  void load_last_hidden();
  void keep_last_hidden();
  Tensor norm(const program::Site& at, program::Norm which);
  Tensor project(const program::Site& at, program::Matrix which, const Tensor& x);
  void add_projection(const program::Site& at, program::Matrix which, const Tensor& x);
  void rope(const Tensor& x, int heads, int head_dim);
  Tensor gate_logits(const program::Site& at, const Tensor& x, const Tensor& proj);
  Tensor retention(const program::Site& at, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& gate);
  void head_norm(const Tensor& o, int heads, int head_dim);
  Tensor silu_gate(const Tensor& g, const Tensor& o);
  Tensor window_attention(const program::Site& at, const Tensor& q, const Tensor& k, const Tensor& v);
  void write_kv(const program::Site& at, const Tensor& k, const Tensor& v);
  Tensor attention(const program::Site& at, const Tensor& q);
  Tensor swiglu(const Tensor& u);
  program::Routing<Tensor> route(const program::Site& at, const Tensor& logits);
  void add_experts(const program::Site& at, const Tensor& x, const program::Routing<Tensor>& r);

  bool tracing() const { return sink_ != nullptr; }
  void trace(const std::string& name, const Tensor& t);

 private:
  // cos/sin of the rows' positions for one head dim (the self-decoder's and the attention's).
  struct RopeTable {
    int head_dim = -1;
    std::vector<float> cos, sin;
  };
  const RopeTable& rope_table(int head_dim);
  SequenceState& sequence(int row) const { return *rows_.states[rows_.chunk ? 0 : row]; }
  // The norms and matrices of the block at a site, whichever decoder it belongs to.
  struct Block {
    const std::vector<float>*mixer_norm, *final_norm, *mixer_in, *gate, *out, *ffn_up, *ffn_down;
    const MoeWeights* moe;
  };
  Block block(const program::Site& at) const;
  Tensor output(std::vector<float>& buf, int width);

  const Model& model_;
  const program::Widths widths_;
  const int retention_chunk_;
  const float eps_;
  const TraceSink* const sink_;
  Status status_;
  Rows rows_;
  int64_t attended_rows_ = 0;  // Σ (position + 1) over the rows: what a step's attention reads
  std::vector<float> h_, x_, proj_, o_, gate_, decay_, k_all_, v_all_;
  // A paged sequence's global K/V rows 0..last as one run, for the cross-decoder over a chunk
  // (a forward's slice): gathered once per bound chunk, read by every cross layer.
  std::vector<float> global_k_, global_v_;
  int64_t global_rows_ = 0;
  std::vector<float> router_, probs_, chosen_, expert_weights_, moe_out_;  // an MoE FFN's
  std::vector<int32_t> expert_ids_;
  float *ffn_u_ = nullptr, *ffn_act_ = nullptr;  // in ffn_scratch, after norm(kFfn)
  RopeTable ropes_[2];
  std::vector<float> trace_rows_;
};

}  // namespace yoco
