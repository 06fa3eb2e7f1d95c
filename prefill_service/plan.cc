#include "prefill_service/plan.h"

#include <algorithm>

namespace yoco {

StepPlan plan(std::span<const PlanJob> waiting, std::span<const PlanJob> active, const PrefillLimits& limits) {
  StepPlan p;
  const size_t room = active.size() < static_cast<size_t>(limits.max_active) ? limits.max_active - active.size() : 0;
  p.admitted = std::min(room, waiting.size());
  int budget = limits.chunk_tokens;
  const size_t n_active = active.size() + p.admitted;
  for (size_t i = 0; i < n_active && budget > 0; ++i) {
    const PlanJob& j = i < active.size() ? active[i] : waiting[i - active.size()];
    const int n = static_cast<int>(std::min<int64_t>(budget, j.remaining));
    p.slices.push_back({i, n});
    budget -= n;
  }
  return p;
}

}  // namespace yoco
