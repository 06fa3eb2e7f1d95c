#include "model/cuda/backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "handoff/kv_rows.h"
#include "model/cuda/engine_impl.h"

namespace yoco::cuda_engine {

static_assert(program::Backend<CudaBackend>, "the CUDA backend implements every op of the program");

using program::Matrix;
using program::Norm;
using program::Part;
using program::Site;

Status Workspace::alloc(const EngineSizes& s, int max_batch, int table_width, bool head, cudaStream_t stream) {
  const size_t rows = s.max_rows, B = max_batch;
  const size_t dim = s.widths.dim, attn_width = s.widths.attn_width,
               ffn_hidden = std::max(s.widths.hidden, s.widths.shared_hidden);
  YOCO_RETURN_IF_ERROR(tokens.alloc(rows * 4, "tokens", stream));
  YOCO_RETURN_IF_ERROR(positions.alloc(rows * 8, "positions", stream));
  YOCO_RETURN_IF_ERROR(lengths.alloc(B * 4, "lengths", stream));
  YOCO_RETURN_IF_ERROR(slot_ids.alloc(B * 4, "slot ids", stream));
  YOCO_RETURN_IF_ERROR(row_tables.alloc(B * 4, "row tables", stream));
  YOCO_RETURN_IF_ERROR(block_tables.alloc(B * table_width * 4, "block tables", stream));
  YOCO_RETURN_IF_ERROR(
      state_ptrs.alloc(static_cast<size_t>(s.states_per_sequence) * 2 * B * sizeof(float*), "state pointers", stream));
  const size_t in_width = std::max<size_t>(s.mixer_in_width, attn_width);
  const size_t out_width = std::max(dim, attn_width);
  YOCO_RETURN_IF_ERROR(hidden.alloc(rows * dim * 4, "h", stream));
  YOCO_RETURN_IF_ERROR(normed.alloc(rows * dim * 2, "normed x (bf16)", stream));
  YOCO_RETURN_IF_ERROR(mixer_out_bf16.alloc(rows * out_width * 2, "mixer out (bf16)", stream));
  YOCO_RETURN_IF_ERROR(ffn_act.alloc(rows * ffn_hidden * 2, "ffn act (bf16)", stream));
  YOCO_RETURN_IF_ERROR(mixer_in.alloc(rows * in_width * 4, "projections", stream));
  YOCO_RETURN_IF_ERROR(mixer_out.alloc(rows * out_width * 4, "mixer out", stream));
  YOCO_RETURN_IF_ERROR(ffn_up.alloc(rows * 2 * ffn_hidden * 4, "ffn fc1|gate", stream));
  YOCO_RETURN_IF_ERROR(global_kv.alloc(rows * 2 * s.widths.kv_dim * 4, "global k|v", stream));
  if (head)
    YOCO_RETURN_IF_ERROR(logits.alloc(static_cast<size_t>(s.logits_rows) * s.widths.vocab * 4, "logits", stream));
  if (s.widths.experts > 0) {
    const size_t E = s.widths.experts, k = s.widths.experts_per_token, he = s.widths.expert_hidden, A = rows * k;
    YOCO_RETURN_IF_ERROR(moe_logits.alloc(rows * E * 4, "moe router logits", stream));
    YOCO_RETURN_IF_ERROR(moe_probs.alloc(rows * E * 4, "moe router probs", stream));
    YOCO_RETURN_IF_ERROR(moe_experts.alloc(A * 4, "moe experts", stream));
    YOCO_RETURN_IF_ERROR(moe_experts_f.alloc(A * 4, "moe experts (float)", stream));
    YOCO_RETURN_IF_ERROR(moe_weights.alloc(A * 4, "moe weights", stream));
    YOCO_RETURN_IF_ERROR(moe_offsets.alloc((E + 1) * 4, "moe offsets", stream));
    YOCO_RETURN_IF_ERROR(moe_tile_offsets.alloc((E + 1) * 4, "moe tile offsets", stream));
    YOCO_RETURN_IF_ERROR(moe_src_rows.alloc(A * 4, "moe src rows", stream));
    YOCO_RETURN_IF_ERROR(moe_slot_rows.alloc(A * 4, "moe slot rows", stream));
    YOCO_RETURN_IF_ERROR(moe_up.alloc(A * 2 * he * 4, "moe experts fc1|gate", stream));
    YOCO_RETURN_IF_ERROR(moe_act.alloc(A * he * 2, "moe experts act (bf16)", stream));
    YOCO_RETURN_IF_ERROR(moe_y.alloc(A * dim * 4, "moe experts fc2", stream));
  }
  std::vector<int32_t> ident(B);
  for (size_t b = 0; b < B; ++b) ident[b] = static_cast<int32_t>(b);
  return copy_up(row_tables.as<int32_t>(), ident.data(), B * 4, "row tables", stream);
}

CudaBackend::CudaBackend(const Impl& engine, const DeviceRows& rows)
    : m_(engine), rows_(rows), eps_(static_cast<float>(engine.cfg.norm_eps)), sink_(TraceScope::current()) {}

const ModelConfig& CudaBackend::config() const { return m_.cfg; }

const program::Widths& CudaBackend::widths() const { return m_.sizes.widths; }

CudaBackend::Tensor CudaBackend::hidden() const {
  const int dim = m_.sizes.widths.dim;
  return {m_.ws.hidden.as<float>(), dim, dim, false};
}

bool CudaBackend::ok(const cuda::Status& s) {
  if (status_.ok() && !s.ok()) status_ = to_status(s);
  return status_.ok();
}

const DeviceBlock& CudaBackend::block(const Site& at) const {
  return at.part == Part::kCross ? m_.weights.cross_layers[at.layer] : m_.weights.self_layers[at.layer];
}

void CudaBackend::embed() {
  if (!status_.ok()) return;
  const int dim = m_.sizes.widths.dim;
  ok(cuda::embed(m_.weights.embed, cuda::DType::kBF16, dim, m_.ws.tokens.as<int32_t>(), rows_.count,
                 std::sqrt(static_cast<float>(dim)), m_.ws.hidden.as<float>(), m_.stream));
}

void CudaBackend::load_last_hidden() {
  if (!status_.ok()) return;
  const int dim = m_.sizes.widths.dim;
  ok(cuda::copy_rows(m_.slots.last_hidden_rows(), dim, m_.ws.slot_ids.as<int32_t>(), m_.ws.hidden.as<float>(), dim,
                     nullptr, rows_.count, dim, m_.stream));
}

void CudaBackend::keep_last_hidden() {
  if (!status_.ok()) return;
  const int dim = m_.sizes.widths.dim;
  if (rows_.chunk) {
    status_ = cuda_check(cudaMemcpyAsync(m_.slots.last_hidden(rows_.slot),
                                         m_.ws.hidden.as<float>() + static_cast<size_t>(rows_.count - 1) * dim,
                                         static_cast<size_t>(dim) * 4, cudaMemcpyDeviceToDevice, m_.stream),
                         "last_hidden");
    return;
  }
  ok(cuda::copy_rows(m_.ws.hidden.as<float>(), dim, nullptr, m_.slots.last_hidden_rows(), dim,
                     m_.ws.slot_ids.as<int32_t>(), rows_.count, dim, m_.stream));
}

CudaBackend::Tensor CudaBackend::norm(const Site& at, Norm which) {
  const int dim = m_.sizes.widths.dim;
  const Tensor x{m_.ws.normed.as<uint16_t>(), dim, dim, true};
  if (!status_.ok()) return x;
  const float* w = which == Norm::kMixer ? block(at).mixer_norm
                   : which == Norm::kFfn ? block(at).final_norm
                   : which == Norm::kKv  ? m_.weights.kv_norm
                                         : m_.weights.final_norm;
  ok(cuda::rmsnorm_to_bf16(m_.ws.hidden.as<float>(), w, x.b16(), rows_.count, dim, eps_, m_.stream));
  return x;
}

CudaBackend::Tensor CudaBackend::project(const Site& at, Matrix which, const Tensor& x) {
  const program::Widths& w = m_.sizes.widths;
  const uint16_t* m = nullptr;
  float* y = m_.ws.mixer_in.as<float>();
  int width = 0;
  switch (which) {
    case Matrix::kMixerIn:
      m = block(at).mixer_in;
      width = at.part == Part::kCross ? w.attn_width : m_.sizes.mixer_in_width;
      break;
    case Matrix::kFfnUp:
      m = block(at).ffn_up;
      y = m_.ws.ffn_up.as<float>();
      width = 2 * w.hidden;
      break;
    case Matrix::kKv:
      m = m_.weights.wkv;
      y = m_.ws.global_kv.as<float>();
      width = 2 * w.kv_dim;
      break;
    case Matrix::kSharedUp:
      m = block(at).shared_up;
      y = m_.ws.ffn_up.as<float>();
      width = 2 * w.shared_hidden;
      break;
    case Matrix::kRouter: {  // the router stays fp32 (kernels/cuda/ops.h, moe_router_logits)
      const Tensor logits{m_.ws.moe_logits.as<float>(), w.experts, w.experts, false};
      if (!status_.ok()) return logits;
      YOCO_CHECK(x.bf16 && x.ld == x.width);
      ok(cuda::moe_router_logits(x.b16(), block(at).router, rows_.count, x.width, w.experts, logits.f32(), m_.stream));
      return logits;
    }
    case Matrix::kOutput:
      m = m_.weights.output;
      y = m_.ws.logits.as<float>();
      width = w.vocab;
      break;
    case Matrix::kOut:
    case Matrix::kFfnDown:
    case Matrix::kSharedDown:
      YOCO_CHECK(false);  // added into h: add_projection
  }
  const Tensor out{y, width, width, false};
  if (!status_.ok()) return out;
  YOCO_CHECK(x.bf16 && x.ld == x.width);
  ok(cuda::gemm_bf16(x.b16(), m, y, cuda::DType::kF32, rows_.count, width, x.width, 1.f, 0.f, m_.stream));
  return out;
}

void CudaBackend::add_projection(const Site& at, Matrix which, const Tensor& x) {
  if (!status_.ok()) return;
  YOCO_CHECK(which == Matrix::kOut || which == Matrix::kFfnDown || which == Matrix::kSharedDown);
  Tensor in = x;
  if (!x.bf16) {  // a mixer's fp32 output: rounded once for the product
    in = {m_.ws.mixer_out_bf16.as<uint16_t>(), x.width, x.width, true};
    if (!ok(cuda::convert_to_bf16(x.f32(), x.ld, in.b16(), in.ld, rows_.count, x.width, m_.stream))) return;
  }
  YOCO_CHECK(in.ld == in.width);
  const uint16_t* m = which == Matrix::kOut       ? block(at).out
                      : which == Matrix::kFfnDown ? block(at).ffn_down
                                                  : block(at).shared_down;
  ok(cuda::gemm_bf16(in.b16(), m, m_.ws.hidden.as<float>(), cuda::DType::kF32, rows_.count, m_.sizes.widths.dim,
                     in.width, 1.f, 1.f, m_.stream));
}

void CudaBackend::rope(const Tensor& x, int heads, int head_dim) {
  if (!status_.ok()) return;
  ok(cuda::rope_interleaved(x.f32(), x.ld, rows_.count, heads, head_dim, m_.ws.positions.as<int64_t>(),
                            m_.cfg.rope_theta, m_.stream));
}

// The gate rows ride along in the mixer's product (EngineSizes::mixer_in_width).
CudaBackend::Tensor CudaBackend::gate_logits(const Site&, const Tensor&, const Tensor& proj) {
  return proj.cols(m_.sizes.self_qkv_width, m_.sizes.widths.self_heads);
}

float* const* CudaBackend::state_pointers(int state_index, int which) const {
  return m_.ws.state_ptrs.as<float*>() + (static_cast<size_t>(state_index) * 2 + which) * m_.opt.max_batch;
}

CudaBackend::Tensor CudaBackend::retention(const Site& at, const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& gate) {
  const program::Widths& w = m_.sizes.widths;
  const Tensor o{m_.ws.mixer_out.as<float>(), w.self_width, w.self_width, false};
  if (!status_.ok()) return o;
  const float k_scale = 1.0f / std::sqrt(static_cast<float>(w.self_head_dim));
  const float normalizer = static_cast<float>(m_.cfg.gate_logit_normalizer);
  if (rows_.chunk) {
    cuda::RetentionPrefillArgs a;
    a.q = q.f32();
    a.ldq = q.ld;
    a.k = k.f32();
    a.ldk = k.ld;
    a.v = v.f32();
    a.ldv = v.ld;
    a.gt = gate.f32();
    a.ldg = gate.ld;
    a.state = m_.slots.state(rows_.slot, at.state);
    a.out = o.f32();
    a.ldo = o.ld;
    a.n = rows_.count;
    a.n_heads = w.self_heads;
    a.head_dim = w.self_head_dim;
    a.chunk = m_.opt.retention_chunk;
    a.k_scale = k_scale;
    a.gate_logit_normalizer = normalizer;
    ok(cuda::retention_prefill(a, m_.stream));
    return o;
  }
  cuda::RetentionStepArgs a;
  a.q = q.f32();
  a.ldq = q.ld;
  a.k = k.f32();
  a.ldk = k.ld;
  a.v = v.f32();
  a.ldv = v.ld;
  a.gt = gate.f32();
  a.ldg = gate.ld;
  a.states = state_pointers(at.state, 0);
  a.out = o.f32();
  a.ldo = o.ld;
  a.batch = rows_.count;
  a.n_heads = w.self_heads;
  a.head_dim = w.self_head_dim;
  a.k_scale = k_scale;
  a.gate_logit_normalizer = normalizer;
  ok(cuda::retention_decode_step(a, m_.stream));
  return o;
}

void CudaBackend::head_norm(const Tensor& o, int heads, int head_dim) {
  if (!status_.ok()) return;
  YOCO_CHECK(o.ld == heads * head_dim);
  ok(cuda::rmsnorm(o.f32(), nullptr, o.f32(), rows_.count * heads, head_dim, eps_, m_.stream));
}

CudaBackend::Tensor CudaBackend::silu_gate(const Tensor& g, const Tensor& o) {
  const Tensor out{m_.ws.mixer_out_bf16.as<uint16_t>(), o.width, o.width, true};
  if (!status_.ok()) return out;
  ok(cuda::silu_mul_to_bf16(g.f32(), g.ld, o.f32(), o.ld, out.b16(), out.ld, rows_.count, o.width, m_.stream));
  return out;
}

CudaBackend::Tensor CudaBackend::window_attention(const Site& at, const Tensor& q, const Tensor& k, const Tensor& v) {
  const program::Widths& w = m_.sizes.widths;
  const Tensor o{m_.ws.mixer_out.as<float>(), w.self_width, w.self_width, false};
  if (!status_.ok()) return o;
  const int window = m_.cfg.sliding_window;
  const float scale = 1.0f / std::sqrt(static_cast<float>(w.self_head_dim));
  if (rows_.chunk) {
    float* rings = m_.slots.state(rows_.slot, at.state);
    cuda::SwaPrefillArgs a;
    a.q = q.f32();
    a.ldq = q.ld;
    a.k = k.f32();
    a.ldk = k.ld;
    a.v = v.f32();
    a.ldv = v.ld;
    a.k_ring = rings;
    a.v_ring = rings + static_cast<int64_t>(window) * w.dim;
    a.out = o.f32();
    a.ldo = o.ld;
    a.n = rows_.count;
    a.n_q_heads = w.self_heads;
    a.n_kv_heads = w.self_heads;
    a.head_dim = w.self_head_dim;
    a.window = window;
    a.pos0 = rows_.pos0;
    a.scale = scale;
    ok(cuda::swa_prefill(a, m_.stream));
    return o;
  }
  cuda::SwaDecodeArgs a;
  a.q = q.f32();
  a.ldq = q.ld;
  a.k = k.f32();
  a.ldk = k.ld;
  a.v = v.f32();
  a.ldv = v.ld;
  a.k_rings = state_pointers(at.state, 0);
  a.v_rings = state_pointers(at.state, 1);
  a.positions = m_.ws.positions.as<int64_t>();
  a.out = o.f32();
  a.ldo = o.ld;
  a.batch = rows_.count;
  a.n_q_heads = w.self_heads;
  a.n_kv_heads = w.self_heads;
  a.head_dim = w.self_head_dim;
  a.window = window;
  a.scale = scale;
  ok(cuda::swa_decode(a, m_.stream));
  return o;
}

// A transformer layer's view of the pool (SequenceSlots::table_width).
int64_t CudaBackend::layer_pool_offset(int layer) const {
  return static_cast<int64_t>(layer) * kKvChunkRows * m_.sizes.widths.kv_dim;
}

void CudaBackend::write_kv(const Site& at, const Tensor& k, const Tensor& v) {
  if (!status_.ok()) return;
  const int64_t offset = at.part == Part::kLayer ? layer_pool_offset(at.layer) : 0;
  YOCO_CHECK(k.ld == v.ld);
  cuda::KvAppendArgs a;
  a.k = k.f32();
  a.ldk = k.ld;
  a.v = v.f32();
  a.ldv = v.ld;
  a.k_pool = m_.slots.k_pool() + offset;
  a.v_pool = m_.slots.v_pool() + offset;
  a.block_tables = m_.ws.block_tables.as<int32_t>();
  a.max_blocks = m_.slots.table_width();
  // A chunk's rows all go through table row 0; a step's row b through table row b.
  a.row_tables = rows_.chunk ? nullptr : m_.ws.row_tables.as<int32_t>();
  a.positions = m_.ws.positions.as<int64_t>();
  a.rows = rows_.count;
  a.kv_dim = m_.sizes.widths.kv_dim;
  a.block_size = m_.slots.table_block();
  a.n_blocks = m_.slots.table_ids();
  ok(cuda::kv_append_paged(a, m_.stream));
}

CudaBackend::Tensor CudaBackend::paged_decode(const Tensor& q, int64_t pool_offset) {
  const program::Widths& w = m_.sizes.widths;
  const Tensor o{m_.ws.mixer_out.as<float>(), w.attn_width, w.attn_width, false};
  cuda::PagedDecodeArgs a;
  a.q = q.f32();
  a.ldq = q.ld;
  a.out = o.f32();
  a.ldo = o.ld;
  a.k_pool = m_.slots.k_pool() + pool_offset;
  a.v_pool = m_.slots.v_pool() + pool_offset;
  a.block_tables = m_.ws.block_tables.as<int32_t>();
  a.max_blocks = m_.slots.table_width();
  a.lengths = m_.ws.lengths.as<int32_t>();
  a.max_length = rows_.attention_rows;
  a.batch = rows_.count;
  a.n_q_heads = w.attn_heads;
  a.n_kv_heads = w.kv_heads;
  a.head_dim = w.attn_head_dim;
  a.block_size = m_.slots.table_block();
  a.scale = 1.0f / std::sqrt(static_cast<float>(w.attn_head_dim));
  ok(cuda::decode_attention_paged(a, m_.stream));
  return o;
}

CudaBackend::Tensor CudaBackend::attention(const Site& at, const Tensor& q) {
  const program::Widths& w = m_.sizes.widths;
  const Tensor o{m_.ws.mixer_out.as<float>(), w.attn_width, w.attn_width, false};
  if (!status_.ok()) return o;
  const bool own = at.part == Part::kLayer;
  const int64_t offset = own ? layer_pool_offset(at.layer) : 0;
  if (!rows_.chunk) return paged_decode(q, offset);
  // A chunk: a transformer layer over its own rows, or the cross-decoder of a forward (Score) over
  // the global K/V rows the chunk has just written; both causal over the sequence's pool rows.
  cuda::CausalPrefillArgs a;
  a.q = q.f32();
  a.ldq = q.ld;
  a.out = o.f32();
  a.ldo = o.ld;
  a.k_pool = m_.slots.k_pool() + offset;
  a.v_pool = m_.slots.v_pool() + offset;
  a.block_table = m_.ws.block_tables.as<int32_t>();
  a.max_blocks = m_.slots.table_width();
  a.block_size = m_.slots.table_block();
  a.n = rows_.count;
  a.n_q_heads = w.attn_heads;
  a.n_kv_heads = w.kv_heads;
  a.head_dim = w.attn_head_dim;
  a.pos0 = rows_.pos0;
  a.scale = 1.0f / std::sqrt(static_cast<float>(w.attn_head_dim));
  ok(cuda::causal_attention_prefill(a, m_.stream));
  return o;
}

// docs/design.md §2.2: fc1 (the first hidden columns) is the activated branch.
CudaBackend::Tensor CudaBackend::swiglu(const Tensor& u) {
  const int hidden = u.width / 2;
  const Tensor act{m_.ws.ffn_act.as<uint16_t>(), hidden, hidden, true};
  if (!status_.ok()) return act;
  ok(cuda::silu_mul_to_bf16(u.f32(), u.ld, u.f32() + hidden, u.ld, act.b16(), act.ld, rows_.count, hidden, m_.stream));
  return act;
}

program::Routing<CudaBackend::Tensor> CudaBackend::route(const Site&, const Tensor& logits) {
  const program::Widths& w = m_.sizes.widths;
  const int E = w.experts, k = w.experts_per_token;
  const program::Routing<Tensor> r{{m_.ws.moe_probs.as<float>(), E, E, false},
                                   {m_.ws.moe_experts_f.as<float>(), k, k, false},
                                   {m_.ws.moe_weights.as<float>(), k, k, false}};
  if (!status_.ok()) return r;
  cuda::MoeRouteArgs a;
  a.logits = logits.f32();
  a.rows = rows_.count;
  a.n_experts = E;
  a.k = k;
  a.norm_topk = m_.cfg.moe_norm_topk_prob;
  a.probs = r.probs.f32();
  a.experts = m_.ws.moe_experts.as<int32_t>();
  a.experts_f = r.experts.f32();
  a.weights = r.weights.f32();
  ok(cuda::moe_route(a, m_.stream));
  return r;
}

// The rows sorted by expert, every expert's fc1|gate in one launch (gathering its rows of x),
// SwiGLU, every expert's fc2 in one launch, then h += the weighted rows back in token order.
void CudaBackend::add_experts(const Site& at, const Tensor& x, const program::Routing<Tensor>&) {
  if (!status_.ok()) return;
  YOCO_CHECK(x.bf16 && x.ld == x.width);
  const program::Widths& w = m_.sizes.widths;
  const int rows = rows_.count, E = w.experts, k = w.experts_per_token, he = w.expert_hidden, dim = w.dim;
  const DeviceBlock& b = block(at);
  cuda::MoePermuteArgs p;
  p.experts = m_.ws.moe_experts.as<int32_t>();
  p.rows = rows;
  p.k = k;
  p.n_experts = E;
  p.offsets = m_.ws.moe_offsets.as<int32_t>();
  p.tile_offsets = m_.ws.moe_tile_offsets.as<int32_t>();
  p.src_rows = m_.ws.moe_src_rows.as<int32_t>();
  p.slot_rows = m_.ws.moe_slot_rows.as<int32_t>();
  if (!ok(cuda::moe_permute(p, m_.stream))) return;
  cuda::MoeGemmArgs g;
  g.a = x.b16();
  g.a_rows = p.src_rows;
  g.w = b.experts_up;
  g.w_stride = 2 * static_cast<int64_t>(he) * dim;
  g.c = m_.ws.moe_up.as<float>();
  g.offsets = p.offsets;
  g.tile_offsets = p.tile_offsets;
  g.n_experts = E;
  g.total_rows = rows * k;
  g.n = 2 * he;
  g.k = dim;
  if (!ok(cuda::moe_grouped_gemm(g, m_.stream))) return;
  uint16_t* act = m_.ws.moe_act.as<uint16_t>();
  if (!ok(cuda::silu_mul_to_bf16(g.c, 2 * he, g.c + he, 2 * he, act, he, rows * k, he, m_.stream))) return;
  g.a = act;
  g.a_rows = nullptr;
  g.w = b.experts_down;
  g.w_stride = static_cast<int64_t>(dim) * he;
  g.c = m_.ws.moe_y.as<float>();
  g.n = dim;
  g.k = he;
  if (!ok(cuda::moe_grouped_gemm(g, m_.stream))) return;
  ok(cuda::moe_combine(g.c, p.slot_rows, m_.ws.moe_weights.as<float>(), rows, k, dim, m_.ws.hidden.as<float>(),
                       m_.stream));
}

void CudaBackend::trace(const std::string& name, const Tensor& t) {
  if (!status_.ok()) return;
  const int n = rows_.count;
  const size_t elem = t.bf16 ? 2 : 4, values = static_cast<size_t>(n) * t.width;
  trace_rows_.resize(values);
  trace_bf16_.resize(t.bf16 ? values : 0);
  void* dst = t.bf16 ? static_cast<void*>(trace_bf16_.data()) : static_cast<void*>(trace_rows_.data());
  status_ = cuda_check(
      cudaMemcpy2DAsync(dst, t.width * elem, t.data, t.ld * elem, t.width * elem, n, cudaMemcpyDeviceToHost, m_.stream),
      "trace");
  if (status_.ok()) status_ = cuda_check(cudaStreamSynchronize(m_.stream), "trace");
  if (!status_.ok()) return;
  for (size_t i = 0; i < trace_bf16_.size(); ++i) trace_rows_[i] = bf16_to_f32(trace_bf16_[i]);
  (*sink_)(TraceRows{name, n, t.width, trace_rows_.data(), rows_.host_positions});
}

}  // namespace yoco::cuda_engine
