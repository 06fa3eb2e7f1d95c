// Typed metrics of a decode worker (docs/architecture.md, rule 9; docs/design.md §6 names).
#pragma once

#include "common/metrics.h"

namespace yoco {

struct DecodeMetrics {
  explicit DecodeMetrics(MetricsRegistry &r);
  Histogram &ttft, &itl, &e2e, &queue, &transfer;
  Counter &prompt_tokens, &generation_tokens, &cached_tokens, &transfer_bytes, &transfer_failures, &migrated_in,
      &shared_blocks, &residency_blocks, &forks;
  Family<Counter> &requests, &transfer_refused;
  Gauge &running, &waiting, &kv_usage, &kv_free, &transfer_in_flight, &kv_shared;
  // Resident prefixes (docs/design.md, resident prefixes): bytes each request received, blocks
  // mapped from the pool instead, blocks kept for later prompts.
  Histogram &request_transfer_bytes;
  Counter &resident_blocks;
  Gauge &kv_kept;
};

}  // namespace yoco
