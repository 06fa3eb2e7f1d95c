// yoco-decode: a decode worker. Serves the internal DecodeWorker service only (KV blocks reserved
// for a prefill worker, filled over UCX, then continuous batching; Score and Describe for the
// router; proto/yoco/internal/v1): clients reach it through yoco-router, the one front door.
// gRPC health and reflection, /metrics, graceful SIGTERM drain (server/server.h).
#include "decode_service/batcher.h"
#include "decode_service/metrics.h"
#include "decode_service/worker_service.h"
#include "server/server.h"
#include "structured/vocab.h"
#include "tokenizer/tokenizer.h"
#include "transfer/ucx_transport.h"

namespace yoco {
namespace {

constexpr const char* kProgram = "yoco-decode";

BatcherLimits read_limits(ServerFlags& f) {
  BatcherLimits lim;
  lim.max_running = static_cast<int>(f.int_in("max-running", 32, 1, 1 << 16));
  lim.max_waiting = static_cast<int>(f.int_in("max-waiting", 256, 0, 1 << 24));
  return lim;
}

UcxReceiverOptions read_receiver_options(ServerFlags& f) {
  UcxReceiverOptions ro;
  const ListenAddress ucx = f.listen_address("ucx-listen");
  ro.listen_host = ucx.host;
  ro.listen_port = ucx.port;
  ro.advertise_host = f.str("ucx-advertise");
  ro.transports = f.str("ucx-transports");
  ro.peer_error_handling = !f.boolean("ucx-no-peer-error-handling");
  return ro;
}

// --device cpu|cuda[:N], --threads and the CUDA engine's sizes. With cuda the batcher runs on
// the GPU; shipped states still arrive in the host pool (the UCX receive buffer) and move to the
// device when admitted.
EngineOptions read_engine_options(ServerFlags& f, const BatcherLimits& lim) {
  EngineOptions eo;
  auto device = parse_device_flag(f.str("device", "cpu"));
  if (!device.ok()) f.fail(device.status().message());
  eo.device = device.ok() ? *device : -1;
  eo.threads = static_cast<int>(f.int_in("threads", 0, 0, 1024));
  eo.cuda.max_sequences = eo.cuda.max_batch = lim.max_running;
  eo.cuda.max_chunk_tokens = lim.prefill.chunk_tokens;
  eo.cuda.max_context = f.int_in("cuda-max-context", 32768, 1, int64_t{1} << 30);
  eo.cuda.kv_blocks = static_cast<int>(f.int_in("cuda-kv-blocks", 4096, 1, 1 << 24));
  eo.cuda.cuda_graphs = f.boolean("cuda-graphs");
  return eo;
}

// Null (constraints refused, one warn line) when the model has no tokenizer or the build no xgrammar.
std::unique_ptr<ConstraintCompiler> make_compiler(const std::string& model_dir, int vocab_size) {
  if (!structured_outputs_enabled()) return nullptr;
  auto tok = Tokenizer::load(model_dir);
  if (!tok.ok()) {
    YOCO_LOG(LogLevel::kWarn, "structured outputs off: no tokenizer", LogFields().kv("error", tok.status().message()));
    return nullptr;
  }
  std::vector<int32_t> stops;
  if (auto eos = (*tok)->eos_id(); eos && *eos < vocab_size) stops.push_back(*eos);
  auto c = ConstraintCompiler::create(token_vocab(**tok, vocab_size), stops);
  if (!c.ok()) {
    YOCO_LOG(LogLevel::kWarn, "structured outputs off", LogFields().kv("error", c.status().message()));
    return nullptr;
  }
  return std::move(c).value();
}

int run(int argc, char** argv) {
  ServerFlags f(
      kProgram, argc, argv,
      {"model", "kv-blocks", "block-size", "max-running", "max-waiting", "threads", "ucx-listen", "ucx-advertise",
       "ucx-transports", "ucx-no-peer-error-handling", "no-prefix-sharing", "device", "dtype", "cuda-kv-blocks",
       "cuda-max-context", "cuda-graphs", "max-lease-ms", "no-prefix-retention", "residency-keys"},
      {"ucx-no-peer-error-handling", "no-prefix-sharing", "cuda-graphs", "no-prefix-retention"});
  ServerOptions so = server_options(f);
  require_client_ca(f, so.tls);  // internal services: only the router, by its client certificate
  so.shutdown_grace = so.drain;  // handlers still waiting for a commit get the whole drain
  const std::string model_dir = f.required("model", "a model directory");
  const BatcherLimits lim = read_limits(f);
  const int kv_blocks = static_cast<int>(f.int_in("kv-blocks", 4096, 1, 1 << 24));
  const int block_size = static_cast<int>(f.int_in("block-size", 32, 1, 1 << 16));
  const UcxReceiverOptions ro = read_receiver_options(f);
  // Caps every reservation's lease, whatever DecodeRequest.lease_ms asks (docs/design.md §9b).
  const int64_t max_lease_ms = f.int_in("max-lease-ms", 30000, 1, 3600000);
  // Decode residency (docs/design.md §3.3): finished sequences' shared blocks stay until evicted,
  // and GetLoad lists up to --residency-keys of their keys for the router's KV-aware choice.
  const bool retain = !f.boolean("no-prefix-retention") && !f.boolean("no-prefix-sharing");
  const int64_t residency_keys = f.int_in("residency-keys", 4096, 0, 1 << 20);
  EngineOptions eo = read_engine_options(f, lim);
  if (!f.ok()) return f.usage_error();
  install_shutdown_signal_handlers();

  auto model = Model::load(model_dir);
  if (!model.ok()) return exit_with(kProgram, model.status().message(), 1);
  // --dtype bf16: bf16 weights and products on the CPU engine (model/model.h).
  if (Status st = apply_dtype_flag(**model, f.str("dtype", "fp32"), eo.device); !st.ok())
    return exit_with(kProgram, st.message(), 2);
  if ((*model)->config().is_transformer())  // its state has no hand-off format
    return exit_with(kProgram,
                     "--model: arch \"transformer\" is the benchmark baseline; the cluster serves arch \"yoco\"", 2);
  auto pool = KvPool::create(kv_blocks, block_size, (*model)->config().kv_dim());
  if (!pool.ok()) return exit_with(kProgram, pool.status().message(), 2);
  eo.cuda.max_context = std::min<int64_t>(eo.cuda.max_context, (*model)->config().max_seq_len);
  auto engine = make_engine(**model, pool->get(), eo);
  if (!engine.ok()) return exit_with(kProgram, "--device " + f.str("device") + ": " + engine.status().message(), 1);
  ContinuousBatcher batcher(**model, **pool, lim, engine->get());
  // The UCX receiver: the pool is registered once; prefill workers write into reserved blocks.
  UcxReceiverOptions ro_model = ro;
  ro_model.fingerprint = (*model)->fingerprint();
  ro_model.state_shape = state_shape((*model)->config());
  ro_model.max_rows = (*model)->config().max_seq_len;
  auto receiver = make_ucx_receiver(**pool, ro_model);
  if (!receiver.ok()) return exit_with(kProgram, "UCX receiver: " + receiver.status().message(), 1);
  batcher.start();

  // Structured outputs: the model's vocabulary read once from its tokenizer (docs/design.md §3.2c).
  std::unique_ptr<ConstraintCompiler> compiler = make_compiler(model_dir, (*model)->config().vocab_size);

  MetricsRegistry registry;
  DecodeMetrics metrics(registry);
  DecodeWorkerService worker(**model, **pool, **receiver, batcher, metrics);
  worker.set_share_prefixes(!f.boolean("no-prefix-sharing"));
  if (!retain) (*pool)->set_keep_released(false);  // after set_share_prefixes, which turns keeping on
  worker.set_max_lease(std::chrono::milliseconds(max_lease_ms));
  worker.set_residency_keys(static_cast<size_t>(residency_keys));
  worker.set_constraint_compiler(compiler.get());
  auto server = Server::start(so, {&worker}, registry, [&] { worker.refresh_metrics(); },
                              {{"ucx_address", Json((*receiver)->address())}});
  if (!server.ok()) return exit_with(kProgram, server.status().message(), 1);
  (*server)->log_serving(LogFields()
                             .kv("ucx", (*receiver)->address())
                             .kv("model", model_dir)
                             .kv("device", (*engine)->device())
                             .kv("dtype", std::string((*model)->bf16_weights() ? "bf16" : "fp32")));

  // Running and waiting sequences finish; new calls are refused.
  (*server)->wait_and_drain(
      {.refuse = [&] { worker.set_serving(false); }, .finish = [&](auto) { batcher.stop(/*drain=*/true); }});
  return 0;
}

}  // namespace
}  // namespace yoco

int main(int argc, char** argv) { return yoco::run(argc, argv); }
