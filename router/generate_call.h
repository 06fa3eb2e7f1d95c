// One Generate, from request to final message (docs/architecture.md, a request's path). Stages,
// in order:
//   validate          prompt, documents, lengths, sampling, stops, logprobs: before anything is held
//   admit             admission (in-flight, queued tokens); the seed and request id are fixed here
//   attempt, repeated until the stream ends:
//     pick_decode     a decode worker of the served model with KV room for the whole sequence
//     open_decode     Decode: the worker reserves blocks (or, colocated, prefills locally)
//     prefill         a prefill worker fills the reservation over UCX (retried on others)
//     relay           tokens to the client: text, stop strings, logprobs, metrics
//     decode_failed   a decode worker lost mid-stream: migrate (re-prefill prompt + tokens
//                     already streamed on another one), so the client sees one stream
//     decode_stalled  a decode worker hung (silent while failing health polls) in any phase of
//                     the attempt: one StallWatch from open_decode to the end of relay, the
//                     Prefill call linked to it (it waits for that worker's commit); both calls
//                     are cancelled and the request migrates the same way (re-prefilled
//                     elsewhere when it had no token yet)
//   finish            the remaining text and the final message (reason, usage, timings)
// The workers are reached through RouterCore::calls (router/worker_calls.h) and the client through
// a GenerateSink, so the stages run in unit tests over in-memory workers and an in-memory client
// (tests/unit/router/generate_call_test.cc).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "router/core.h"
#include "router/stall_watch.h"
#include "router/stop_strings.h"
#include "router/worker_calls.h"
#include "yoco/internal/v1/worker.grpc.pb.h"
#include "yoco/v1/yoco.grpc.pb.h"

namespace yoco {

// The client's side of one Generate: where its responses go and (as the CallParent of the
// worker calls) its deadline and cancellation.
class GenerateSink : public CallParent {
 public:
  virtual bool write(const v1::GenerateResponse& resp) = 0;  // false: the client went away
};

// A gRPC server call as the sink (RouterService::Generate).
class ServerGenerateSink final : public GenerateSink {
 public:
  ServerGenerateSink(grpc::ServerContext* ctx, grpc::ServerWriter<v1::GenerateResponse>* writer)
      : parent_(ctx), writer_(writer) {}
  bool write(const v1::GenerateResponse& resp) override { return writer_->Write(resp); }
  std::optional<grpc::Status> end() const override { return parent_.end(); }
  std::unique_ptr<grpc::ClientContext> child() const override { return parent_.child(); }

 private:
  const ServerCallParent parent_;
  grpc::ServerWriter<v1::GenerateResponse>* const writer_;
};

class GenerateCall {
 public:
  // `fork`: the call's place among the n choices of one prompt (router/fork_groups.h).
  GenerateCall(RouterCore& core, GenerateSink& client, const v1::GenerateRequest& req, KeyLease* key = nullptr,
               ForkMember fork = {});
  ~GenerateCall();  // gives the admission back
  GenerateCall(const GenerateCall&) = delete;
  GenerateCall& operator=(const GenerateCall&) = delete;

  grpc::Status run();

 private:
  using Clock = std::chrono::steady_clock;
  // What a stage tells the attempt loop: go on, try again (other workers), or end the call.
  struct Step {
    enum Kind { kNext, kRetry, kEnd } kind = kNext;
    grpc::Status status;
    static Step next() { return {}; }
    static Step retry() { return {kRetry, grpc::Status::OK}; }
    static Step end(grpc::Status s) { return {kEnd, std::move(s)}; }
  };
  struct DecodePick {
    std::string address, fingerprint;
    int64_t blocks = 0;  // counted against the worker's free blocks until the attempt ends
  };
  std::optional<size_t> choose_decode(const std::vector<WorkerSnapshot>& snap, int64_t rows_needed,
                                      const std::vector<std::string>& exclude);

  grpc::Status validate();
  grpc::Status validate_prompt(const v1::ModelInfo& model);
  grpc::Status resolve_documents();
  grpc::Status validate_options(const v1::ModelInfo& model);
  grpc::Status validate_structured_output() const;
  grpc::Status admit();
  void prepare_stream();

  Step attempt();
  Step pick_decode(DecodePick* pick);
  // follow: a fork group's follower on its leader's worker (no reservation, no prefill).
  std::unique_ptr<DecodeCall> open_decode(const DecodePick& pick, bool follow = false);
  Step prefill(const DecodePick& pick, const std::string& reservation, DecodeCall& stream, StallWatch& stall);
  Step prefill_failed(const std::string& address, const grpc::Status& st);
  Step relay(DecodeCall& stream, const std::string& address, StallWatch& stall);
  bool relay_tokens(const internal::v1::Tokens& tokens);  // false: the client went away
  void fill_logprob_text(v1::LogprobEntry* e, int32_t chosen) const;
  Step decode_failed(const std::string& address, const grpc::Status& st);
  Step decode_stalled(const std::string& address);
  std::unique_ptr<StallWatch> watch(DecodeCall& stream, const std::string& address);
  Step finish(const std::string& reason);
  std::optional<grpc::Status> client_end() const;

  RouterCore& core_;
  GenerateSink& client_;
  const v1::GenerateRequest& req_;
  const Clock::time_point t0_ = Clock::now();
  const Tokenizer* const tok_;
  KeyLease* const key_;  // the API key's limits and documents; null without keys
  const ForkMember fork_;
  bool fork_joined_ = false, fork_published_ = false, fork_tried_ = false;

  // Fixed by validate/admit.
  std::vector<int32_t> prompt_;             // documents' tokens first, then the request's
  std::vector<int64_t> cached_candidates_;  // document ends: where a prefill may resume from the store
  int64_t max_tokens_ = 16;
  v1::SamplingParams sampling_;  // with its seed fixed, so a migrated stream draws the same
  std::string request_id_;
  bool admitted_ = false;
  uint64_t prefix_hash_ = 0;
  std::vector<int32_t> stop_ids_;
  std::optional<int32_t> eos_;
  std::unique_ptr<StopStringMatcher> stops_;
  std::unique_ptr<StreamDecoder> text_;

  // The stream so far.
  std::vector<int32_t> generated_;
  std::vector<std::string> bad_prefill_, bad_decode_;
  int64_t chosen_resident_blocks_ = 0;  // of the last choose_decode's pick: its predicted resident run
  int prefill_failures_ = 0, migrations_ = 0;
  std::string last_error_;
  v1::Timings timings_;
  int64_t cached_tokens_ = 0;
  std::optional<Clock::time_point> first_token_, last_token_;
  bool stop_hit_ = false, client_gone_ = false;
};

}  // namespace yoco
