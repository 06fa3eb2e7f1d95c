#include "model/state.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace yoco {

void SelfLayerState::ring_push(const float* k_row, const float* v_row, int dim) {
  int slot;
  if (count < capacity) {
    slot = (head + count) % capacity;
    ++count;
  } else {
    slot = head;
    head = (head + 1) % capacity;
  }
  std::memcpy(k.data() + static_cast<size_t>(slot) * dim, k_row, static_cast<size_t>(dim) * 4);
  std::memcpy(v.data() + static_cast<size_t>(slot) * dim, v_row, static_cast<size_t>(dim) * 4);
}

void SelfLayerState::ring_skip(int rows) {
  if (rows <= 0) return;
  const int filled = count + rows;
  if (filled > capacity) head = (head + filled - capacity) % capacity;
  count = std::min(filled, capacity);
}

void SequenceState::read_kv(int64_t r, int kv_dim, int64_t col, int n, float* k_out, float* v_out) const {
  if (!kv16()) {
    std::memcpy(k_out, k_row(r, kv_dim) + col, static_cast<size_t>(n) * 4);
    std::memcpy(v_out, v_row(r, kv_dim) + col, static_cast<size_t>(n) * 4);
    return;
  }
  const uint16_t *k16 = k_row16(r) + col, *v16 = v_row16(r) + col;
  for (int i = 0; i < n; ++i) {
    k_out[i] = bf16_to_f32(k16[i]);
    v_out[i] = bf16_to_f32(v16[i]);
  }
}

void SequenceState::write_kv(int64_t r, int kv_dim, int64_t col, int n, const float* k_in, const float* v_in) {
  if (!kv16()) {
    std::memcpy(k_row(r, kv_dim) + col, k_in, static_cast<size_t>(n) * 4);
    std::memcpy(v_row(r, kv_dim) + col, v_in, static_cast<size_t>(n) * 4);
    return;
  }
  uint16_t *k16 = k_row16(r) + col, *v16 = v_row16(r) + col;
  for (int i = 0; i < n; ++i) {
    k16[i] = f32_to_bf16(k_in[i]);
    v16[i] = f32_to_bf16(v_in[i]);
  }
}

int64_t SequenceState::self_state_bytes() const {
  int64_t n = 0;
  for (const auto& s : self) n += static_cast<int64_t>(s.s.size() + s.k.size() + s.v.size()) * 4;
  return n + static_cast<int64_t>(last_hidden.size()) * 4;
}

SequenceState make_sequence_state(const ModelConfig& c, int tp_world) {
  SequenceState st;
  if (c.is_transformer()) return st;
  st.self.resize(static_cast<size_t>(c.n_loops) * c.n_self_layers);
  const int hd = c.self_head_dim(), heads = c.n_self_heads / tp_world, width = heads * hd;
  for (auto& s : st.self) {
    if (c.is_swa()) {
      s.capacity = c.sliding_window;
      s.k.assign(static_cast<size_t>(s.capacity) * width, 0.0f);
      s.v.assign(static_cast<size_t>(s.capacity) * width, 0.0f);
    } else {
      s.s.assign(static_cast<size_t>(heads) * hd * hd, 0.0f);
    }
  }
  return st;
}

StateShape state_shape(const ModelConfig& c) {
  StateShape s;
  s.kv_dim = static_cast<uint32_t>(c.kv_dim());
  s.dim = static_cast<uint32_t>(c.dim);
  s.n_loops = static_cast<uint32_t>(c.n_loops);
  s.n_self_layers = static_cast<uint32_t>(c.n_self_layers);
  s.mixer = c.is_swa() ? SelfMixer::kSlidingWindow : SelfMixer::kGatedRetention;
  s.n_self_heads = static_cast<uint32_t>(c.n_self_heads);
  s.self_head_dim = static_cast<uint32_t>(c.self_head_dim());
  s.window = static_cast<uint32_t>(c.sliding_window);
  return s;
}

