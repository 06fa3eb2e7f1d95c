// The BPE model shared by both file formats: a piece's bytes become initial symbols, then the
// adjacent pair with the lowest rank is merged (leftmost on ties) until no pair has a rank.
//   tokenizer.json: a pair's rank is its line in "merges"; initial symbols come from the
//                   byte-level alphabet (with continuing_subword_prefix, end_of_word_suffix,
//                   byte_fallback and unk as tokenizers applies them).
//   tiktoken:       a pair's rank is the rank of its concatenation; initial symbols are the
//                   single-byte ranks. tiktoken's "merge the lowest-ranked concatenation" is
//                   the same rule once every (left, right) split of a token is a pair.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace yoco {

// Open-addressing map (left id, right id) -> (rank, merged id).
class PairMap {
 public:
  struct Value {
    int32_t rank, id;
  };
  void insert_or_assign(int32_t left, int32_t right, Value v);
  const Value* find(int32_t left, int32_t right) const {
    if (keys_.empty()) return nullptr;
    const uint64_t k = key(left, right);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) return &values_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t key(int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }
  size_t slot(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_) & mask_; }
  void grow();
  std::vector<uint64_t> keys_;
  std::vector<Value> values_;
  size_t size_ = 0, mask_ = 0;
  int shift_ = 64;
};

// Bounded, thread-safe memo of piece -> ids. Sharded so concurrent encoders rarely meet.
class PieceCache {
 public:
  static constexpr size_t kMaxPieceBytes = 256;
  explicit PieceCache(size_t capacity);
  bool get(std::string_view piece, std::vector<int32_t>& out) const;  // appends on a hit
  void put(std::string_view piece, const int32_t* ids, size_t n) const;

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
  };
  static constexpr size_t kShards = 16;
  size_t per_shard_;
  mutable std::array<Shard, kShards> shards_;
};

class BpeModel {
 public:
  // How a byte becomes initial symbols at each place in a piece (tokenizers looks the
  // character up with the prefix/suffix of that place; tiktoken uses the byte's rank).
  enum Place { kOnly = 0, kFirst = 1, kMiddle = 2, kLast = 3 };
  enum class InitKind : uint8_t { kDrop, kId, kByteFallback, kUnk };
  struct ByteInit {
    InitKind kind = InitKind::kDrop;
    std::vector<int32_t> ids;
  };

  explicit BpeModel(size_t cache_capacity = 1 << 16);

  void set_byte_init(Place place, uint8_t byte, ByteInit init);
  void set_unk(int32_t id, bool fuse) { unk_id_ = id, fuse_unk_ = fuse; }
  PairMap& pairs() { return pairs_; }
  // Pieces found whole in this table are emitted as one id before any merging
  // (tokenizers' ignore_merges, tiktoken's "encoder.get(piece)").
  void add_whole_piece(std::string bytes, int32_t id) { whole_.emplace(std::move(bytes), id); }
  void finish();  // call once after the setters

  // Appends the ids of one pre-tokenized piece (raw bytes).
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  // The initial symbols of a piece, before any merge.
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  // Merges in place: the fast version (linear scan for short words, a heap for long ones).
  void merge(std::vector<int32_t>& symbols) const;
  // The plain version it is tested against: rescan every pair after every merge.
  void merge_reference(std::vector<int32_t>& symbols) const;

 private:
  void merge_heap(std::vector<int32_t>& symbols) const;

  std::array<std::array<ByteInit, 256>, 4> init_;
  std::array<int32_t, 256> simple_ids_{};  // valid when simple_: one id per byte everywhere
  bool simple_ = false;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  PairMap pairs_;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> whole_;
  std::unique_ptr<PieceCache> cache_;
};

}  // namespace yoco
