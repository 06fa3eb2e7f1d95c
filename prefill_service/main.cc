// yoco-prefill: a prefill worker (docs/design.md §3.1). Holds the embedding, self-decoder and K/V
// projection weights only, prefills prompts chunk by chunk (PrefillScheduler), ships K/V rows
// and the state into a decode worker's reserved blocks over UCX, and answers Prefill once the
// decode worker has acknowledged the commit; computes documents into the shared KV store.
// Serves yoco.internal.v1.PrefillWorker (worker_service.h) on the server kit: gRPC health and
// reflection, /metrics, drain on SIGTERM.
#include "common/checksum.h"
#include "prefill_service/kv_store_flags.h"
#include "prefill_service/metrics.h"
#include "prefill_service/scheduler.h"
#include "prefill_service/worker_service.h"
#include "server/server.h"
#include "transfer/ucx_transport.h"

namespace yoco {
namespace {

constexpr const char* kProgram = "yoco-prefill";

FlagTable prefill_flags() {
  return {
      flag::str("model", "a model directory"),
      flag::integer("threads", "CPU engine threads (0: one per physical core)", 0, 0, 1024),
      flag::integer("chunk-tokens", "prompt tokens computed per step, across the active prompts", 512, 1, 1 << 20),
      flag::integer("max-active", "prompts being computed at once", 4, 1, 4096),
      flag::integer("max-queued-tokens", "prompt tokens waiting; more get RESOURCE_EXHAUSTED", int64_t{1} << 20, 1,
                    int64_t{1} << 40),
      flag::str("ucx-transports", "UCX_TLS for the transfer (default: UCX's choice)"),
      flag::boolean("ucx-no-peer-error-handling", "UCX endpoints without peer error handling"),
      flag::integer("inject-chunk-delay-ms", "fault injection (tests, drills): slow every prefill chunk by this", 0, 0,
                    600000),
      flag::integer("inject-commit-delay-ms", "fault injection (tests, drills): hold every commit back this long", 0, 0,
                    600000),
      flag::str("kv-store",
                "the shared KV store, tiers fastest first (docs/design.md §5): memory, dir:PATH, "
                "redis://..., redis-cluster://..."),
      flag::integer("kv-block-tokens", "tokens per stored K/V block", 64, 1, 1 << 16),
      flag::boolean("no-prompt-cache", "store documents only, not the prefixes of ordinary prompts"),
      flag::str("kv-store-password-env", "the environment variable holding the Redis password"),
      flag::str("device", "cpu, cuda or cuda:N", "cpu"),
      flag::str("dtype", "the CPU engine's weights and products: fp32 or bf16", "fp32"),
      flag::integer("cuda-kv-blocks", "K/V blocks of the device pool", 8192, 1, 1 << 24),
      flag::integer("cuda-max-context", "the longest prompt on the device (capped by max_seq_len)", 1 << 17, 1,
                    int64_t{1} << 30),
  };
}

PrefillLimits read_limits(ServerFlags& f) {
  PrefillLimits lim;
  lim.chunk_tokens = static_cast<int>(f.integer("chunk-tokens"));
  lim.max_active = static_cast<int>(f.integer("max-active"));
  lim.max_queued_tokens = f.integer("max-queued-tokens");
  // Fault injection (tests, drills): slow every prefill chunk / hold every commit back.
  lim.inject_slice_delay = std::chrono::milliseconds(f.integer("inject-chunk-delay-ms"));
  lim.inject_commit_delay = std::chrono::milliseconds(f.integer("inject-commit-delay-ms"));
  return lim;
}

// --device cpu|cuda[:N], --threads and the CUDA engine's sizes. With cuda every prompt's
// sequence lives on the GPU; each slice's K/V rows are copied to the host to be shipped (and
// stored), the state at the end.
EngineOptions read_engine_options(ServerFlags& f, const PrefillLimits& lim) {
  EngineOptions eo;
  auto device = parse_device_flag(f.str("device"));
  if (!device.ok()) f.fail(device.status().message());
  eo.device = device.ok() ? *device : -1;
  eo.threads = static_cast<int>(f.integer("threads"));
  eo.cuda.max_sequences = lim.max_active;
  eo.cuda.max_batch = 1;  // no decode steps here
  eo.cuda.max_chunk_tokens = std::min(lim.chunk_tokens, 4096);
  eo.cuda.max_context = f.integer("cuda-max-context");
  eo.cuda.kv_blocks = static_cast<int>(f.integer("cuda-kv-blocks"));
  eo.cuda.retention_chunk = lim.retention_chunk;
  return eo;
}

int run(int argc, char** argv) {
  ServerFlags f(kProgram, "a prefill worker (yoco.internal.v1.PrefillWorker; K/V shipped over UCX)", argc, argv,
                prefill_flags());
  ServerOptions so = server_options(f);
  require_client_ca(f, so.tls);                 // internal services: only the router, by its client certificate
  so.shutdown_grace = std::chrono::seconds(5);  // every job has completed by then
  const std::string model_dir = f.required("model");
  const PrefillLimits lim = read_limits(f);
  const int block_tokens = static_cast<int>(f.integer("kv-block-tokens"));
  EngineOptions eo = read_engine_options(f, lim);
  if (!f.ok()) return f.usage_error();
  install_shutdown_signal_handlers();  // a SIGTERM while the model loads still drains

  auto model = Model::load(model_dir, WeightSet::kPrefill);
  if (!model.ok()) return exit_with(kProgram, "--model: " + model.status().message(), 1);
  // --dtype bf16: bf16 weights and products on the CPU engine (model/model.h).
  if (Status st = apply_dtype_flag(**model, f.str("dtype"), eo.device); !st.ok())
    return exit_with(kProgram, st.message(), 2);
  if ((*model)->config().is_transformer())  // its state has no hand-off format
    return exit_with(kProgram,
                     "--model: arch \"transformer\" is the benchmark baseline; the cluster serves arch \"yoco\"", 2);
  UcxSenderOptions uo;
  uo.fingerprint = (*model)->fingerprint();
  uo.transports = f.str("ucx-transports");
  uo.peer_error_handling = !f.boolean("ucx-no-peer-error-handling");
  auto sender = make_ucx_sender(uo);
  if (!sender.ok()) return exit_with(kProgram, "UCX: " + sender.status().message(), 1);
  // The KV store (docs/design.md §5): documents, and prefixes of ordinary prompts unless --no-prompt-cache.
  std::unique_ptr<KvStore> store;
  std::unique_ptr<KvCache> cache;
  if (f.has("kv-store")) {
    auto s = open_kv_store(f.str("kv-store"), f.str("kv-store-password-env"));
    if (!s.ok()) return exit_with(kProgram, s.status().message(), 2);
    store = std::move(s).value();
    cache = std::make_unique<KvCache>(
        *store, KvCacheOptions{(*model)->fingerprint(), (*model)->config().kv_dim(), block_tokens});
  }
  eo.cuda.max_context = std::min<int64_t>(eo.cuda.max_context, (*model)->config().max_seq_len);
  auto engine = make_engine(**model, nullptr, eo);
  if (!engine.ok()) return exit_with(kProgram, "--device " + f.str("device") + ": " + engine.status().message(), 1);
  auto scheduler =
      PrefillScheduler::create(**model, **sender, lim, cache.get(), !f.boolean("no-prompt-cache"), engine->get());
  if (!scheduler.ok()) return exit_with(kProgram, scheduler.status().message(), 2);
  (*scheduler)->start();

  MetricsRegistry registry;
  PrefillMetrics metrics(registry);
  PrefillService service(**model, **scheduler, metrics, cache.get());
  auto server = Server::start(so, {&service}, registry, [&] {
    metrics.refresh((*scheduler)->load(), (*scheduler)->tokens_per_second(), (*sender)->in_flight());
    if (cache) metrics.refresh_store(cache->stats(), store->stats());
  });
  if (!server.ok()) return exit_with(kProgram, server.status().message(), 1);
  (*server)->log_serving(LogFields()
                             .kv("model", model_dir)
                             .kv("fingerprint", hex64((*model)->fingerprint()))
                             .kv("chunk_tokens", lim.chunk_tokens)
                             .kv("max_active", lim.max_active)
                             .kv("device", (*engine)->device())
                             .kv("dtype", std::string((*model)->bf16_weights() ? "bf16" : "fp32")));

  // Refuse new work, let queued and in-flight jobs finish (bounded by --drain-seconds).
  auto finish = [&](std::chrono::steady_clock::time_point until) {
    (*scheduler)->stop(std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()));
  };
  (*server)->wait_and_drain({.refuse = [&] { service.drain(); }, .finish = finish});
  return 0;
}

}  // namespace
}  // namespace yoco

int main(int argc, char** argv) { return yoco::run(argc, argv); }
