// A decode worker's constraint compiler (docs/design.md §3.2c): the vocabulary is read once per
// model, each distinct constraint is compiled once against it and kept (bounded by
// StructuredLimits::cache_bytes); TokenMask (token_mask.h) is one sequence's state over the result.
// Thread-safe: the Decode handlers compile, off the batcher thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/structured_output.h"
#include "structured/check.h"

namespace yoco {

struct CompiledConstraint;  // the grammar engine's, defined where it is used

class ConstraintCompiler {
 public:
  // vocab[id]: the bytes token id writes (structured/vocab.h), one per id of the model's
  // vocabulary; "" marks an id that never writes text (special, unused), which no mask allows
  // except as a stop token. stop_ids: the model's end-of-sequence ids.
  static Result<std::unique_ptr<ConstraintCompiler>> create(const std::vector<std::string>& vocab,
                                                            std::vector<int32_t> stop_ids,
                                                            StructuredLimits limits = {});
  ~ConstraintCompiler();

  // The compiled constraint (from the cache when seen before); INVALID_ARGUMENT naming `field`
  // when it does not compile within the limits.
  Result<std::shared_ptr<const CompiledConstraint>> compile(const StructuredOutput& s, std::string_view field);
  int vocab_size() const;

  struct Impl;

 private:
  explicit ConstraintCompiler(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // shared with a compile still running past its timeout
};

}  // namespace yoco
