#include "model/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/ops.h"
#include "model/moe_cpu.h"

namespace yoco {

static_assert(program::Backend<CpuBackend>, "the CPU backend implements every op of the program");

using program::Matrix;
using program::Norm;
using program::Part;
using program::Site;

namespace {

float logsigmoid(float x) { return std::min(x, 0.0f) - std::log1p(std::exp(-std::fabs(x))); }

// A parallel region costs a thread wake-up (microseconds, far more when the cores are
// shared); a decode step of one sequence is dozens of small products, so only work of about
// 2^18 multiply-adds and up is split across threads.
bool worth_threads(int64_t multiply_adds) { return multiply_adds > (1 << 18); }

// fn(i) for i < n, split across the threads when `parallel`, else on this thread. Not an OpenMP
// `if` clause: a region made inactive by one still counts as a nesting level, and libgomp starts
// fresh threads (not its pool's) for a region nested in one, so a kernel's own parallel region
// inside would create a thread per call: a one-sequence decode step did so once per layer
// (bench/README.md, "decode attention").
template <typename Fn>
void rows_in_parallel(int n, bool parallel, Fn&& fn) {
  if (!parallel || n <= 1) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
#pragma omp parallel for schedule(dynamic)
  for (int i = 0; i < n; ++i) fn(i);
}

// The FFN's normed input, fc1|gate product and activation: every layer of a prefill chunk needs
// these (tens of MB at 2K rows), so they stay on the calling thread from call to call instead of
// being allocated per layer, which would zero and fault in fresh pages on one thread while the
// others wait (bench/README.md, attention off OpenBLAS).
std::vector<float>& ffn_scratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}

}  // namespace

CpuBackend::CpuBackend(const Model& model, int retention_chunk)
    : model_(model),
      widths_(program::widths(model.cfg_, model.sd_)),
      retention_chunk_(retention_chunk),
      eps_(static_cast<float>(model.cfg_.norm_eps)),
      sink_(TraceScope::current()) {}

void CpuBackend::bind(const Rows& rows) {
  rows_ = rows;
  const program::Widths& w = widths_;
  const size_t n = rows.count;
  const int self_proj = (config().is_swa() ? 3 : 4) * w.self_width;
  const int proj_width = std::max({self_proj, w.attn_width + 2 * w.kv_dim, 2 * w.kv_dim});
  h_.resize(n * w.dim);
  x_.resize(n * w.dim);
  proj_.resize(n * proj_width);
  o_.resize(n * std::max(w.self_width, w.attn_width));
  attended_rows_ = 0;
  global_rows_ = 0;
  for (int r = 0; r < rows.count; ++r) attended_rows_ += rows.positions[r] + 1;
  for (RopeTable& t : ropes_) t.head_dim = -1;
}

CpuBackend::Block CpuBackend::block(const Site& at) const {
  const ModelWeights& w = model_.w_;
  if (at.part == Part::kCross) {
    const CrossLayerWeights& L = w.cross_layers[at.layer];
    return {&L.mixer_norm, &L.final_norm, &L.wq, nullptr, &L.wo, &L.w13, &L.w2, &L.moe};
  }
  const SelfLayerWeights& L = w.self_layers[at.layer];  // a transformer's layers too
  return {&L.mixer_norm, &L.final_norm, &L.wqkvg, &L.wgt, &L.wo, &L.w13, &L.w2, &L.moe};
}

CpuBackend::Tensor CpuBackend::output(std::vector<float>& buf, int width) {
  buf.resize(static_cast<size_t>(rows_.count) * width);
  return {buf.data(), width, width};
}

void CpuBackend::embed() { model_.embed_rows(rows_.tokens, rows_.count, h_.data()); }

void CpuBackend::load_last_hidden() {
  const int D = widths_.dim;
  for (int b = 0; b < rows_.count; ++b)
    std::memcpy(h_.data() + static_cast<size_t>(b) * D, rows_.states[b]->last_hidden.data(), D * 4);
}

