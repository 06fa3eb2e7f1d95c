#include "model/communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>

namespace yoco {

namespace {

// A collective is two rendezvous. The first (abortable, with the timeout) waits until every
// rank has posted its buffers; the second waits until every rank is done reading and writing
// them, so that no rank returns and frees a buffer a peer still uses. Nobody can be missing
// from the second, because everyone passed the first and the work in between never blocks:
// it ignores abort() and the timeout, and so can never leave a peer writing into freed memory.
class LocalGroup {
 public:
  LocalGroup(int world, const LocalGroupOptions& opt) : world_(world), opt_(opt), posts_(world) {}

  int world() const { return world_; }

  Status all_reduce_sum(int rank, float* data, size_t n) {
    std::vector<Post> posts;
    YOCO_RETURN_IF_ERROR(post_and_meet(rank, {data, data, n}, "all_reduce_sum", posts));
    // Rank r owns elements [n·r/N, n·(r+1)/N) of every rank's buffer: it alone reads and
    // writes them, summing in rank order, so every rank receives the same bits.
    constexpr size_t kBlock = 1024;
    float acc[kBlock];
    const size_t begin = n * rank / world_, end = n * (rank + 1) / world_;
    for (size_t b0 = begin; b0 < end; b0 += kBlock) {
      const size_t m = std::min(kBlock, end - b0);
      std::memcpy(acc, posts[0].out + b0, m * sizeof(float));
      for (int q = 1; q < world_; ++q) {
        const float* src = posts[q].out + b0;
        for (size_t i = 0; i < m; ++i) acc[i] += src[i];
      }
      for (int q = 0; q < world_; ++q) std::memcpy(posts[q].out + b0, acc, m * sizeof(float));
    }
    finish();
    return Status::Ok();
  }

  Status all_gather(int rank, const float* send, size_t n, float* recv) {
    std::vector<Post> posts;
    YOCO_RETURN_IF_ERROR(post_and_meet(rank, {send, recv, n}, "all_gather", posts));
    for (int q = 0; q < world_; ++q)
      if (n > 0) std::memcpy(recv + static_cast<size_t>(q) * n, posts[q].in, n * sizeof(float));
    finish();
    return Status::Ok();
  }

  Status barrier(int rank) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!aborted_.ok()) return aborted_;
    return meet(lk, rank, "barrier", /*abortable=*/true);
  }

  void abort(int rank, const Status& why) {
    std::lock_guard<std::mutex> lk(mu_);
    abort_locked(rank, why);
  }

 private:
  struct Post {
    const float* in;
    float* out;
    size_t n;
  };

  Status post_and_meet(int rank, const Post& p, const char* op, std::vector<Post>& posts) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!aborted_.ok()) return aborted_;
    posts_[rank] = p;
    YOCO_RETURN_IF_ERROR(meet(lk, rank, op, /*abortable=*/true));
    // Every rank sees the same posts (nobody posts again before the second rendezvous, and
    // nobody posts at all once the group is aborted), so they all agree on a mismatch.
    for (int q = 0; q < world_; ++q)
      if (posts_[q].n != p.n)
        return abort_locked(rank, invalid_argument(std::string(op) + ": rank " + std::to_string(q) + " passed " +
                                                   std::to_string(posts_[q].n) + " elements, rank " +
                                                   std::to_string(rank) + " passed " + std::to_string(p.n)));
    posts = posts_;
    return Status::Ok();
  }

  void finish() {
    std::unique_lock<std::mutex> lk(mu_);
    (void)meet(lk, -1, "", /*abortable=*/false);
  }

  // A reusable barrier: the last rank to arrive starts a new generation.
  Status meet(std::unique_lock<std::mutex>& lk, int rank, const char* op, bool abortable) {
    const uint64_t gen = generation_;
    if (++arrived_ == world_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return Status::Ok();
    }
    auto done = [&] { return generation_ != gen || (abortable && !aborted_.ok()); };
    if (abortable && opt_.timeout.count() > 0) {
      if (!cv_.wait_for(lk, opt_.timeout, done)) {
        const Status late(StatusCode::kDeadlineExceeded, std::string(op) + ": rank " + std::to_string(rank) +
                                                             " waited " + std::to_string(opt_.timeout.count()) +
                                                             " ms for the other ranks");
        abort_locked(rank, late);
        return late;
      }
    } else {
      cv_.wait(lk, done);
    }
    if (generation_ != gen) return Status::Ok();  // everyone arrived (maybe just before an abort)
    return aborted_;
  }

  const Status& abort_locked(int rank, const Status& why) {
    if (aborted_.ok()) {
      aborted_ = Status(StatusCode::kUnavailable,
                        "tensor-parallel group aborted by rank " + std::to_string(rank) + ": " + why.to_string());
      cv_.notify_all();
    }
    return aborted_;
  }

  const int world_;
  const LocalGroupOptions opt_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  Status aborted_;
  std::vector<Post> posts_;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return g_->world(); }
  Status all_reduce_sum(float* data, size_t n) override { return g_->all_reduce_sum(rank_, data, n); }
  Status all_gather(const float* send, size_t n, float* recv) override { return g_->all_gather(rank_, send, n, recv); }
  Status barrier() override { return g_->barrier(rank_); }
  void abort(const Status& why) override { g_->abort(rank_, why); }

 private:
  std::shared_ptr<LocalGroup> g_;
  const int rank_;
};

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> make_local_group(int world_size, const LocalGroupOptions& opt) {
  if (world_size < 1) return invalid_argument("world_size must be >= 1, got " + std::to_string(world_size));
  if (opt.timeout.count() < 0) return invalid_argument("timeout must be >= 0");
  auto g = std::make_shared<LocalGroup>(world_size, opt);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < world_size; ++r) out.push_back(std::make_unique<LocalCommunicator>(g, r));
  return out;
}

}  // namespace yoco
