// Tensor parallelism (Megatron style) for the engine: which slice of each weight a rank keeps.
//
// Column-parallel (rows of the [out, in] matrix split, no communication): the self-decoder's
// q|k|v(|g) and gt projections by self-decoder heads, the global k|v projection by KV heads, the
// cross-decoder's q by the query heads of this rank's KV heads (GQA groups never straddle
// ranks), fc1|gate by hidden units (each shard keeps the fused fc1-then-gate layout); in an MoE
// every expert's fc1|gate (and the shared expert's) by its hidden units, the router replicated.
// Row-parallel (columns split, partial sums all-reduced): every out_proj and fc2 (experts' too). Norms,
// embedding and the output head are replicated, so every rank holds the same residual stream
// and computes the same full logits (no gather, any rank can sample).
//
// Each rank keeps only its KV heads of the global cache: per-rank KV memory is 1/world.
#pragma once

#include "common/status.h"
#include "model/communicator.h"
#include "model/config.h"
#include "model/weights.h"

namespace yoco {

struct TensorParallel {
  int rank = 0;
  int world = 1;
  Communicator* comm = nullptr;  // not owned; may stay null when world is 1
};

// The per-rank sizes the engine computes with; with world 1 they are the model's own.
struct ShardDims {
  int self_heads = 0;     // n_self_heads / world
  int self_width = 0;     // self_heads · self head dim
  int attn_heads = 0;     // n_attn_heads / world
  int attn_kv_heads = 0;  // n_attn_kv_heads / world
  int attn_width = 0;     // attn_heads · cross head dim
  int kv_dim = 0;         // attn_kv_heads · cross head dim: one global K (or V) row of this rank
  int hidden = 0;         // hidden_dim / world (0 in an MoE model: no dense FFN)
  int expert_hidden = 0;  // expert_hidden_dim / world: each routed expert's hidden units
  int shared_hidden = 0;  // shared_expert_hidden_dim / world
};

ShardDims shard_dims(const ModelConfig& c, int world);

// INVALID_ARGUMENT naming the field: world, rank, comm, or the config key (n_self_heads,
// n_attn_heads, n_attn_kv_heads, hidden_dim, expert_hidden_dim, shared_expert_hidden_dim) that world
// does not divide.
Status validate_tensor_parallel(const ModelConfig& c, const TensorParallel& tp);

// Keeps rank's slices of full-model weights (see above); world 1 leaves them untouched.
void shard_weights(const ModelConfig& c, const TensorParallel& tp, ModelWeights& w);

}  // namespace yoco
