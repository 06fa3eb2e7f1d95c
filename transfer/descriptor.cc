#include "transfer/descriptor.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/checksum.h"
#include "handoff/bytes.h"

namespace yoco {

namespace {

constexpr char kMagic[8] = {'Y', 'O', 'C', 'O', 'R', 'S', 'V', '1'};
constexpr uint32_t kVersion = 2;          // 2: the reservation secret
constexpr uint32_t kVersionResident = 3;  // 3: resident_rows after the block ids
constexpr uint32_t kVersionKvDtype = 4;   // 4: resident_rows (maybe 0), then the pool's KV dtype
constexpr size_t kMaxRequestId = 256;
constexpr size_t kMaxAddress = 256;
constexpr size_t kMaxRkey = 16384;
constexpr uint32_t kMaxBlocks = 1u << 24;
constexpr size_t kMaxBytes = 64 + 16 + 2 * 4 + kMaxRequestId + kMaxAddress + 2 * kMaxRkey + 4 + 4ull * kMaxBlocks + 64;

bool get_secret(ByteReader& r, ReservationSecret& out) {
  std::span<const uint8_t> b;
  if (!r.take(out.size(), b)) return false;
  std::memcpy(out.data(), b.data(), out.size());
  return true;
}

Status bad(const std::string& m) { return data_loss("reservation descriptor: " + m); }

}  // namespace

ReservationSecret mint_reservation_secret() {
  ReservationSecret s{};
  size_t got = 0;
  while (got < s.size()) {
    const ssize_t n = getrandom(s.data() + got, s.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // never hand out a guessable capability
      std::fprintf(stderr, "getrandom failed: %s\n", std::strerror(errno));
      std::abort();
    }
    got += static_cast<size_t>(n);
  }
  return s;
}

bool secret_equal(const ReservationSecret& a, const ReservationSecret& b) {
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = diff | (a[i] ^ b[i]);
  return diff == 0;
}

int64_t lease_deadline_unix_ms(std::chrono::steady_clock::time_point deadline) {
  const auto sys = std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                                          deadline - std::chrono::steady_clock::now());
  return std::chrono::duration_cast<std::chrono::milliseconds>(sys.time_since_epoch()).count();
}

namespace {
int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

std::chrono::steady_clock::time_point lease_deadline_steady(const ReservationDescriptor& d) {
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(d.lease_deadline_unix_ms - now_unix_ms());
}

bool lease_over(const ReservationDescriptor& d) { return now_unix_ms() >= d.lease_deadline_unix_ms; }

Result<std::pair<std::string, int>> split_host_port(const std::string& address) {
  std::string host, port;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':')
      return invalid_argument("address '" + address + "': expected [host]:port");
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) return invalid_argument("address '" + address + "': expected host:port");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (host.empty()) return invalid_argument("address '" + address + "': empty host");
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return invalid_argument("address '" + address + "': bad port");
  const int p = std::stoi(port);
  if (p < 1 || p > 65535) return invalid_argument("address '" + address + "': port out of range");
  return std::make_pair(host, p);
}

Status ReservationDescriptor::validate() const {
  if (reservation_id == 0) return bad("reservation_id is 0");
  if (request_id.empty() || request_id.size() > kMaxRequestId) return bad("request_id length out of range");
  if (kv_dim <= 0 || kv_dim > (1 << 20)) return bad("kv_dim " + std::to_string(kv_dim) + " out of range");
  if (block_size <= 0 || block_size > (1 << 20))
    return bad("block_size " + std::to_string(block_size) + " out of range");
  if (pool_blocks <= 0) return bad("pool_blocks " + std::to_string(pool_blocks) + " out of range");
  if (kv_dtype != KvDType::kF32 && kv_dtype != KvDType::kBF16)
    return bad("kv_dtype " + std::to_string(static_cast<uint32_t>(kv_dtype)) + " is not f32 or bf16");
  const unsigned __int128 pool_bytes =
      static_cast<unsigned __int128>(pool_blocks) * block_size * kv_dim * kv_dtype_bytes(kv_dtype);
  if (pool_bytes > (static_cast<unsigned __int128>(1) << 50)) return bad("pool size out of range");
  if (rows <= 0 || rows > static_cast<int64_t>(kMaxBlocks) * block_size)
    return bad("rows " + std::to_string(rows) + " out of range");
  const int64_t want_blocks = (rows + block_size - 1) / block_size;
  if (static_cast<int64_t>(blocks.size()) != want_blocks)
    return bad("blocks: " + std::to_string(blocks.size()) + " for " + std::to_string(rows) + " rows of block_size " +
               std::to_string(block_size) + " (want " + std::to_string(want_blocks) + ")");
  std::vector<int32_t> sorted = blocks;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() < 0 || sorted.back() >= pool_blocks) return bad("block id out of range of pool_blocks");
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return bad("duplicate block id");
  if (address.size() > kMaxAddress) return bad("address too long");
  if (auto hp = split_host_port(address); !hp.ok()) return bad("address: " + hp.status().message());
  for (uint64_t base : {k_base, v_base}) {
    if (base == 0 || static_cast<unsigned __int128>(base) + pool_bytes > (static_cast<unsigned __int128>(1) << 64))
      return bad("pool base address out of range");
  }
  // No rkeys: the receiver takes no one-sided writes (pull only). Both or neither.
  if (k_rkey.empty() != v_rkey.empty()) return bad("k_rkey and v_rkey: both or neither");
  if (k_rkey.size() > kMaxRkey) return bad("k_rkey size out of range");
  if (v_rkey.size() > kMaxRkey) return bad("v_rkey size out of range");
  if (lease_deadline_unix_ms <= 0) return bad("lease_deadline_unix_ms not set");
  if (resident_rows < 0 || resident_rows > rows || resident_rows % block_size != 0)
    return bad("resident_rows " + std::to_string(resident_rows) + " is not whole blocks of the rows");
  return Status::Ok();
}

