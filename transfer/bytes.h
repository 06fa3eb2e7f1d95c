// Little-endian byte writer and a bounds-checked reader for the transfer wire formats. The reader
// never reads past its span: every get reports failure instead, so hostile input is an error.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace yoco::transfer_detail {

class ByteWriter {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_integral_v<T>);
    for (size_t i = 0; i < sizeof(T); ++i) b_.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
  }
  void put_bytes(std::span<const uint8_t> s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    b_.insert(b_.end(), s.begin(), s.end());
  }
  void put_string(const std::string& s) {
    put_bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }
  void put_raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b_.insert(b_.end(), c, c + n);
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
    static_assert(std::is_integral_v<T>);
    if (s_.size() - pos_ < sizeof(T)) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < sizeof(T); ++i) x |= static_cast<uint64_t>(s_[pos_ + i]) << (8 * i);
    v = static_cast<T>(x);
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
  size_t pos() const { return pos_; }
  size_t remaining() const { return s_.size() - pos_; }

 private:
  std::span<const uint8_t> s_;
  size_t pos_ = 0;
};

}  // namespace yoco::transfer_detail
