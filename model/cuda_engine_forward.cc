// The CUDA engine's model: self-decoder, global K/V, cross-decoder, the Transformer baseline;
// prefill, logits and decode steps.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/cuda_engine_impl.h"

namespace yoco {

using cuda_engine_internal::cuda_check;
using cuda_engine_internal::Slot;
using cuda_engine_internal::to_status;

Status CudaEngine::Impl::add_proj(const uint16_t* x_bf16, const uint16_t* w, int rows, int k) {
  return to_status(cuda::gemm_bf16(x_bf16, w, h.as<float>(), cuda::DType::kF32, rows, D, k, 1.f, 1.f, stream));
}

Status CudaEngine::Impl::ffn(int rows, const float* norm, const uint16_t* w13, const uint16_t* w2) {
  const float eps = static_cast<float>(cfg.norm_eps);
  YOCO_RETURN_IF_KERNEL_ERROR(cuda::rmsnorm_to_bf16(h.as<float>(), norm, xb.as<uint16_t>(), rows, D, eps, stream));
  YOCO_RETURN_IF_KERNEL_ERROR(
      cuda::gemm_bf16(xb.as<uint16_t>(), w13, u.as<float>(), cuda::DType::kF32, rows, 2 * H, D, 1.f, 0.f, stream));
  // docs/design.md §2.2: fc1 (the first H columns) is the activated branch.
  YOCO_RETURN_IF_KERNEL_ERROR(
      cuda::silu_mul_to_bf16(u.as<float>(), 2 * H, u.as<float>() + H, 2 * H, act.as<uint16_t>(), H, rows, H, stream));
  return add_proj(act.as<uint16_t>(), w2, rows, H);
}

Status CudaEngine::Impl::self_projections(const DevSelfLayer& L, int rows) {
  const float eps = static_cast<float>(cfg.norm_eps);
  YOCO_RETURN_IF_KERNEL_ERROR(
      cuda::rmsnorm_to_bf16(h.as<float>(), L.mixer_norm, xb.as<uint16_t>(), rows, D, eps, stream));
  YOCO_RETURN_IF_KERNEL_ERROR(
      cuda::gemm_bf16(xb.as<uint16_t>(), L.wqkvg, proj.as<float>(), cuda::DType::kF32, rows, P, D, 1.f, 0.f, stream));
  float* q = proj.as<float>();
  YOCO_RETURN_IF_KERNEL_ERROR(
      cuda::rope_interleaved(q, P, rows, Hs, hd, positions.as<int64_t>(), cfg.rope_theta, stream));
  return to_status(cuda::rope_interleaved(q + D, P, rows, Hs, hd, positions.as<int64_t>(), cfg.rope_theta, stream));
}

Status CudaEngine::Impl::retention_output(int rows) {
  float* ov = o.as<float>();
  YOCO_RETURN_IF_KERNEL_ERROR(cuda::rmsnorm(ov, nullptr, ov, rows * Hs, hd, static_cast<float>(cfg.norm_eps), stream));
  return to_status(cuda::silu_mul_to_bf16(proj.as<float>() + 3 * D, P, ov, D, ob.as<uint16_t>(), D, rows, D, stream));
}

Status CudaEngine::Impl::self_decoder_chunk(int slot, int n, int64_t pos0) {
  for (int loop = 0; loop < cfg.n_loops; ++loop) {
    for (int l = 0; l < cfg.n_self_layers; ++l) {
      const DevSelfLayer& L = self_layers[l];
      float* st = slot_state(slot, loop * cfg.n_self_layers + l);
      YOCO_RETURN_IF_ERROR(self_projections(L, n));
      float* q = proj.as<float>();
      if (!cfg.is_swa()) {
        cuda::RetentionPrefillArgs a;
        a.q = q;
        a.ldq = P;
        a.k = q + D;
        a.ldk = P;
        a.v = q + 2 * D;
        a.ldv = P;
        a.gt = q + R;
        a.ldg = P;
        a.state = st;
        a.out = o.as<float>();
        a.ldo = D;
        a.n = n;
        a.n_heads = Hs;
        a.head_dim = hd;
        a.chunk = opt.retention_chunk;
        a.k_scale = 1.0f / std::sqrt(static_cast<float>(hd));
        a.gate_logit_normalizer = static_cast<float>(cfg.gate_logit_normalizer);
        YOCO_RETURN_IF_KERNEL_ERROR(cuda::retention_prefill(a, stream));
        YOCO_RETURN_IF_ERROR(retention_output(n));
      } else {
        const int W = cfg.sliding_window;
        cuda::SwaPrefillArgs a;
        a.q = q;
        a.ldq = P;
        a.k = q + D;
        a.ldk = P;
        a.v = q + 2 * D;
        a.ldv = P;
        a.k_ring = st;
        a.v_ring = st + static_cast<int64_t>(W) * D;
        a.out = o.as<float>();
        a.ldo = D;
        a.n = n;
        a.n_q_heads = Hs;
        a.n_kv_heads = Hs;
        a.head_dim = hd;
        a.window = W;
        a.pos0 = pos0;
        a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
        YOCO_RETURN_IF_KERNEL_ERROR(cuda::swa_prefill(a, stream));
        YOCO_RETURN_IF_KERNEL_ERROR(cuda::convert_to_bf16(o.as<float>(), D, ob.as<uint16_t>(), D, n, D, stream));
      }
      YOCO_RETURN_IF_ERROR(add_proj(ob.as<uint16_t>(), L.wo, n, D));
      YOCO_RETURN_IF_ERROR(ffn(n, L.final_norm, L.w13, L.w2));
    }
  }
  return Status::Ok();
}

Status CudaEngine::Impl::self_decoder_step(int B) {
  float* const* ptrs = state_ptrs.as<float*>();
  for (int loop = 0; loop < cfg.n_loops; ++loop) {
    for (int l = 0; l < cfg.n_self_layers; ++l) {
      const DevSelfLayer& L = self_layers[l];
      const int si = loop * cfg.n_self_layers + l;
      YOCO_RETURN_IF_ERROR(self_projections(L, B));
      float* q = proj.as<float>();
      if (!cfg.is_swa()) {
        cuda::RetentionStepArgs a;
        a.q = q;
        a.ldq = P;
        a.k = q + D;
        a.ldk = P;
        a.v = q + 2 * D;
        a.ldv = P;
        a.gt = q + R;
        a.ldg = P;
        a.states = ptrs + static_cast<size_t>(si) * 2 * opt.max_batch;
        a.out = o.as<float>();
        a.ldo = D;
        a.batch = B;
        a.n_heads = Hs;
        a.head_dim = hd;
        a.k_scale = 1.0f / std::sqrt(static_cast<float>(hd));
        a.gate_logit_normalizer = static_cast<float>(cfg.gate_logit_normalizer);
        YOCO_RETURN_IF_KERNEL_ERROR(cuda::retention_decode_step(a, stream));
        YOCO_RETURN_IF_ERROR(retention_output(B));
      } else {
        cuda::SwaDecodeArgs a;
        a.q = q;
        a.ldq = P;
        a.k = q + D;
        a.ldk = P;
        a.v = q + 2 * D;
        a.ldv = P;
        a.k_rings = ptrs + static_cast<size_t>(si) * 2 * opt.max_batch;
        a.v_rings = ptrs + (static_cast<size_t>(si) * 2 + 1) * opt.max_batch;
        a.positions = positions.as<int64_t>();
        a.out = o.as<float>();
        a.ldo = D;
        a.batch = B;
        a.n_q_heads = Hs;
        a.n_kv_heads = Hs;
        a.head_dim = hd;
        a.window = cfg.sliding_window;
        a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
        YOCO_RETURN_IF_KERNEL_ERROR(cuda::swa_decode(a, stream));
        YOCO_RETURN_IF_KERNEL_ERROR(cuda::convert_to_bf16(o.as<float>(), D, ob.as<uint16_t>(), D, B, D, stream));
      }
      YOCO_RETURN_IF_ERROR(add_proj(ob.as<uint16_t>(), L.wo, B, D));
      YOCO_RETURN_IF_ERROR(ffn(B, L.final_norm, L.w13, L.w2));
    }
  }
  return Status::Ok();
}

Status CudaEngine::Impl::global_kv(int rows, const int32_t* row_tables_dev) {
  YOCO_RETURN_IF_KERNEL_ERROR(cuda::rmsnorm_to_bf16(h.as<float>(), kv_norm, xb.as<uint16_t>(), rows, D,
                                                    static_cast<float>(cfg.norm_eps), stream));
  float* kv = kvbuf.as<float>();
  YOCO_RETURN_IF_KERNEL_ERROR(
      cuda::gemm_bf16(xb.as<uint16_t>(), wkv, kv, cuda::DType::kF32, rows, 2 * KV, D, 1.f, 0.f, stream));
  if (cfg.cross_decoder_rope)
    YOCO_RETURN_IF_KERNEL_ERROR(
        cuda::rope_interleaved(kv, 2 * KV, rows, KVh, hdc, positions.as<int64_t>(), cfg.rope_theta, stream));
  return append_kv(kv, kv + KV, 2 * KV, 0, rows, row_tables_dev);
}

Status CudaEngine::Impl::append_kv(const float* k, const float* v, int ld, int64_t pool_off, int rows,
                                   const int32_t* row_tables_dev) {
  cuda::KvAppendArgs a;
  a.k = k;
  a.ldk = ld;
  a.v = v;
  a.ldv = ld;
  a.k_pool = k_pool.as<float>() + pool_off;
  a.v_pool = v_pool.as<float>() + pool_off;
  a.block_tables = block_tables.as<int32_t>();
  a.max_blocks = table_width();
  a.row_tables = row_tables_dev;
  a.positions = positions.as<int64_t>();
  a.rows = rows;
  a.kv_dim = KV;
  a.block_size = table_block();
  a.n_blocks = table_ids();
  return to_status(cuda::kv_append_paged(a, stream));
}

Status CudaEngine::Impl::paged_decode(const float* q, int ldq, int64_t pool_off, int B, int64_t max_length) {
  cuda::PagedDecodeArgs a;
  a.q = q;
  a.ldq = ldq;
  a.out = o.as<float>();
  a.ldo = Dq;
  a.k_pool = k_pool.as<float>() + pool_off;
  a.v_pool = v_pool.as<float>() + pool_off;
  a.block_tables = block_tables.as<int32_t>();
  a.max_blocks = table_width();
  a.lengths = lengths.as<int32_t>();
  a.max_length = max_length;
  a.batch = B;
  a.n_q_heads = Ha;
  a.n_kv_heads = KVh;
  a.head_dim = hdc;
  a.block_size = table_block();
  a.scale = 1.0f / std::sqrt(static_cast<float>(hdc));
  return to_status(cuda::decode_attention_paged(a, stream));
}

Status CudaEngine::Impl::cross_decoder(int B, int64_t max_length) {
  const float eps = static_cast<float>(cfg.norm_eps);
  for (const DevCrossLayer& L : cross_layers) {
    YOCO_RETURN_IF_KERNEL_ERROR(
        cuda::rmsnorm_to_bf16(h.as<float>(), L.mixer_norm, xb.as<uint16_t>(), B, D, eps, stream));
    float* q = proj.as<float>();
    YOCO_RETURN_IF_KERNEL_ERROR(
        cuda::gemm_bf16(xb.as<uint16_t>(), L.wq, q, cuda::DType::kF32, B, Dq, D, 1.f, 0.f, stream));
    if (cfg.cross_decoder_rope)
      YOCO_RETURN_IF_KERNEL_ERROR(
          cuda::rope_interleaved(q, Dq, B, Ha, hdc, positions.as<int64_t>(), cfg.rope_theta, stream));
    YOCO_RETURN_IF_ERROR(paged_decode(q, Dq, 0, B, max_length));
    YOCO_RETURN_IF_KERNEL_ERROR(cuda::convert_to_bf16(o.as<float>(), Dq, ob.as<uint16_t>(), Dq, B, Dq, stream));
    YOCO_RETURN_IF_ERROR(add_proj(ob.as<uint16_t>(), L.wo, B, Dq));
    YOCO_RETURN_IF_ERROR(ffn(B, L.final_norm, L.w13, L.w2));
  }
  return output_head(B);
}

Status CudaEngine::Impl::transformer_layers(int rows, bool chunk, int64_t pos0, int64_t max_len) {
  const float eps = static_cast<float>(cfg.norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hdc));
  for (int l = 0; l < cfg.n_layers; ++l) {
    const DevSelfLayer& L = self_layers[l];
    YOCO_RETURN_IF_KERNEL_ERROR(
        cuda::rmsnorm_to_bf16(h.as<float>(), L.mixer_norm, xb.as<uint16_t>(), rows, D, eps, stream));
    float* q = proj.as<float>();
    YOCO_RETURN_IF_KERNEL_ERROR(
        cuda::gemm_bf16(xb.as<uint16_t>(), L.wqkvg, q, cuda::DType::kF32, rows, P, D, 1.f, 0.f, stream));
    YOCO_RETURN_IF_KERNEL_ERROR(
        cuda::rope_interleaved(q, P, rows, Ha, hdc, positions.as<int64_t>(), cfg.rope_theta, stream));
    YOCO_RETURN_IF_KERNEL_ERROR(
        cuda::rope_interleaved(q + Dq, P, rows, KVh, hdc, positions.as<int64_t>(), cfg.rope_theta, stream));
    // Layer l's view of the pool (see tf above).
    const int64_t layer_off = static_cast<int64_t>(l) * kKvChunkRows * KV;
    YOCO_RETURN_IF_ERROR(
        append_kv(q + Dq, q + Dq + KV, P, layer_off, rows, chunk ? nullptr : row_tables.as<int32_t>()));
    if (chunk) {
      cuda::CausalPrefillArgs a;
      a.q = q;
      a.ldq = P;
      a.out = o.as<float>();
      a.ldo = Dq;
      a.k_pool = k_pool.as<float>() + layer_off;
      a.v_pool = v_pool.as<float>() + layer_off;
      a.block_table = block_tables.as<int32_t>();
      a.max_blocks = table_width();
      a.block_size = table_block();
      a.n = rows;
      a.n_q_heads = Ha;
      a.n_kv_heads = KVh;
      a.head_dim = hdc;
      a.pos0 = pos0;
      a.scale = scale;
      YOCO_RETURN_IF_KERNEL_ERROR(cuda::causal_attention_prefill(a, stream));
    } else {
      YOCO_RETURN_IF_ERROR(paged_decode(q, P, layer_off, rows, max_len));
    }
    YOCO_RETURN_IF_KERNEL_ERROR(cuda::convert_to_bf16(o.as<float>(), Dq, ob.as<uint16_t>(), Dq, rows, Dq, stream));
    YOCO_RETURN_IF_ERROR(add_proj(ob.as<uint16_t>(), L.wo, rows, Dq));
    YOCO_RETURN_IF_ERROR(ffn(rows, L.final_norm, L.w13, L.w2));
  }
  return Status::Ok();
}