void CpuBackend::keep_last_hidden() {
  const int D = widths_.dim;
  if (rows_.chunk) {
    const float* last = h_.data() + static_cast<size_t>(rows_.count - 1) * D;
    rows_.states[0]->last_hidden.assign(last, last + D);
    return;
  }
  for (int b = 0; b < rows_.count; ++b) {
    const float* row = h_.data() + static_cast<size_t>(b) * D;
    rows_.states[b]->last_hidden.assign(row, row + D);
  }
}

CpuBackend::Tensor CpuBackend::norm(const Site& at, Norm which) {
  const ModelWeights& w = model_.w_;
  const int D = widths_.dim, n = rows_.count;
  const std::vector<float>* weight = nullptr;
  float* x = x_.data();
  switch (which) {
    case Norm::kMixer:
      weight = block(at).mixer_norm;
      break;
    case Norm::kFfn: {
      weight = block(at).final_norm;
      std::vector<float>& scratch = ffn_scratch();
      // fc1|gate of the dense FFN or of an MoE's shared expert.
      const size_t nx = static_cast<size_t>(n) * D,
                   nu = static_cast<size_t>(n) * 2 * std::max(widths_.hidden, widths_.shared_hidden);
      if (scratch.size() < nx + nu + nu / 2) scratch.resize(nx + nu + nu / 2);
      x = scratch.data();
      ffn_u_ = x + nx;
      ffn_act_ = ffn_u_ + nu;
      break;
    }
    case Norm::kKv:
      weight = &w.kv_norm;
      break;
    case Norm::kFinal:
      weight = &w.final_norm;
      break;
  }
  cpu::rmsnorm(h_.data(), D, weight->data(), x, D, n, D, eps_);
  return {x, D, D};
}

CpuBackend::Tensor CpuBackend::project(const Site& at, Matrix which, const Tensor& x) {
  const ModelWeights& w = model_.w_;
  const program::Widths& wd = widths_;
  YOCO_CHECK(x.ld == x.width);
  const std::vector<float>* m = nullptr;
  float* y = proj_.data();
  int width = 0;
  switch (which) {
    case Matrix::kMixerIn:
      m = block(at).mixer_in;
      width = at.part == Part::kCross   ? wd.attn_width
              : at.part == Part::kLayer ? wd.attn_width + 2 * wd.kv_dim
                                        : (config().is_swa() ? 3 : 4) * wd.self_width;
      break;
    case Matrix::kFfnUp:
      m = block(at).ffn_up;
      y = ffn_u_;
      width = 2 * wd.hidden;
      break;
    case Matrix::kSharedUp:
      m = &block(at).moe->shared.w13;
      y = ffn_u_;
      width = 2 * wd.shared_hidden;
      break;
    case Matrix::kRouter: {
      const Tensor logits = output(router_, wd.experts);
      model_.linear(x.data, block(at).moe->router, logits.data, rows_.count, wd.experts, x.width);
      return logits;
    }
    case Matrix::kKv:
      m = &w.wkv;
      width = 2 * wd.kv_dim;
      break;
    case Matrix::kOutput:
      m = w.tied ? &w.embed : &w.output;
      y = rows_.logits;
      width = wd.vocab;
      break;
    case Matrix::kOut:
    case Matrix::kFfnDown:
    case Matrix::kSharedDown:
      YOCO_CHECK(false);  // added into h: add_projection
  }
  model_.linear(x.data, *m, y, rows_.count, width, x.width);
  return {y, width, width};
}

void CpuBackend::add_projection(const Site& at, Matrix which, const Tensor& x) {
  if (!status_.ok()) return;  // no collective after a failed one
  YOCO_CHECK(x.ld == x.width && (which == Matrix::kOut || which == Matrix::kFfnDown || which == Matrix::kSharedDown));
  const std::vector<float>& m = which == Matrix::kOut       ? *block(at).out
                                : which == Matrix::kFfnDown ? *block(at).ffn_down
                                                            : block(at).moe->shared.w2;
  status_ = model_.add_row_parallel(x.data, m, h_.data(), rows_.count, x.width);
}

