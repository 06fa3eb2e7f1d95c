// yoco-prefill: a prefill worker (SPEC 3.1). Holds the embedding, self-decoder and K/V
// projection weights only, prefills prompts chunk by chunk (PrefillScheduler), ships K/V rows
// and the state into a decode worker's reserved blocks over UCX, and answers Prefill once the
// decode worker has acknowledged the commit. Serves yoco.internal.v1.PrefillWorker, gRPC health
// and reflection, /metrics, and drains on SIGTERM.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "common/checksum.h"
#include "common/flags.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/process.h"
#include "proto/grpc_util.h"
#include "kv_store/factory.h"
#include "prefill_service/scheduler.h"
#include "transfer/ucx_transport.h"
#include "yoco/internal/v1/worker.grpc.pb.h"

namespace yoco {
namespace {


// Typed metrics of this worker (STYLE item 9).
class PrefillMetrics {
 public:
  explicit PrefillMetrics(MetricsRegistry& r)
      : prompt_tokens_(r.counter("yoco_prompt_tokens_total", "Prompt tokens accepted for prefill.")),
        requests_(*r.counter_family("yoco_requests_total", "Finished Prefill calls by gRPC status.", {"status"}).value()),
        waiting_(r.gauge("yoco_requests_waiting", "Prefill jobs queued, not yet computing.")),
        running_(r.gauge("yoco_requests_running",
                         "Prefill jobs computing or waiting for the decode worker's commit acknowledgement.")),
        queue_(r.histogram("yoco_request_queue_seconds", "Time from a Prefill call to its first computed chunk.",
                           Histogram::latency_buckets())),
        tokens_per_second_(r.gauge("yoco_prefill_tokens_per_second",
                                   "Prompt tokens computed per second of compute over the last few seconds of work.")),
        queued_tokens_(r.gauge("yoco_prefill_queued_tokens", "Prompt tokens queued or computing, not yet computed.")),
        transfer_bytes_(r.counter("yoco_kv_transfer_bytes_total", "K/V row and state bytes of acknowledged transfers.")),
        transfer_seconds_(r.histogram("yoco_kv_transfer_seconds",
                                      "Time from a prompt's last computed chunk to the decode worker's acknowledgement "
                                      "(the part of the transfer not hidden behind compute).",
                                      Histogram::latency_buckets())),
        transfer_failures_(r.counter("yoco_kv_transfer_failures_total",
                                     "Prefill jobs whose KV transfer failed (peer lost, rejected, lease expired, timeout).")),
        transfer_in_flight_(r.gauge("yoco_kv_transfer_in_flight", "Transfers open in this worker's KV sender.")),
        cached_tokens_(r.counter("yoco_cached_prompt_tokens_total", "Prompt tokens loaded from the KV store instead of computed.")),
        store_hits_(r.counter("yoco_kv_store_hits_total", "KV store objects (blocks, states, records) found and valid.")),
        store_misses_(r.counter("yoco_kv_store_misses_total", "KV store lookups that found nothing usable (incl. corrupt).")),
        store_errors_(r.counter("yoco_kv_store_errors_total", "KV store calls that failed (backend down, timeout, I/O).")),
        store_corrupt_(r.counter("yoco_kv_store_corrupt_total", "KV store objects that failed validation (deleted).")),
        store_read_bytes_(r.counter("yoco_kv_store_read_bytes_total", "Bytes read from the KV store.")),
        store_written_bytes_(r.counter("yoco_kv_store_written_bytes_total", "Bytes written to the KV store.")),
        store_breaker_open_(r.gauge("yoco_kv_store_breaker_open", "Remote KV store tiers whose circuit breaker is open.")) {}

  void observe_cached(int64_t tokens) { cached_tokens_.inc(static_cast<double>(tokens)); }
  // Counters follow the store's own (monotonic) totals.
  void refresh_store(const KvStoreStatsSnapshot& objects, const KvStoreStatsSnapshot& backend) {
    auto follow = [](Counter& c, uint64_t total) { c.inc(std::max(0.0, static_cast<double>(total) - c.value())); };
    follow(store_hits_, objects.hits);
    follow(store_misses_, objects.misses);
    follow(store_errors_, backend.errors);
    follow(store_corrupt_, objects.corrupt + backend.corrupt);  // caught by a backend (its own framing) or by the object check
    follow(store_read_bytes_, backend.bytes_read);
    follow(store_written_bytes_, backend.bytes_written);
    store_breaker_open_.set(static_cast<double>(backend.breaker_open));
  }

