// The CUDA engine's calls (model/cuda/cuda_engine.h): prefill, forward, logits and decode_step check their
// arguments, take K/V blocks, put the rows' metadata on the device, run the layer program
// (model/program.h) on the CUDA backend and move the positions.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "model/cuda/engine_impl.h"
#include "model/program.h"

namespace yoco {

using cuda_engine::cuda_check;
using cuda_engine::CudaBackend;
using cuda_engine::DeviceRows;
using cuda_engine::Impl;
using cuda_engine::Slot;

namespace cuda_engine {

Status Impl::upload_batch_meta(std::span<const int> ids, std::span<const int64_t> positions,
                               std::span<const int32_t> lengths) {
  const int B = static_cast<int>(ids.size()), width = slots.table_width();
  std::vector<int32_t> tables(static_cast<size_t>(B) * width, 0), slot_ids(B);
  for (int b = 0; b < B; ++b) {
    slots.fill_table(slots[ids[b]], tables.data() + static_cast<ptrdiff_t>(b) * width);
    slot_ids[b] = ids[b];
  }
  YOCO_RETURN_IF_ERROR(copy_up(ws.block_tables.as<int32_t>(), tables.data(), tables.size() * 4, "block tables"));
  YOCO_RETURN_IF_ERROR(copy_up(ws.slot_ids.as<int32_t>(), slot_ids.data(), slot_ids.size() * 4, "slot ids"));
  YOCO_RETURN_IF_ERROR(copy_up(ws.lengths.as<int32_t>(), lengths.data(), lengths.size() * 4, "lengths"));
  return copy_up(ws.positions.as<int64_t>(), positions.data(), positions.size() * 8, "positions");
}

}  // namespace cuda_engine

Status CudaEngine::prefill(SeqId id, std::span<const int32_t> tokens, int chunk_tokens) {
  return consume(id, tokens, chunk_tokens, nullptr);
}

Status CudaEngine::consume(SeqId id, std::span<const int32_t> tokens, int chunk_tokens, float* out) {
  Impl& m = *impl_;
  const char* what = out ? "forward" : "prefill";
  YOCO_RETURN_IF_ERROR(m.slots.check_id(id, what));
  if (out && !m.has_head) return failed_precondition("this engine holds no cross-decoder (prefill weights)");
  if (chunk_tokens < 0 || chunk_tokens > m.opt.max_chunk_tokens)
    return invalid_argument("chunk_tokens must be in 0..max_chunk_tokens (" + std::to_string(m.opt.max_chunk_tokens) +
                            ")");
  int chunk = chunk_tokens == 0 ? m.opt.max_chunk_tokens : chunk_tokens;
  if (out) chunk = std::min(chunk, m.sizes.logits_rows);
  Slot& s = m.slots[id];
  YOCO_RETURN_IF_ERROR(m.check_tokens(tokens, s.position, "tokens"));
  if (tokens.empty()) return Status::Ok();
  const int one[1] = {id};
  const int64_t need[1] = {s.position + static_cast<int64_t>(tokens.size())};
  YOCO_RETURN_IF_ERROR(m.slots.reserve(one, need));
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));

  std::vector<int32_t> table(m.slots.table_width());
  m.slots.fill_table(s, table.data());
  YOCO_RETURN_IF_ERROR(m.copy_up(m.ws.block_tables.as<int32_t>(), table.data(), table.size() * 4, "block table"));
  const program::Pass pass = out ? program::Pass::forward() : program::Pass::prefill();
  const size_t V = static_cast<size_t>(m.sizes.widths.vocab);
  std::vector<int64_t> positions;
  int64_t position = s.position;
  for (size_t off = 0; off < tokens.size(); off += chunk) {
    const int n = static_cast<int>(std::min<size_t>(chunk, tokens.size() - off));
    positions.resize(n);
    for (int i = 0; i < n; ++i) positions[i] = position + i;
    YOCO_RETURN_IF_ERROR(
        m.copy_up(m.ws.tokens.as<int32_t>(), tokens.data() + off, static_cast<size_t>(n) * 4, "tokens"));
    YOCO_RETURN_IF_ERROR(
        m.copy_up(m.ws.positions.as<int64_t>(), positions.data(), static_cast<size_t>(n) * 8, "positions"));
    CudaBackend be(m, DeviceRows{n, /*chunk=*/true, id, position, 0, positions.data()});
    YOCO_RETURN_IF_ERROR(program::run(be, pass));
    if (out)  // the next chunk's head overwrites the buffer only after this copy, in stream order
      YOCO_RETURN_IF_ERROR(cuda_check(
          cudaMemcpyAsync(out + off * V, m.ws.logits.as<float>(), n * V * 4, cudaMemcpyDeviceToHost, m.stream),
          "logits to host"));
    position += n;
  }
  YOCO_RETURN_IF_ERROR(m.finish(what));
  s.position = position;
  return Status::Ok();
}

Status CudaEngine::prefill(SeqId id, std::span<const int32_t> tokens, const PrefillOptions& opt) {
  if (opt.chunk_tokens <= 0) return invalid_argument("chunk_tokens must be > 0");
  return prefill(id, tokens, std::min(opt.chunk_tokens, impl_->opt.max_chunk_tokens));
}