const CpuBackend::RopeTable& CpuBackend::rope_table(int head_dim) {
  for (RopeTable& t : ropes_)
    if (t.head_dim == head_dim) return t;
  RopeTable& t = ropes_[0].head_dim < 0 ? ropes_[0] : ropes_[1];
  t.head_dim = head_dim;
  t.cos.resize(static_cast<size_t>(rows_.count) * (head_dim / 2));
  t.sin.resize(t.cos.size());
  cpu::rope_table(rows_.positions, rows_.count, head_dim, config().rope_theta, t.cos.data(), t.sin.data());
  return t;
}

void CpuBackend::rope(const Tensor& x, int heads, int head_dim) {
  const RopeTable& t = rope_table(head_dim);
  cpu::rope_apply(x.data, x.ld, rows_.count, heads, head_dim, t.cos.data(), t.sin.data());
}

CpuBackend::Tensor CpuBackend::gate_logits(const Site& at, const Tensor& x, const Tensor&) {
  const int heads = widths_.self_heads;
  const Tensor gt = output(gate_, heads);
  model_.linear(x.data, *block(at).gate, gt.data, rows_.count, heads, x.width);
  return gt;
}

// docs/design.md §2.3, steps 3-5: k ← k / sqrt(hd), a = logsigmoid(γ) / τ, then the chunkwise form
// over a chunk or the recurrence for one token per sequence, per head.
CpuBackend::Tensor CpuBackend::retention(const Site& at, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& gate) {
  const int n = rows_.count, Hs = widths_.self_heads, hd = widths_.self_head_dim, Dl = widths_.self_width;
  const float inv_tau = 1.0f / static_cast<float>(config().gate_logit_normalizer);
  const float kscale = 1.0f / std::sqrt(static_cast<float>(hd));
  const Tensor o{o_.data(), Dl, Dl};
  if (rows_.chunk) {
    SelfLayerState& S = rows_.states[0]->self[at.state];
    decay_.resize(static_cast<size_t>(n) * Hs);
    float* a = decay_.data();
    for (int t = 0; t < n; ++t)
      for (int hh = 0; hh < Hs; ++hh)
        a[static_cast<size_t>(hh) * n + t] = logsigmoid(gate.data[static_cast<size_t>(t) * gate.ld + hh]) * inv_tau;
    for (int t = 0; t < n; ++t) cpu::scale_inplace(k.data + static_cast<int64_t>(t) * k.ld, kscale, Dl);
#pragma omp parallel for schedule(dynamic)
    for (int hh = 0; hh < Hs; ++hh)
      cpu::retention_chunkwise(q.data + hh * hd, q.ld, k.data + hh * hd, k.ld, v.data + hh * hd, v.ld,
                               a + static_cast<size_t>(hh) * n, n, hd, retention_chunk_,
                               S.s.data() + static_cast<size_t>(hh) * hd * hd, o.data + hh * hd, Dl);
    return o;
  }
  const int B = n;
  for (int b = 0; b < B; ++b) cpu::scale_inplace(k.data + static_cast<int64_t>(b) * k.ld, kscale, Dl);
    // Per head: S decays, gains kᵀv and is read by q, three hd×hd passes.
#pragma omp parallel for schedule(static) if (worth_threads(3 * static_cast <int64_t>(B) * Hs * hd * hd))
  for (int bh = 0; bh < B * Hs; ++bh) {
    const int b = bh / Hs, hh = bh % Hs;
    const float a = logsigmoid(gate.data[static_cast<size_t>(b) * gate.ld + hh]) * inv_tau;
    const int64_t qr = static_cast<int64_t>(b) * q.ld + hh * hd, kr = static_cast<int64_t>(b) * k.ld + hh * hd,
                  vr = static_cast<int64_t>(b) * v.ld + hh * hd;
    cpu::retention_recurrent(q.data + qr, q.ld, k.data + kr, k.ld, v.data + vr, v.ld, &a, 1, hd,
                             rows_.states[b]->self[at.state].s.data() + static_cast<size_t>(hh) * hd * hd,
                             o.data + static_cast<size_t>(b) * Dl + hh * hd, Dl);
  }
  return o;
}

