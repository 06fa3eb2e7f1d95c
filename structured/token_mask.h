// One sequence's place in its constraint (docs/design.md §3.2c): which tokens may come next, as a
// mask on the logits, advanced by each token the sequence takes. A stop token is allowed only once
// the constraint is complete; the mask is `terminated` when the sequence must end.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "structured/compiler.h"

namespace yoco {

class TokenMask {
 public:
  // stop_ids: the request's stop tokens (EOS among them); empty: the sequence ends as soon as
  // the constraint is complete and nothing more may follow.
  TokenMask(std::shared_ptr<const CompiledConstraint> c, std::span<const int32_t> stop_ids);
  ~TokenMask();
  TokenMask(TokenMask&&) noexcept;
  TokenMask& operator=(TokenMask&&) noexcept;

  // Sets the logits of the tokens that may not come next to -infinity (n: the row's length;
  // ids past the compiled vocabulary are masked too).
  void apply(float* logits, int n);
  // The allowed tokens of the next step (the mask apply() uses), for tests.
  std::vector<int32_t> allowed();
  // Advances over a taken token; false (and no change) when the constraint does not allow it.
  bool accept(int32_t token);
  bool terminated() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace yoco