  void observe_accepted(int64_t tokens) { prompt_tokens_.inc(static_cast<double>(tokens)); }
  void observe_finished(grpc::StatusCode code) { requests_.with({grpc_code_label(code)}).inc(); }
  void observe_outcome(const PrefillOutcome& o) {
    if (o.stats.started) queue_.observe(o.stats.queue_seconds);
    if (o.status.ok()) {
      transfer_bytes_.inc(static_cast<double>(o.stats.bytes));
      transfer_seconds_.observe(o.stats.transfer_seconds);
    }
    if (o.stats.transfer_failed) transfer_failures_.inc();
  }
  void refresh(const PrefillSchedulerLoad& load, double tokens_per_second, int64_t in_flight) {
    waiting_.set(load.waiting);
    running_.set(load.active + load.committing);
    queued_tokens_.set(static_cast<double>(load.queued_tokens));
    tokens_per_second_.set(tokens_per_second);
    transfer_in_flight_.set(static_cast<double>(in_flight));
  }

 private:
  Counter& prompt_tokens_;
  Family<Counter>& requests_;
  Gauge &waiting_, &running_;
  Histogram& queue_;
  Gauge &tokens_per_second_, &queued_tokens_;
  Counter& transfer_bytes_;
  Histogram& transfer_seconds_;
  Counter& transfer_failures_;
  Gauge& transfer_in_flight_;
  Counter &cached_tokens_, &store_hits_, &store_misses_, &store_errors_, &store_corrupt_, &store_read_bytes_,
      &store_written_bytes_;
  Gauge& store_breaker_open_;
};

// --kv-store-password-env: the Redis password comes from the environment (a Kubernetes Secret),
// never from a flag or a config file. It goes into every redis:// tier that has no userinfo,
// %-encoded as the URL parser expects.
std::string with_redis_password(const std::string& spec, const std::string& password) {
  std::string enc;
  for (unsigned char ch : password) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      enc += static_cast<char>(ch);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", ch);
      enc += buf;
    }
  }
  std::string out;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    std::string tier = spec.substr(pos, end - pos);
    for (const char* scheme : {"redis://", "rediss://"}) {
      const size_t n = std::strlen(scheme);
      if (tier.rfind(scheme, 0) == 0) {
        const size_t host_end = tier.find_first_of("/?", n);
        const std::string authority = tier.substr(n, host_end == std::string::npos ? std::string::npos : host_end - n);
        if (authority.find('@') == std::string::npos) tier.insert(n, ":" + enc + "@");
        break;
      }
    }
    out += (out.empty() && pos == 0 ? "" : ",") + tier;
    pos = end + 1;
  }
  return out;
}


class PrefillService final : public internal::v1::PrefillWorker::Service {
 public:
  PrefillService(const Model& model, PrefillScheduler& scheduler, PrefillMetrics& m, KvCache* cache,
                 PrefillOptions opt)
      : model_(model), scheduler_(scheduler), m_(m), cache_(cache), opt_(opt) {}

  // ---- documents (SPEC 5): computed here, kept in the KV store every prefill worker shares ----
  grpc::Status CacheDocument(grpc::ServerContext* ctx, const v1::CacheDocumentRequest* req, v1::Document* doc) override {
    grpc::Status st = cache_document(ctx, req, doc);
    m_.observe_finished(st.error_code());
    return st;
  }

  grpc::Status GetDocument(grpc::ServerContext*, const v1::GetDocumentRequest* req,
                           internal::v1::DocumentRecord* out) override {
    if (!cache_) return no_store();
    auto rec = cache_->get_document(req->id());
    if (!rec.ok()) return {grpc::StatusCode::UNAVAILABLE, "KV store: " + rec.status().message()};
    if (!rec->has_value()) return {grpc::StatusCode::NOT_FOUND, "id: unknown document \"" + req->id() + "\""};
    fill(**rec, out->mutable_document(), false);
    out->mutable_tokens()->Add((*rec)->tokens.begin(), (*rec)->tokens.end());
    return grpc::Status::OK;
  }