void CpuBackend::head_norm(const Tensor& o, int heads, int head_dim) {
  YOCO_CHECK(o.ld == heads * head_dim);
  cpu::rmsnorm(o.data, head_dim, nullptr, o.data, head_dim, rows_.count * heads, head_dim, eps_);
}

CpuBackend::Tensor CpuBackend::silu_gate(const Tensor& g, const Tensor& o) {
  cpu::silu_mul(g.data, g.ld, o.data, o.ld, o.data, o.ld, rows_.count, o.width);
  return o;
}

// docs/design.md §2.3, SWA: the ring's rows and these rows as keys, then these rows enter the ring.
CpuBackend::Tensor CpuBackend::window_attention(const Site& at, const Tensor& q, const Tensor& k, const Tensor& v) {
  const int n = rows_.count, Hs = widths_.self_heads, hd = widths_.self_head_dim, Dl = widths_.self_width,
            window = config().sliding_window;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const Tensor o{o_.data(), Dl, Dl};
  if (rows_.chunk) {
    SelfLayerState& S = rows_.states[0]->self[at.state];
    const int64_t pos0 = rows_.positions[0];
    // Keys: the ring's rows (positions pos0 − count ..) followed by this chunk's rows. With
    // an empty ring (a prompt's first chunk) they are this chunk's rows, read in place.
    const int cnt = S.count, total = cnt + n;
    const float *keys = k.data, *values = v.data;
    int ld_kv = k.ld;
    if (cnt > 0) {
      k_all_.resize(static_cast<size_t>(total) * Dl);
      v_all_.resize(static_cast<size_t>(total) * Dl);
      for (int i = 0; i < cnt; ++i) {
        std::memcpy(&k_all_[static_cast<size_t>(i) * Dl], &S.k[static_cast<size_t>(S.ring_index(i)) * Dl], Dl * 4);
        std::memcpy(&v_all_[static_cast<size_t>(i) * Dl], &S.v[static_cast<size_t>(S.ring_index(i)) * Dl], Dl * 4);
      }
      for (int t = 0; t < n; ++t) {
        std::memcpy(&k_all_[static_cast<size_t>(cnt + t) * Dl], k.data + static_cast<int64_t>(t) * k.ld, Dl * 4);
        std::memcpy(&v_all_[static_cast<size_t>(cnt + t) * Dl], v.data + static_cast<int64_t>(t) * v.ld, Dl * 4);
      }
      keys = k_all_.data();
      values = v_all_.data();
      ld_kv = Dl;
    }
    cpu::AttentionArgs args{q.data, q.ld, keys, ld_kv, values, ld_kv,      o.data, Dl,   n,
                            total,  Hs,   Hs,   hd,    pos0,   pos0 - cnt, window, scale};
    cpu::attention(args);
    // The ring advances over every row (not just the last W) so that the row of position p
    // lands in slot p mod W: the layout depends on the position alone. Rows that later rows
    // of this chunk overwrite are skipped without being copied.
    const int skip = std::max(0, n - S.capacity);
    S.ring_skip(skip);
    for (int t = skip; t < n; ++t)
      S.ring_push(keys + static_cast<int64_t>(cnt + t) * ld_kv, values + static_cast<int64_t>(cnt + t) * ld_kv, Dl);
    return o;
  }
  const int B = n;
  // q·K and P·V over the window for every head.
  rows_in_parallel(B, worth_threads(2 * static_cast<int64_t>(B) * window * Dl), [&](int b) {
    SelfLayerState& S = rows_.states[b]->self[at.state];
    // The ring holds W rows, so after inserting this token it is exactly the window.
    S.ring_push(k.data + static_cast<int64_t>(b) * k.ld, v.data + static_cast<int64_t>(b) * v.ld, Dl);
    // Age order (oldest first) in up to two runs, so the result does not depend on
    // where the ring happens to start (a restored state starts at 0).
    const int first = std::min(S.count, S.capacity - S.head);
    const float* kb[2] = {S.k.data() + static_cast<size_t>(S.head) * Dl, S.k.data()};
    const float* vb[2] = {S.v.data() + static_cast<size_t>(S.head) * Dl, S.v.data()};
    const int rows[2] = {first, S.count - first};
    cpu::KvBlocks kv{kb, vb, S.capacity, S.count, rows};
    cpu::decode_attention(q.data + static_cast<int64_t>(b) * q.ld, kv, o.data + static_cast<size_t>(b) * Dl, Hs, Hs, hd,
                          scale);
  });
  return o;
}

