#include "prefill_service/limits.h"

#include <string>

namespace yoco {

Status PrefillLimits::validate() const {
  if (chunk_tokens <= 0) return invalid_argument("chunk_tokens: must be > 0, got " + std::to_string(chunk_tokens));
  if (max_active <= 0) return invalid_argument("max_active: must be > 0, got " + std::to_string(max_active));
  if (max_queued_tokens <= 0)
    return invalid_argument("max_queued_tokens: must be > 0, got " + std::to_string(max_queued_tokens));
  if (committers <= 0) return invalid_argument("committers: must be > 0, got " + std::to_string(committers));
  if (retention_chunk <= 0)
    return invalid_argument("retention_chunk: must be > 0, got " + std::to_string(retention_chunk));
  if (commit_grace.count() < 0) return invalid_argument("commit_grace: must be >= 0");
  return Status::Ok();
}

}  // namespace yoco
