#include "tools/client/connection.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "proto/grpc_util.h"
#include "server/tls.h"

namespace yoco::cli {

ServerFlags command_flags(int argc, char** argv, const std::string& about, FlagTable table) {
  FlagTable common =
      flag::grouped("Every cluster command",
                    {flag::str("router", "HOST:PORT"),
                     flag::optional_integer("deadline-ms", "each call's deadline (none: no deadline)", 1, INT32_MAX),
                     flag::str("api-key", "the API key (default: $YOCO_API_KEY)")});
  for (FlagSpec& s : flag::grouped("Every cluster command", channel_tls_flags("", "the router")))
    common.push_back(std::move(s));
  for (FlagSpec& s : common) table.push_back(std::move(s));
  ServerFlags f =
      ServerFlags::client("yoco-cli " + std::string(argc > 1 ? argv[1] : ""), about, argc, argv, 2, std::move(table));
  f.required("router");
  return f;
}

FlagSpec token_ids_flag(std::string name, std::string help) {
  return flag::int_list(std::move(name), std::move(help), 0, INT32_MAX);
}

void Connection::authorize(grpc::ClientContext& ctx) const {
  if (!api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key);
}

void Connection::prepare(grpc::ClientContext& ctx) const {
  if (deadline) ctx.set_deadline(std::chrono::system_clock::now() + *deadline);
  authorize(ctx);
}

std::optional<Connection> connect(ServerFlags& flags) {
  Connection c;
  if (flags.has("deadline-ms")) c.deadline = std::chrono::milliseconds(flags.integer("deadline-ms"));
  const ChannelTls tls = read_channel_tls(flags, "");
  if (!flags.ok()) return std::nullopt;
  const char* env_key = std::getenv("YOCO_API_KEY");
  c.api_key = flags.has("api-key") ? flags.str("api-key") : (env_key ? env_key : "");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // Score with top-n alternatives over a long text is large
  if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  c.stub = v1::Yoco::NewStub(grpc::CreateCustomChannel(flags.str("router"), channel_credentials(tls), args));
  return c;
}

int rpc_fail(const grpc::Status& st) {
  std::fprintf(stderr, "error: %s: %s\n", grpc_code_name(st.error_code()), st.error_message().c_str());
  return 1;
}

int flag_fail(const ServerFlags& flags) {
  std::fprintf(stderr, "error: %s: %s\n", grpc_code_name(grpc::StatusCode::INVALID_ARGUMENT), flags.error().c_str());
  return 2;
}

std::vector<int32_t> token_ids(const ServerFlags& flags, const std::string& name) {
  std::vector<int32_t> out;
  for (int64_t t : flags.int_list(name)) out.push_back(static_cast<int32_t>(t));
  return out;
}

}  // namespace yoco::cli
