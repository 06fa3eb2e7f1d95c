#include "model/state.h"

#include <cstring>
#include <string>

#include "common/checksum.h"
#include "model/safetensors.h"

namespace yoco {

namespace {
constexpr char kMagic[8] = {'Y', 'O', 'C', 'O', 'S', 'E', 'Q', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8 + 8 + 4 * 10;

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& b) : b_(b) {}
  template <class T>
  void put(T v) {
    const size_t n = b_.size();
    b_.resize(n + sizeof(T));
    std::memcpy(b_.data() + n, &v, sizeof(T));
  }
  void put_f32(const float* p, int64_t n) {
    const size_t at = b_.size();
    b_.resize(at + static_cast<size_t>(n) * 4);
    std::memcpy(b_.data() + at, p, static_cast<size_t>(n) * 4);
  }
  void put_bf16(const float* p, int64_t n) {
    for (int64_t i = 0; i < n; ++i) put<uint16_t>(f32_to_bf16(p[i]));
  }

 private:
  std::vector<uint8_t>& b_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  template <class T>
  bool get(T& v) {
    if (b_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool get_f32(float* p, int64_t n) {
    if (n < 0 || static_cast<uint64_t>(n) > (b_.size() - pos_) / 4) return false;
    std::memcpy(p, b_.data() + pos_, static_cast<size_t>(n) * 4);
    pos_ += static_cast<size_t>(n) * 4;
    return true;
  }
  bool get_bf16(float* p, int64_t n) {
    if (n < 0 || static_cast<uint64_t>(n) > (b_.size() - pos_) / 2) return false;
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, b_.data() + pos_ + 2 * i, 2);
      p[i] = bf16_to_f32(v);
    }
    pos_ += static_cast<size_t>(n) * 2;
    return true;
  }
  size_t remaining() const { return b_.size() - pos_; }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

}  // namespace

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

std::vector<uint8_t> serialize_state(const SequenceState& st, const ModelConfig& c, uint64_t fingerprint,
                                     const StateBlobOptions& opt) {
  YOCO_CHECK(!c.is_transformer());  // see state.h: transformer states are not shipped
  const int kv_dim = c.kv_dim();
  int64_t row_begin = opt.include_kv ? opt.kv_row_begin : 0;
  int64_t row_end = opt.include_kv ? (opt.kv_row_end < 0 ? st.position : opt.kv_row_end) : 0;
  YOCO_CHECK(row_begin >= 0 && row_begin <= row_end && row_end <= st.position);
  YOCO_CHECK(st.pages ? st.pages->capacity() >= row_end : static_cast<int64_t>(st.k.size()) >= row_end * kv_dim);
  const int64_t rows = row_end - row_begin;
  std::vector<uint8_t> b;
  b.reserve(kHeaderBytes + rows * kv_dim * 8 + st.self_state_bytes() + 16);
  Writer w(b);
  for (char ch : kMagic) w.put<char>(ch);
  w.put<uint32_t>(kVersion);
  w.put<uint32_t>(kHeaderBytes);
  w.put<uint64_t>(fingerprint);
  w.put<int64_t>(st.position);
  w.put<int64_t>(row_begin);
  w.put<int64_t>(rows);
  w.put<uint32_t>(static_cast<uint32_t>(opt.kv_dtype));
  w.put<uint32_t>(kv_dim);
  w.put<uint32_t>(c.dim);
  w.put<uint32_t>(c.n_loops);
  w.put<uint32_t>(c.n_self_layers);
  w.put<uint32_t>(c.is_swa() ? 1 : 0);
  w.put<uint32_t>(c.n_self_heads);
  w.put<uint32_t>(c.self_head_dim());
  w.put<uint32_t>(c.sliding_window);
  w.put<uint32_t>(st.last_hidden.empty() ? 0 : 1);
  for (const bool is_k : {true, false}) {
    for (int64_t r = row_begin; r < row_end; ++r) {
      const float* p = is_k ? st.k_row(r, kv_dim) : st.v_row(r, kv_dim);
      if (opt.kv_dtype == KvDType::kBF16) w.put_bf16(p, kv_dim);
      else w.put_f32(p, kv_dim);
    }
  }
  for (const auto& s : st.self) {
    if (!c.is_swa()) {
      w.put_f32(s.s.data(), static_cast<int64_t>(s.s.size()));
      continue;
    }
    const int keep = std::min(s.count, c.sliding_window - 1);  // the format keeps W−1 rows
    w.put<uint32_t>(static_cast<uint32_t>(keep));
    for (const auto* ring : {&s.k, &s.v})
      for (int i = s.count - keep; i < s.count; ++i)
        w.put_f32(ring->data() + static_cast<size_t>(s.ring_index(i)) * c.dim, c.dim);
  }
  if (!st.last_hidden.empty()) w.put_f32(st.last_hidden.data(), c.dim);
  w.put<uint32_t>(crc32c(b.data(), b.size()));
  return b;
}

Result<StateBlobInfo> deserialize_state(std::span<const uint8_t> blob, const ModelConfig& c, uint64_t fingerprint,
                                        SequenceState& out) {
  auto bad = [](const std::string& what) { return data_loss("state blob: " + what); };
  if (c.is_transformer())
    return Status(StatusCode::kUnimplemented, "state blob: arch \"transformer\" states are not serialized");
  if (blob.size() < kHeaderBytes + 4) return bad("too short (" + std::to_string(blob.size()) + " bytes)");
  if (std::memcmp(blob.data(), kMagic, 8) != 0) return bad("bad magic");
  uint32_t stored_crc;
  std::memcpy(&stored_crc, blob.data() + blob.size() - 4, 4);
  if (crc32c(blob.data(), blob.size() - 4) != stored_crc) return bad("checksum mismatch");
  Reader r(blob.subspan(8, blob.size() - 12));
  uint32_t version, header_bytes, kv_dtype, kv_dim, dim, n_loops, n_self_layers, mixer, heads, hd, window, has_hidden;
  StateBlobInfo info;
  int64_t position;
  r.get(version);
  r.get(header_bytes);
  if (version != kVersion) return bad("unsupported version " + std::to_string(version));
  if (header_bytes != kHeaderBytes) return bad("header size " + std::to_string(header_bytes));
  r.get(info.fingerprint);
  r.get(position);
  r.get(info.kv_row_begin);
  r.get(info.kv_rows);
  r.get(kv_dtype);
  r.get(kv_dim);
  r.get(dim);
  r.get(n_loops);
  r.get(n_self_layers);
  r.get(mixer);
  r.get(heads);
  r.get(hd);
  r.get(window);
  r.get(has_hidden);
  if (info.fingerprint != fingerprint) return failed_precondition("state blob: model fingerprint mismatch");
  auto field = [&](const char* name, uint64_t got, uint64_t want) -> Status {
    if (got == want) return Status::Ok();
    return failed_precondition(std::string("state blob: ") + name + " is " + std::to_string(got) + ", model has " +
                               std::to_string(want));
  };
  YOCO_RETURN_IF_ERROR(field("kv_dim", kv_dim, c.kv_dim()));
  YOCO_RETURN_IF_ERROR(field("dim", dim, c.dim));
  YOCO_RETURN_IF_ERROR(field("n_loops", n_loops, c.n_loops));
  YOCO_RETURN_IF_ERROR(field("n_self_layers", n_self_layers, c.n_self_layers));
  YOCO_RETURN_IF_ERROR(field("mixer", mixer, c.is_swa() ? 1 : 0));
  YOCO_RETURN_IF_ERROR(field("n_self_heads", heads, c.n_self_heads));
  YOCO_RETURN_IF_ERROR(field("self head dim", hd, c.self_head_dim()));
  YOCO_RETURN_IF_ERROR(field("window", window, c.sliding_window));
  if (kv_dtype > 1) return bad("unknown KV dtype " + std::to_string(kv_dtype));
  info.kv_dtype = static_cast<KvDType>(kv_dtype);
  info.position = position;
  if (position < 0 || position > c.max_seq_len) return bad("position " + std::to_string(position) + " out of range");
  if (info.kv_row_begin < 0 || info.kv_rows < 0 || info.kv_row_begin + info.kv_rows > position)
    return bad("KV row range out of range");
  if (has_hidden > 1 || (has_hidden == 1 && position == 0)) return bad("bad last_hidden flag");

  SequenceState st = make_sequence_state(c);
  st.position = position;
  const int64_t n_kv = info.kv_rows * c.kv_dim();
  if (info.kv_rows > 0) {
    st.k.assign((info.kv_row_begin + info.kv_rows) * c.kv_dim(), 0.0f);
    st.v.assign(st.k.size(), 0.0f);
    for (auto* dst : {&st.k, &st.v}) {
      float* p = dst->data() + info.kv_row_begin * c.kv_dim();
      bool ok = info.kv_dtype == KvDType::kBF16 ? r.get_bf16(p, n_kv) : r.get_f32(p, n_kv);
      if (!ok) return bad("truncated KV rows");
    }
  }
  for (auto& s : st.self) {
    if (!c.is_swa()) {
      if (!r.get_f32(s.s.data(), static_cast<int64_t>(s.s.size()))) return bad("truncated retention state");
      continue;
    }
    uint32_t rows;
    if (!r.get(rows)) return bad("truncated window state");
    const int64_t want = std::min<int64_t>(position, c.sliding_window - 1);
    if (rows != want) return bad("window state has " + std::to_string(rows) + " rows, expected " + std::to_string(want));
    // Row of position p lives in slot p mod capacity, as in the running ring, so a restored
    // state has the same layout and decodes bitwise identically.
    s.count = static_cast<int>(rows);
    s.head = static_cast<int>((position - rows) % s.capacity);
    for (auto* ring : {&s.k, &s.v})
      for (uint32_t i = 0; i < rows; ++i)
        if (!r.get_f32(ring->data() + static_cast<size_t>(s.ring_index(static_cast<int>(i))) * c.dim, c.dim))
          return bad("truncated window state");
  }
  if (has_hidden) {
    st.last_hidden.resize(c.dim);
    if (!r.get_f32(st.last_hidden.data(), c.dim)) return bad("truncated last_hidden");
  }
  if (r.remaining() != 0) return bad(std::to_string(r.remaining()) + " trailing bytes");
  out = std::move(st);
  return info;
}

}  // namespace yoco