Status CudaEngine::Impl::output_head(int B) {
  YOCO_RETURN_IF_KERNEL_ERROR(cuda::rmsnorm_to_bf16(h.as<float>(), final_norm, xb.as<uint16_t>(), B, D,
                                                    static_cast<float>(cfg.norm_eps), stream));
  return to_status(
      cuda::gemm_bf16(xb.as<uint16_t>(), output, logits.as<float>(), cuda::DType::kF32, B, V, D, 1.f, 0.f, stream));
}

Status CudaEngine::Impl::upload_batch_meta(std::span<const SeqId> ids, std::span<const int64_t> pos,
                                           std::span<const int32_t> lens) {
  const int B = static_cast<int>(ids.size());
  std::vector<int32_t> tables(static_cast<size_t>(B) * table_width(), 0), slot_v(B);
  for (int b = 0; b < B; ++b) {
    fill_table(slots[ids[b]], tables.data() + static_cast<ptrdiff_t>(b) * table_width());
    slot_v[b] = ids[b];
  }
  YOCO_RETURN_IF_ERROR(copy_up(block_tables.as<int32_t>(), tables.data(), tables.size() * 4, "block tables"));
  YOCO_RETURN_IF_ERROR(copy_up(slot_ids.as<int32_t>(), slot_v.data(), slot_v.size() * 4, "slot ids"));
  YOCO_RETURN_IF_ERROR(copy_up(lengths.as<int32_t>(), lens.data(), lens.size() * 4, "lengths"));
  return copy_up(positions.as<int64_t>(), pos.data(), pos.size() * 8, "positions");
}

