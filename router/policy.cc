#include "router/policy.h"

#include <algorithm>

#include "common/checksum.h"

namespace yoco {

namespace {
bool excluded(const std::vector<std::string>& exclude, const std::string& a) {
  return std::find(exclude.begin(), exclude.end(), a) != exclude.end();
}
}  // namespace

uint64_t PrefillPicker::next() {  // xorshift64*
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  return state_ * 0x2545F4914F6CDD1Dull;
}

std::optional<size_t> PrefillPicker::pick(const std::vector<WorkerSnapshot>& workers,
                                          const std::vector<std::string>& exclude) {
  std::vector<size_t> ok;
  for (size_t i = 0; i < workers.size(); ++i)
    if (workers[i].healthy && !excluded(exclude, workers[i].address)) ok.push_back(i);
  if (ok.empty()) return std::nullopt;
  if (ok.size() == 1) return ok[0];
  const size_t a = ok[next() % ok.size()];
  size_t b = ok[next() % (ok.size() - 1)];
  if (b == a) b = ok.back();  // two distinct candidates
  return workers[a].queued_tokens <= workers[b].queued_tokens ? a : b;
}

std::optional<size_t> PrefillPicker::pick_affine(const std::vector<WorkerSnapshot>& workers, uint64_t prefix_hash,
                                                 int64_t max_extra_tokens, const std::vector<std::string>& exclude) {
  const auto balanced = pick(workers, exclude);
  if (!balanced) return balanced;
  std::optional<size_t> preferred;
  uint64_t best = 0;
  for (size_t i = 0; i < workers.size(); ++i) {
    if (!workers[i].healthy || excluded(exclude, workers[i].address)) continue;
    const uint64_t score = mix64(prefix_hash, fnv1a64(workers[i].address));
    if (!preferred || score > best) {
      preferred = i;
      best = score;
    }
  }
  if (workers[*preferred].queued_tokens <= workers[*balanced].queued_tokens + max_extra_tokens) return preferred;
  return balanced;
}

std::optional<size_t> pick_decode(const std::vector<WorkerSnapshot>& workers, int64_t rows_needed,
                                  const std::vector<std::string>& exclude) {
  std::optional<size_t> best;
  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerSnapshot& w = workers[i];
    if (!w.healthy || excluded(exclude, w.address)) continue;
    if (w.free_kv_blocks * w.kv_block_rows < rows_needed) continue;
    if (!best || w.free_kv_blocks > workers[*best].free_kv_blocks ||
        (w.free_kv_blocks == workers[*best].free_kv_blocks && w.running < workers[*best].running))
      best = i;
  }
  return best;
}

int64_t resident_prefix(std::span<const uint64_t> keys, const std::unordered_set<uint64_t>* resident) {
  if (!resident) return 0;
  int64_t n = 0;
  while (n < static_cast<int64_t>(keys.size()) && resident->count(keys[static_cast<size_t>(n)])) ++n;
  return n;
}

DecodeChoice residency(const WorkerSnapshot& w, size_t index, const std::vector<PromptChain>& chains) {
  DecodeChoice c{index, 0, 0};
  for (const PromptChain& p : chains) {
    if (p.block_rows != w.kv_block_rows) continue;
    c.prompt_blocks = static_cast<int64_t>(p.keys.size());
    c.resident_blocks = resident_prefix(p.keys, w.resident.get());
    break;
  }
  return c;
}

// Free blocks that hold nothing (the kept ones hold a cached prefix until evicted).
static int64_t empty_blocks(const WorkerSnapshot& w) {
  return std::max<int64_t>(0, w.free_kv_blocks - w.kept_kv_blocks);
}

std::optional<DecodeChoice> pick_decode_kv(const std::vector<WorkerSnapshot>& workers, int64_t rows_needed,
                                           const std::vector<PromptChain>& chains, const DecodeCost& cost,
                                           const std::vector<std::string>& exclude) {
  std::optional<DecodeChoice> best;
  double best_cost = 0;
  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerSnapshot& w = workers[i];
    if (!w.healthy || excluded(exclude, w.address) || w.kv_block_rows <= 0) continue;
    const DecodeChoice c = residency(w, i, chains);
    const int64_t added =
        std::max<int64_t>(0, (rows_needed + w.kv_block_rows - 1) / w.kv_block_rows - c.resident_blocks);
    // Room: the blocks it adds. Resident blocks a running sequence holds take nothing more; kept
    // ones are free blocks the claim takes, which the summary does not tell apart: where they
    // leave too little, the worker refuses the reservation and the request tries another.
    if (w.free_kv_blocks < added) continue;
    const int64_t used = std::max<int64_t>(0, w.total_kv_blocks - w.free_kv_blocks);
    const int64_t evicted = std::max<int64_t>(0, added - empty_blocks(w));
    const double x = cost.cost(c.prompt_blocks - c.resident_blocks, used + added + evicted);
    bool better = !best || x < best_cost;
    if (best && x == best_cost) {
      const WorkerSnapshot& b = workers[best->index];
      better = empty_blocks(w) > empty_blocks(b) || (empty_blocks(w) == empty_blocks(b) && w.running < b.running);
    }
    if (better) {
      best = c;
      best_cost = x;
    }
  }
  return best;
}

Status Admission::try_admit(int64_t prompt_tokens) {
  if (in_flight_ >= max_in_flight_)
    return Status(StatusCode::kResourceExhausted, "admission: " + std::to_string(in_flight_) +
                                                      " requests in flight (limit " + std::to_string(max_in_flight_) +
                                                      ")");
  if (queued_tokens_ + prompt_tokens > max_queued_tokens_)
    return Status(StatusCode::kResourceExhausted,
                  "admission: queued prompt tokens would exceed " + std::to_string(max_queued_tokens_));
  ++in_flight_;
  queued_tokens_ += prompt_tokens;
  return Status::Ok();
}

void Admission::release(int64_t prompt_tokens) {
  if (in_flight_ > 0) --in_flight_;
  queued_tokens_ = std::max<int64_t>(0, queued_tokens_ - prompt_tokens);
}

}  // namespace yoco
