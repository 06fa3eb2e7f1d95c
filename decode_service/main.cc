// yoco-decode: a decode worker. Serves the internal DecodeWorker service (KV blocks reserved
// for a prefill worker, filled over UCX, then continuous batching; proto/yoco/internal/v1) and,
// for direct use without a router, the public yoco.v1 API with local prefill. gRPC health and
// reflection, /metrics, graceful SIGTERM drain.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "common/checksum.h"
#include "common/flags.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/process.h"
#include "decode_service/batcher.h"
#include "proto/grpc_util.h"
#include "decode_service/metrics.h"
#include "decode_service/stream_pump.h"
#include "decode_service/worker_service.h"
#include "transfer/ucx_transport.h"
#include "tokenizer/tokenizer.h"
#include "yoco/v1/yoco.grpc.pb.h"

namespace yoco {
namespace {


class YocoService final : public v1::Yoco::Service {
 public:
  YocoService(const Model& model, const Tokenizer* tok, ContinuousBatcher& batcher, DecodeMetrics& m)
      : model_(model), tok_(tok), batcher_(batcher), m_(m) {}

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    const auto t0 = Clock::now();
    grpc::Status st = generate(ctx, req, writer, t0);
    m_.requests.with({grpc_code_label(st.error_code())}).inc();
    m_.e2e.observe(std::chrono::duration<double>(Clock::now() - t0).count());
    return st;
  }

  grpc::Status Score(grpc::ServerContext*, const v1::ScoreRequest* req, v1::ScoreResponse* resp) override {
    auto ids = input_ids(req->input_case() == v1::ScoreRequest::kText, req->text(), req->tokens(), "input");
    if (!ids.ok()) return to_grpc(ids.status());
    auto lp = model_.score(ids.value());
    if (!lp.ok()) return to_grpc(lp.status());
    double sum = 0;
    for (int32_t t : ids.value()) resp->add_token_ids(t);
    for (float x : lp.value()) {
      resp->add_token_logprobs(x);
      sum += x;
    }
    resp->set_sum_logprob(sum);
    resp->set_perplexity(std::exp(-sum / static_cast<double>(lp->size())));
    return grpc::Status::OK;
  }

  grpc::Status Tokenize(grpc::ServerContext*, const v1::TokenizeRequest* req, v1::TokenizeResponse* resp) override {
    if (!tok_) return {grpc::StatusCode::FAILED_PRECONDITION, "the model directory has no tokenizer"};
    for (int32_t t : tok_->encode(req->text(), req->allow_special(), req->add_bos())) resp->add_ids(t);
    return grpc::Status::OK;
  }

  grpc::Status Detokenize(grpc::ServerContext*, const v1::DetokenizeRequest* req, v1::DetokenizeResponse* resp) override {
    if (!tok_) return {grpc::StatusCode::FAILED_PRECONDITION, "the model directory has no tokenizer"};
    std::vector<int32_t> ids(req->ids().begin(), req->ids().end());
    auto text = tok_->decode_checked(ids, req->skip_special());
    if (!text.ok()) return to_grpc(text.status());
    resp->set_text(text.value());
    return grpc::Status::OK;
  }

  grpc::Status GetModelInfo(grpc::ServerContext*, const v1::GetModelInfoRequest*, v1::ModelInfo* info) override {
    const ModelConfig& c = model_.config();
    info->set_fingerprint(hex64(model_.fingerprint()));
    info->set_arch(c.arch == Arch::kYoco ? "yoco" : "transformer");
    info->set_params_json(c.to_json().dump());
    info->set_vocab_size(c.vocab_size);
    info->set_max_seq_len(c.max_seq_len);
    info->set_n_layers(c.n_layers);
    info->set_n_self_layers(c.n_self_layers);
    info->set_n_loops(c.n_loops);
    info->set_sliding_window(c.sliding_window);
    info->set_kv_bytes_per_token(c.kv_bytes_per_token());
    if (tok_ && tok_->bos_id()) info->set_bos_id(*tok_->bos_id());
    if (tok_ && tok_->eos_id()) info->set_eos_id(*tok_->eos_id());
    return grpc::Status::OK;
  }