  grpc::Status ListDocuments(grpc::ServerContext*, const v1::ListDocumentsRequest*,
                             v1::ListDocumentsResponse* out) override {
    if (!cache_) return no_store();
    auto ids = cache_->list_documents();
    if (!ids.ok()) return {grpc::StatusCode::UNAVAILABLE, "KV store: " + ids.status().message()};
    for (const auto& id : *ids) {
      auto rec = cache_->get_document(id);
      if (rec.ok() && rec->has_value()) fill(**rec, out->add_documents(), false);
    }
    return grpc::Status::OK;
  }

  grpc::Status DeleteDocument(grpc::ServerContext*, const v1::DeleteDocumentRequest* req,
                              v1::DeleteDocumentResponse* out) override {
    if (!cache_) return no_store();
    auto rec = cache_->get_document(req->id());
    if (!rec.ok()) return {grpc::StatusCode::UNAVAILABLE, "KV store: " + rec.status().message()};
    if (!rec->has_value()) return {grpc::StatusCode::NOT_FOUND, "id: unknown document \"" + req->id() + "\""};
    if (Status d = cache_->delete_document(req->id()); !d.ok())
      return {grpc::StatusCode::UNAVAILABLE, "KV store: " + d.message()};
    out->set_deleted(true);
    return grpc::Status::OK;
  }

  // New calls get UNAVAILABLE from here on (the router retries elsewhere).
  void drain() { draining_ = true; }

  grpc::Status Prefill(grpc::ServerContext* ctx, const internal::v1::PrefillRequest* req,
                       internal::v1::PrefillResponse* resp) override {
    grpc::Status st = prefill(ctx, req, resp);
    m_.observe_finished(st.error_code());
    if (!st.ok())
      YOCO_LOG(LogLevel::kInfo, "prefill failed",
               LogFields().kv("request", req->request_id()).kv("code", static_cast<int>(st.error_code())).kv("error", st.error_message()));
    return st;
  }

  grpc::Status GetLoad(grpc::ServerContext*, const internal::v1::LoadRequest*, internal::v1::PrefillLoad* load) override {
    const PrefillSchedulerLoad l = scheduler_.load();
    load->set_queued_tokens(l.queued_tokens);
    load->set_queued_requests(l.waiting + l.active + l.committing);
    load->set_fingerprint(hex64(model_.fingerprint()));
    load->set_serving(!draining_);
    return grpc::Status::OK;
  }

 private:
  static grpc::Status no_store() {
    return {grpc::StatusCode::FAILED_PRECONDITION, "this prefill worker has no KV store (start it with --kv-store)"};
  }

  static void fill(const DocumentRecord& r, v1::Document* d, bool already_cached) {
    d->set_id(r.id);
    d->set_token_count(static_cast<uint32_t>(r.tokens.size()));
    d->set_stored_bytes(static_cast<uint64_t>(r.stored_bytes));
    d->set_created_unix_ms(r.created_ms);
    d->set_ttl_seconds(static_cast<uint32_t>(r.ttl_s));
    d->set_already_cached(already_cached);
  }

  grpc::Status cache_document(grpc::ServerContext* ctx, const v1::CacheDocumentRequest* req, v1::Document* doc) {
    if (draining_) return {grpc::StatusCode::UNAVAILABLE, "this prefill worker is draining"};
    if (!cache_) return no_store();
    const std::vector<int32_t> tokens(req->tokens().ids().begin(), req->tokens().ids().end());
    if (tokens.empty()) return {grpc::StatusCode::INVALID_ARGUMENT, "content: empty document"};
    if (Status v = model_.validate_tokens(tokens, 0, "content.tokens"); !v.ok()) return to_grpc(v);
    // Content-addressed: a document already stored whole is not computed again.
    const std::string id = document_id(tokens, model_.fingerprint());
    if (auto have = cache_->load_document(id); have.ok() && have->has_value() && (*have)->cached) {
      fill((*have)->record, doc, true);
      return grpc::Status::OK;
    }
    if (ctx->IsCancelled()) return {grpc::StatusCode::CANCELLED, "cancelled"};
    SequenceState st = model_.new_sequence();
    if (Status p = model_.prefill(st, tokens, opt_); !p.ok()) return to_grpc(p);
    auto rec = cache_->save_document(tokens, st, model_.config(), std::chrono::seconds(req->ttl_seconds()));
    if (!rec.ok()) return {grpc::StatusCode::UNAVAILABLE, "KV store: " + rec.status().message()};
    fill(*rec, doc, false);
    YOCO_LOG(LogLevel::kInfo, "document cached",
             LogFields().kv("id", rec->id).kv("tokens", static_cast<int64_t>(tokens.size())).kv("bytes", rec->stored_bytes));
    return grpc::Status::OK;
  }

