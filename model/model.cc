#include "model/model.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/ops.h"

namespace yoco {

namespace {

float logsigmoid(float x) { return std::min(x, 0.0f) - std::log1p(std::exp(-std::fabs(x))); }

struct RopeTable {
  std::vector<float> cos, sin;
  RopeTable(const int64_t* positions, int rows, int head_dim, double theta)
      : cos(static_cast<size_t>(rows) * (head_dim / 2)), sin(cos.size()) {
    cpu::rope_table(positions, rows, head_dim, theta, cos.data(), sin.data());
  }
};

// A parallel region costs a thread wake-up (microseconds, far more when the cores are
// shared); a decode step of one sequence is dozens of small products, so only work of about
// 2^18 multiply-adds and up is split across threads.
bool worth_threads(int64_t multiply_adds) { return multiply_adds > (1 << 18); }

std::vector<int64_t> consecutive(int64_t pos0, int n) {
  std::vector<int64_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = pos0 + i;
  return p;
}

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Tensor parallelism splits YOCO's heads only (model/tensor_parallel.h); a transformer runs
// whole on one rank.
Status transformer_not_split(const ModelConfig& c, const TensorParallel& tp) {
  if (c.is_transformer() && tp.world != 1)
    return Status(StatusCode::kUnimplemented,
                  "tensor parallel: arch \"transformer\" is not supported (world must be 1, got " +
                      std::to_string(tp.world) + ")");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, WeightSet set, const TensorParallel& tp) {
  if (tp.world != 1) {  // reject a bad split before reading the weights
    auto c = load_model_config(dir + "/params.json");
    if (!c.ok()) return c.status();
    YOCO_RETURN_IF_ERROR(transformer_not_split(c.value(), tp));
    YOCO_RETURN_IF_ERROR(validate_tensor_parallel(c.value(), tp));
  }
  auto w = load_model_dir(dir, set);
  if (!w.ok()) return w.status();
  if (tp.world == 1 && !tp.comm) return std::make_unique<Model>(std::move(w).value());
  return create(std::move(w).value(), tp);
}

Result<std::unique_ptr<Model>> Model::create(LoadedWeights w, const TensorParallel& tp) {
  YOCO_RETURN_IF_ERROR(transformer_not_split(w.config, tp));
  YOCO_RETURN_IF_ERROR(validate_tensor_parallel(w.config, tp));
  shard_weights(w.config, tp, w.weights);
  return std::unique_ptr<Model>(new Model(std::move(w), tp));
}

Model::Model(LoadedWeights w) : Model(std::move(w), TensorParallel{}) {}

Model::Model(LoadedWeights w, const TensorParallel& tp)
    : cfg_(w.config),
      w_(std::move(w.weights)),
      fingerprint_(w.fingerprint),
      tp_(tp),
      sd_(shard_dims(cfg_, tp.world)),
      kv_row_(cfg_.is_transformer() ? cfg_.n_layers * sd_.kv_dim : sd_.kv_dim) {
  YOCO_CHECK(!cfg_.is_transformer() || tp.world == 1);
}

Status Model::agree(const Status& local) const {
  if (tp_.world == 1) return local;
  float rejected = local.ok() ? 0.0f : 1.0f;
  YOCO_RETURN_IF_ERROR(tp_.comm->all_reduce_sum(&rejected, 1));
  if (!local.ok()) return local;
  if (rejected > 0)
    return Status(StatusCode::kCancelled, "tensor parallel: " + std::to_string(static_cast<int>(rejected)) +
                                              " other rank(s) rejected this call; nothing was computed");
  return Status::Ok();
}

Status Model::add_row_parallel(const float* x, const std::vector<float>& w, float* h, int rows, int k) const {
  const int D = cfg_.dim;
  if (tp_.world == 1) {
    linear(x, w, h, rows, D, k, /*accumulate=*/true);
    return Status::Ok();
  }
  // Sum the partial products first, then add: every rank adds the same bits to the same h.
  std::vector<float> y(static_cast<size_t>(rows) * D);
  linear(x, w, y.data(), rows, D, k);
  YOCO_RETURN_IF_ERROR(tp_.comm->all_reduce_sum(y.data(), y.size()));
  cpu::add_inplace(h, y.data(), static_cast<int64_t>(y.size()));
  return Status::Ok();
}

Status Model::validate_tokens(std::span<const int32_t> tokens, int64_t start_position, const char* field) const {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= cfg_.vocab_size)
      return invalid_argument(std::string(field) + "[" + std::to_string(i) + "]: token id " +
                              std::to_string(tokens[i]) + " is outside the vocabulary [0, " +
                              std::to_string(cfg_.vocab_size) + ")");
  if (start_position + static_cast<int64_t>(tokens.size()) > cfg_.max_seq_len)
    return invalid_argument(std::string(field) + ": sequence of " +
                            std::to_string(start_position + static_cast<int64_t>(tokens.size())) +
                            " tokens exceeds max_seq_len " + std::to_string(cfg_.max_seq_len));
  return Status::Ok();
}

Status Model::ffn(float* h, int rows, const std::vector<float>& norm, const std::vector<float>& w13,
                  const std::vector<float>& w2) const {
  const int D = cfg_.dim, H = sd_.hidden;
  // Every layer of a prefill chunk needs these (tens of MB at 2K rows): kept on this thread
  // instead of allocated per call, so each layer does not zero and fault in fresh pages on one
  // thread while the others wait (bench/README.md, attention off OpenBLAS).
  thread_local std::vector<float> scratch;
  const size_t nx = static_cast<size_t>(rows) * D, nu = static_cast<size_t>(rows) * 2 * H;
  if (scratch.size() < nx + nu + nu / 2) scratch.resize(nx + nu + nu / 2);
  float *x = scratch.data(), *u = x + nx, *act = u + nu;
  cpu::rmsnorm(h, D, norm.data(), x, D, rows, D, static_cast<float>(cfg_.norm_eps));
  linear(x, w13, u, rows, 2 * H, D);
  // docs/design.md §2.2: fc1 is the activated branch, gate the linear one.
  cpu::silu_mul(u, 2 * H, u + H, 2 * H, act, H, rows, H);
  return add_row_parallel(act, w2, h, rows, H);
}

// Per rank: D is the residual width (replicated); Dl = Hs·hd the width of this rank's heads
// (D with world 1), and R the rows of its fused q|k|v(|g) projection.
Status Model::self_decoder_chunk(float* h, int n, int64_t pos0, SequenceState& st, const PrefillOptions& opt) const {
  const int D = cfg_.dim, Hs = sd_.self_heads, hd = cfg_.self_head_dim(), Dl = sd_.self_width,
            R = (cfg_.is_swa() ? 3 : 4) * Dl;
  const float eps = static_cast<float>(cfg_.norm_eps);
  const std::vector<int64_t> positions = consecutive(pos0, n);
  const RopeTable rope(positions.data(), n, hd, cfg_.rope_theta);
  std::vector<float> x(static_cast<size_t>(n) * D), proj(static_cast<size_t>(n) * R), o(static_cast<size_t>(n) * Dl);
  std::vector<float> gt, a, k_all, v_all;

  for (int loop = 0; loop < cfg_.n_loops; ++loop) {
    for (int l = 0; l < cfg_.n_self_layers; ++l) {
      const SelfLayerWeights& L = w_.self_layers[l];
      SelfLayerState& S = st.self[static_cast<size_t>(loop) * cfg_.n_self_layers + l];
      cpu::rmsnorm(h, D, L.mixer_norm.data(), x.data(), D, n, D, eps);
      linear(x.data(), L.wqkvg, proj.data(), n, R, D);
      float* q = proj.data();
      float* k = proj.data() + Dl;
      float* v = proj.data() + 2 * Dl;
      cpu::rope_apply(q, R, n, Hs, hd, rope.cos.data(), rope.sin.data());
      cpu::rope_apply(k, R, n, Hs, hd, rope.cos.data(), rope.sin.data());

      if (!cfg_.is_swa()) {
        gt.resize(static_cast<size_t>(n) * Hs);
        a.resize(static_cast<size_t>(n) * Hs);
        linear(x.data(), L.wgt, gt.data(), n, Hs, D);
        const float inv_tau = 1.0f / static_cast<float>(cfg_.gate_logit_normalizer);
        for (int t = 0; t < n; ++t)
          for (int hh = 0; hh < Hs; ++hh)
            a[static_cast<size_t>(hh) * n + t] = logsigmoid(gt[static_cast<size_t>(t) * Hs + hh]) * inv_tau;
        const float kscale = 1.0f / std::sqrt(static_cast<float>(hd));
        for (int t = 0; t < n; ++t) cpu::scale_inplace(k + static_cast<int64_t>(t) * R, kscale, Dl);
#pragma omp parallel for schedule(dynamic)
        for (int hh = 0; hh < Hs; ++hh)
          cpu::retention_chunkwise(q + hh * hd, R, k + hh * hd, R, v + hh * hd, R,
                                   a.data() + static_cast<size_t>(hh) * n, n, hd, opt.retention_chunk,
                                   S.s.data() + static_cast<size_t>(hh) * hd * hd, o.data() + hh * hd, Dl);
        cpu::rmsnorm(o.data(), hd, nullptr, o.data(), hd, n * Hs, hd, eps);  // per-head, no weight
        cpu::silu_mul(proj.data() + 3 * Dl, R, o.data(), Dl, o.data(), Dl, n, Dl);
      } else {
        // Keys: the ring's rows (positions pos0 − count ..) followed by this chunk's rows. With
        // an empty ring (a prompt's first chunk) they are this chunk's rows, read in place.
        const int cnt = S.count, total = cnt + n;
        const float *keys = k, *values = v;
        int ld_kv = R;
        if (cnt > 0) {
          k_all.resize(static_cast<size_t>(total) * Dl);
          v_all.resize(static_cast<size_t>(total) * Dl);
          for (int i = 0; i < cnt; ++i) {
            std::memcpy(&k_all[static_cast<size_t>(i) * Dl], &S.k[static_cast<size_t>(S.ring_index(i)) * Dl], Dl * 4);
            std::memcpy(&v_all[static_cast<size_t>(i) * Dl], &S.v[static_cast<size_t>(S.ring_index(i)) * Dl], Dl * 4);
          }
          for (int t = 0; t < n; ++t) {
            std::memcpy(&k_all[static_cast<size_t>(cnt + t) * Dl], k + static_cast<int64_t>(t) * R, Dl * 4);
            std::memcpy(&v_all[static_cast<size_t>(cnt + t) * Dl], v + static_cast<int64_t>(t) * R, Dl * 4);
          }
          keys = k_all.data();
          values = v_all.data();
          ld_kv = Dl;
        }
        cpu::AttentionArgs args{q,
                                R,
                                keys,
                                ld_kv,
                                values,
                                ld_kv,
                                o.data(),
                                Dl,
                                n,
                                total,
                                Hs,
                                Hs,
                                hd,
                                pos0,
                                pos0 - cnt,
                                cfg_.sliding_window,
                                1.0f / std::sqrt(static_cast<float>(hd))};
        cpu::attention(args);
        // The ring advances over every row (not just the last W) so that the row of position p
        // lands in slot p mod W: the layout depends on the position alone. Rows that later rows
        // of this chunk overwrite are skipped without being copied.
        const int skip = std::max(0, n - S.capacity);
        S.ring_skip(skip);
        for (int t = skip; t < n; ++t)
          S.ring_push(keys + static_cast<int64_t>(cnt + t) * ld_kv, values + static_cast<int64_t>(cnt + t) * ld_kv, Dl);
      }
      YOCO_RETURN_IF_ERROR(add_row_parallel(o.data(), L.wo, h, n, Dl));
      YOCO_RETURN_IF_ERROR(ffn(h, n, L.final_norm, L.w13, L.w2));
    }
  }
  return Status::Ok();
}

Status Model::self_decoder_step(float* h, std::span<SequenceState* const> states) const {
  const int B = static_cast<int>(states.size());
  const int D = cfg_.dim, Hs = sd_.self_heads, hd = cfg_.self_head_dim(), Dl = sd_.self_width,
            R = (cfg_.is_swa() ? 3 : 4) * Dl;
  const float eps = static_cast<float>(cfg_.norm_eps);
  std::vector<int64_t> positions(B);
  for (int b = 0; b < B; ++b) positions[b] = states[b]->position;
  const RopeTable rope(positions.data(), B, hd, cfg_.rope_theta);
  std::vector<float> x(static_cast<size_t>(B) * D), proj(static_cast<size_t>(B) * R), o(static_cast<size_t>(B) * Dl),
      gt(static_cast<size_t>(B) * Hs);

  for (int loop = 0; loop < cfg_.n_loops; ++loop) {
    for (int l = 0; l < cfg_.n_self_layers; ++l) {
      const SelfLayerWeights& L = w_.self_layers[l];
      const size_t si = static_cast<size_t>(loop) * cfg_.n_self_layers + l;
      cpu::rmsnorm(h, D, L.mixer_norm.data(), x.data(), D, B, D, eps);
      linear(x.data(), L.wqkvg, proj.data(), B, R, D);
      float* q = proj.data();
      float* k = proj.data() + Dl;
      float* v = proj.data() + 2 * Dl;
      cpu::rope_apply(q, R, B, Hs, hd, rope.cos.data(), rope.sin.data());
      cpu::rope_apply(k, R, B, Hs, hd, rope.cos.data(), rope.sin.data());
      if (!cfg_.is_swa()) {
        linear(x.data(), L.wgt, gt.data(), B, Hs, D);
        const float inv_tau = 1.0f / static_cast<float>(cfg_.gate_logit_normalizer);
        const float kscale = 1.0f / std::sqrt(static_cast<float>(hd));
        for (int b = 0; b < B; ++b) cpu::scale_inplace(k + static_cast<int64_t>(b) * R, kscale, Dl);
          // Per head: S decays, gains kᵀv and is read by q, three hd×hd passes.
#pragma omp parallel for schedule(static) if (worth_threads(3 * static_cast <int64_t>(B) * Hs * hd * hd))
        for (int bh = 0; bh < B * Hs; ++bh) {
          const int b = bh / Hs, hh = bh % Hs;
          const float a = logsigmoid(gt[bh]) * inv_tau;
          const int64_t row = static_cast<int64_t>(b) * R + hh * hd;
          cpu::retention_recurrent(q + row, R, k + row, R, v + row, R, &a, 1, hd,
                                   states[b]->self[si].s.data() + static_cast<size_t>(hh) * hd * hd,
                                   o.data() + static_cast<size_t>(b) * Dl + hh * hd, Dl);
        }
        cpu::rmsnorm(o.data(), hd, nullptr, o.data(), hd, B * Hs, hd, eps);
        cpu::silu_mul(proj.data() + 3 * Dl, R, o.data(), Dl, o.data(), Dl, B, Dl);
      } else {
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        // q·K and P·V over the window for every head.
#pragma omp parallel for schedule(static) if (B > 1 && \
                                              worth_threads(2 * static_cast <int64_t>(B) * cfg_.sliding_window * Dl))
        for (int b = 0; b < B; ++b) {
          SelfLayerState& S = states[b]->self[si];
          // The ring holds W rows, so after inserting this token it is exactly the window.
          S.ring_push(k + static_cast<int64_t>(b) * R, v + static_cast<int64_t>(b) * R, Dl);
          // Age order (oldest first) in up to two runs, so the result does not depend on
          // where the ring happens to start (a restored state starts at 0).
          const int first = std::min(S.count, S.capacity - S.head);
          const float* kb[2] = {S.k.data() + static_cast<size_t>(S.head) * Dl, S.k.data()};
          const float* vb[2] = {S.v.data() + static_cast<size_t>(S.head) * Dl, S.v.data()};
          const int rows[2] = {first, S.count - first};
          cpu::KvBlocks kv{kb, vb, S.capacity, S.count, rows};
          cpu::decode_attention(q + static_cast<int64_t>(b) * R, kv, o.data() + static_cast<size_t>(b) * Dl, Hs, Hs, hd,
                                scale);
        }
      }
      YOCO_RETURN_IF_ERROR(add_row_parallel(o.data(), L.wo, h, B, Dl));
      YOCO_RETURN_IF_ERROR(ffn(h, B, L.final_norm, L.w13, L.w2));
    }
  }
  return Status::Ok();
}