 private:
  Result<std::vector<int32_t>> input_ids(bool is_text, const std::string& text, const v1::TokenIds& tokens,
                                         const char* field) const {
    std::vector<int32_t> ids;
    if (is_text) {
      if (!tok_) return failed_precondition(std::string(field) + ".text: the model directory has no tokenizer");
      ids = tok_->encode(text, false, tok_->add_bos_token());
    } else {
      ids.assign(tokens.ids().begin(), tokens.ids().end());
    }
    if (ids.empty()) return invalid_argument(std::string(field) + ": empty");
    return ids;
  }

  grpc::Status generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer, Clock::time_point t0) {
    if (req->document_ids_size() > 0)
      return {grpc::StatusCode::UNIMPLEMENTED, "document_ids: cached documents are served through yoco-router"};
    if (req->stop_size() > 0)
      return {grpc::StatusCode::UNIMPLEMENTED, "stop: stop strings are handled by yoco-router; send them there"};
    auto ids = input_ids(req->prompt_case() == v1::GenerateRequest::kText, req->text(), req->tokens(), "prompt");
    if (!ids.ok()) return to_grpc(ids.status());

    DecodeRequest dr;
    dr.prompt = ids.value();
    dr.max_tokens = req->max_tokens() == 0 ? 16 : static_cast<int>(req->max_tokens());
    auto sampling = sampling_from_proto(req->sampling());
    if (!sampling.ok()) return to_grpc(sampling.status());
    dr.sampling = sampling.value();
    dr.stop_token_ids.assign(req->stop_token_ids().begin(), req->stop_token_ids().end());
    if (tok_ && tok_->eos_id() && !req->ignore_eos()) dr.stop_token_ids.push_back(*tok_->eos_id());
    const auto deadline = ctx->deadline();
    if (deadline != std::chrono::system_clock::time_point::max())
      dr.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(deadline - std::chrono::system_clock::now());

    dr.logprobs = static_cast<int>(std::min<uint32_t>(req->logprobs(), 1000));
    dr.priority = req->priority();
    m_.prompt_tokens.inc(static_cast<double>(ids->size()));

    std::unique_ptr<StreamDecoder> text;
    if (tok_) text = std::make_unique<StreamDecoder>(*tok_, /*skip_special=*/true);
    int32_t last_token = -1;
    std::optional<Clock::time_point> last;
    auto pumped = pump_tokens(ctx, batcher_, std::move(dr),
                              [&](const std::vector<int32_t>& batch, const std::vector<TokenLogprobs>& lps) {
                                const auto now = Clock::now();
                                if (!last) {
                                  m_.ttft.observe(std::chrono::duration<double>(now - t0).count());
                                } else {
                                  m_.itl.observe(std::chrono::duration<double>(now - *last).count() / batch.size());
                                }
                                last = now;
                                v1::GenerateResponse resp;
                                auto* delta = resp.mutable_delta();
                                for (int32_t t : batch) {
                                  delta->add_token_ids(t);
                                  if (text) *delta->mutable_text() += text->push(t);
                                }
                                for (const auto& lp : lps) fill_logprobs(lp, delta->add_logprobs());
                                last_token = batch.back();
                                m_.generation_tokens.inc(static_cast<double>(batch.size()));
                                return writer->Write(resp);
                              });
    if (!pumped.ok()) return to_grpc(pumped.status());
    const FinishInfo& done = pumped->info;
    m_.queue.observe(done.queue_seconds);
    if (!done.status.ok()) return to_grpc(done.status);
    if (pumped->client_gone) return {grpc::StatusCode::CANCELLED, "the client went away"};
    v1::GenerateResponse resp;
    if (text) {
      const std::string rest = text->flush();
      if (!rest.empty()) {
        resp.mutable_delta()->set_text(rest);
        writer->Write(resp);
        resp.Clear();
      }
    }
    auto* fin = resp.mutable_final();
    fin->set_request_id(req->request_id());
    const bool eos = tok_ && tok_->eos_id() && !req->ignore_eos() && done.reason == "stop" && last_token == *tok_->eos_id();
    fin->set_finish_reason(done.reason == "length" ? v1::FINISH_REASON_LENGTH
                           : eos                   ? v1::FINISH_REASON_EOS
                                                   : v1::FINISH_REASON_STOP);
    fin->mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(done.prompt_tokens));
    fin->mutable_usage()->set_completion_tokens(static_cast<uint32_t>(done.completion_tokens));
    fin->mutable_timings()->set_queue_seconds(done.queue_seconds);
    if (pumped->first_token)
      fin->mutable_timings()->set_first_token_seconds(std::chrono::duration<double>(*pumped->first_token - t0).count());
    fin->mutable_timings()->set_total_seconds(std::chrono::duration<double>(Clock::now() - t0).count());
    writer->Write(resp);
    return grpc::Status::OK;
  }

  const Model& model_;
  const Tokenizer* tok_;
  ContinuousBatcher& batcher_;
  DecodeMetrics& m_;
};