  grpc::Status prefill(grpc::ServerContext* ctx, const internal::v1::PrefillRequest* req,
                       internal::v1::PrefillResponse* resp) {
    if (draining_) return {grpc::StatusCode::UNAVAILABLE, "this prefill worker is draining"};
    const std::string& bytes = req->reservation();
    auto d = ReservationDescriptor::parse(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    if (!d.ok()) return {grpc::StatusCode::INVALID_ARGUMENT, "reservation: " + d.status().message()};
    PrefillJob job;
    job.request_id = req->request_id();
    job.priority = req->priority();
    job.tokens.assign(req->tokens().begin(), req->tokens().end());
    job.cached_prefix_candidates.assign(req->cached_prefix_candidates().begin(), req->cached_prefix_candidates().end());
    job.reservation = std::move(d).value();
    const auto deadline = ctx->deadline();
    if (deadline != std::chrono::system_clock::time_point::max())
      job.deadline = TransferClock::now() +
                     std::chrono::duration_cast<TransferClock::duration>(deadline - std::chrono::system_clock::now());
    const int64_t n_tokens = static_cast<int64_t>(job.tokens.size());

    // The scheduler completes the job on its threads; this handler thread waits for it.
    struct Channel {
      std::mutex mu;
      std::condition_variable cv;
      std::optional<PrefillOutcome> done;
    };
    auto ch = std::make_shared<Channel>();
    auto id = scheduler_.submit(std::move(job), [ch](const PrefillOutcome& o) {
      std::lock_guard<std::mutex> lock(ch->mu);
      ch->done = o;
      ch->cv.notify_all();
    });
    if (!id.ok()) return to_grpc(id.status());
    m_.observe_accepted(n_tokens);

    bool cancel_sent = false;
    PrefillOutcome out;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(ch->mu);
        if (ch->cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return ch->done.has_value(); })) {
          out = std::move(*ch->done);
          break;
        }
      }
      if (!cancel_sent && ctx->IsCancelled()) {  // the router gave up: free the decode worker's blocks now
        scheduler_.cancel(id.value());
        cancel_sent = true;
      }
    }
    m_.observe_outcome(out);
    if (!out.status.ok()) return to_grpc(out.status);
    resp->set_rows(out.stats.rows);
    resp->set_bytes(out.stats.bytes);
    resp->set_queue_seconds(out.stats.queue_seconds);
    resp->set_prefill_seconds(out.stats.prefill_seconds);
    resp->set_transfer_seconds(out.stats.transfer_seconds);
    resp->set_cached_tokens(out.stats.cached_tokens);
    m_.observe_cached(out.stats.cached_tokens);
    YOCO_LOG(LogLevel::kDebug, "prefill done",
             LogFields().kv("request", req->request_id()).kv("rows", out.stats.rows).kv("queue_s", out.stats.queue_seconds)
                 .kv("prefill_s", out.stats.prefill_seconds).kv("transfer_s", out.stats.transfer_seconds));
    return grpc::Status::OK;
  }

  const Model& model_;
  PrefillScheduler& scheduler_;
  PrefillMetrics& m_;
  KvCache* const cache_;
  const PrefillOptions opt_;
  std::atomic<bool> draining_{false};
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "yoco-prefill: %s\n", message.c_str());
  std::exit(2);
}

