#include "router/model_info.h"

#include <chrono>

#include "common/log.h"

namespace yoco {

void ModelInfoCache::refresh() {
  const std::shared_ptr<const v1::ModelInfo> have = get();
  const std::vector<WorkerSnapshot> snap = decode_.snapshot();
  for (const auto& w : snap)
    if (have && w.healthy && w.fingerprint == have->fingerprint()) return;  // still served
  for (const auto& w : snap) {
    if (!w.healthy) continue;
    auto info = std::make_shared<v1::ModelInfo>();
    const grpc::Status st = calls_.describe(w.address, std::chrono::seconds(2), info.get());
    if (!st.ok()) {
      YOCO_LOG(LogLevel::kWarn, "describe failed",
               LogFields().kv("address", w.address).kv("error", st.error_message()));
      continue;
    }
    YOCO_LOG(LogLevel::kInfo, "serving model",
             LogFields()
                 .kv("fingerprint", info->fingerprint())
                 .kv("vocab_size", info->vocab_size())
                 .kv("max_seq_len", info->max_seq_len())
                 .kv("from", w.address));
    std::lock_guard<std::mutex> lock(mu_);
    info_ = std::move(info);
    return;
  }
}

std::shared_ptr<const v1::ModelInfo> ModelInfoCache::get() const {
  std::lock_guard<std::mutex> lock(mu_);
  return info_;
}

bool ModelInfoCache::same_model(const std::string& fingerprint) const {
  const auto info = get();
  return !info || fingerprint.empty() || info->fingerprint() == fingerprint;
}

}  // namespace yoco