// The global rows (site kv) or a transformer layer's rows (layout in model/state.h).
void CpuBackend::write_kv(const Site& at, const Tensor& k, const Tensor& v) {
  const int KV = widths_.kv_dim, L = config().n_layers;
  for (int r = 0; r < rows_.count; ++r) {
    SequenceState& st = sequence(r);
    const int64_t p = rows_.positions[r];
    const float *ks = k.data + static_cast<int64_t>(r) * k.ld, *vs = v.data + static_cast<int64_t>(r) * v.ld;
    if (at.part == Part::kLayer) st.write_layer_kv(p, at.layer, L, KV, ks, vs);
    else st.write_kv(p, KV, 0, KV, ks, vs);
  }
}

// Causal GQA over the global rows (cross-decoder) or the layer's own rows (transformer): a
// chunk's queries over its sequence's rows 0..last, or each sequence's one query over its rows.
CpuBackend::Tensor CpuBackend::attention(const Site& at, const Tensor& q) {
  const int rows = rows_.count, Ha = widths_.attn_heads, KVh = widths_.kv_heads, hd = widths_.attn_head_dim,
            KV = widths_.kv_dim, Dq = widths_.attn_width, L = config().n_layers;
  const bool own = at.part == Part::kLayer;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t* positions = rows_.positions;
  const Tensor o{o_.data(), Dq, Dq};
  if (rows_.chunk) {
    const SequenceState& st = *rows_.states[0];
    const int total = static_cast<int>(positions[rows - 1] + 1);
    const float *keys = st.k.data(), *values = st.v.data();
    if (own) {
      // This layer's keys 0..last as one run (prefill is compute-bound: the copy is noise).
      k_all_.resize(static_cast<size_t>(total) * KV);
      v_all_.resize(static_cast<size_t>(total) * KV);
      for (int t = 0; t < total; ++t)
        st.read_layer_kv(t, at.layer, L, KV, &k_all_[static_cast<size_t>(t) * KV],
                         &v_all_[static_cast<size_t>(t) * KV]);
      keys = k_all_.data();
      values = v_all_.data();
    } else if (st.pages) {
      // A forward's slice in the worker's pool (Score on the decode worker): the rows as one run,
      // gathered by the first cross layer of the chunk.
      if (global_rows_ != total) {
        global_k_.resize(static_cast<size_t>(total) * KV);
        global_v_.resize(static_cast<size_t>(total) * KV);
        for (int t = 0; t < total; ++t)
          st.read_kv(t, KV, 0, KV, &global_k_[static_cast<size_t>(t) * KV], &global_v_[static_cast<size_t>(t) * KV]);
        global_rows_ = total;
      }
      keys = global_k_.data();
      values = global_v_.data();
    }
    cpu::AttentionArgs args{q.data, q.ld, keys, KV, values,       KV, o.data, Dq,   rows,
                            total,  Ha,   KVh,  hd, positions[0], 0,  0,      scale};
    cpu::attention(args);
    return o;
  }
  // q·K and P·V over every attended row for every query head (KV · group = the query width).
  rows_in_parallel(rows, worth_threads(2 * attended_rows_ * KV * (Ha / KVh)), [&](int b) {
    // Keys in fixed chunks of kKvChunkRows rows, read in place wherever they are stored
    // (contiguous or paged; a transformer's chunk holds each layer's rows as one block).
    const SequenceState& st = *rows_.states[b];
    const int64_t n = positions[b] + 1;
    std::vector<const float*> kb, vb;
    std::vector<const uint16_t*> kb16, vb16;  // a 16-bit pool's rows (model/state.h)
    for (int64_t r = 0; r < n; r += kKvChunkRows) {
      if (st.kv16()) {
        const int64_t col = own ? SequenceState::layer_row_offset(r, at.layer, KV) : 0;
        kb16.push_back(st.k_row16(r) + col);
        vb16.push_back(st.v_row16(r) + col);
        continue;
      }
      kb.push_back(own ? st.layer_k_row(r, at.layer, L, KV) : st.k_row(r, KV));
      vb.push_back(own ? st.layer_v_row(r, at.layer, L, KV) : st.v_row(r, KV));
    }
    cpu::KvBlocks kv{kb.data(), vb.data(), kKvChunkRows, n, nullptr, kb16.data(), vb16.data()};
    if (!st.kv16()) kv.k16_blocks = kv.v16_blocks = nullptr;
    cpu::decode_attention(q.data + static_cast<int64_t>(b) * q.ld, kv, o.data + static_cast<size_t>(b) * Dq, Ha, KVh,
                          hd, scale);
  });
  return o;
}

