// The model the router serves, as the decode workers describe it (DecodeWorker.Describe): its
// fingerprint and the limits requests are validated against (vocab size, max_seq_len). The
// router holds no weights and no engine; it learns these from the workers at start-up and
// again when the healthy workers' model changes (a rolling update), and pairs only workers of
// that model.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "router/worker_calls.h"
#include "router/workers.h"
#include "yoco/v1/yoco.pb.h"

namespace yoco {

class ModelInfoCache {
 public:
  ModelInfoCache(WorkerGroup& decode, WorkerCalls& calls) : decode_(decode), calls_(calls) {}

  // After each poll of the decode workers: keeps the info while a healthy worker still reports
  // its fingerprint, else asks a healthy worker (the first model seen, or the one they moved to).
  void refresh();
  // nullptr until a decode worker has described its model.
  std::shared_ptr<const v1::ModelInfo> get() const;
  // True when `fingerprint` (a worker's load report) is the served model's, or either is unknown.
  bool same_model(const std::string& fingerprint) const;

 private:
  WorkerGroup& decode_;
  WorkerCalls& calls_;
  mutable std::mutex mu_;
  std::shared_ptr<const v1::ModelInfo> info_;
};

}  // namespace yoco
