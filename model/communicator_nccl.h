// The Communicator over NCCL, for ranks that each own one GPU (a process or a thread per
// GPU). Buffers given to its collectives are device pointers. Target yoco_comm_nccl, built only
// with YOCO_CUDA where NCCL is found; this header includes neither CUDA nor NCCL.
//
// Each collective is enqueued on the stream and waited for, so a call returns with the data
// in place, like the in-process group. NCCL reduces each element once and broadcasts it, so
// the ranks get the same bits, and a sum repeats for a fixed topology and NCCL version; it is
// not the rank-order sum of the in-process group.
// NCCL cannot wake a peer in another process: abort() stops this rank's communicator, and a
// peer left waiting learns of it from its own timeout.
#pragma once

#include <array>
#include <chrono>
#include <memory>

#include "common/status.h"
#include "model/communicator.h"

namespace yoco {

// An ncclUniqueId: rank 0 makes one and hands it to the other ranks out of band.
struct NcclId {
  std::array<char, 128> bytes{};
};
Result<NcclId> make_nccl_id();

struct NcclOptions {
  // A collective not finished within this long aborts the communicator (DEADLINE_EXCEEDED);
  // zero waits forever.
  std::chrono::milliseconds timeout{0};
  void* stream = nullptr;  // the cudaStream_t collectives run on; null: the default stream
};

// Joins the group on the calling thread's current CUDA device (call cudaSetDevice first);
// blocks until all `world` ranks have joined.
Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclId& id, int rank, int world,
                                                             const NcclOptions& opt = {});

}  // namespace yoco
