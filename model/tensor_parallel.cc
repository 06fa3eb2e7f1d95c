#include "model/tensor_parallel.h"

#include <cstring>
#include <string>

namespace yoco {

namespace {

// Rows [r0, r0 + n) of a row-major matrix with `cols` columns.
std::vector<float> take_rows(const std::vector<float>& m, int64_t cols, int64_t r0, int64_t n) {
  return std::vector<float>(m.begin() + r0 * cols, m.begin() + (r0 + n) * cols);
}

// Columns [c0, c0 + n) of a row-major matrix with `cols` columns.
std::vector<float> take_cols(const std::vector<float>& m, int64_t cols, int64_t c0, int64_t n) {
  const int64_t rows = static_cast<int64_t>(m.size()) / cols;
  std::vector<float> out(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) std::memcpy(&out[r * n], &m[r * cols + c0], static_cast<size_t>(n) * 4);
  return out;
}

// Row blocks [p·block + offset, p·block + offset + n) of each of `parts` stacked matrices,
// stacked again: the shard of a fused projection keeps the fused layout.
std::vector<float> take_fused_rows(const std::vector<float>& m, int64_t cols, int parts, int64_t block, int64_t offset,
                                   int64_t n) {
  std::vector<float> out;
  out.reserve(static_cast<size_t>(parts * n * cols));
  for (int p = 0; p < parts; ++p) {
    const auto part = take_rows(m, cols, p * block + offset, n);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

Status divisible(const char* key, int value, int world, const char* why) {
  if (value % world == 0) return Status::Ok();
  return invalid_argument("tensor parallel: " + std::string(key) + " (" + std::to_string(value) +
                          ") is not divisible by the world size " + std::to_string(world) + " (" + why + ")");
}

}  // namespace

ShardDims shard_dims(const ModelConfig& c, int world) {
  ShardDims s;
  s.self_heads = c.n_self_heads / world;
  s.self_width = s.self_heads * c.self_head_dim();
  s.attn_heads = c.n_attn_heads / world;
  s.attn_kv_heads = c.n_attn_kv_heads / world;
  s.attn_width = s.attn_heads * c.cross_head_dim();
  s.kv_dim = s.attn_kv_heads * c.cross_head_dim();
  s.hidden = c.is_moe() ? 0 : c.hidden_dim / world;
  s.expert_hidden = c.expert_hidden_dim / world;
  s.shared_hidden = c.shared_expert_hidden_dim / world;
  return s;
}

Status validate_tensor_parallel(const ModelConfig& c, const TensorParallel& tp) {
  if (tp.world < 1) return invalid_argument("tensor parallel: world must be >= 1, got " + std::to_string(tp.world));
  if (tp.rank < 0 || tp.rank >= tp.world)
    return invalid_argument("tensor parallel: rank " + std::to_string(tp.rank) + " is outside [0, " +
                            std::to_string(tp.world) + ")");
  if (tp.world > 1 && !tp.comm) return invalid_argument("tensor parallel: comm is required when world > 1");
  if (tp.comm && (tp.comm->world_size() != tp.world || tp.comm->rank() != tp.rank))
    return invalid_argument("tensor parallel: comm is rank " + std::to_string(tp.comm->rank()) + " of " +
                            std::to_string(tp.comm->world_size()) + ", expected rank " + std::to_string(tp.rank) +
                            " of " + std::to_string(tp.world));
  if (c.arch != Arch::kYoco && tp.world > 1)
    return Status(StatusCode::kUnimplemented, "tensor parallel: only arch \"yoco\" can be sharded");
  YOCO_RETURN_IF_ERROR(divisible("n_self_heads", c.n_self_heads, tp.world, "self-decoder heads are split"));
  YOCO_RETURN_IF_ERROR(divisible("n_attn_heads", c.n_attn_heads, tp.world, "cross-decoder query heads are split"));
  YOCO_RETURN_IF_ERROR(
      divisible("n_attn_kv_heads", c.n_attn_kv_heads, tp.world, "each rank keeps whole KV heads of the global cache"));
  if (!c.is_moe()) return divisible("hidden_dim", c.hidden_dim, tp.world, "the FFN hidden units are split");
  YOCO_RETURN_IF_ERROR(
      divisible("expert_hidden_dim", c.expert_hidden_dim, tp.world, "each expert's hidden units are split"));
  return divisible("shared_expert_hidden_dim", c.shared_expert_hidden_dim, tp.world,
                   "the shared expert's hidden units are split");
}

void shard_weights(const ModelConfig& c, const TensorParallel& tp, ModelWeights& w) {
  if (tp.world == 1) return;
  const ShardDims s = shard_dims(c, tp.world);
  const int64_t D = c.dim, H = c.hidden_dim, KV = c.kv_dim(), r = tp.rank;
  auto split = [&](std::vector<float>& w13, std::vector<float>& w2, int64_t hidden, int64_t part) {
    w13 = take_fused_rows(w13, D, 2, hidden, r * part, part);  // fc1 rows then gate rows
    w2 = take_cols(w2, hidden, r * part, part);
  };
  auto ffn = [&](std::vector<float>& w13, std::vector<float>& w2, MoeWeights& moe) {
    if (!c.is_moe()) return split(w13, w2, H, s.hidden);
    for (ExpertWeights& e : moe.experts) split(e.w13, e.w2, c.expert_hidden_dim, s.expert_hidden);
    if (s.shared_hidden > 0) split(moe.shared.w13, moe.shared.w2, c.shared_expert_hidden_dim, s.shared_hidden);
  };
  for (SelfLayerWeights& l : w.self_layers) {
    l.wqkvg = take_fused_rows(l.wqkvg, D, c.is_swa() ? 3 : 4, D, r * s.self_width, s.self_width);
    if (!c.is_swa()) l.wgt = take_rows(l.wgt, D, r * s.self_heads, s.self_heads);
    l.wo = take_cols(l.wo, D, r * s.self_width, s.self_width);
    ffn(l.w13, l.w2, l.moe);
  }
  w.wkv = take_fused_rows(w.wkv, D, 2, KV, r * s.kv_dim, s.kv_dim);  // k rows then v rows
  for (CrossLayerWeights& l : w.cross_layers) {
    // Query heads [r·Ha/N, (r+1)·Ha/N) read exactly KV heads [r·KVh/N, (r+1)·KVh/N).
    l.wq = take_rows(l.wq, D, r * s.attn_width, s.attn_width);
    l.wo = take_cols(l.wo, D, r * s.attn_width, s.attn_width);
    ffn(l.w13, l.w2, l.moe);
  }
}

}  // namespace yoco
