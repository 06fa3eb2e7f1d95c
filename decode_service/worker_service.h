// The decode worker's internal service (proto/yoco/internal/v1/worker.proto): Decode reserves
// KV blocks, hands the router the transfer descriptor, waits for the prefill worker's
// validated commit, then runs the sequence in the continuous batcher and streams its tokens.
#pragma once

#include <atomic>

#include "decode_service/batcher.h"
#include "decode_service/metrics.h"
#include "model/kv_pool.h"
#include "proto/sampling_convert.h"
#include "transfer/transport.h"
#include "yoco/internal/v1/worker.grpc.pb.h"

namespace yoco {

class DecodeWorkerService final : public internal::v1::DecodeWorker::Service {
 public:
  DecodeWorkerService(const Model& model, KvPool& pool, KvReceiver& receiver, ContinuousBatcher& batcher,
                      DecodeMetrics& metrics)
      : model_(model), pool_(pool), receiver_(receiver), batcher_(batcher), m_(metrics) {}

  grpc::Status Decode(grpc::ServerContext* ctx, const internal::v1::DecodeRequest* req,
                      grpc::ServerWriter<internal::v1::DecodeEvent>* writer) override;
  grpc::Status GetLoad(grpc::ServerContext* ctx, const internal::v1::LoadRequest* req,
                       internal::v1::DecodeLoad* load) override;
  // Scoring runs in the batcher like any sequence (queued, batched, preempted, under the pool's
  // blocks): the first token is its prompt, the rest are forced one per step.
  grpc::Status Score(grpc::ServerContext* ctx, const v1::ScoreRequest* req, v1::ScoreResponse* resp) override;
  grpc::Status Describe(grpc::ServerContext* ctx, const internal::v1::DescribeRequest* req,
                        v1::ModelInfo* info) override;

  // Draining: new Decode calls get UNAVAILABLE; running ones finish.
  void set_serving(bool serving) { serving_ = serving; }
  // Prefix sharing of pool blocks between sequences (on by default).
  void set_share_prefixes(bool on) { share_prefixes_ = on; }

 private:
  grpc::Status decode(grpc::ServerContext* ctx, const internal::v1::DecodeRequest* req,
                      grpc::ServerWriter<internal::v1::DecodeEvent>* writer);

  const Model& model_;
  KvPool& pool_;
  KvReceiver& receiver_;
  ContinuousBatcher& batcher_;
  DecodeMetrics& m_;
  std::atomic<bool> serving_{true};
  bool share_prefixes_ = true;
};

}  // namespace yoco