std::vector<uint8_t> serialize_state(const SequenceState& st, const ModelConfig& c, uint64_t fingerprint,
                                     const StateBlobOptions& opt) {
  YOCO_CHECK(!c.is_transformer());  // see state.h: transformer states are not shipped
  const int kv_dim = c.kv_dim();
  int64_t row_begin = opt.include_kv ? opt.kv_row_begin : 0;
  int64_t row_end = opt.include_kv ? (opt.kv_row_end < 0 ? st.position : opt.kv_row_end) : 0;
  YOCO_CHECK(row_begin >= 0 && row_begin <= row_end && row_end <= st.position);
  YOCO_CHECK(st.pages ? st.pages->capacity() >= row_end : static_cast<int64_t>(st.k.size()) >= row_end * kv_dim);
  StateBlobHeader h;
  h.fingerprint = fingerprint;
  h.position = st.position;
  h.kv_row_begin = row_begin;
  h.kv_rows = row_end - row_begin;
  h.kv_dtype = opt.kv_dtype;
  h.shape = state_shape(c);
  h.has_last_hidden = !st.last_hidden.empty();
  StateBlobWriter w(h);
  if (st.kv16()) {  // widened exactly: a bf16 blob carries the pool's values bit for bit
    std::vector<float> k(kv_dim), v(kv_dim);
    for (int which = 0; which < 2; ++which)
      for (int64_t r = row_begin; r < row_end; ++r) {
        st.read_kv(r, kv_dim, 0, kv_dim, k.data(), v.data());
        w.put_kv_row(which == 0 ? k.data() : v.data());
      }
  } else {
    for (int64_t r = row_begin; r < row_end; ++r) w.put_kv_row(st.k_row(r, kv_dim));
    for (int64_t r = row_begin; r < row_end; ++r) w.put_kv_row(st.v_row(r, kv_dim));
  }
  for (const auto& s : st.self) {
    if (!c.is_swa()) {
      w.put_retention(s.s.data());
      continue;
    }
    const int keep = std::min(s.count, c.sliding_window - 1);  // the format keeps W−1 rows
    w.put_window_rows(static_cast<uint32_t>(keep));
    for (const auto* ring : {&s.k, &s.v})
      for (int i = s.count - keep; i < s.count; ++i)
        w.put_window_row(ring->data() + static_cast<size_t>(s.ring_index(i)) * c.dim);
  }
  if (h.has_last_hidden) w.put_last_hidden(st.last_hidden.data());
  return w.finish();
}

Result<StateBlobInfo> deserialize_state(std::span<const uint8_t> blob, const ModelConfig& c, uint64_t fingerprint,
                                        SequenceState& out) {
  if (c.is_transformer())
    return Status(StatusCode::kUnimplemented, "state blob: arch \"transformer\" states are not serialized");
  YOCO_ASSIGN_OR_RETURN(StateBlobView v, parse_state_blob(blob));
  const StateBlobHeader& h = v.header;
  YOCO_RETURN_IF_ERROR(check_state_blob_model(h, fingerprint, state_shape(c)));
  if (h.position > c.max_seq_len)
    return data_loss("state blob: position " + std::to_string(h.position) + " out of range");

  SequenceState st = make_sequence_state(c);
  st.position = h.position;
  if (h.kv_rows > 0) {
    const int64_t kv_dim = c.kv_dim(), n_kv = h.kv_rows * kv_dim;
    st.k.assign((h.kv_row_begin + h.kv_rows) * kv_dim, 0.0f);
    st.v.assign(st.k.size(), 0.0f);
    decode_kv_values(v.k_rows.data(), n_kv, h.kv_dtype, st.k.data() + h.kv_row_begin * kv_dim);
    decode_kv_values(v.v_rows.data(), n_kv, h.kv_dtype, st.v.data() + h.kv_row_begin * kv_dim);
  }
  for (size_t l = 0; l < st.self.size(); ++l) {
    SelfLayerState& s = st.self[l];
    const SelfLayerBytes& b = v.self[l];
    if (!c.is_swa()) {
      read_f32(b.retention, s.s.data());
      continue;
    }
    // Row of position p lives in slot p mod capacity, as in the running ring, so a restored
    // state has the same layout and decodes bitwise identically.
    s.count = static_cast<int>(b.window_rows);
    s.head = static_cast<int>((h.position - b.window_rows) % s.capacity);
    const size_t row_bytes = static_cast<size_t>(c.dim) * 4;
    for (int which = 0; which < 2; ++which) {
      const std::span<const uint8_t> rows = which == 0 ? b.window_k : b.window_v;
      auto& ring = which == 0 ? s.k : s.v;
      for (uint32_t i = 0; i < b.window_rows; ++i) {
        float* slot = ring.data() + static_cast<size_t>(s.ring_index(static_cast<int>(i))) * c.dim;
        read_f32(rows.subspan(i * row_bytes, row_bytes), slot);
      }
    }
  }
  if (h.has_last_hidden) {
    st.last_hidden.resize(c.dim);
    read_f32(v.last_hidden, st.last_hidden.data());
  }
  out = std::move(st);
  return StateBlobInfo{h.fingerprint, h.position, h.kv_row_begin, h.kv_rows, h.kv_dtype};
}

}  // namespace yoco