std::vector<RowRun> ReservationDescriptor::contiguous_runs(int64_t row_begin, int64_t n_rows) const {
  std::vector<RowRun> runs;
  const int64_t end = row_begin + n_rows;
  for (int64_t r = row_begin; r < end;) {
    const int64_t n = std::min<int64_t>(block_size - r % block_size, end - r);
    const uint64_t off = row_offset(r);
    if (!runs.empty() && runs.back().offset + static_cast<uint64_t>(runs.back().rows * row_bytes()) == off) {
      runs.back().rows += n;
    } else {
      runs.push_back({r, n, off});
    }
    r += n;
  }
  return runs;
}

std::vector<uint8_t> ReservationDescriptor::serialize() const {
  ByteWriter w;
  w.put_raw(kMagic, sizeof(kMagic));
  const bool kv16 = kv_dtype != KvDType::kF32;
  w.put<uint32_t>(kv16 ? kVersionKvDtype : resident_rows > 0 ? kVersionResident : kVersion);
  w.put<uint32_t>(0);  // total bytes, patched below
  w.put<uint64_t>(reservation_id);
  w.put<uint64_t>(fingerprint);
  w.put<int32_t>(kv_dim);
  w.put<int32_t>(block_size);
  w.put<int32_t>(pool_blocks);
  w.put<int64_t>(rows);
  w.put<int64_t>(lease_deadline_unix_ms);
  w.put<uint64_t>(k_base);
  w.put<uint64_t>(v_base);
  w.put_raw(secret.data(), secret.size());
  w.put_string(request_id);
  w.put_string(address);
  w.put_bytes(k_rkey);
  w.put_bytes(v_rkey);
  w.put<uint32_t>(static_cast<uint32_t>(blocks.size()));
  for (int32_t b : blocks) w.put<int32_t>(b);
  if (resident_rows > 0 || kv16) w.put<int64_t>(resident_rows);
  if (kv16) w.put<uint32_t>(static_cast<uint32_t>(kv_dtype));
  auto& b = w.bytes();
  const uint32_t total = static_cast<uint32_t>(b.size() + 4);
  store_le<uint32_t>(b.data() + 12, total);
  w.put<uint32_t>(crc32c(b.data(), b.size()));
  return std::move(b);
}

Result<ReservationDescriptor> ReservationDescriptor::parse(std::span<const uint8_t> bytes) {
  if (bytes.size() < 20) return bad("truncated (" + std::to_string(bytes.size()) + " bytes)");
  if (bytes.size() > kMaxBytes) return bad("too large (" + std::to_string(bytes.size()) + " bytes)");
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return bad("bad magic");
  ByteReader r(bytes.subspan(8));
  uint32_t version = 0, total = 0;
  r.get(version);
  r.get(total);
  if (version != kVersion && version != kVersionResident && version != kVersionKvDtype)
    return bad("unsupported version " + std::to_string(version));
  if (total != bytes.size())
    return bad("size field " + std::to_string(total) + " != " + std::to_string(bytes.size()) + " bytes");
  uint32_t stored_crc = 0;
  ByteReader(bytes.subspan(bytes.size() - 4)).get(stored_crc);
  if (crc32c(bytes.data(), bytes.size() - 4) != stored_crc) return bad("checksum mismatch");

  ReservationDescriptor d;
  ByteReader body(bytes.subspan(16, bytes.size() - 20));
  uint32_t n_blocks = 0;
  const bool ok = body.get(d.reservation_id) && body.get(d.fingerprint) && body.get(d.kv_dim) &&
                  body.get(d.block_size) && body.get(d.pool_blocks) && body.get(d.rows) &&
                  body.get(d.lease_deadline_unix_ms) && body.get(d.k_base) && body.get(d.v_base) &&
                  get_secret(body, d.secret) && body.get_string(d.request_id, kMaxRequestId) &&
                  body.get_string(d.address, kMaxAddress) && body.get_bytes(d.k_rkey, kMaxRkey) &&
                  body.get_bytes(d.v_rkey, kMaxRkey) && body.get(n_blocks);
  if (!ok) return bad("truncated field");
  const uint64_t tail = version == kVersionResident ? 8 : version == kVersionKvDtype ? 12 : 0;
  if (n_blocks > kMaxBlocks || body.remaining() != 4ull * n_blocks + tail)
    return bad("block count " + std::to_string(n_blocks) + " does not match the size");
  d.blocks.resize(n_blocks);
  for (auto& b : d.blocks) body.get(b);
  if (tail > 0) {
    body.get(d.resident_rows);
    if (version == kVersionResident && d.resident_rows <= 0) return bad("version 3 without resident_rows");
  }
  if (version == kVersionKvDtype) {
    uint32_t dtype = 0;
    body.get(dtype);
    if (dtype != static_cast<uint32_t>(KvDType::kBF16))
      return bad("version 4 with kv_dtype " + std::to_string(dtype) + " (only bf16 is written as version 4)");
    d.kv_dtype = KvDType::kBF16;
  }
  YOCO_RETURN_IF_ERROR(d.validate());
  return d;
}

}  // namespace yoco
