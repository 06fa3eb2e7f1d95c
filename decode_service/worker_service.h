// The decode worker's internal service (proto/yoco/internal/v1/worker.proto): Decode reserves
// KV blocks, hands the router the transfer descriptor, waits for the prefill worker's
// validated commit, then runs the sequence in the continuous batcher and streams its tokens
// (with local_prefill, the colocated mode, the batcher prefills the prompt itself). Score and
// Describe serve the router's other needs; the worker has no public API of its own.
#pragma once

#include <atomic>

#include "decode_service/batcher.h"
#include "decode_service/metrics.h"
#include "model/kv_pool.h"
#include "proto/sampling_convert.h"
#include "structured/compiler.h"
#include "transfer/transport.h"
#include "yoco/internal/v1/worker.grpc.pb.h"

namespace yoco {

class DecodeWorkerService final : public internal::v1::DecodeWorker::Service {
 public:
  DecodeWorkerService(const Model& model, KvPool& pool, KvReceiver& receiver, ContinuousBatcher& batcher,
                      DecodeMetrics& metrics)
      : model_(model), pool_(pool), receiver_(receiver), batcher_(batcher), m_(metrics) {
    pool_.set_keep_released(share_prefixes_);
  }

  grpc::Status Decode(grpc::ServerContext* ctx, const internal::v1::DecodeRequest* req,
                      grpc::ServerWriter<internal::v1::DecodeEvent>* writer) override;
  grpc::Status GetLoad(grpc::ServerContext* ctx, const internal::v1::LoadRequest* req,
                       internal::v1::DecodeLoad* load) override;
  // Scoring runs in the batcher like any sequence (queued, preempted, under the pool's blocks):
  // the first token is its prompt, the rest are forced, computed in forward slices between decode
  // steps (docs/design.md §3.3).
  grpc::Status Score(grpc::ServerContext* ctx, const v1::ScoreRequest* req, v1::ScoreResponse* resp) override;
  grpc::Status Describe(grpc::ServerContext* ctx, const internal::v1::DescribeRequest* req,
                        v1::ModelInfo* info) override;

  // Draining: new Decode calls get UNAVAILABLE; running ones finish.
  void set_serving(bool serving) { serving_ = serving; }
  // Prefix sharing of pool blocks between sequences, and prefixes kept resident in the pool for
  // later prompts (on by default).
  void set_share_prefixes(bool on) {
    share_prefixes_ = on;
    pool_.set_keep_released(on);
  }
  // The residency summary GetLoad reports: at most this many pool block keys (0: none).
  void set_residency_keys(size_t n) { residency_keys_ = n; }
  // The longest lease a reservation gets; DecodeRequest.lease_ms above it (or 0) is clamped to it.
  void set_max_lease(std::chrono::milliseconds max_lease) { max_lease_ = max_lease; }
  // Compiles DecodeRequest.structured_output against the model's vocabulary (null: constraints
  // are refused with UNIMPLEMENTED). Must outlive the service.
  void set_constraint_compiler(ConstraintCompiler* c) { compiler_ = c; }
  // The gauges a /metrics scrape shows (batcher, pool, receiver), read now.
  void refresh_metrics();

 private:
  // Decode's stages: the request, the shipped state (reservation, commit), then the tokens.
  grpc::Status decode(grpc::ServerContext* ctx, const internal::v1::DecodeRequest* req,
                      grpc::ServerWriter<internal::v1::DecodeEvent>* writer);
  // Admission: the committed state blob becomes the sequence's state over the committed blocks.
  Result<SequenceState> admit(CommittedSequence& c);
  Result<DecodeRequest> to_request(const grpc::ServerContext& ctx, const internal::v1::DecodeRequest& req) const;
  grpc::Status receive_state(grpc::ServerContext* ctx, const internal::v1::DecodeRequest& req, DecodeRequest& dr,
                             grpc::ServerWriter<internal::v1::DecodeEvent>* writer, Clock::time_point t0);
  grpc::Status wait_committed(grpc::ServerContext* ctx, uint64_t rid, Clock::time_point lease,
                              Clock::time_point deadline, CommittedSequence& out);
  void share_prefix(DecodeRequest& dr);
  // The pool's keys of the whole blocks of prompt + generated (the prefix chain).
  std::vector<BlockKey> prefix_hashes(const DecodeRequest& dr) const;
  // The leading whole blocks this pool already holds, pinned for the reservation
  // (docs/design.md, resident prefixes); empty without prefix sharing.
  std::vector<int32_t> claim_resident(const DecodeRequest& dr);
  grpc::Status stream_tokens(grpc::ServerContext* ctx, const std::string& request_id, DecodeRequest dr,
                             grpc::ServerWriter<internal::v1::DecodeEvent>* writer, Clock::time_point t0);

  const Model& model_;
  KvPool& pool_;
  KvReceiver& receiver_;
  ContinuousBatcher& batcher_;
  DecodeMetrics& m_;
  std::atomic<bool> serving_{true};
  bool share_prefixes_ = true;
  size_t residency_keys_ = 4096;
  std::chrono::milliseconds max_lease_{30000};
  ConstraintCompiler* compiler_ = nullptr;
};

}  // namespace yoco
