// The CUDA engine's state I/O: host states up (upload, adopt), down (download, snapshot), K/V rows
// to the host (read_rows).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "model/cuda/engine_impl.h"
#include "model/kv_pool.h"

namespace yoco {

using cuda_engine::cuda_check;
using cuda_engine::Impl;
using cuda_engine::Slot;

Status Impl::rows_down(const Slot& slot, int64_t first, int64_t n, float* k, float* v) const {
  if (n == 0) return Status::Ok();
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(opt.device), "cudaSetDevice"));
  const int bs = opt.kv_block_size;
  for (int64_t r = first; r < first + n;) {
    const int64_t in_block = r % bs, rows = std::min<int64_t>(bs - in_block, first + n - r);
    const size_t off = (static_cast<size_t>(slot.blocks[r / bs]) * bs + in_block) * sizes.pool_row_floats;
    const size_t bytes = static_cast<size_t>(rows) * sizes.pool_row_floats * 4;
    // Pageable destinations: each copy returns once complete (ordered after earlier work).
    YOCO_RETURN_IF_ERROR(cuda_check(cudaMemcpyAsync(k + (r - first) * sizes.pool_row_floats, slots.k_pool() + off,
                                                    bytes, cudaMemcpyDeviceToHost, stream),
                                    "read_rows"));
    YOCO_RETURN_IF_ERROR(cuda_check(cudaMemcpyAsync(v + (r - first) * sizes.pool_row_floats, slots.v_pool() + off,
                                                    bytes, cudaMemcpyDeviceToHost, stream),
                                    "read_rows"));
    r += rows;
  }
  return finish("read_rows");
}

Result<CudaEngine::SeqId> CudaEngine::upload(const SequenceState& st) {
  Impl& m = *impl_;
  const ModelConfig& c = m.cfg;
  auto bad = [](const std::string& what) { return invalid_argument("upload: " + what); };
  const int64_t n = st.position;
  if (n < 0 || n > m.limit()) return bad("position " + std::to_string(n) + " is outside the engine's context");
  if (static_cast<int>(st.self.size()) != m.sizes.states_per_sequence)
    return bad("state has " + std::to_string(st.self.size()) + " self-decoder layers, model has " +
               std::to_string(m.sizes.states_per_sequence));
  const int64_t n_rows = m.slots.stored_rows(n);  // a transformer's last chunk whole (model/state.h)
  const int row_floats = m.sizes.pool_row_floats, dim = m.sizes.widths.dim;
  if (st.pages) {
    if (st.pages->kv_dim != row_floats || st.pages->capacity() < n_rows)
      return bad("KV pages do not hold the state's rows");
  } else if (static_cast<int64_t>(st.k.size()) < n_rows * row_floats ||
             static_cast<int64_t>(st.v.size()) < n_rows * row_floats) {
    return bad("K/V rows shorter than the position");
  }
  if (n > 0 && static_cast<int>(st.last_hidden.size()) != dim) return bad("last_hidden must hold dim values");
  const int W = c.sliding_window;
  for (int si = 0; si < m.sizes.states_per_sequence; ++si) {
    const SelfLayerState& s = st.self[si];
    const std::string at = "self-decoder state " + std::to_string(si) + ": ";
    if (!c.is_swa()) {
      if (static_cast<int64_t>(s.s.size()) != m.sizes.state_floats) return bad(at + "S has the wrong size");
    } else {
      if (s.capacity != W || static_cast<int64_t>(s.k.size()) != static_cast<int64_t>(W) * dim ||
          s.v.size() != s.k.size())
        return bad(at + "the window ring must be [window, dim]");
      // The GPU reads positions n − W + 1 .. n − 1 at p % W: those rows must be there.
      const int64_t must = std::min<int64_t>(n, W - 1);
      if (s.count < must || s.count > std::min<int64_t>(n, W)) return bad(at + "the ring holds too few rows");
      if (s.count > 0 && s.head != static_cast<int>(((n - s.count) % W + W) % W))
        return bad(at + "the ring's rows are not at position mod window");
    }
  }
  YOCO_ASSIGN_OR_RETURN(SeqId id, new_sequence());
  Slot& slot = m.slots[id];
  const int one[1] = {id};
  const int64_t need[1] = {n};
  if (Status r = m.slots.reserve(one, need); !r.ok()) {
    (void)release(id);  // id is ours and valid: cannot fail
    return r;
  }
  auto fail = [&](Status s) {
    (void)release(id);  // id is ours and valid: cannot fail
    return s;
  };
  for (int si = 0; si < m.sizes.states_per_sequence; ++si) {
    const SelfLayerState& s = st.self[si];
    float* dst = m.slots.state(id, si);
    Status r = !c.is_swa() ? m.copy_up(dst, s.s.data(), s.s.size() * 4, "upload S")
                           : m.copy_up(dst, s.k.data(), s.k.size() * 4, "upload K ring");
    if (r.ok() && c.is_swa())
      r = m.copy_up(dst + static_cast<int64_t>(W) * dim, s.v.data(), s.v.size() * 4, "upload V ring");
    if (!r.ok()) return fail(r);
  }
  if (n > 0) {
    Status r =
        m.copy_up(m.slots.last_hidden(id), st.last_hidden.data(), static_cast<size_t>(dim) * 4, "upload last_hidden");
    if (!r.ok()) return fail(r);
  }
  // K/V rows block by block ([block_size, row width] contiguous in the pool; a transformer's
  // rows are copied as the CPU state lays them out, chunk by chunk).
  const int bs = m.opt.kv_block_size, w = row_floats;
  std::vector<float> kb, vb;
  for (size_t bi = 0; bi < slot.blocks.size(); ++bi) {
    const int64_t r0 = static_cast<int64_t>(bi) * bs, rows = std::min<int64_t>(bs, n_rows - r0);
    if (rows <= 0) break;
    kb.resize(static_cast<size_t>(rows) * w);
    vb.resize(kb.size());
    for (int64_t r = 0; r < rows; ++r) st.read_kv(r0 + r, w, 0, w, &kb[r * w], &vb[r * w]);  // bf16 widened
    const size_t off = static_cast<size_t>(slot.blocks[bi]) * bs * w;
    Status r = m.copy_up(m.slots.k_pool() + off, kb.data(), kb.size() * 4, "upload K rows");
    if (r.ok()) r = m.copy_up(m.slots.v_pool() + off, vb.data(), vb.size() * 4, "upload V rows");
    if (!r.ok()) return fail(r);
  }
  if (Status r = m.finish("upload"); !r.ok()) return fail(r);
  slot.position = n;
  return id;
}

