// The prefill scheduler's step planning as a pure function (docs/architecture.md, rule 8): which
// waiting prompts start, and how many tokens each active prompt computes in the next step. The
// scheduler's threads, queues and cache stay outside; tests/unit/prefill_service/plan_test.cc
// pins the policy alone.
//
// The policy: prompts start first come first served (the waiting queue is already in priority
// order) while fewer than max_active compute; a step spends at most chunk_tokens, across the
// active prompts in arrival order, each getting a contiguous slice of what it has left, so the
// oldest prompt finishes first and a long prompt never starves a short one behind it for more
// than its share of one step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "prefill_service/limits.h"

namespace yoco {

// A prompt as the planner sees it.
struct PlanJob {
  int64_t remaining = 0;  // tokens not yet computed
};

struct PlannedSlice {
  size_t job = 0;  // index into the active prompts after admission (the admitted ones last)
  int tokens = 0;
};

struct StepPlan {
  size_t admitted = 0;               // waiting prompts, from the front, that start now
  std::vector<PlannedSlice> slices;  // in active order; prompts past the budget get none this step
};

// `waiting`: the queue's front (no more than limits.max_active can start in one step, so more need
// not be passed); `active`: the prompts computing, in arrival order. Only chunk_tokens and
// max_active of `limits` count.
StepPlan plan(std::span<const PlanJob> waiting, std::span<const PlanJob> active, const PrefillLimits& limits);

}  // namespace yoco