Status CudaEngine::Impl::decode_device_work(int B, int64_t attn_len) {
  YOCO_RETURN_IF_KERNEL_ERROR(cuda::embed(embed, cuda::DType::kBF16, D, tokens.as<int32_t>(), B,
                                          std::sqrt(static_cast<float>(D)), h.as<float>(), stream));
  if (tf) {
    YOCO_RETURN_IF_ERROR(transformer_layers(B, false, 0, attn_len));
    YOCO_RETURN_IF_KERNEL_ERROR(
        cuda::copy_rows(h.as<float>(), D, nullptr, last_hidden.as<float>(), D, slot_ids.as<int32_t>(), B, D, stream));
    return output_head(B);
  }
  YOCO_RETURN_IF_ERROR(self_decoder_step(B));
  YOCO_RETURN_IF_ERROR(global_kv(B, row_tables.as<int32_t>()));
  YOCO_RETURN_IF_KERNEL_ERROR(
      cuda::copy_rows(h.as<float>(), D, nullptr, last_hidden.as<float>(), D, slot_ids.as<int32_t>(), B, D, stream));
  return cross_decoder(B, attn_len);
}

const float* CudaEngine::device_logits() const { return impl_->logits.as<float>(); }

Status CudaEngine::prefill(SeqId id, std::span<const int32_t> tokens, int chunk_tokens) {
  Impl& m = *impl_;
  YOCO_RETURN_IF_ERROR(m.check_id(id, "prefill"));
  if (chunk_tokens < 0 || chunk_tokens > m.opt.max_chunk_tokens)
    return invalid_argument("chunk_tokens must be in 0..max_chunk_tokens (" + std::to_string(m.opt.max_chunk_tokens) +
                            ")");
  const int chunk = chunk_tokens == 0 ? m.opt.max_chunk_tokens : chunk_tokens;
  Slot& s = m.slots[id];
  YOCO_RETURN_IF_ERROR(m.check_tokens(tokens, s.position, "tokens"));
  if (tokens.empty()) return Status::Ok();
  const SeqId one[1] = {id};
  const int64_t need[1] = {s.position + static_cast<int64_t>(tokens.size())};
  YOCO_RETURN_IF_ERROR(m.reserve(one, need));
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));

  std::vector<int32_t> table(m.table_width());
  m.fill_table(s, table.data());
  YOCO_RETURN_IF_ERROR(m.copy_up(m.block_tables.as<int32_t>(), table.data(), table.size() * 4, "block table"));
  std::vector<int64_t> pos;
  int64_t position = s.position;
  for (size_t off = 0; off < tokens.size(); off += chunk) {
    const int n = static_cast<int>(std::min<size_t>(chunk, tokens.size() - off));
    pos.resize(n);
    for (int i = 0; i < n; ++i) pos[i] = position + i;
    YOCO_RETURN_IF_ERROR(m.copy_up(m.tokens.as<int32_t>(), tokens.data() + off, static_cast<size_t>(n) * 4, "tokens"));
    YOCO_RETURN_IF_ERROR(m.copy_up(m.positions.as<int64_t>(), pos.data(), static_cast<size_t>(n) * 8, "positions"));
    YOCO_RETURN_IF_KERNEL_ERROR(cuda::embed(m.embed, cuda::DType::kBF16, m.D, m.tokens.as<int32_t>(), n,
                                            std::sqrt(static_cast<float>(m.D)), m.h.as<float>(), m.stream));
    if (m.tf) {
      YOCO_RETURN_IF_ERROR(m.transformer_layers(n, true, position, 0));
    } else {
      YOCO_RETURN_IF_ERROR(m.self_decoder_chunk(id, n, position));
      YOCO_RETURN_IF_ERROR(m.global_kv(n, nullptr));
    }
    YOCO_RETURN_IF_ERROR(cuda_check(cudaMemcpyAsync(m.last_hidden.as<float>() + static_cast<size_t>(id) * m.D,
                                                    m.h.as<float>() + static_cast<size_t>(n - 1) * m.D,
                                                    static_cast<size_t>(m.D) * 4, cudaMemcpyDeviceToDevice, m.stream),
                                    "last_hidden"));
    position += n;
  }
  YOCO_RETURN_IF_ERROR(m.finish("prefill"));
  s.position = position;
  return Status::Ok();
}