Status CudaEngine::download(SeqId id, SequenceState& out, bool with_kv) const {
  const Impl& m = *impl_;
  YOCO_RETURN_IF_ERROR(m.slots.check_id(id, "download"));
  const Slot& slot = m.slots[id];
  const int64_t n = slot.position;
  const int W = m.cfg.sliding_window;
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));
  YOCO_RETURN_IF_ERROR(m.finish("download"));
  SequenceState st = make_sequence_state(m.cfg);
  st.position = n;
  auto down = [&](void* dst, const void* src, size_t bytes) {
    // Pageable destination: returns once the copy (ordered on the stream) is complete.
    return cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, m.stream), "download");
  };
  for (int si = 0; si < m.sizes.states_per_sequence; ++si) {
    SelfLayerState& s = st.self[si];
    const float* src = m.slots.state(id, si);
    if (!m.cfg.is_swa()) {
      YOCO_RETURN_IF_ERROR(down(s.s.data(), src, s.s.size() * 4));
    } else {
      YOCO_RETURN_IF_ERROR(down(s.k.data(), src, s.k.size() * 4));
      YOCO_RETURN_IF_ERROR(down(s.v.data(), src + static_cast<int64_t>(W) * m.sizes.widths.dim, s.v.size() * 4));
      // As the CPU's ring_push leaves it: the newest min(n, W) positions, oldest at (n − count) % W.
      s.count = static_cast<int>(std::min<int64_t>(n, W));
      s.head = static_cast<int>((n - s.count) % W);
    }
  }
  if (n > 0) {
    st.last_hidden.resize(m.sizes.widths.dim);
    YOCO_RETURN_IF_ERROR(
        down(st.last_hidden.data(), m.slots.last_hidden(id), static_cast<size_t>(m.sizes.widths.dim) * 4));
  }
  if (with_kv) {
    const int64_t n_rows = m.slots.stored_rows(n);
    st.k.resize(static_cast<size_t>(n_rows) * m.sizes.pool_row_floats);
    st.v.resize(st.k.size());
    YOCO_RETURN_IF_ERROR(m.rows_down(slot, 0, n_rows, st.k.data(), st.v.data()));
  }
  out = std::move(st);
  return Status::Ok();
}

Status CudaEngine::read_rows(SeqId id, int64_t first, int64_t n, float* k, float* v) const {
  const Impl& m = *impl_;
  YOCO_RETURN_IF_ERROR(m.slots.check_id(id, "read_rows"));
  if (m.cfg.is_transformer())
    return Status(StatusCode::kUnimplemented,
                  "read_rows: arch \"transformer\" keeps each chunk's rows layer-major (model/state.h); use download");
  const Slot& slot = m.slots[id];
  if (first < 0 || n < 0 || first + n > slot.position)
    return invalid_argument("rows: [" + std::to_string(first) + ", " + std::to_string(first + n) +
                            ") is outside the sequence's " + std::to_string(slot.position) + " rows");
  return m.rows_down(slot, first, n, k, v);
}

Result<CudaEngine::SeqId> CudaEngine::adopt(SequenceState& st) {
  KvPool* pool = impl_->host_pool;
  if (st.pages && (!pool || !pool->owns(*st.pages)))
    return invalid_argument("state: its K/V rows are paged in a pool this engine does not own");
  YOCO_ASSIGN_OR_RETURN(SeqId id, upload(st));
  // The rows are on the device now: the host blocks go back to the pool for the next transfer.
  if (st.pages) {
    pool->release(*st.pages);
    st.pages.reset();
  }
  return id;
}

Status CudaEngine::snapshot(SeqId id, SequenceState& out) const { return download(id, out, /*with_kv=*/false); }

}  // namespace yoco
