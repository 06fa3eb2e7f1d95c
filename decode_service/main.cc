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

FlagTable decode_flags() {
  return {
      flag::str("model", "a model directory"),
      flag::integer("kv-blocks", "K/V blocks of the host pool (the UCX receive buffer)", 4096, 1, 1 << 24),
      flag::str("kv-dtype",
                "how the host pool keeps K/V rows: f32, or bf16 (16-bit K/V: half the bytes per token and for "
                "decode attention to read; prefill workers round the rows as they send them)",
                "f32"),
      flag::integer("block-size", "rows per K/V block", 32, 1, 1 << 16),
      flag::integer("max-running", "sequences decoded at once", 32, 1, 1 << 16),
      flag::integer("max-waiting", "sequences queued for a place in the batch", 256, 0, 1 << 24),
      flag::integer("threads", "CPU engine threads (0: one per physical core)", 0, 0, 1024),
      flag::str("ucx-listen", "the UCX listener receiving K/V from prefill workers, host:port", "127.0.0.1:0"),
      flag::str("ucx-advertise", "the host prefill workers dial (default: the --ucx-listen host)"),
      flag::str("ucx-transports", "UCX_TLS for the transfer (default: UCX's choice)"),
      flag::boolean("ucx-no-peer-error-handling", "UCX endpoints without peer error handling"),
      flag::boolean("no-prefix-sharing", "no K/V block is shared between sequences"),
      flag::str("device", "cpu, cuda or cuda:N", "cpu"),
      flag::str("dtype", "the CPU engine's weights and products: fp32 or bf16", "fp32"),
      flag::integer("cuda-kv-blocks", "K/V blocks of the device pool", 4096, 1, 1 << 24),
      flag::integer("cuda-max-context", "the longest sequence on the device (capped by max_seq_len)", 32768, 1,
                    int64_t{1} << 30),
      flag::boolean("cuda-graphs", "capture decode steps as CUDA graphs"),
      flag::integer("max-lease-ms", "the longest lease a reservation gets, whatever the router asks", 30000, 1,
                    3600000),
      flag::boolean("no-prefix-retention", "finished sequences' blocks are not kept for later prompts"),
      flag::integer("residency-keys", "prefix keys of resident blocks listed in GetLoad for the router", 4096, 0,
                    1 << 20),
      flag::boolean("score-per-token",
                    "Score one forced token per decode step (the plain reference of the sliced Score)"),
  };
}

BatcherLimits read_limits(ServerFlags& f) {
  BatcherLimits lim;
  lim.max_running = static_cast<int>(f.integer("max-running"));
  lim.max_waiting = static_cast<int>(f.integer("max-waiting"));
  lim.score_per_token = f.boolean("score-per-token");
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
  auto device = parse_device_flag(f.str("device"));
  if (!device.ok()) f.fail(device.status().message());
  eo.device = device.ok() ? *device : -1;
  eo.threads = static_cast<int>(f.integer("threads"));
  eo.cuda.max_sequences = eo.cuda.max_batch = lim.max_running;
  eo.cuda.max_chunk_tokens = lim.prefill.chunk_tokens;
  eo.cuda.max_context = f.integer("cuda-max-context");
  eo.cuda.kv_blocks = static_cast<int>(f.integer("cuda-kv-blocks"));
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
  ServerFlags f(kProgram, "a decode worker (yoco.internal.v1.DecodeWorker; K/V arrives over UCX)", argc, argv,
                decode_flags());
  ServerOptions so = server_options(f);
  require_client_ca(f, so.tls);  // internal services: only the router, by its client certificate
  so.shutdown_grace = so.drain;  // handlers still waiting for a commit get the whole drain
  const std::string model_dir = f.required("model");
  const BatcherLimits lim = read_limits(f);
  const int kv_blocks = static_cast<int>(f.integer("kv-blocks"));
  const int block_size = static_cast<int>(f.integer("block-size"));
  const UcxReceiverOptions ro = read_receiver_options(f);
  // Caps every reservation's lease, whatever DecodeRequest.lease_ms asks (docs/design.md §9b).
  const int64_t max_lease_ms = f.integer("max-lease-ms");
  // Decode residency (docs/design.md §3.3): finished sequences' shared blocks stay until evicted,
  // and GetLoad lists up to --residency-keys of their keys for the router's KV-aware choice.
  const bool retain = !f.boolean("no-prefix-retention") && !f.boolean("no-prefix-sharing");
  const int64_t residency_keys = f.integer("residency-keys");
  EngineOptions eo = read_engine_options(f, lim);
  if (!f.ok()) return f.usage_error();
  install_shutdown_signal_handlers();

  auto model = Model::load(model_dir);
  if (!model.ok()) return exit_with(kProgram, model.status().message(), 1);
  // --dtype bf16: bf16 weights and products on the CPU engine (model/model.h).
  if (Status st = apply_dtype_flag(**model, f.str("dtype"), eo.device); !st.ok())
    return exit_with(kProgram, st.message(), 2);
  if ((*model)->config().is_transformer())  // its state has no hand-off format
    return exit_with(kProgram,
                     "--model: arch \"transformer\" is the benchmark baseline; the cluster serves arch \"yoco\"", 2);
  auto kv_dtype = parse_kv_dtype(f.str("kv-dtype"));
  if (!kv_dtype.ok()) return exit_with(kProgram, kv_dtype.status().message(), 2);
  auto pool = KvPool::create(kv_blocks, block_size, (*model)->config().kv_dim(), *kv_dtype);
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
                             .kv("dtype", std::string((*model)->bf16_weights() ? "bf16" : "fp32"))
                             .kv("kv_dtype", std::string(kv_dtype_name(*kv_dtype))));

  // Running and waiting sequences finish; new calls are refused.
  (*server)->wait_and_drain(
      {.refuse = [&] { worker.set_serving(false); }, .finish = [&](auto) { batcher.stop(/*drain=*/true); }});
  return 0;
}

}  // namespace
}  // namespace yoco

int main(int argc, char** argv) { return yoco::run(argc, argv); }