Status CudaEngine::prefill(SeqId id, std::span<const int32_t> tokens, const PrefillOptions& opt) {
  if (opt.chunk_tokens <= 0) return invalid_argument("chunk_tokens must be > 0");
  return prefill(id, tokens, std::min(opt.chunk_tokens, impl_->opt.max_chunk_tokens));
}

Status CudaEngine::logits(std::span<const SeqId> ids, float* out) {
  Impl& m = *impl_;
  if (!m.cross) return failed_precondition("this engine holds no cross-decoder (prefill weights)");
  YOCO_RETURN_IF_ERROR(m.check_batch(ids, "logits"));
  const int B = static_cast<int>(ids.size());
  std::vector<int64_t> pos(B);
  std::vector<int32_t> lens(B);
  int64_t max_len = 0;
  for (int b = 0; b < B; ++b) {
    const int64_t p = m.slots[ids[b]].position;
    if (p <= 0) return failed_precondition("sequence " + std::to_string(ids[b]) + " has consumed no tokens");
    pos[b] = p - 1;
    lens[b] = static_cast<int32_t>(p);
    max_len = std::max(max_len, p);
  }
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));
  YOCO_RETURN_IF_ERROR(m.upload_batch_meta(ids, pos, lens));
  YOCO_RETURN_IF_KERNEL_ERROR(cuda::copy_rows(m.last_hidden.as<float>(), m.D, m.slot_ids.as<int32_t>(), m.h.as<float>(),
                                              m.D, nullptr, B, m.D, m.stream));
  YOCO_RETURN_IF_ERROR(m.tf ? m.output_head(B) : m.cross_decoder(B, max_len));
  if (out)
    YOCO_RETURN_IF_ERROR(cuda_check(
        cudaMemcpyAsync(out, m.logits.as<float>(), static_cast<size_t>(B) * m.V * 4, cudaMemcpyDeviceToHost, m.stream),
        "logits to host"));
  return m.finish("logits");
}

