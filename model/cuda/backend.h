// The CUDA backend of the layer program (model/program.h): its ops as kernels of kernels/cuda/ops.h
// on the engine's one stream, over the device weights, the sequences' slots and the workspace.
// Numerics (docs/design.md §2.5): every norm and activation that feeds a product rounds its output
// to bf16 once (the product's A operand); projections are bf16 × bf16 GEMMs with fp32 sums; the
// residual stream, the mixers' outputs, S, the window rings and the K/V rows stay fp32.
// Private to yoco_engine_cuda: includes CUDA headers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/ops.h"
#include "model/cuda/device.h"
#include "model/cuda/sizes.h"
#include "model/program.h"
#include "model/trace.h"

namespace yoco::cuda_engine {

struct Impl;
struct DeviceBlock;

// The activations and per-call metadata on the device, sized once for max_rows rows and reused by
// every call in stream order.
struct Workspace {
  // Per call: the rows' tokens and positions; per batch row: attended lengths, slots, which table
  // row a row's K/V goes through (the identity), the block tables, and per (loop, layer) the
  // state pointers (gRet S, or the SWA K rings then the V rings, max_batch of each).
  DeviceMem tokens, positions, lengths, slot_ids, row_tables, block_tables, state_ptrs;
  DeviceMem hidden;          // h [rows, dim] fp32: the residual stream
  DeviceMem normed;          // [rows, dim] bf16: a norm's output, the next product's input
  DeviceMem mixer_in;        // [rows, max(mixer_in_width, attn_width)] fp32: the mixer's input product
  DeviceMem mixer_out;       // [rows, max(dim, attn_width)] fp32
  DeviceMem mixer_out_bf16;  // the same rounded for out_proj
  DeviceMem ffn_up;          // [rows, 2·hidden] fp32: fc1|gate (an MoE's shared expert: its hidden)
  DeviceMem ffn_act;         // [rows, hidden] bf16
  // An MoE FFN's (docs/design.md §2.2; kernels/cuda/ops.h, moe.cu): router logits and probs [rows,
  // E]; the chosen experts (int32, and as floats for traces) and weights [rows, k]; the sort by
  // expert (offsets and tile offsets [E + 1], src and slot rows [rows·k]); the experts' fc1|gate
  // [rows·k, 2·expert_hidden] fp32, activation bf16 and fc2 [rows·k, dim] fp32, in sorted order.
  DeviceMem moe_logits, moe_probs, moe_experts, moe_experts_f, moe_weights;
  DeviceMem moe_offsets, moe_tile_offsets, moe_src_rows, moe_slot_rows;
  DeviceMem moe_up, moe_act, moe_y;
  DeviceMem global_kv;  // [rows, 2·kv_dim] fp32: K|V before they go into the pool
  DeviceMem logits;     // [logits_rows, vocab] fp32 (models with a head)

  // table_width: block-table entries per sequence (SequenceSlots::table_width).
  Status alloc(const EngineSizes& s, int max_batch, int table_width, bool head, cudaStream_t stream);
};

// One call's rows. The caller uploads the tokens, positions and (for a step) the batch's lengths,
// slots, block tables and state pointers to the workspace first.
struct DeviceRows {
  int count = 0;
  bool chunk = false;                       // consecutive positions pos0 .. of the sequence in `slot`
  int slot = 0;                             // chunk: the sequence's slot (its block table is table row 0)
  int64_t pos0 = 0;                         // chunk: the first row's position
  int64_t attention_rows = 0;               // step: the attention grid's bound on the attended lengths
  const int64_t* host_positions = nullptr;  // the positions on the host, for traces
};

class CudaBackend {
 public:
  // A [rows, width] view of device floats (or bf16 bit patterns) with row stride ld.
  struct Tensor {
    void* data = nullptr;
    int ld = 0, width = 0;
    bool bf16 = false;
    Tensor cols(int first, int count) const {
      return {static_cast<char*>(data) + static_cast<int64_t>(first) * (bf16 ? 2 : 4), ld, count, bf16};
    }
    float* f32() const { return static_cast<float*>(data); }
    uint16_t* b16() const { return static_cast<uint16_t*>(data); }
  };

  CudaBackend(const Impl& engine, const DeviceRows& rows);

  const ModelConfig& config() const;
  const program::Widths& widths() const;
  Status status() const { return status_; }
  Tensor hidden() const;

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

  // Tracing copies each named intermediate to the host (synchronously): never under graph capture.
  bool tracing() const { return sink_ != nullptr; }
  void trace(const std::string& name, const Tensor& t);

 private:
  // Records a kernel's failure; every op after the first one does nothing.
  bool ok(const cuda::Status& s);
  const DeviceBlock& block(const program::Site& at) const;
  // The state pointers of (loop, layer) `state_index` for the batch: gRet S or the SWA K rings,
  // then (SWA) the V rings.
  float* const* state_pointers(int state_index, int which) const;
  // o = attention of q's row b over keys 0..lengths[b]−1 of table row b, in the pool offset by
  // pool_offset floats (a transformer layer's view).
  Tensor paged_decode(const Tensor& q, int64_t pool_offset);
  int64_t layer_pool_offset(int layer) const;

  const Impl& m_;
  const DeviceRows rows_;
  const float eps_;
  const TraceSink* const sink_;
  Status status_;
  std::vector<float> trace_rows_;
  std::vector<uint16_t> trace_bf16_;
};

}  // namespace yoco::cuda_engine
