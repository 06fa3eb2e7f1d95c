#include "tools/client/connection.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "proto/grpc_util.h"
#include "server/tls.h"

namespace yoco::cli {

ServerFlags command_flags(int argc, char** argv, std::set<std::string> known, const std::set<std::string>& booleans) {
  known.insert({"router", "deadline-ms", "api-key", "tls-ca", "tls-cert", "tls-key", "tls-server-name"});
  ServerFlags f = ServerFlags::client("yoco-cli", argc, argv, 2, known, booleans);
  f.required("router", "HOST:PORT");
  return f;
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
  if (flags.has("deadline-ms")) c.deadline = std::chrono::milliseconds(flags.int_in("deadline-ms", 0, 1, INT32_MAX));
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

std::vector<std::string> repeated_flag(int argc, char** argv, const std::string& name,
                                       const std::set<std::string>& booleans) {
  std::vector<std::string> out;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) continue;
    const std::string n = a.substr(2);
    if (const auto eq = n.find('='); eq != std::string::npos) {
      if (n.substr(0, eq) == name) out.push_back(n.substr(eq + 1));
      continue;
    }
    if (booleans.count(n) || i + 1 >= argc) continue;
    if (n == name) out.push_back(argv[i + 1]);
    ++i;
  }
  return out;
}

std::vector<int32_t> token_ids(ServerFlags& flags, const std::string& name) {
  std::vector<int32_t> out;
  for (int64_t t : flags.int_list(name, 0, INT32_MAX)) out.push_back(static_cast<int32_t>(t));
  return out;
}

}  // namespace yoco::cli
