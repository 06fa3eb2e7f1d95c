// How much the prefill scheduler takes on (docs/architecture.md, rule 8): its step budget, the
// prompts it interleaves, its queue bound and committers, and the fault injection of the tests.
#pragma once

#include <chrono>
#include <cstdint>

#include "common/status.h"

namespace yoco {

struct PrefillLimits {
  int chunk_tokens = 512;                        // tokens computed per step, across all active prompts
  int max_active = 4;                            // prompts interleaved per step
  int64_t max_queued_tokens = int64_t{1} << 20;  // uncomputed tokens waiting or active; beyond: RESOURCE_EXHAUSTED
  int committers = 8;                            // threads waiting for commit acknowledgements
  int retention_chunk = 64;                      // C of the chunkwise gated-retention form
  // Slack past the reservation's lease for the commit acknowledgement (its wait must end).
  std::chrono::milliseconds commit_grace{5000};
  // Fault injection for tests and drills, off by default: every slice takes at least this long
  // (a slow or busy prefill), and the commit waits this long after the last rows and the state
  // were handed over (a slow network). They make each phase of a request long enough to
  // cancel, time out or kill a worker in on purpose (tests/cluster/cluster_test.cc).
  std::chrono::milliseconds inject_slice_delay{0};
  std::chrono::milliseconds inject_commit_delay{0};

  // Errors name the field.
  Status validate() const;
};

}  // namespace yoco