// This rank's KV heads only: no communication (the input h is replicated).
void Model::global_kv(const float* h, int n, const int64_t* positions, float* k_out, float* v_out) const {
  const int D = cfg_.dim, KV = sd_.kv_dim;
  std::vector<float> x(static_cast<size_t>(n) * D), kv(static_cast<size_t>(n) * 2 * KV);
  cpu::rmsnorm(h, D, w_.kv_norm.data(), x.data(), D, n, D, static_cast<float>(cfg_.norm_eps));
  linear(x.data(), w_.wkv, kv.data(), n, 2 * KV, D);
  for (int t = 0; t < n; ++t) {
    std::memcpy(k_out + static_cast<int64_t>(t) * KV, &kv[static_cast<size_t>(t) * 2 * KV], KV * 4);
    std::memcpy(v_out + static_cast<int64_t>(t) * KV, &kv[static_cast<size_t>(t) * 2 * KV + KV], KV * 4);
  }
  if (cfg_.cross_decoder_rope) {
    const RopeTable rope(positions, n, cfg_.cross_head_dim(), cfg_.rope_theta);
    cpu::rope_apply(k_out, KV, n, sd_.attn_kv_heads, cfg_.cross_head_dim(), rope.cos.data(), rope.sin.data());
  }
}

Status Model::cross_decoder(float* h, int rows, const int64_t* positions, std::span<SequenceState* const> states,
                            bool chunk_of_one_sequence, float* logits) const {
  // Per rank: Ha query heads that read exactly its KVh kv heads (GQA groups stay whole).
  const int D = cfg_.dim, Ha = sd_.attn_heads, KVh = sd_.attn_kv_heads, hdc = cfg_.cross_head_dim(), KV = sd_.kv_dim,
            Dq = sd_.attn_width;
  const float eps = static_cast<float>(cfg_.norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hdc));
  std::vector<float> x(static_cast<size_t>(rows) * D), q(static_cast<size_t>(rows) * Dq),
      o(static_cast<size_t>(rows) * Dq);
  std::unique_ptr<RopeTable> rope;
  if (cfg_.cross_decoder_rope) rope = std::make_unique<RopeTable>(positions, rows, hdc, cfg_.rope_theta);
  int64_t attended_rows = 0;
  for (int b = 0; b < rows; ++b) attended_rows += positions[b] + 1;

  for (const CrossLayerWeights& L : w_.cross_layers) {
    cpu::rmsnorm(h, D, L.mixer_norm.data(), x.data(), D, rows, D, eps);
    linear(x.data(), L.wq, q.data(), rows, Dq, D);
    if (rope) cpu::rope_apply(q.data(), Dq, rows, Ha, hdc, rope->cos.data(), rope->sin.data());
    if (chunk_of_one_sequence) {
      const SequenceState& st = *states[0];
      YOCO_CHECK(!st.pages);  // the full forward runs on a fresh contiguous state
      cpu::AttentionArgs args{q.data(), Dq,       st.k.data(), KV,           st.v.data(),
                              KV,       o.data(), Dq,          rows,         static_cast<int>(positions[rows - 1] + 1),
                              Ha,       KVh,      hdc,         positions[0], 0,
                              0,        scale};
      cpu::attention(args);
    } else {
      // q·K and P·V over every attended row for every query head (KV · group = the query width).
#pragma omp parallel for schedule(dynamic) if (rows > 1 && worth_threads(2 * attended_rows * KV * (Ha / KVh)))
      for (int b = 0; b < rows; ++b) {
        // Keys in fixed chunks, wherever they are stored (see kKvChunkRows).
        const SequenceState& st = *states[b];
        const int64_t n = positions[b] + 1;
        std::vector<const float*> kb, vb;
        for (int64_t r = 0; r < n; r += kKvChunkRows) {
          kb.push_back(st.k_row(r, KV));
          vb.push_back(st.v_row(r, KV));
        }
        cpu::KvBlocks kv{kb.data(), vb.data(), kKvChunkRows, n};
        cpu::decode_attention(q.data() + static_cast<size_t>(b) * Dq, kv, o.data() + static_cast<size_t>(b) * Dq, Ha,
                              KVh, hdc, scale);
      }
    }
    YOCO_RETURN_IF_ERROR(add_row_parallel(o.data(), L.wo, h, rows, Dq));
    YOCO_RETURN_IF_ERROR(ffn(h, rows, L.final_norm, L.w13, L.w2));
  }
  output_head(h, rows, logits);
  return Status::Ok();
}

