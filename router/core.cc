#include "router/core.h"

#include <algorithm>

#include "common/checksum.h"

namespace yoco {

RouterCore::RouterCore(const Tokenizer* tokenizer, WorkerGroup& prefill, WorkerGroup& decode, ModelInfoCache& model,
                       RouterLimits limits, RouterMetrics& metrics, bool colocated)
    : tok_(tokenizer),
      prefill_(prefill),
      decode_(decode),
      model_(model),
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

std::shared_ptr<grpc::Channel> RouterCore::any_decode_channel() {
  for (const auto& w : decode_snapshot())
    if (w.healthy) return decode_.channel(w.address);
  return nullptr;
}

std::optional<size_t> RouterCore::pick_prefill(const std::vector<WorkerSnapshot>& workers,
                                               std::optional<uint64_t> prefix_hash,
                                               const std::vector<std::string>& exclude) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!prefix_hash || limits_.affinity_tokens <= 0) return picker_.pick(workers, exclude);
  return picker_.pick_affine(workers, *prefix_hash, limits_.affinity_max_extra_tokens, exclude);
}

uint64_t RouterCore::prefix_hash(std::span<const int32_t> tokens) const {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < tokens.size() && i < static_cast<size_t>(std::max(0, limits_.affinity_tokens)); ++i)
    h = mix64(h, static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])));
  return h;
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
