#include "tokenizer/bpe.h"

#include <algorithm>
#include <climits>
#include <queue>

namespace yoco {

void PairMap::grow() {
  const size_t cap = keys_.empty() ? 1024 : keys_.size() * 2;
  std::vector<uint64_t> old_keys = std::move(keys_);
  std::vector<Value> old_values = std::move(values_);
  keys_.assign(cap, kEmpty);
  values_.assign(cap, Value{0, 0});
  mask_ = cap - 1;
  shift_ = 64 - __builtin_ctzll(cap);
  for (size_t i = 0; i < old_keys.size(); ++i) {
    if (old_keys[i] == kEmpty) continue;
    size_t j = slot(old_keys[i]);
    while (keys_[j] != kEmpty) j = (j + 1) & mask_;
    keys_[j] = old_keys[i];
    values_[j] = old_values[i];
  }
}

void PairMap::insert_or_assign(int32_t left, int32_t right, Value v) {
  if ((size_ + 1) * 2 > keys_.size()) grow();
  const uint64_t k = key(left, right);
  size_t i = slot(k);
  while (keys_[i] != kEmpty && keys_[i] != k) i = (i + 1) & mask_;
  if (keys_[i] == kEmpty) {
    keys_[i] = k;
    ++size_;
  }
  values_[i] = v;
}

PieceCache::PieceCache(size_t capacity) : per_shard_(std::max<size_t>(1, capacity / kShards)) {}

bool PieceCache::get(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t h = Hash()(piece);
  Shard& s = shards_[h % kShards];
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.map.find(piece);
  if (it == s.map.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void PieceCache::put(std::string_view piece, const int32_t* ids, size_t n) const {
  if (piece.size() > kMaxPieceBytes) return;
  const size_t h = Hash()(piece);
  Shard& s = shards_[h % kShards];
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.map.size() >= per_shard_) s.map.clear();  // bounded: start over rather than grow
  s.map.try_emplace(std::string(piece), ids, ids + n);
}

BpeModel::BpeModel(size_t cache_capacity) {
  if (cache_capacity > 0) cache_ = std::make_unique<PieceCache>(cache_capacity);
}

void BpeModel::set_byte_init(Place place, uint8_t byte, ByteInit init) { init_[place][byte] = std::move(init); }

void BpeModel::finish() {
  simple_ = true;
  for (int b = 0; b < 256 && simple_; ++b) {
    const ByteInit& first = init_[kOnly][b];
    simple_ = first.kind == InitKind::kId && first.ids.size() == 1;
    for (int p = 1; p < 4 && simple_; ++p) {
      simple_ = init_[p][b].kind == InitKind::kId && init_[p][b].ids == first.ids;
    }
    if (simple_) simple_ids_[b] = first.ids[0];
  }
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  symbols.clear();
  const size_t n = piece.size();
  if (simple_) {
    symbols.resize(n);
    for (size_t i = 0; i < n; ++i) symbols[i] = simple_ids_[static_cast<uint8_t>(piece[i])];
    return;
  }
  // tokenizers' merge_word, one byte-level character per byte.
  bool pending_unk = false;
  for (size_t i = 0; i < n; ++i) {
    const Place place = n == 1 ? kOnly : i == 0 ? kFirst : i + 1 == n ? kLast : kMiddle;
    const ByteInit& in = init_[place][static_cast<uint8_t>(piece[i])];
    switch (in.kind) {
      case InitKind::kId:
        if (pending_unk) symbols.push_back(unk_id_);
        pending_unk = false;
        symbols.push_back(in.ids[0]);
        break;
      case InitKind::kByteFallback:  // tokenizers leaves a pending unk where it is here
        symbols.insert(symbols.end(), in.ids.begin(), in.ids.end());
        break;
      case InitKind::kUnk:
        if (pending_unk && !fuse_unk_) symbols.push_back(unk_id_);
        pending_unk = true;
        break;
      case InitKind::kDrop:
        break;
    }
  }
  if (pending_unk) symbols.push_back(unk_id_);
}

void BpeModel::merge_reference(std::vector<int32_t>& s) const {
  while (s.size() >= 2) {
    size_t best = 0;
    const PairMap::Value* best_v = nullptr;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const PairMap::Value* v = pairs_.find(s[i], s[i + 1]);
      if (v && (!best_v || v->rank < best_v->rank)) best = i, best_v = v;
    }
    if (!best_v) return;
    s[best] = best_v->id;
    s.erase(s.begin() + static_cast<ptrdiff_t>(best) + 1);
  }
}

void BpeModel::merge(std::vector<int32_t>& s) const {
  constexpr size_t kLinearMax = 64;
  const size_t n0 = s.size();
  if (n0 < 2) return;
  if (n0 > kLinearMax) {
    merge_heap(s);
    return;
  }
  // ranks[i]: the rank of the pair (s[i], s[i+1]), INT32_MAX when it has none.
  int32_t ranks[kLinearMax];
  int32_t results[kLinearMax];
  size_t n = n0;
  auto look = [&](size_t i) {
    const PairMap::Value* v = pairs_.find(s[i], s[i + 1]);
    ranks[i] = v ? v->rank : INT32_MAX;
    results[i] = v ? v->id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) look(i);
  while (n >= 2) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == INT32_MAX) break;
    s[best] = results[best];
    for (size_t i = best + 1; i + 1 < n; ++i) s[i] = s[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) {
      ranks[i] = ranks[i + 1];
      results[i] = results[i + 1];
    }
    --n;
    if (best + 1 < n) look(best);
    if (best > 0) look(best - 1);
  }
  s.resize(n);
}

void BpeModel::merge_heap(std::vector<int32_t>& s) const {
  // tokenizers' Word::merge_all: a min-heap of (rank, position); entries made stale by an
  // earlier merge are recognised by the ids at their position and skipped.
  struct Entry {
    int32_t rank, pos, left, right, result;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto n = static_cast<int32_t>(s.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<char> alive(n, 1);
  for (int32_t i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
  std::vector<Entry> heap_storage;
  heap_storage.reserve(n);
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap(std::greater<>(), std::move(heap_storage));
  auto push = [&](int32_t a, int32_t b) {
    if (const PairMap::Value* v = pairs_.find(s[a], s[b])) heap.push({v->rank, a, s[a], s[b], v->id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    if (!alive[e.pos] || s[e.pos] != e.left) continue;
    const int32_t r = next[e.pos];
    if (r < 0 || s[r] != e.right) continue;
    s[e.pos] = e.result;
    alive[r] = 0;
    next[e.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = e.pos;
    if (prev[e.pos] >= 0) push(prev[e.pos], e.pos);
    if (next[e.pos] >= 0) push(e.pos, next[e.pos]);
  }
  size_t out = 0;
  for (int32_t i = 0; i >= 0 && i < n; i = next[i]) s[out++] = s[i];
  s.resize(out);
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (!whole_.empty()) {
    auto it = whole_.find(piece);
    if (it != whole_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = cache_ && piece.size() <= PieceCache::kMaxPieceBytes;
  if (cacheable && cache_->get(piece, out)) return;
  thread_local std::vector<int32_t> symbols;
  initial_symbols(piece, symbols);
  merge(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) cache_->put(piece, symbols.data(), symbols.size());
  if (symbols.capacity() > (1u << 16)) std::vector<int32_t>().swap(symbols);  // don't pin a huge piece
}

}  // namespace yoco
