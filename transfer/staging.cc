#include "transfer/staging.h"

#include <sys/mman.h>

#include <new>

#include "transfer/transport.h"

namespace yoco::transfer_detail {

StagingBuf alloc_staging(int64_t bytes) {
  void* p = nullptr;
  if (static_cast<size_t>(bytes) >= kHugePage) {
    const size_t len = (static_cast<size_t>(bytes) + kHugePage - 1) / kHugePage * kHugePage;
    p = std::aligned_alloc(kHugePage, len);
    if (p) (void)madvise(p, len, MADV_HUGEPAGE);  // a hint: without it the buffer still works
  } else {
    p = std::malloc(static_cast<size_t>(bytes));
  }
  if (p == nullptr) throw std::bad_alloc();
  return StagingBuf(static_cast<float*>(p));
}

Result<std::shared_ptr<StagingBuffers::Lease>> StagingBuffers::acquire(int64_t bytes,
                                                                       std::chrono::steady_clock::duration timeout) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_until(lock, std::chrono::steady_clock::now() + timeout,
                        [&] { return staged_bytes_ == 0 || staged_bytes_ + bytes <= max_bytes_; }))
      return transfer_error(TransferError::kTimeout, "put_rows: staging buffers stayed full");
    staged_bytes_ += bytes;
  }
  return std::make_shared<Lease>(this, bytes, take(bytes));
}

StagingBuf StagingBuffers::take(int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->first != bytes) continue;
      auto buf = std::move(it->second);
      cached_bytes_ -= bytes;
      cache_.erase(it);
      return buf;
    }
  }
  return alloc_staging(bytes);
}

void StagingBuffers::release(int64_t bytes, StagingBuf buf) {
  std::lock_guard<std::mutex> lock(mu_);
  staged_bytes_ -= bytes;
  cv_.notify_all();
  // Keep the latest buffers for the next chunks, oldest out.
  const int64_t cap = max_bytes_ / 2;
  if (!buf || bytes > cap) return;
  while (cached_bytes_ + bytes > cap) {
    cached_bytes_ -= cache_.front().first;
    cache_.erase(cache_.begin());
  }
  cached_bytes_ += bytes;
  cache_.emplace_back(bytes, std::move(buf));
}

int64_t StagingBuffers::staged_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return staged_bytes_;
}

int64_t StagingBuffers::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

}  // namespace yoco::transfer_detail
