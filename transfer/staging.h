// The sender's staging buffers, with no transport in them: put_rows copies the caller's rows
// into one so the caller's buffers are free on return. A budget (max bytes staged and not yet
// read by the transport) makes put_rows wait, and a cache keeps recent buffers for the next
// chunks (prefill chunks come in a few sizes; fresh pages cost a fault each).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "common/status.h"

namespace yoco::transfer_detail {

// Buffers of at least this size sit on transparent huge pages: UCX's cma read walks and pins
// the sender's pages, 4 KiB at a time otherwise (bench/README.md, transfer at memcpy speed).
constexpr size_t kHugePage = size_t{2} << 20;

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using StagingBuf = std::unique_ptr<float[], FreeDeleter>;

// A buffer of `bytes` (throws std::bad_alloc when there is no memory).
StagingBuf alloc_staging(int64_t bytes);

class StagingBuffers {
 public:
  // `max_bytes` staged at most (a larger single request still goes alone); cached buffers up
  // to half of it.
  explicit StagingBuffers(int64_t max_bytes) : max_bytes_(max_bytes) {}

  // One staged buffer: counted against the budget until destroyed (when the last operation
  // reading it completed), then cached.
  class Lease {
   public:
    Lease(StagingBuffers* owner, int64_t bytes, StagingBuf buf) : owner_(owner), bytes_(bytes), buf_(std::move(buf)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { owner_->release(bytes_, std::move(buf_)); }
    float* data() const { return buf_.get(); }
    int64_t bytes() const { return bytes_; }

   private:
    StagingBuffers* owner_;
    int64_t bytes_;
    StagingBuf buf_;
  };

  // A buffer of `bytes` once the budget allows (kTimeout after `timeout`); reuses a cached
  // buffer of exactly that size. The owner must outlive the lease.
  Result<std::shared_ptr<Lease>> acquire(int64_t bytes, std::chrono::steady_clock::duration timeout);

  int64_t staged_bytes() const;
  int64_t cached_bytes() const;

 private:
  void release(int64_t bytes, StagingBuf buf);
  StagingBuf take(int64_t bytes);

  const int64_t max_bytes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t staged_bytes_ = 0;
  std::vector<std::pair<int64_t, StagingBuf>> cache_;  // (bytes, buffer), oldest first
  int64_t cached_bytes_ = 0;
};

}  // namespace yoco::transfer_detail
