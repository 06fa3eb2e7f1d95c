#include "router/flags.h"

#include <filesystem>

#include "server/tls.h"

namespace yoco {

FlagTable router_flags() {
  const int64_t kTokens = int64_t{1} << 40;
  FlagTable t = {
      flag::str("model", "a model directory: the router reads its tokenizer"),
      flag::str("prefill", "prefill workers: host:port,... or dns:name:port (none: colocated, decode workers prefill)"),
      flag::str("decode", "decode workers: host:port,... or dns:name:port"),
      flag::integer("max-in-flight", "requests admitted at once; more get RESOURCE_EXHAUSTED", 256, 1, 1 << 20),
      flag::integer("max-queued-tokens", "prompt tokens of the admitted requests", 1 << 20, 1, kTokens),
      flag::integer("prefill-attempts", "tries per request across prefill workers", 3, 1, 100),
      flag::integer("migrations", "decode workers a stream may move across", 3, 0, 100),
      flag::integer("lease-ms", "how long a reservation waits for its commit", 30000, 100, 3600000),
      flag::integer("stall-timeout-ms", "a Decode stream silent this long while its worker fails health polls moves",
                    3000, 100, 3600000),
      flag::integer("health-interval-ms", "how often every worker's load and health are polled", 500, 10, 600000),
      flag::integer("dns-refresh-seconds", "how often dns: worker names are resolved again", 5, 1, 86400),
      flag::integer("affinity-tokens", "prompts sharing this many first tokens go to one prefill worker (0: off)", 64,
                    0, 1 << 20),
      flag::integer("affinity-max-extra-tokens", "the queue an affine prefill worker may have beyond the balanced pick",
                    4096, 0, kTokens),
      flag::str("decode-routing", "kv (resident blocks traded against load) or free-blocks", "kv"),
      flag::number("decode-ship-weight", "kv routing: the weight of the blocks to ship", 1.0, 0.0, 1e6),
      flag::number("decode-load-weight", "kv routing: the weight of a worker's load", 1.0, 0.0, 1e6),
      flag::str("api-keys", "the API keys file (docs/design.md §9b); none: the public API is open"),
      flag::optional_integer("http-port", "serve the OpenAI-compatible HTTP API on this port (0: any free port)", 0,
                             65535),
      flag::str("chat-template", "a jinja chat template file overriding the model's"),
      flag::str("tool-call-parser",
                "the tool-call syntax of chat replies: auto (from the chat template), hermes, llama3_json, mistral, "
                "mistral_args or "
                "none",
                "auto"),
      flag::str("served-model-name", "the name clients put in \"model\" (default: the model directory's name)"),
  };
  for (FlagSpec& s : channel_tls_flags("worker-", "the workers")) t.push_back(std::move(s));
  return t;
}

namespace {

// host:port,... or dns:name:port; an absent (or empty) optional list is no workers.
std::vector<Target> read_targets(ServerFlags& f, const std::string& name, bool required) {
  const std::string value = required ? f.required(name) : f.str(name);
  if (value.empty()) return {};
  auto t = parse_targets(value);
  if (!t.ok()) f.fail("--" + name + ": " + t.status().message());
  return t.ok() ? std::move(t).value() : std::vector<Target>{};
}

RouterLimits read_limits(ServerFlags& f) {
  RouterLimits lim;
  lim.max_in_flight = static_cast<int>(f.integer("max-in-flight"));
  lim.max_queued_tokens = f.integer("max-queued-tokens");
  lim.prefill_attempts = static_cast<int>(f.integer("prefill-attempts"));
  lim.migrations = static_cast<int>(f.integer("migrations"));
  lim.lease_ms = static_cast<uint32_t>(f.integer("lease-ms"));
  lim.stall_timeout_ms = f.integer("stall-timeout-ms");
  lim.affinity_tokens = static_cast<int>(f.integer("affinity-tokens"));
  lim.affinity_max_extra_tokens = f.integer("affinity-max-extra-tokens");
  // Decode choice (docs/design.md §3.3): kv (residency traded against load) or free-blocks.
  const std::string routing = f.str("decode-routing");
  if (routing != "kv" && routing != "free-blocks")
    f.fail("--decode-routing: \"kv\" or \"free-blocks\", not \"" + routing + "\"");
  lim.kv_aware_decode = routing == "kv";
  lim.decode_cost.ship_weight = f.number("decode-ship-weight");
  lim.decode_cost.load_weight = f.number("decode-load-weight");
  return lim;
}

WorkerGroupOptions read_worker_options(ServerFlags& f) {
  WorkerGroupOptions o;
  o.poll_interval = std::chrono::milliseconds(f.integer("health-interval-ms"));
  o.dns_refresh = std::chrono::milliseconds(1000 * f.integer("dns-refresh-seconds"));
  // TLS to the workers (their names are checked against their certificates: docs/design.md §9b).
  const ChannelTls tls = read_channel_tls(f, "worker-");
  if (f.ok()) o.credentials = channel_credentials(tls);
  o.tls_server_name = tls.server_name;
  return o;
}

// The name clients put in "model" (vLLM's --served-model-name): the flag, else the model
// directory's name.
std::string served_model_name(ServerFlags& f, const std::string& model_dir) {
  std::string name = f.str("served-model-name");
  if (f.has("served-model-name") && name.empty()) f.fail("--served-model-name: empty");
  if (!name.empty()) return name;
  std::filesystem::path p = std::filesystem::path(model_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "models/kjv-yoco/"
  return p.filename().empty() ? model_dir : p.filename().string();
}

}  // namespace

RouterFlags read_router_flags(ServerFlags& f) {
  RouterFlags r;
  r.model_dir = f.required("model");
  r.prefill = read_targets(f, "prefill", /*required=*/false);
  r.decode = read_targets(f, "decode", /*required=*/true);
  r.limits = read_limits(f);
  r.workers = read_worker_options(f);
  r.api_keys = f.str("api-keys");
  r.http_port = f.has("http-port") ? static_cast<int>(f.integer("http-port")) : -1;
  r.chat_template = f.str("chat-template");
  r.tool_call_parser = f.str("tool-call-parser");
  r.served_model_name = served_model_name(f, r.model_dir);
  return r;
}

}  // namespace yoco
