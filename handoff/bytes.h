// The one little-endian byte codec of the wire and store formats (docs/design.md, hand-off
// format): fixed-offset loads and stores for headers, an appending writer and a bounds-checked
// reader. The reader never reads past its span: every get reports failure instead, so hostile
// input is an error, never a crash.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace yoco {

// Float arrays are copied as host bytes: the formats are little-endian and so must the host be.
static_assert(std::endian::native == std::endian::little, "the byte formats assume a little-endian host");

// An integer of sizeof(T) bytes at p, least significant byte first.
template <class T>
inline void store_le(void* p, T v) {
  static_assert(std::is_integral_v<T> || std::is_enum_v<T>);
  auto* b = static_cast<uint8_t*>(p);
  const auto x = static_cast<uint64_t>(v);
  for (size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<uint8_t>(x >> (8 * i));
}

template <class T>
inline T load_le(const void* p) {
  static_assert(std::is_integral_v<T> || std::is_enum_v<T>);
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t x = 0;
  for (size_t i = 0; i < sizeof(T); ++i) x |= static_cast<uint64_t>(b[i]) << (8 * i);
  return static_cast<T>(x);
}

class ByteWriter {
 public:
  ByteWriter() = default;
  explicit ByteWriter(size_t reserve) { b_.reserve(reserve); }

  template <class T>
  void put(T v) {
    const size_t at = b_.size();
    b_.resize(at + sizeof(T));
    store_le<T>(b_.data() + at, v);
  }
  // A u32 length, then the bytes.
  void put_bytes(std::span<const uint8_t> s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    put_raw(s.data(), s.size());
  }
  void put_string(const std::string& s) { put_bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
  void put_raw(const void* p, size_t n) {
    if (n > 0) std::memcpy(extend(n), p, n);
  }
  void put_f32(const float* p, int64_t n) { put_raw(p, static_cast<size_t>(n) * 4); }
  // Room for n bytes the caller fills in place (returns where they start).
  uint8_t* extend(size_t n) {
    const size_t at = b_.size();
    b_.resize(at + n);
    return b_.data() + at;
  }
  size_t size() const { return b_.size(); }
  std::vector<uint8_t>& bytes() { return b_; }

 private:
  std::vector<uint8_t> b_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> s) : s_(s) {}

  template <class T>
  bool get(T& v) {
    if (s_.size() - pos_ < sizeof(T)) return false;
    v = load_le<T>(s_.data() + pos_);
    pos_ += sizeof(T);
    return true;
  }
  // A length-prefixed field of at most max_len bytes.
  bool get_bytes(std::vector<uint8_t>& out, size_t max_len) {
    uint32_t n = 0;
    if (!get(n) || n > max_len || s_.size() - pos_ < n) return false;
    out.assign(s_.begin() + pos_, s_.begin() + pos_ + n);
    pos_ += n;
    return true;
  }
  bool get_string(std::string& out, size_t max_len) {
    uint32_t n = 0;
    if (!get(n) || n > max_len || s_.size() - pos_ < n) return false;
    out.assign(reinterpret_cast<const char*>(s_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  // The next n bytes, or false when fewer remain.
  bool take(uint64_t n, std::span<const uint8_t>& out) {
    if (n > s_.size() - pos_) return false;
    out = s_.subspan(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return true;
  }
  size_t pos() const { return pos_; }
  size_t remaining() const { return s_.size() - pos_; }

 private:
  std::span<const uint8_t> s_;
  size_t pos_ = 0;
};

}  // namespace yoco