// docs/design.md §2.2: fc1 is the activated branch, gate the linear one.
CpuBackend::Tensor CpuBackend::swiglu(const Tensor& u) {
  const int H = u.width / 2;
  cpu::silu_mul(u.data, u.ld, u.data + H, u.ld, ffn_act_, H, rows_.count, H);
  return {ffn_act_, H, H};
}

program::Routing<CpuBackend::Tensor> CpuBackend::route(const Site&, const Tensor& logits) {
  const int n = rows_.count, E = widths_.experts, k = widths_.experts_per_token;
  YOCO_CHECK(logits.ld == E && logits.width == E);
  const Tensor probs = output(probs_, E), chosen = output(chosen_, k), weights = output(expert_weights_, k);
  expert_ids_.resize(static_cast<size_t>(n) * k);
  cpu::moe_route(logits.data, n, E, k, config().moe_norm_topk_prob, probs.data, expert_ids_.data(), weights.data);
  for (size_t i = 0; i < expert_ids_.size(); ++i) chosen.data[i] = static_cast<float>(expert_ids_[i]);
  return {probs, chosen, weights};
}

// h += the routed experts' weighted sum; under tensor parallelism each rank holds a slice of every
// expert's hidden units, so the partial sums are all-reduced first (like add_projection's).
void CpuBackend::add_experts(const Site& at, const Tensor& x, const program::Routing<Tensor>&) {
  if (!status_.ok()) return;
  YOCO_CHECK(x.ld == x.width);
  const int n = rows_.count, D = widths_.dim;
  moe_out_.resize(static_cast<size_t>(n) * D);
  MoeCpu::grouped(model_, *block(at).moe, widths_.expert_hidden, x.data, n, widths_.experts_per_token,
                  expert_ids_.data(), expert_weights_.data(), moe_out_.data());
  if (model_.tp_.world > 1) {
    status_ = model_.tp_.comm->all_reduce_sum(moe_out_.data(), moe_out_.size());
    if (!status_.ok()) return;
  }
  cpu::add_inplace(h_.data(), moe_out_.data(), static_cast<int64_t>(moe_out_.size()));
}

void CpuBackend::trace(const std::string& name, const Tensor& t) {
  const int n = rows_.count;
  trace_rows_.resize(static_cast<size_t>(n) * t.width);
  for (int r = 0; r < n; ++r)
    std::memcpy(&trace_rows_[static_cast<size_t>(r) * t.width], t.data + static_cast<int64_t>(r) * t.ld,
                static_cast<size_t>(t.width) * 4);
  (*sink_)(TraceRows{name, n, t.width, trace_rows_.data(), rows_.positions});
}

}  // namespace yoco