Status CudaEngine::decode_step(std::span<const SeqId> ids, std::span<const int32_t> tokens, float* out) {
  Impl& m = *impl_;
  if (!m.cross) return failed_precondition("this engine holds no cross-decoder (prefill weights)");
  YOCO_RETURN_IF_ERROR(m.check_batch(ids, "decode_step"));
  if (tokens.size() != ids.size()) return invalid_argument("decode_step: one token per sequence");
  const int B = static_cast<int>(ids.size());
  std::vector<int64_t> pos(B), need(B);
  std::vector<int32_t> lens(B);
  int64_t max_len = 0;
  for (int b = 0; b < B; ++b) {
    const int64_t p = m.slots[ids[b]].position;
    YOCO_RETURN_IF_ERROR(m.check_tokens(tokens.subspan(b, 1), p, "tokens[" + std::to_string(b) + "]"));
    pos[b] = p;
    need[b] = p + 1;
    lens[b] = static_cast<int32_t>(p + 1);
    max_len = std::max(max_len, p + 1);
  }
  YOCO_RETURN_IF_ERROR(m.reserve(ids, need));
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));
  // Per (loop, layer): the B state pointers (gRet S, or the SWA K ring), then the B V rings.
  std::vector<float*> ptrs(static_cast<size_t>(m.n_states) * 2 * m.opt.max_batch, nullptr);
  for (int si = 0; si < m.n_states; ++si)
    for (int b = 0; b < B; ++b) {
      float* st = m.slot_state(ids[b], si);
      ptrs[(static_cast<size_t>(si) * 2) * m.opt.max_batch + b] = st;
      if (m.cfg.is_swa())
        ptrs[(static_cast<size_t>(si) * 2 + 1) * m.opt.max_batch + b] =
            st + static_cast<int64_t>(m.cfg.sliding_window) * m.D;
    }
  if (!ptrs.empty())  // a transformer has no self-decoder state
    YOCO_RETURN_IF_ERROR(
        m.copy_up(m.state_ptrs.as<float*>(), ptrs.data(), ptrs.size() * sizeof(float*), "state pointers"));
  YOCO_RETURN_IF_ERROR(m.upload_batch_meta(ids, pos, lens));
  YOCO_RETURN_IF_ERROR(m.copy_up(m.tokens.as<int32_t>(), tokens.data(), static_cast<size_t>(B) * 4, "tokens"));

  YOCO_RETURN_IF_ERROR(m.opt.cuda_graphs ? m.decode_with_graph(B, max_len) : m.decode_device_work(B, max_len));
  if (out)
    YOCO_RETURN_IF_ERROR(cuda_check(
        cudaMemcpyAsync(out, m.logits.as<float>(), static_cast<size_t>(B) * m.V * 4, cudaMemcpyDeviceToHost, m.stream),
        "logits to host"));
  YOCO_RETURN_IF_ERROR(m.finish("decode_step"));
  for (int b = 0; b < B; ++b) m.slots[ids[b]].position += 1;
  return Status::Ok();
}

}  // namespace yoco
