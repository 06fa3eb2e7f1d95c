// Helpers the KV store's tests share (tests/unit/kv_store/): deterministic data, a fake backend
// that fails, stalls or lies on demand, and a tiny model's state for the cache cases.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kv_store/cache.h"
#include "kv_store/dir_store.h"
#include "kv_store/store.h"
#include "model/config.h"
#include "model/state.h"

namespace yoco::kv_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline constexpr uint64_t kFp = 0x1234abcd5678ef01ull;

inline std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

inline std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(g() & 0xff);
  return s;
}

inline std::vector<int32_t> iota_tokens(int n, int start = 1) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = start + i;
  return t;
}

// A get's outcome as text: the value, "<miss>" or "<error: ...>".
inline std::string value_of(const KvGetResult& r) {
  if (!r.ok()) return "<error: " + r.status().to_string() + ">";
  return r.value() ? *r.value() : "<miss>";
}

template <class T>
T ok_value(Result<T> r) {
  if (!r.ok()) {
    ADD_FAILURE() << r.status().to_string();
    return T{};
  }
  return std::move(r).value();
}

// "k" + the numbers joined by '-' (appends: GCC 12 warns falsely on "lit" + std::string&&).
inline std::string key_name(std::initializer_list<int> parts) {
  std::string s = "k";
  for (int p : parts) {
    if (s.size() > 1) s += '-';
    s += std::to_string(p);
  }
  return s;
}

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

inline std::unique_ptr<DirStore> open_dir(const std::string& root, int64_t max_bytes = int64_t{1} << 30) {
  DirStoreOptions o;
  o.root = root;
  o.max_bytes = max_bytes;
  auto s = DirStore::open(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

// A backend that fails, stalls or lies on demand.
class FakeStore final : public KvStore {
 public:
  std::atomic<bool> fail{false};
  std::atomic<bool> lie{false};  // returns other bytes than were put
  std::atomic<int> delay_ms{0};
  std::atomic<int> calls{0};

  KvGetResult get(std::string_view key) override {
    if (auto st = enter(); !st.ok()) return st;
    std::lock_guard<std::mutex> l(mu_);
    auto it = data_.find(std::string(key));
    if (it == data_.end()) return kv_miss();
    return KvValue(lie ? it->second + "!" : it->second);
  }
  Status put(std::string_view key, std::string_view value, std::chrono::seconds) override {
    YOCO_RETURN_IF_ERROR(enter());
    std::lock_guard<std::mutex> l(mu_);
    data_[std::string(key)] = std::string(value);
    return Status::Ok();
  }
  Status del(std::string_view key) override {
    YOCO_RETURN_IF_ERROR(enter());
    std::lock_guard<std::mutex> l(mu_);
    data_.erase(std::string(key));
    return Status::Ok();
  }
  Status set_add(std::string_view, std::string_view) override { return enter(); }
  Status set_remove(std::string_view, std::string_view) override { return enter(); }
  Result<std::vector<std::string>> set_members(std::string_view) override {
    YOCO_RETURN_IF_ERROR(enter());
    return std::vector<std::string>{};
  }
  std::string name() const override { return "fake"; }
  size_t size() {
    std::lock_guard<std::mutex> l(mu_);
    return data_.size();
  }

 private:
  Status enter() {
    ++calls;
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
    if (fail) return kv_unavailable("fake store down");
    return Status::Ok();
  }
  std::mutex mu_;
  std::map<std::string, std::string> data_;
};

inline ModelConfig tiny_config(int window) {
  ModelConfig c;
  c.dim = 16;
  c.n_layers = 2;
  c.hidden_dim = 32;
  c.n_self_heads = 2;
  c.n_attn_heads = 2;
  c.n_attn_kv_heads = 1;
  c.vocab_size = 64;
  c.n_self_layers = 1;
  c.sliding_window = window;
  c.max_seq_len = 4096;
  return c;
}

inline SequenceState random_state(const ModelConfig& c, int64_t n, uint32_t seed) {
  SequenceState st = make_sequence_state(c);
  st.position = n;
  st.k = random_floats(static_cast<size_t>(n) * c.kv_dim(), seed);
  st.v = random_floats(st.k.size(), seed + 1);
  for (auto& s : st.self) {
    if (c.is_swa()) {
      s.k = random_floats(s.k.size(), seed + 2);
      s.v = random_floats(s.v.size(), seed + 3);
      s.count = static_cast<int>(std::min<int64_t>(n, s.capacity));
      s.head = static_cast<int>((n - s.count) % s.capacity);
    } else {
      s.s = random_floats(s.s.size(), seed + 4);
    }
  }
  st.last_hidden = random_floats(c.dim, seed + 5);
  return st;
}

inline KvCacheOptions cache_options(const ModelConfig& c, int B, KvDType dtype = KvDType::kF32) {
  KvCacheOptions o;
  o.fingerprint = kFp;
  o.kv_dim = c.kv_dim();
  o.block_tokens = B;
  o.dtype = dtype;
  o.lookup_batch = 3;  // several batches in every walk
  return o;
}

}  // namespace yoco::kv_test
