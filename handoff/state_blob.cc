#include "handoff/state_blob.h"

#include <string>

#include "common/checksum.h"

namespace yoco {

namespace {

constexpr char kMagic[8] = {'Y', 'O', 'C', 'O', 'S', 'E', 'Q', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8 + 8 + 4 * 10;
// Far above any model, far below overflow of the sizes computed from them.
constexpr int64_t kMaxSelfLayers = 1 << 16;

Status bad(const std::string& what) { return data_loss("state blob: " + what); }

// The next a · b values of `elem` bytes each, or false when the product overflows or the
// bytes run out.
bool take_values(ByteReader& r, uint64_t a, uint64_t b, uint64_t elem, std::span<const uint8_t>& out) {
  uint64_t n = 0;
  if (__builtin_mul_overflow(a, b, &n) || __builtin_mul_overflow(n, elem, &n)) return false;
  return r.take(n, out);
}

}  // namespace

StateBlobWriter::StateBlobWriter(const StateBlobHeader& h) : h_(h) {
  const auto& s = h.shape;
  w_.bytes().reserve(kHeaderBytes + static_cast<size_t>(h.kv_rows) * s.kv_dim * 2 * kv_dtype_bytes(h.kv_dtype) + 4);
  w_.put_raw(kMagic, 8);
  w_.put<uint32_t>(kVersion);
  w_.put<uint32_t>(kHeaderBytes);
  w_.put<uint64_t>(h.fingerprint);
  w_.put<int64_t>(h.position);
  w_.put<int64_t>(h.kv_row_begin);
  w_.put<int64_t>(h.kv_rows);
  w_.put<uint32_t>(static_cast<uint32_t>(h.kv_dtype));
  for (uint32_t v : {s.kv_dim, s.dim, s.n_loops, s.n_self_layers, static_cast<uint32_t>(s.mixer), s.n_self_heads,
                     s.self_head_dim, s.window})
    w_.put<uint32_t>(v);
  w_.put<uint32_t>(h.has_last_hidden ? 1 : 0);
}

void StateBlobWriter::put_kv_row(const float* row) {
  encode_kv_values(row, h_.shape.kv_dim, h_.kv_dtype, w_.extend(h_.shape.kv_dim * kv_dtype_bytes(h_.kv_dtype)));
  ++kv_rows_;
}

void StateBlobWriter::put_retention(const float* s) {
  w_.put_f32(s, h_.shape.retention_floats());
  ++layers_;
}

void StateBlobWriter::put_window_rows(uint32_t rows) {
  w_.put<uint32_t>(rows);
  window_rows_ += 2 * static_cast<int64_t>(rows);
  ++layers_;
}

void StateBlobWriter::put_window_row(const float* row) {
  w_.put_f32(row, h_.shape.dim);
  --window_rows_;
}

void StateBlobWriter::put_last_hidden(const float* h) {
  w_.put_f32(h, h_.shape.dim);
  ++hidden_;
}

std::vector<uint8_t> StateBlobWriter::finish() {
  YOCO_CHECK(kv_rows_ == 2 * h_.kv_rows && layers_ == h_.shape.self_layers() && window_rows_ == 0 &&
             hidden_ == (h_.has_last_hidden ? 1 : 0));
  w_.put<uint32_t>(crc32c(w_.bytes().data(), w_.size()));
  return std::move(w_.bytes());
}

Result<StateBlobView> parse_state_blob(std::span<const uint8_t> blob) {
  if (blob.size() < kHeaderBytes + 4) return bad("too short (" + std::to_string(blob.size()) + " bytes)");
  if (std::memcmp(blob.data(), kMagic, 8) != 0) return bad("bad magic");
  if (crc32c(blob.data(), blob.size() - 4) != load_le<uint32_t>(blob.data() + blob.size() - 4))
    return bad("checksum mismatch");
  ByteReader r(blob.subspan(8, blob.size() - 12));
  uint32_t version = 0, header_bytes = 0, kv_dtype = 0, mixer = 0, has_hidden = 0;
  StateBlobView v;
  StateBlobHeader& h = v.header;
  StateShape& s = h.shape;
  r.get(version);
  r.get(header_bytes);
  if (version != kVersion) return bad("unsupported version " + std::to_string(version));
  if (header_bytes != kHeaderBytes) return bad("header size " + std::to_string(header_bytes));
  r.get(h.fingerprint);
  r.get(h.position);
  r.get(h.kv_row_begin);
  r.get(h.kv_rows);
  r.get(kv_dtype);
  r.get(s.kv_dim);
  r.get(s.dim);
  r.get(s.n_loops);
  r.get(s.n_self_layers);
  r.get(mixer);
  r.get(s.n_self_heads);
  r.get(s.self_head_dim);
  r.get(s.window);
  r.get(has_hidden);
  if (kv_dtype > 1) return bad("unknown KV dtype " + std::to_string(kv_dtype));
  h.kv_dtype = static_cast<KvDType>(kv_dtype);
  if (mixer > 1) return bad("unknown mixer " + std::to_string(mixer));
  s.mixer = static_cast<SelfMixer>(mixer);
  if (h.position < 0) return bad("position " + std::to_string(h.position) + " out of range");
  if (h.kv_row_begin < 0 || h.kv_rows < 0 || h.kv_row_begin > h.position || h.kv_rows > h.position - h.kv_row_begin)
    return bad("KV row range out of range");
  if (has_hidden > 1 || (has_hidden == 1 && h.position == 0)) return bad("bad last_hidden flag");
  h.has_last_hidden = has_hidden == 1;
  if (s.self_layers() > kMaxSelfLayers)
    return bad("self layer count " + std::to_string(s.self_layers()) + " out of range");

  const uint64_t kv_elem = kv_dtype_bytes(h.kv_dtype);
  for (auto* rows : {&v.k_rows, &v.v_rows})
    if (!take_values(r, h.kv_rows, s.kv_dim, kv_elem, *rows)) return bad("truncated KV rows");
  v.self.resize(static_cast<size_t>(s.self_layers()));
  for (SelfLayerBytes& l : v.self) {
    if (s.mixer == SelfMixer::kGatedRetention) {
      const uint64_t heads_hd = static_cast<uint64_t>(s.n_self_heads) * s.self_head_dim;
      if (!take_values(r, heads_hd, s.self_head_dim, 4, l.retention)) return bad("truncated retention state");
      continue;
    }
    if (!r.get(l.window_rows)) return bad("truncated window state");
    const int64_t want = s.window_rows(h.position);
    if (l.window_rows != want)
      return bad("window state has " + std::to_string(l.window_rows) + " rows, expected " + std::to_string(want));
    if (!take_values(r, l.window_rows, s.dim, 4, l.window_k) || !take_values(r, l.window_rows, s.dim, 4, l.window_v))
      return bad("truncated window state");
  }
  if (h.has_last_hidden && !take_values(r, 1, s.dim, 4, v.last_hidden)) return bad("truncated last_hidden");
  if (r.remaining() != 0) return bad(std::to_string(r.remaining()) + " trailing bytes");
  return v;
}

Status check_state_blob_model(const StateBlobHeader& h, uint64_t fingerprint, const StateShape& shape) {
  if (h.fingerprint != fingerprint) return failed_precondition("state blob: model fingerprint mismatch");
  auto field = [&](const char* name, uint64_t got, uint64_t want) -> Status {
    if (got == want) return Status::Ok();
    return failed_precondition(std::string("state blob: ") + name + " is " + std::to_string(got) + ", model has " +
                               std::to_string(want));
  };
  const StateShape& s = h.shape;
  YOCO_RETURN_IF_ERROR(field("kv_dim", s.kv_dim, shape.kv_dim));
  YOCO_RETURN_IF_ERROR(field("dim", s.dim, shape.dim));
  YOCO_RETURN_IF_ERROR(field("n_loops", s.n_loops, shape.n_loops));
  YOCO_RETURN_IF_ERROR(field("n_self_layers", s.n_self_layers, shape.n_self_layers));
  YOCO_RETURN_IF_ERROR(field("mixer", static_cast<uint32_t>(s.mixer), static_cast<uint32_t>(shape.mixer)));
  YOCO_RETURN_IF_ERROR(field("n_self_heads", s.n_self_heads, shape.n_self_heads));
  YOCO_RETURN_IF_ERROR(field("self head dim", s.self_head_dim, shape.self_head_dim));
  YOCO_RETURN_IF_ERROR(field("window", s.window, shape.window));
  return Status::Ok();
}

void read_f32(std::span<const uint8_t> bytes, float* out) { std::memcpy(out, bytes.data(), bytes.size()); }

}  // namespace yoco