// The output head is replicated: every rank computes the same full logits.
void Model::output_head(const float* h, int rows, float* logits) const {
  const int D = cfg_.dim;
  std::vector<float> x(static_cast<size_t>(rows) * D);
  cpu::rmsnorm(h, D, w_.final_norm.data(), x.data(), D, rows, D, static_cast<float>(cfg_.norm_eps));
  linear(x.data(), w_.tied ? w_.embed : w_.output, logits, rows, cfg_.vocab_size, D);
}

// docs/design.md §2.6 with the kernels and numerics of the cross-decoder: q|k|v in one product, RoPE on q
// and k at the token's position, GQA over this layer's rows (layout in model/state.h).
Status Model::transformer_layers(float* h, int rows, const int64_t* positions, std::span<SequenceState* const> states,
                                 bool chunk_of_one_sequence) const {
  const int D = cfg_.dim, L = cfg_.n_layers, Ha = sd_.attn_heads, KVh = sd_.attn_kv_heads, hd = cfg_.cross_head_dim(),
            KV = sd_.kv_dim, Dq = sd_.attn_width, R = Dq + 2 * KV;
  const float eps = static_cast<float>(cfg_.norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const RopeTable rope(positions, rows, hd, cfg_.rope_theta);
  std::vector<float> x(static_cast<size_t>(rows) * D), proj(static_cast<size_t>(rows) * R),
      o(static_cast<size_t>(rows) * Dq);
  std::vector<float> k_all, v_all;
  int64_t attended_rows = 0;
  for (int b = 0; b < rows; ++b) attended_rows += positions[b] + 1;

  for (int l = 0; l < L; ++l) {
    const SelfLayerWeights& W = w_.self_layers[l];
    cpu::rmsnorm(h, D, W.mixer_norm.data(), x.data(), D, rows, D, eps);
    linear(x.data(), W.wqkvg, proj.data(), rows, R, D);
    float* q = proj.data();
    float* k = proj.data() + Dq;
    float* v = proj.data() + Dq + KV;
    cpu::rope_apply(q, R, rows, Ha, hd, rope.cos.data(), rope.sin.data());
    cpu::rope_apply(k, R, rows, KVh, hd, rope.cos.data(), rope.sin.data());
    for (int r = 0; r < rows; ++r) {
      SequenceState& st = *states[chunk_of_one_sequence ? 0 : r];
      std::memcpy(st.layer_k_row(positions[r], l, L, KV), k + static_cast<int64_t>(r) * R, KV * 4);
      std::memcpy(st.layer_v_row(positions[r], l, L, KV), v + static_cast<int64_t>(r) * R, KV * 4);
    }
    if (chunk_of_one_sequence) {
      // This layer's keys 0..last as one run (prefill is compute-bound: the copy is noise).
      const SequenceState& st = *states[0];
      const int total = static_cast<int>(positions[rows - 1] + 1);
      k_all.resize(static_cast<size_t>(total) * KV);
      v_all.resize(static_cast<size_t>(total) * KV);
      for (int t = 0; t < total; ++t) {
        std::memcpy(&k_all[static_cast<size_t>(t) * KV], st.layer_k_row(t, l, L, KV), KV * 4);
        std::memcpy(&v_all[static_cast<size_t>(t) * KV], st.layer_v_row(t, l, L, KV), KV * 4);
      }
      cpu::AttentionArgs args{q,     R,  k_all.data(), KV, v_all.data(), KV, o.data(), Dq,   rows,
                              total, Ha, KVh,          hd, positions[0], 0,  0,        scale};
      cpu::attention(args);
    } else {
      // q·K and P·V over every attended row for every query head (KV · group = the query width).
#pragma omp parallel for schedule(dynamic) if (rows > 1 && worth_threads(2 * attended_rows * KV * (Ha / KVh)))
      for (int b = 0; b < rows; ++b) {
        // Each chunk of kKvChunkRows tokens holds this layer's rows as one [rows, kv_dim]
        // block, read in place, contiguous or paged alike.
        const SequenceState& st = *states[b];
        const int64_t n = positions[b] + 1;
        std::vector<const float*> kb, vb;
        for (int64_t r = 0; r < n; r += kKvChunkRows) {
          kb.push_back(st.layer_k_row(r, l, L, KV));
          vb.push_back(st.layer_v_row(r, l, L, KV));
        }
        cpu::KvBlocks kv{kb.data(), vb.data(), kKvChunkRows, n};
        cpu::decode_attention(q + static_cast<int64_t>(b) * R, kv, o.data() + static_cast<size_t>(b) * Dq, Ha, KVh, hd,
                              scale);
      }
    }
    YOCO_RETURN_IF_ERROR(add_row_parallel(o.data(), W.wo, h, rows, Dq));
    YOCO_RETURN_IF_ERROR(ffn(h, rows, W.final_norm, W.w13, W.w2));
  }
  return Status::Ok();
}

Status Model::make_room(SequenceState& st, int64_t rows) const {
  const int64_t need = st.position + rows;
  if (st.pages) {
    if (st.pages->kv_dim != kv_row_ || st.pages->block_size % kKvChunkRows != 0)
      return invalid_argument("KV pages do not match the model (kv_dim or block size)");
    if (st.pages->capacity() < need)
      return Status(StatusCode::kResourceExhausted, "KV pool: the sequence needs " + std::to_string(need) +
                                                        " rows, its blocks hold " +
                                                        std::to_string(st.pages->capacity()));
    return Status::Ok();
  }
  // A transformer's rows come in whole chunks (model/state.h).
  const int64_t alloc = cfg_.is_transformer() ? round_up(need, kKvChunkRows) : need;
  if (!cfg_.is_transformer() || static_cast<int64_t>(st.k.size()) < alloc * kv_row_) {
    st.k.resize(static_cast<size_t>(alloc) * kv_row_);
    st.v.resize(static_cast<size_t>(alloc) * kv_row_);
  }
  return Status::Ok();
}

void Model::store_kv_rows(SequenceState& st, int64_t pos0, int n, const float* k, const float* v) const {
  const int KV = sd_.kv_dim;
  for (int r = 0; r < n; ++r) {
    std::memcpy(st.k_row(pos0 + r, KV), k + static_cast<size_t>(r) * KV, KV * 4);
    std::memcpy(st.v_row(pos0 + r, KV), v + static_cast<size_t>(r) * KV, KV * 4);
  }
}

Status Model::prefill(SequenceState& st, std::span<const int32_t> tokens, const PrefillOptions& opt) const {
  YOCO_RETURN_IF_ERROR(agree([&]() -> Status {
    if (opt.chunk_tokens <= 0) return invalid_argument("chunk_tokens must be > 0");
    if (opt.retention_chunk <= 0) return invalid_argument("retention_chunk must be > 0");
    YOCO_RETURN_IF_ERROR(validate_tokens(tokens, st.position));
    return make_room(st, static_cast<int64_t>(tokens.size()));
  }()));
  const int D = cfg_.dim, KV = sd_.kv_dim;
  std::vector<float> h, k, v;
  if (cfg_.is_transformer()) {
    SequenceState* one[1] = {&st};
    for (size_t off = 0; off < tokens.size(); off += opt.chunk_tokens) {
      const int n = static_cast<int>(std::min<size_t>(opt.chunk_tokens, tokens.size() - off));
      h.resize(static_cast<size_t>(n) * D);
      embed_rows(tokens.data() + off, n, h.data());
      const std::vector<int64_t> positions = consecutive(st.position, n);
      YOCO_RETURN_IF_ERROR(transformer_layers(h.data(), n, positions.data(), one, true));
      st.last_hidden.assign(h.end() - D, h.end());
      st.position += n;
    }
    return Status::Ok();
  }
  for (size_t off = 0; off < tokens.size(); off += opt.chunk_tokens) {
    const int n = static_cast<int>(std::min<size_t>(opt.chunk_tokens, tokens.size() - off));
    const int64_t pos0 = st.position;
    h.resize(static_cast<size_t>(n) * D);
    k.resize(static_cast<size_t>(n) * KV);
    v.resize(static_cast<size_t>(n) * KV);
    embed_rows(tokens.data() + off, n, h.data());
    YOCO_RETURN_IF_ERROR(self_decoder_chunk(h.data(), n, pos0, st, opt));
    const std::vector<int64_t> positions = consecutive(pos0, n);
    global_kv(h.data(), n, positions.data(), k.data(), v.data());
    store_kv_rows(st, pos0, n, k.data(), v.data());
    st.last_hidden.assign(h.end() - D, h.end());
    st.position += n;
  }
  return Status::Ok();
}

Status Model::logits(std::span<SequenceState* const> states, float* out) const {
  const int B = static_cast<int>(states.size()), D = cfg_.dim;
  YOCO_RETURN_IF_ERROR(agree([&]() -> Status {
    if (!has_cross_decoder())
      return failed_precondition("this model was loaded without the cross-decoder (prefill weights)");
    for (int b = 0; b < B; ++b)
      if (states[b]->position <= 0 || static_cast<int>(states[b]->last_hidden.size()) != D)
        return failed_precondition("sequence " + std::to_string(b) + " has consumed no tokens");
    return Status::Ok();
  }()));
  std::vector<float> h(static_cast<size_t>(B) * D);
  std::vector<int64_t> positions(B);
  for (int b = 0; b < B; ++b) {
    std::memcpy(&h[static_cast<size_t>(b) * D], states[b]->last_hidden.data(), D * 4);
    positions[b] = states[b]->position - 1;
  }
  if (cfg_.is_transformer()) {  // last_hidden already went through every layer
    output_head(h.data(), B, out);
    return Status::Ok();
  }
  return cross_decoder(h.data(), B, positions.data(), states, false, out);
}

Status Model::decode_step(std::span<SequenceState* const> states, std::span<const int32_t> tokens, float* out) const {
  const int B = static_cast<int>(states.size()), D = cfg_.dim, KV = sd_.kv_dim;
  YOCO_RETURN_IF_ERROR(agree([&]() -> Status {
    if (!has_cross_decoder())
      return failed_precondition("this model was loaded without the cross-decoder (prefill weights)");
    if (tokens.size() != states.size()) return invalid_argument("decode_step: one token per sequence");
    for (int b = 0; b < B; ++b) YOCO_RETURN_IF_ERROR(validate_tokens(tokens.subspan(b, 1), states[b]->position));
    for (int b = 0; b < B; ++b)
      if (states[b]->pages && states[b]->pages->capacity() < states[b]->position + 1)
        return Status(StatusCode::kResourceExhausted, "sequence " + std::to_string(b) + ": its KV blocks are full");
    return Status::Ok();
  }()));
  if (cfg_.is_transformer()) {
    std::vector<float> h(static_cast<size_t>(B) * D);
    embed_rows(tokens.data(), B, h.data());
    std::vector<int64_t> positions(B);
    for (int b = 0; b < B; ++b) {
      positions[b] = states[b]->position;
      YOCO_RETURN_IF_ERROR(make_room(*states[b], 1));  // paged: checked above; contiguous: grows
    }
    YOCO_RETURN_IF_ERROR(transformer_layers(h.data(), B, positions.data(), states, false));
    for (int b = 0; b < B; ++b) {
      states[b]->last_hidden.assign(h.begin() + static_cast<ptrdiff_t>(b) * D,
                                    h.begin() + static_cast<ptrdiff_t>(b + 1) * D);
      states[b]->position += 1;
    }
    output_head(h.data(), B, out);
    return Status::Ok();
  }
  std::vector<float> h(static_cast<size_t>(B) * D), k(static_cast<size_t>(B) * KV), v(static_cast<size_t>(B) * KV);
  embed_rows(tokens.data(), B, h.data());
  YOCO_RETURN_IF_ERROR(self_decoder_step(h.data(), states));
  std::vector<int64_t> positions(B);
  for (int b = 0; b < B; ++b) positions[b] = states[b]->position;
  global_kv(h.data(), B, positions.data(), k.data(), v.data());
  for (int b = 0; b < B; ++b) {
    SequenceState& st = *states[b];
    if (!st.pages) {
      st.k.resize(static_cast<size_t>(st.position + 1) * KV);
      st.v.resize(static_cast<size_t>(st.position + 1) * KV);
    }
    store_kv_rows(st, st.position, 1, k.data() + static_cast<size_t>(b) * KV, v.data() + static_cast<size_t>(b) * KV);
    st.last_hidden.assign(h.begin() + static_cast<ptrdiff_t>(b) * D, h.begin() + static_cast<ptrdiff_t>(b + 1) * D);
    st.position += 1;
  }
  return cross_decoder(h.data(), B, positions.data(), states, false, out);
}

Status Model::forward(std::span<const int32_t> tokens, const LogitsSink& sink, const PrefillOptions& opt) const {
  YOCO_RETURN_IF_ERROR(agree([&]() -> Status {
    if (!has_cross_decoder())
      return failed_precondition("this model was loaded without the cross-decoder (prefill weights)");
    if (opt.chunk_tokens <= 0 || opt.retention_chunk <= 0) return invalid_argument("chunk sizes must be > 0");
    return validate_tokens(tokens, 0);
  }()));
  const int D = cfg_.dim, KV = sd_.kv_dim, V = cfg_.vocab_size;
  // Bound the logits buffer (rows × vocab) to ~256 MB whatever the vocabulary.
  const int chunk = std::max(1, std::min(opt.chunk_tokens, (1 << 26) / V));
  SequenceState st = new_sequence();
  SequenceState* one[1] = {&st};
  std::vector<float> h, logits;
  if (cfg_.is_transformer()) {
    YOCO_RETURN_IF_ERROR(make_room(st, static_cast<int64_t>(tokens.size())));
    for (size_t off = 0; off < tokens.size(); off += chunk) {
      const int n = static_cast<int>(std::min<size_t>(chunk, tokens.size() - off));
      const int64_t pos0 = st.position;
      h.resize(static_cast<size_t>(n) * D);
      logits.resize(static_cast<size_t>(n) * V);
      embed_rows(tokens.data() + off, n, h.data());
      const std::vector<int64_t> positions = consecutive(pos0, n);
      YOCO_RETURN_IF_ERROR(transformer_layers(h.data(), n, positions.data(), one, true));
      st.position += n;
      output_head(h.data(), n, logits.data());
      sink(pos0, n, logits.data());
    }
    return Status::Ok();
  }
  for (size_t off = 0; off < tokens.size(); off += chunk) {
    const int n = static_cast<int>(std::min<size_t>(chunk, tokens.size() - off));
    const int64_t pos0 = st.position;
    h.resize(static_cast<size_t>(n) * D);
    logits.resize(static_cast<size_t>(n) * V);
    embed_rows(tokens.data() + off, n, h.data());
    YOCO_RETURN_IF_ERROR(self_decoder_chunk(h.data(), n, pos0, st, opt));
    st.k.resize(static_cast<size_t>(pos0 + n) * KV);
    st.v.resize(static_cast<size_t>(pos0 + n) * KV);
    const std::vector<int64_t> positions = consecutive(pos0, n);
    global_kv(h.data(), n, positions.data(), st.k.data() + pos0 * KV, st.v.data() + pos0 * KV);
    st.position += n;
    YOCO_RETURN_IF_ERROR(cross_decoder(h.data(), n, positions.data(), one, true, logits.data()));
    sink(pos0, n, logits.data());
  }
  return Status::Ok();
}

Result<std::vector<float>> Model::score(std::span<const int32_t> tokens, const PrefillOptions& opt) const {
  // A rejected call still takes part in the one agreement its peers' forward() makes.
  if (tokens.size() < 2) return agree(invalid_argument("tokens: scoring needs at least 2 tokens"));
  std::vector<float> out(tokens.size() - 1);
  const int V = cfg_.vocab_size;
  Status st = forward(
      tokens,
      [&](int64_t pos0, int rows, const float* logits) {
        std::vector<float> row(V);
        for (int r = 0; r < rows; ++r) {
          const int64_t p = pos0 + r;
          if (p + 1 >= static_cast<int64_t>(tokens.size())) break;
          std::memcpy(row.data(), logits + static_cast<size_t>(r) * V, V * 4);
          cpu::log_softmax(row.data(), V);
          out[p] = row[tokens[p + 1]];
        }
      },
      opt);
  if (!st.ok()) return st;
  return out;
}

}  // namespace yoco