int run(int argc, char** argv) {
  auto f = Flags::parse(argc, argv, 1,
                        {"config", "model", "listen", "metrics-listen", "port-file", "threads", "chunk-tokens", "max-active",
                         "max-queued-tokens", "ucx-transports", "ucx-no-peer-error-handling", "drain-seconds",
                         "inject-chunk-delay-ms", "inject-commit-delay-ms", "kv-store", "kv-block-tokens",
                         "no-prompt-cache", "kv-store-password-env", "device", "cuda-kv-blocks", "cuda-max-context"},
                        {"ucx-no-peer-error-handling", "no-prompt-cache"});
  if (!f.ok()) usage_error(f.status().message());
  auto int_flag = [&](const char* name, int64_t def, int64_t lo, int64_t hi) -> int64_t {
    auto v = f->get_int(name, def);
    if (!v.ok()) usage_error(v.status().message());
    if (v.value() < lo || v.value() > hi)
      usage_error(std::string("--") + name + ": must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                  std::to_string(v.value()));
    return v.value();
  };
  if (!f->has("model")) usage_error("--model: required");
  const std::string listen = f->get("listen", "127.0.0.1:0");
  if (auto hp = parse_listen_address(listen, "listen"); !hp.ok()) usage_error(hp.status().message());
  auto metrics_hp = parse_listen_address(f->get("metrics-listen", "127.0.0.1:0"), "metrics-listen");
  if (!metrics_hp.ok()) usage_error(metrics_hp.status().message());
  PrefillLimits lim;
  const int threads = static_cast<int>(int_flag("threads", 0, 0, 1024));
  lim.chunk_tokens = static_cast<int>(int_flag("chunk-tokens", 512, 1, 1 << 20));
  lim.max_active = static_cast<int>(int_flag("max-active", 4, 1, 4096));
  lim.max_queued_tokens = int_flag("max-queued-tokens", int64_t{1} << 20, 1, int64_t{1} << 40);
  // Fault injection (tests, drills): slow every prefill chunk / hold every commit back.
  lim.inject_slice_delay = std::chrono::milliseconds(int_flag("inject-chunk-delay-ms", 0, 0, 600000));
  lim.inject_commit_delay = std::chrono::milliseconds(int_flag("inject-commit-delay-ms", 0, 0, 600000));
  const int64_t drain_seconds = int_flag("drain-seconds", 30, 0, 24 * 3600);
  if (f->has("port-file") && f->get("port-file").empty()) usage_error("--port-file: empty path");

  install_shutdown_signal_handlers();  // a SIGTERM while the model loads still drains

  auto model = Model::load(f->get("model"), WeightSet::kPrefill);
  if (!model.ok()) {
    std::fprintf(stderr, "yoco-prefill: --model: %s\n", model.status().message().c_str());
    return 1;
  }
  if ((*model)->config().is_transformer())  // its state has no hand-off format
    usage_error("--model: arch \"transformer\" is the benchmark baseline; the cluster serves arch \"yoco\"");
  UcxSenderOptions so;
  so.fingerprint = (*model)->fingerprint();
  so.transports = f->get("ucx-transports");
  so.peer_error_handling = !f->get_bool("ucx-no-peer-error-handling");
  auto sender = make_ucx_sender(so);
  if (!sender.ok()) {
    std::fprintf(stderr, "yoco-prefill: UCX: %s\n", sender.status().message().c_str());
    return 1;
  }
  // The KV store (SPEC 5): documents, and prefixes of ordinary prompts unless --no-prompt-cache.
  std::unique_ptr<KvStore> store;
  std::unique_ptr<KvCache> cache;
  if (f->has("kv-store")) {
    std::string spec = f->get("kv-store");
    std::string password;
    if (f->has("kv-store-password-env")) {
      const char* pw = std::getenv(f->get("kv-store-password-env").c_str());
      if (!pw) usage_error("--kv-store-password-env: $" + f->get("kv-store-password-env") + " is not set");
      password = pw;
      spec = with_redis_password(spec, password);
    }
    auto s = make_kv_store(spec);
    if (!s.ok()) {
      std::string msg = s.status().message();  // never echo the password
      for (size_t at; !password.empty() && (at = msg.find(password)) != std::string::npos;)
        msg.replace(at, password.size(), "***");
      usage_error("--kv-store: " + msg);
    }
    store = std::move(s).value();
    KvCacheOptions co;
    co.fingerprint = (*model)->fingerprint();
    co.kv_dim = (*model)->config().kv_dim();
    co.block_tokens = static_cast<int>(int_flag("kv-block-tokens", 64, 1, 1 << 16));
    cache = std::make_unique<KvCache>(*store, co);
  }
  // --device cuda: every prompt's sequence lives on the GPU; each slice's K/V rows are copied to
  // the host to be shipped (and stored), the state at the end.
  auto device = parse_device_flag(f->get("device", "cpu"));
  if (!device.ok()) usage_error(device.status().message());
  EngineOptions eo;
  eo.device = *device;
  eo.threads = threads;
  eo.cuda.max_sequences = lim.max_active;
  eo.cuda.max_batch = 1;  // no decode steps here
  eo.cuda.max_chunk_tokens = std::min(lim.chunk_tokens, 4096);
  eo.cuda.max_context = std::min<int64_t>(int_flag("cuda-max-context", 1 << 17, 1, int64_t{1} << 30),
                                          (*model)->config().max_seq_len);
  eo.cuda.kv_blocks = static_cast<int>(int_flag("cuda-kv-blocks", 8192, 1, 1 << 24));
  eo.cuda.retention_chunk = lim.retention_chunk;
  auto made = make_engine(**model, nullptr, eo);
  if (!made.ok()) {
    std::fprintf(stderr, "yoco-prefill: --device %s: %s\n", f->get("device").c_str(), made.status().message().c_str());
    return 1;
  }
  std::unique_ptr<Engine> engine = std::move(made).value();
  auto scheduler =
      PrefillScheduler::create(**model, **sender, lim, cache.get(), !f->get_bool("no-prompt-cache"), engine.get());
  if (!scheduler.ok()) usage_error(scheduler.status().message());
  (*scheduler)->start();

  MetricsRegistry registry;
  PrefillMetrics metrics(registry);
  auto http = HttpServer::start(metrics_hp->first, static_cast<uint16_t>(metrics_hp->second),
                                {{"/metrics", [&] {
                                    metrics.refresh((*scheduler)->load(), (*scheduler)->tokens_per_second(),
                                                    (*sender)->in_flight());
                                    if (cache) metrics.refresh_store(cache->stats(), store->stats());
                                    return HttpResponse{200, kPrometheusContentType, registry.expose()};
                                  }}});
  if (!http.ok()) {
    std::fprintf(stderr, "yoco-prefill: --metrics-listen: %s\n", http.status().message().c_str());
    return 1;
  }

  PrefillService service(**model, **scheduler, metrics, cache.get(), PrefillOptions{lim.chunk_tokens, lim.retention_chunk});
  int port = 0;
  std::unique_ptr<grpc::Server> server = start_grpc_server(listen, {&service}, &port);
  if (!server) {
    std::fprintf(stderr, "yoco-prefill: --listen: cannot listen on %s\n", listen.c_str());
    return 1;
  }
  YOCO_LOG(LogLevel::kInfo, "yoco-prefill serving",
           LogFields().kv("grpc_port", port).kv("metrics_port", (*http)->port()).kv("model", f->get("model"))
               .kv("fingerprint", hex64((*model)->fingerprint())).kv("chunk_tokens", lim.chunk_tokens)
               .kv("max_active", lim.max_active).kv("device", engine->device()));
  if (f->has("port-file")) {
    Status st = write_port_file(f->get("port-file"),
                                Json(Json::Object{{"grpc_port", Json(port)}, {"metrics_port", Json((*http)->port())}}));
    if (!st.ok()) {
      std::fprintf(stderr, "yoco-prefill: %s\n", st.message().c_str());
      return 1;
    }
  }

  wait_for_shutdown_signal();
  // Graceful: NOT_SERVING at once, refuse new work, finish in-flight jobs, then exit.
  const PrefillSchedulerLoad l = (*scheduler)->load();
  YOCO_LOG(LogLevel::kInfo, "draining",
           LogFields().kv("waiting", l.waiting).kv("active", l.active).kv("committing", l.committing));
  server->GetHealthCheckService()->SetServingStatus(false);
  service.drain();
  (*scheduler)->stop(std::chrono::seconds(drain_seconds));
  // Every job has completed, so the handlers return at once.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  (*http)->stop();
  YOCO_LOG(LogLevel::kInfo, "stopped", LogFields());
  return 0;
}

}  // namespace
}  // namespace yoco

int main(int argc, char** argv) { return yoco::run(argc, argv); }
