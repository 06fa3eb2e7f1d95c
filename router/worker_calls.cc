#include "router/worker_calls.h"

#include "router/call_util.h"
#include "router/workers.h"

namespace yoco {
namespace {

class GrpcDecodeCall final : public DecodeCall {
 public:
  GrpcDecodeCall(const std::shared_ptr<grpc::Channel>& channel, const internal::v1::DecodeRequest& req,
                 std::unique_ptr<grpc::ClientContext> ctx)
      : ctx_(std::move(ctx)), reader_(internal::v1::DecodeWorker::NewStub(channel)->Decode(ctx_.get(), req)) {}
  bool read(internal::v1::DecodeEvent* ev) override { return reader_->Read(ev); }
  grpc::Status finish() override { return reader_->Finish(); }
  void cancel() override { ctx_->TryCancel(); }

 private:
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReader<internal::v1::DecodeEvent>> reader_;
};

class GrpcPrefillCall final : public PrefillCall {
 public:
  GrpcPrefillCall(std::shared_ptr<grpc::Channel> channel, const internal::v1::PrefillRequest& req,
                  std::unique_ptr<grpc::ClientContext> ctx)
      : channel_(std::move(channel)), req_(req), ctx_(std::move(ctx)) {}
  grpc::Status wait(internal::v1::PrefillResponse* resp) override {
    return internal::v1::PrefillWorker::NewStub(channel_)->Prefill(ctx_.get(), req_, resp);
  }
  void cancel() override { ctx_->TryCancel(); }

 private:
  const std::shared_ptr<grpc::Channel> channel_;
  const internal::v1::PrefillRequest& req_;
  const std::unique_ptr<grpc::ClientContext> ctx_;
};

std::unique_ptr<grpc::ClientContext> bounded(std::chrono::milliseconds timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  return ctx;
}

}  // namespace

std::optional<grpc::Status> ServerCallParent::end() const { return client_end(ctx_); }

std::unique_ptr<grpc::ClientContext> ServerCallParent::child() const {
  return grpc::ClientContext::FromServerContext(*ctx_);
}

void DecodeCall::cancel_and_drain() {
  cancel();
  internal::v1::DecodeEvent ev;
  while (read(&ev)) {
  }
  finish();
}

std::unique_ptr<DecodeCall> GrpcWorkerCalls::open_decode(const std::string& address,
                                                         const internal::v1::DecodeRequest& req,
                                                         const CallParent& parent) {
  return std::make_unique<GrpcDecodeCall>(decode_.channel(address), req, parent.child());
}

std::unique_ptr<PrefillCall> GrpcWorkerCalls::prefill(const std::string& address,
                                                      const internal::v1::PrefillRequest& req,
                                                      const CallParent& parent) {
  return std::make_unique<GrpcPrefillCall>(prefill_.channel(address), req, parent.child());
}

grpc::Status GrpcWorkerCalls::score(const std::string& address, const v1::ScoreRequest& req, v1::ScoreResponse* resp,
                                    const CallParent& parent) {
  const std::unique_ptr<grpc::ClientContext> ctx = parent.child();
  return internal::v1::DecodeWorker::NewStub(decode_.channel(address))->Score(ctx.get(), req, resp);
}

grpc::Status GrpcWorkerCalls::prefill_load(const std::string& address, std::chrono::milliseconds timeout,
                                           internal::v1::PrefillLoad* load) {
  const auto ctx = bounded(timeout);
  return internal::v1::PrefillWorker::NewStub(prefill_.channel(address))
      ->GetLoad(ctx.get(), internal::v1::LoadRequest(), load);
}

grpc::Status GrpcWorkerCalls::decode_load(const std::string& address, std::chrono::milliseconds timeout,
                                          internal::v1::DecodeLoad* load) {
  const auto ctx = bounded(timeout);
  return internal::v1::DecodeWorker::NewStub(decode_.channel(address))
      ->GetLoad(ctx.get(), internal::v1::LoadRequest(), load);
}

grpc::Status GrpcWorkerCalls::describe(const std::string& address, std::chrono::milliseconds timeout,
                                       v1::ModelInfo* info) {
  const auto ctx = bounded(timeout);
  return internal::v1::DecodeWorker::NewStub(decode_.channel(address))
      ->Describe(ctx.get(), internal::v1::DescribeRequest(), info);
}

}  // namespace yoco