Status CudaEngine::forward(SeqId id, std::span<const int32_t> tokens, const PrefillOptions& opt, float* out) {
  if (opt.chunk_tokens <= 0) return invalid_argument("chunk_tokens must be > 0");
  if (!out) return invalid_argument("out: forward needs a host buffer for the logits");
  return consume(id, tokens, std::min(opt.chunk_tokens, impl_->opt.max_chunk_tokens), out);
}

Status CudaEngine::logits(std::span<const SeqId> ids, float* out) {
  Impl& m = *impl_;
  if (!m.has_head) return failed_precondition("this engine holds no cross-decoder (prefill weights)");
  YOCO_RETURN_IF_ERROR(m.check_batch(ids, "logits"));
  const int B = static_cast<int>(ids.size());
  std::vector<int64_t> positions(B);
  std::vector<int32_t> lengths(B);
  int64_t max_length = 0;
  for (int b = 0; b < B; ++b) {
    const int64_t p = m.slots[ids[b]].position;
    if (p <= 0) return failed_precondition("sequence " + std::to_string(ids[b]) + " has consumed no tokens");
    positions[b] = p - 1;
    lengths[b] = static_cast<int32_t>(p);
    max_length = std::max(max_length, p);
  }
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));
  YOCO_RETURN_IF_ERROR(m.upload_batch_meta(ids, positions, lengths));
  CudaBackend be(m, DeviceRows{B, /*chunk=*/false, 0, 0, max_length, positions.data()});
  YOCO_RETURN_IF_ERROR(program::run(be, program::Pass::logits()));
  if (out)
    YOCO_RETURN_IF_ERROR(
        cuda_check(cudaMemcpyAsync(out, m.ws.logits.as<float>(), static_cast<size_t>(B) * m.sizes.widths.vocab * 4,
                                   cudaMemcpyDeviceToHost, m.stream),
                   "logits to host"));
  return m.finish("logits");
}

Status CudaEngine::decode_step(std::span<const SeqId> ids, std::span<const int32_t> tokens, float* out) {
  Impl& m = *impl_;
  if (!m.has_head) return failed_precondition("this engine holds no cross-decoder (prefill weights)");
  YOCO_RETURN_IF_ERROR(m.check_batch(ids, "decode_step"));
  if (tokens.size() != ids.size()) return invalid_argument("decode_step: one token per sequence");
  const int B = static_cast<int>(ids.size());
  std::vector<int64_t> positions(B), need(B);
  std::vector<int32_t> lengths(B);
  int64_t max_length = 0;
  for (int b = 0; b < B; ++b) {
    const int64_t p = m.slots[ids[b]].position;
    YOCO_RETURN_IF_ERROR(m.check_tokens(tokens.subspan(b, 1), p, "tokens[" + std::to_string(b) + "]"));
    positions[b] = p;
    need[b] = p + 1;
    lengths[b] = static_cast<int32_t>(p + 1);
    max_length = std::max(max_length, p + 1);
  }
  YOCO_RETURN_IF_ERROR(m.slots.reserve(ids, need));
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));
  // Per (loop, layer): the B state pointers (gRet S, or the SWA K ring), then the B V rings.
  const int states = m.sizes.states_per_sequence, max_batch = m.opt.max_batch;
  std::vector<float*> pointers(static_cast<size_t>(states) * 2 * max_batch, nullptr);
  for (int si = 0; si < states; ++si)
    for (int b = 0; b < B; ++b) {
      float* st = m.slots.state(ids[b], si);
      pointers[(static_cast<size_t>(si) * 2) * max_batch + b] = st;
      if (m.cfg.is_swa())
        pointers[(static_cast<size_t>(si) * 2 + 1) * max_batch + b] =
            st + static_cast<int64_t>(m.cfg.sliding_window) * m.sizes.widths.dim;
    }
  if (!pointers.empty())  // a transformer has no self-decoder state
    YOCO_RETURN_IF_ERROR(
        m.copy_up(m.ws.state_ptrs.as<float*>(), pointers.data(), pointers.size() * sizeof(float*), "state pointers"));
  YOCO_RETURN_IF_ERROR(m.upload_batch_meta(ids, positions, lengths));
  YOCO_RETURN_IF_ERROR(m.copy_up(m.ws.tokens.as<int32_t>(), tokens.data(), static_cast<size_t>(B) * 4, "tokens"));

  // A graph's attention grid covers its length bucket; a traced step runs eagerly (its copies to
  // the host cannot be captured).
  const bool graphs = m.opt.cuda_graphs && !TraceScope::current();
  const int64_t bucket = cuda_engine::DecodeGraphs::length_bucket(
      max_length, static_cast<int64_t>(m.sizes.blocks_per_sequence) * m.opt.kv_block_size);
  CudaBackend be(m, DeviceRows{B, /*chunk=*/false, 0, 0, graphs ? bucket : max_length, positions.data()});
  auto step = [&] { return program::run(be, program::Pass::decode_step()); };
  YOCO_RETURN_IF_ERROR(graphs ? m.graphs.run(B, bucket, m.stream, step) : step());
  if (out)
    YOCO_RETURN_IF_ERROR(
        cuda_check(cudaMemcpyAsync(out, m.ws.logits.as<float>(), static_cast<size_t>(B) * m.sizes.widths.vocab * 4,
                                   cudaMemcpyDeviceToHost, m.stream),
                   "logits to host"));
  YOCO_RETURN_IF_ERROR(m.finish("decode_step"));
  for (int b = 0; b < B; ++b) m.slots[ids[b]].position += 1;
  return Status::Ok();
}

}  // namespace yoco
