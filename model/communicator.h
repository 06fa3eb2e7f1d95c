// Collectives between the ranks of a tensor-parallel group (the narrow interface every backend
// implements: in-process threads here, NCCL on GPUs). Every rank calls the same collectives in
// the same order with the same sizes; a rank that cannot go on calls abort() so that the others
// leave their collectives with an error instead of waiting forever.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "common/status.h"

namespace yoco {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // data[0..n) ← Σ over ranks of every rank's data[0..n), in place.
  virtual Status all_reduce_sum(float* data, size_t n) = 0;
  // recv[r·n .. (r+1)·n) ← rank r's send[0..n); recv holds world_size()·n floats.
  virtual Status all_gather(const float* send, size_t n, float* recv) = 0;
  virtual Status barrier() = 0;
  // Marks the group failed: collectives waiting now and every later one return UNAVAILABLE
  // naming `why`. Idempotent (the first reason wins); a group does not recover.
  virtual void abort(const Status& why) = 0;
};

// In-process group: rank r is a thread holding communicators[r]. The sum is deterministic:
// each element is added in rank order 0, 1, .., N−1 and every rank receives the same bits.
struct LocalGroupOptions {
  // A rank that waits longer than this for its peers aborts the group (DEADLINE_EXCEEDED);
  // zero waits forever (abort() is then the only way out).
  std::chrono::milliseconds timeout{0};
};

// The communicators share the group; any of them may outlive the others.
Result<std::vector<std::unique_ptr<Communicator>>> make_local_group(int world_size, const LocalGroupOptions& opt = {});

}  // namespace yoco
