#include "model/communicator_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

namespace yoco {

namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclId::bytes), "NcclId must hold an ncclUniqueId");

Status nccl_error(const char* what, ncclResult_t r) {
  return Status(StatusCode::kUnavailable, std::string(what) + ": " + ncclGetErrorString(r));
}

Status cuda_error(const char* what, cudaError_t e) {
  return Status(StatusCode::kInternal, std::string(what) + ": " + cudaGetErrorString(e));
}

// The thread that issues the collectives owns the NCCL communicator: abort() from any other
// thread only raises a flag, which that thread turns into ncclCommAbort while it waits (or on
// its next call), so the communicator is never torn down under a running call.
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int world, const NcclOptions& opt, float* scratch)
      : comm_(comm),
        rank_(rank),
        world_(world),
        opt_(opt),
        stream_(static_cast<cudaStream_t>(opt.stream)),
        scratch_(scratch) {}
  ~NcclCommunicator() override {
    if (comm_ && abort_requested_) ncclCommAbort(comm_);
    else if (comm_) ncclCommDestroy(comm_);
    cudaFree(scratch_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  Status all_reduce_sum(float* data, size_t n) override {
    return run("all_reduce_sum", [&] { return ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream_); });
  }
  Status all_gather(const float* send, size_t n, float* recv) override {
    return run("all_gather", [&] { return ncclAllGather(send, recv, n, ncclFloat32, comm_, stream_); });
  }
  Status barrier() override { return all_reduce_sum(scratch_, 1); }
  void abort(const Status& why) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (reason_.ok())
      reason_ = Status(StatusCode::kUnavailable,
                       "tensor-parallel group aborted by rank " + std::to_string(rank_) + ": " + why.to_string());
    abort_requested_ = true;
  }

 private:
  template <class Enqueue>
  Status run(const char* op, Enqueue enqueue) {
    if (abort_requested_) return stop();
    if (const ncclResult_t r = enqueue(); r != ncclSuccess) return fail(nccl_error(op, r));
    const auto deadline = std::chrono::steady_clock::now() + opt_.timeout;
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return Status::Ok();
      if (e != cudaErrorNotReady) return fail(cuda_error(op, e));
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) != ncclSuccess || (async != ncclSuccess && async != ncclInProgress))
        return fail(nccl_error(op, async));
      if (abort_requested_) return stop();
      if (opt_.timeout.count() > 0 && std::chrono::steady_clock::now() > deadline)
        return fail(Status(StatusCode::kDeadlineExceeded, std::string(op) + ": rank " + std::to_string(rank_) +
                                                              " waited " + std::to_string(opt_.timeout.count()) +
                                                              " ms for the other ranks"));
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // This rank's own failure: it aborts the group and reports what went wrong here.
  Status fail(const Status& st) {
    abort(st);
    (void)stop();
    return st;
  }

  // Tears the communicator down (kernels still waiting on peers are killed) and reports why.
  Status stop() {
    if (comm_) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    std::lock_guard<std::mutex> lk(mu_);
    return reason_;
  }

  ncclComm_t comm_;
  const int rank_, world_;
  const NcclOptions opt_;
  const cudaStream_t stream_;
  float* scratch_;  // one device float for barrier()
  std::mutex mu_;
  Status reason_;
  std::atomic<bool> abort_requested_{false};
};

}  // namespace

Result<NcclId> make_nccl_id() {
  ncclUniqueId id;
  if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return nccl_error("ncclGetUniqueId", r);
  NcclId out;
  std::memcpy(out.bytes.data(), &id, sizeof(id));
  return out;
}

Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclId& id, int rank, int world,
                                                             const NcclOptions& opt) {
  if (world < 1) return invalid_argument("world must be >= 1, got " + std::to_string(world));
  if (rank < 0 || rank >= world)
    return invalid_argument("rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world) + ")");
  if (opt.timeout.count() < 0) return invalid_argument("timeout must be >= 0");
  ncclUniqueId uid;
  std::memcpy(&uid, id.bytes.data(), sizeof(uid));
  float* scratch = nullptr;
  if (const cudaError_t e = cudaMalloc(&scratch, sizeof(float)); e != cudaSuccess) return cuda_error("cudaMalloc", e);
  ncclComm_t comm = nullptr;
  if (const ncclResult_t r = ncclCommInitRank(&comm, world, uid, rank); r != ncclSuccess) {
    cudaFree(scratch);
    return nccl_error("ncclCommInitRank", r);
  }
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(comm, rank, world, opt, scratch));
}

}  // namespace yoco
