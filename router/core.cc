#include "router/core.h"

#include <algorithm>
#include <cstdlib>

#include "common/checksum.h"
#include "handoff/prefix_chain.h"

namespace yoco {

RouterCore::RouterCore(const Tokenizer* tokenizer, WorkerGroup& prefill, WorkerGroup& decode, ModelInfoCache& model,
                       WorkerCalls& calls, RouterLimits limits, RouterMetrics& metrics, bool colocated)
    : tok_(tokenizer),
      prefill_(prefill),
      decode_(decode),
      model_(model),
      calls_(calls),
      limits_(limits),
      m_(metrics),
      colocated_(colocated),
      admission_(limits.max_in_flight, limits.max_queued_tokens),
      picker_(std::random_device{}()),
      seeds_(std::random_device{}()) {}

Result<std::shared_ptr<const v1::ModelInfo>> RouterCore::model() const {
  auto info = model_.get();
  if (!info) return Status(StatusCode::kUnavailable, "no healthy decode worker has described the model yet");
  return info;
}

std::vector<WorkerSnapshot> RouterCore::decode_snapshot() const {
  std::vector<WorkerSnapshot> snap = decode_.snapshot();
  for (auto& w : snap)
    if (!model_.same_model(w.fingerprint)) w.healthy = false;
  return snap;
}

std::optional<std::string> RouterCore::any_decode_worker() const {
  for (const auto& w : decode_snapshot())
    if (w.healthy) return w.address;
  return std::nullopt;
}

std::optional<size_t> RouterCore::pick_prefill(const std::vector<WorkerSnapshot>& workers,
                                               std::optional<uint64_t> prefix_hash,
                                               const std::vector<std::string>& exclude) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!prefix_hash || limits_.affinity_tokens <= 0) return picker_.pick(workers, exclude);
  return picker_.pick_affine(workers, *prefix_hash, limits_.affinity_max_extra_tokens, exclude);
}

std::vector<PromptChain> RouterCore::decode_chains(std::span<const int32_t> tokens,
                                                   const std::vector<WorkerSnapshot>& workers) {
  std::vector<PromptChain> out;
  for (const WorkerSnapshot& w : workers) {
    if (!w.healthy || w.kv_block_rows <= 0) continue;
    if (std::any_of(out.begin(), out.end(), [&](const PromptChain& c) { return c.block_rows == w.kv_block_rows; }))
      continue;
    char* end = nullptr;
    const uint64_t fingerprint = std::strtoull(w.fingerprint.c_str(), &end, 16);
    if (w.fingerprint.empty() || *end != '\0') continue;
    PromptChain c{w.kv_block_rows, {}};
    for (const BlockKey& k : chain_keys(tokens, static_cast<int>(w.kv_block_rows), fingerprint))
      c.keys.push_back(k.fold64());
    out.push_back(std::move(c));
  }
  return out;
}

uint64_t RouterCore::prefix_hash(std::span<const int32_t> tokens) const {
  // The project's one prefix chain (handoff/prefix_chain.h) over the first affinity_tokens
  // tokens, as one block: prompts that start alike land on the same prefill worker.
  const size_t n = static_cast<size_t>(std::max(0, limits_.affinity_tokens));
  if (n == 0) return 0;
  return prefix_key(tokens.first(std::min(tokens.size(), n)), static_cast<int>(n), /*fingerprint=*/0).fold64();
}

Status RouterCore::try_admit(int64_t prompt_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  return admission_.try_admit(prompt_tokens);
}

void RouterCore::release(int64_t prompt_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  admission_.release(prompt_tokens);
}

int RouterCore::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return admission_.in_flight();
}

uint64_t RouterCore::next_seed() {
  std::lock_guard<std::mutex> lock(mu_);
  return seeds_();
}

}  // namespace yoco
