// The router's calls to its workers behind one narrow interface (docs/architecture.md, the
// router): the load polls and Describe that WorkerGroup and ModelInfoCache make, and a request's
// Decode, Prefill and Score. GrpcWorkerCalls, over the groups' channels, is the production one;
// the unit tests script an in-memory one (tests/unit/router/fake_workers.h), so the retry,
// migration and stall logic of GenerateCall runs in milliseconds without a server. The document
// RPCs (router/documents.h) still call their stubs directly.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "yoco/internal/v1/worker.grpc.pb.h"
#include "yoco/v1/yoco.pb.h"

namespace yoco {

class WorkerGroup;

// The client's call that worker calls are made for: they inherit its deadline and cancellation
// (gRPC: ClientContext::FromServerContext, which propagates both).
class CallParent {
 public:
  virtual ~CallParent() = default;
  // The client's own end: its deadline passed or it cancelled.
  virtual std::optional<grpc::Status> end() const = 0;
  // The context of one worker call made for it (used by GrpcWorkerCalls only).
  virtual std::unique_ptr<grpc::ClientContext> child() const = 0;
};

// A gRPC server call as the parent.
class ServerCallParent final : public CallParent {
 public:
  explicit ServerCallParent(grpc::ServerContext* ctx) : ctx_(ctx) {}
  std::optional<grpc::Status> end() const override;
  std::unique_ptr<grpc::ClientContext> child() const override;

 private:
  grpc::ServerContext* const ctx_;
};

// One open Decode stream. cancel() may come from any thread (the stall watch); read() and
// finish() only from the caller's.
class DecodeCall {
 public:
  virtual ~DecodeCall() = default;
  virtual bool read(internal::v1::DecodeEvent* ev) = 0;  // false: the stream ended
  virtual grpc::Status finish() = 0;                     // once, at the end
  virtual void cancel() = 0;
  // Cancels, reads what is still coming, finishes (the worker frees the reservation).
  void cancel_and_drain();
};

// One Prefill call: made, then waited for, so that another thread can cancel it meanwhile (the
// stall watch's Link). The request passed to WorkerCalls::prefill is read until wait() returns.
class PrefillCall {
 public:
  virtual ~PrefillCall() = default;
  virtual grpc::Status wait(internal::v1::PrefillResponse* resp) = 0;  // once
  virtual void cancel() = 0;                                           // any thread, before or during wait
};

class WorkerCalls {
 public:
  virtual ~WorkerCalls() = default;
  virtual std::unique_ptr<DecodeCall> open_decode(const std::string& address, const internal::v1::DecodeRequest& req,
                                                  const CallParent& parent) = 0;
  virtual std::unique_ptr<PrefillCall> prefill(const std::string& address, const internal::v1::PrefillRequest& req,
                                               const CallParent& parent) = 0;
  virtual grpc::Status score(const std::string& address, const v1::ScoreRequest& req, v1::ScoreResponse* resp,
                             const CallParent& parent) = 0;
  // Health and load (WorkerGroup's polls) and the model (ModelInfoCache), each bounded by `timeout`.
  virtual grpc::Status prefill_load(const std::string& address, std::chrono::milliseconds timeout,
                                    internal::v1::PrefillLoad* load) = 0;
  virtual grpc::Status decode_load(const std::string& address, std::chrono::milliseconds timeout,
                                   internal::v1::DecodeLoad* load) = 0;
  virtual grpc::Status describe(const std::string& address, std::chrono::milliseconds timeout, v1::ModelInfo* info) = 0;
};

// The production calls: gRPC stubs over the prefill and decode groups' channels.
class GrpcWorkerCalls final : public WorkerCalls {
 public:
  GrpcWorkerCalls(WorkerGroup& prefill, WorkerGroup& decode) : prefill_(prefill), decode_(decode) {}
  std::unique_ptr<DecodeCall> open_decode(const std::string& address, const internal::v1::DecodeRequest& req,
                                          const CallParent& parent) override;
  std::unique_ptr<PrefillCall> prefill(const std::string& address, const internal::v1::PrefillRequest& req,
                                       const CallParent& parent) override;
  grpc::Status score(const std::string& address, const v1::ScoreRequest& req, v1::ScoreResponse* resp,
                     const CallParent& parent) override;
  grpc::Status prefill_load(const std::string& address, std::chrono::milliseconds timeout,
                            internal::v1::PrefillLoad* load) override;
  grpc::Status decode_load(const std::string& address, std::chrono::milliseconds timeout,
                           internal::v1::DecodeLoad* load) override;
  grpc::Status describe(const std::string& address, std::chrono::milliseconds timeout, v1::ModelInfo* info) override;

 private:
  WorkerGroup& prefill_;
  WorkerGroup& decode_;
};

}  // namespace yoco