int run(int argc, char** argv) {
  auto f = Flags::parse(argc, argv, 1,
                        {"model", "listen", "metrics-listen", "kv-blocks", "block-size", "max-running", "max-waiting",
                         "threads", "port-file", "drain-seconds", "config", "ucx-listen", "ucx-advertise", "ucx-transports",
                         "ucx-no-peer-error-handling", "no-prefix-sharing", "device", "cuda-kv-blocks", "cuda-max-context",
                         "cuda-graphs"},
                        {"ucx-no-peer-error-handling", "no-prefix-sharing", "cuda-graphs"});
  if (!f.ok()) {
    std::fprintf(stderr, "yoco-decode: %s\n", f.status().message().c_str());
    return 2;
  }
  auto num = [&](const char* name, int64_t def) -> int64_t {
    auto v = f->get_int(name, def);
    if (!v.ok()) {
      std::fprintf(stderr, "yoco-decode: %s\n", v.status().message().c_str());
      std::exit(2);
    }
    return v.value();
  };
  if (!f->has("model")) {
    std::fprintf(stderr, "yoco-decode: --model: required\n");
    return 2;
  }
  auto model = Model::load(f->get("model"));
  if (!model.ok()) {
    std::fprintf(stderr, "yoco-decode: %s\n", model.status().message().c_str());
    return 1;
  }
  if ((*model)->config().is_transformer()) {  // its state has no hand-off format
    std::fprintf(stderr, "yoco-decode: --model: arch \"transformer\" is the benchmark baseline; the cluster serves arch \"yoco\"\n");
    return 2;
  }
  std::unique_ptr<Tokenizer> tok;
  if (auto t = Tokenizer::load(f->get("model")); t.ok()) tok = std::move(t).value();
  auto pool = KvPool::create(static_cast<int>(num("kv-blocks", 4096)), static_cast<int>(num("block-size", 32)),
                             (*model)->config().kv_dim());
  if (!pool.ok()) {
    std::fprintf(stderr, "yoco-decode: %s\n", pool.status().message().c_str());
    return 2;
  }
  BatcherLimits lim;
  lim.max_running = static_cast<int>(num("max-running", 32));
  lim.max_waiting = static_cast<int>(num("max-waiting", 256));
  // --device cuda: the batcher runs on the GPU engine; shipped states still arrive in the host
  // pool (the UCX receive buffer) and move to the device when admitted.
  auto device = parse_device_flag(f->get("device", "cpu"));
  if (!device.ok()) {
    std::fprintf(stderr, "yoco-decode: %s\n", device.status().message().c_str());
    return 2;
  }
  EngineOptions eo;
  eo.device = *device;
  eo.threads = static_cast<int>(num("threads", 0));
  eo.cuda.max_sequences = eo.cuda.max_batch = lim.max_running;
  eo.cuda.max_chunk_tokens = lim.prefill.chunk_tokens;
  eo.cuda.max_context = std::min<int64_t>(num("cuda-max-context", 32768), (*model)->config().max_seq_len);
  eo.cuda.kv_blocks = static_cast<int>(num("cuda-kv-blocks", 4096));
  eo.cuda.cuda_graphs = f->get_bool("cuda-graphs");
  auto made = make_engine(**model, pool->get(), eo);
  if (!made.ok()) {
    std::fprintf(stderr, "yoco-decode: --device %s: %s\n", f->get("device").c_str(), made.status().message().c_str());
    return 1;
  }
  std::unique_ptr<Engine> engine = std::move(made).value();
  ContinuousBatcher batcher(**model, **pool, lim, engine.get());

  // The UCX receiver: the pool is registered once; prefill workers write into reserved blocks.
  UcxReceiverOptions ro;
  auto ucx_hp = parse_listen_address(f->get("ucx-listen", "127.0.0.1:0"), "ucx-listen");
  if (!ucx_hp.ok()) {
    std::fprintf(stderr, "yoco-decode: %s\n", ucx_hp.status().message().c_str());
    return 2;
  }
  ro.listen_host = ucx_hp->first;
  ro.listen_port = ucx_hp->second;
  ro.advertise_host = f->get("ucx-advertise");
  ro.transports = f->get("ucx-transports");
  ro.peer_error_handling = !f->get_bool("ucx-no-peer-error-handling");
  auto receiver = make_ucx_receiver(**pool, (*model)->config(), (*model)->fingerprint(), ro);
  if (!receiver.ok()) {
    std::fprintf(stderr, "yoco-decode: UCX receiver: %s\n", receiver.status().message().c_str());
    return 1;
  }
  batcher.start();

  MetricsRegistry registry;
  DecodeMetrics metrics(registry);
  auto refresh_gauges = [&] {
    const TransferMetricsSnapshot t = (*receiver)->metrics().snapshot();
    metrics.transfer_bytes.inc(std::max(0.0, static_cast<double>(t.bytes) - metrics.transfer_bytes.value()));
    metrics.transfer_failures.inc(std::max(0.0, static_cast<double>(t.failures) - metrics.transfer_failures.value()));
    metrics.transfer_in_flight.set(static_cast<double>((*receiver)->in_flight()));
    metrics.kv_shared.set((*pool)->shared_blocks());
    metrics.running.set(batcher.running());
    metrics.waiting.set(batcher.waiting());
    const double free = (*pool)->free_blocks();
    metrics.kv_free.set(free);
    metrics.kv_usage.set(1.0 - free / (*pool)->total_blocks());
  };
  auto metrics_hp = parse_listen_address(f->get("metrics-listen", "127.0.0.1:0"), "metrics-listen");
  if (!metrics_hp.ok()) {
    std::fprintf(stderr, "yoco-decode: %s\n", metrics_hp.status().message().c_str());
    return 2;
  }
  auto http = HttpServer::start(metrics_hp->first, static_cast<uint16_t>(metrics_hp->second),
                                {{"/metrics", [&] {
                                    refresh_gauges();
                                    return HttpResponse{200, kPrometheusContentType, registry.expose()};
                                  }}});
  if (!http.ok()) {
    std::fprintf(stderr, "yoco-decode: %s\n", http.status().message().c_str());
    return 1;
  }

  YocoService service(**model, tok.get(), batcher, metrics);
  DecodeWorkerService worker(**model, **pool, **receiver, batcher, metrics);
  worker.set_share_prefixes(!f->get_bool("no-prefix-sharing"));
  int port = 0;
  std::unique_ptr<grpc::Server> server = start_grpc_server(f->get("listen", "127.0.0.1:0"), {&service, &worker}, &port);
  if (!server) {
    std::fprintf(stderr, "yoco-decode: cannot listen on %s\n", f->get("listen", "127.0.0.1:0").c_str());
    return 1;
  }
  YOCO_LOG(LogLevel::kInfo, "yoco-decode serving",
           LogFields().kv("grpc_port", port).kv("metrics_port", (*http)->port()).kv("ucx", (*receiver)->address())
               .kv("model", f->get("model")).kv("device", engine->device()));
  if (f->has("port-file")) {
    Status st = write_port_file(f->get("port-file"), Json(Json::Object{{"grpc_port", Json(port)},
                                                                     {"metrics_port", Json((*http)->port())},
                                                                     {"ucx_address", Json((*receiver)->address())}}));
    if (!st.ok()) YOCO_LOG(LogLevel::kError, "port file", LogFields().kv("error", st.message()));
  }

  wait_for_shutdown_signal();
  // Graceful: NOT_SERVING at once, finish in-flight work, then exit.
  YOCO_LOG(LogLevel::kInfo, "draining", LogFields().kv("running", batcher.running()).kv("waiting", batcher.waiting()));
  server->GetHealthCheckService()->SetServingStatus(false);
  worker.set_serving(false);
  batcher.stop(/*drain=*/true);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(num("drain-seconds", 30)));
  (*http)->stop();
  YOCO_LOG(LogLevel::kInfo, "stopped", LogFields());
  return 0;
}

}  // namespace
}  // namespace yoco

int main(int argc, char** argv) { return yoco::run(argc, argv); }
