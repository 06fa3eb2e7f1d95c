// One connection to a yoco.v1 server (the router) for yoco-cli's cluster commands and the load
// generator (bench/load_generator.cc): the flags every command takes, read with the server kit's
// ServerFlags (server/flags.h), TLS from server/tls.h (read_channel_tls, channel_credentials:
// the same file-watching credentials as the router's channels), errors printed as the servers
// name them (proto/grpc_util.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/flags.h"
#include "yoco/v1/yoco.grpc.pb.h"

namespace yoco::cli {

// Every command's flags (argv[2..]; argv[1] is the command): its own `table` plus --router
// (required), --deadline-ms, --api-key, --tls-ca, --tls-cert, --tls-key and --tls-server-name.
// `about` says what the command does (--help). Errors are kept in the result (ServerFlags::ok,
// flag_fail).
ServerFlags command_flags(int argc, char** argv, const std::string& about, FlagTable table);
// A token-id list flag (comma-separated, each in [0, 2^31-1]).
FlagSpec token_ids_flag(std::string name, std::string help);

struct Connection {
  std::unique_ptr<v1::Yoco::Stub> stub;
  std::optional<std::chrono::milliseconds> deadline;  // --deadline-ms, per call
  std::string api_key;                                // --api-key or $YOCO_API_KEY (docs/design.md §9b)

  // The API key's `authorization: Bearer` metadata.
  void authorize(grpc::ClientContext& ctx) const;
  // authorize() and the --deadline-ms deadline.
  void prepare(grpc::ClientContext& ctx) const;
};

// The channel to --router (TLS when --tls-ca is given; a client certificate with --tls-cert and
// --tls-key, for a router that requires one); nullopt after a flag error, kept in `flags`.
std::optional<Connection> connect(ServerFlags& flags);

// Prints `error: CODE: message` to stderr and returns the exit code: 1 for an RPC error, 2 for a
// bad flag (which never reaches the server but reads like its INVALID_ARGUMENT).
int rpc_fail(const grpc::Status& st);
int flag_fail(const ServerFlags& flags);

// The ids of a token_ids_flag().
std::vector<int32_t> token_ids(const ServerFlags& flags, const std::string& name);

}  // namespace yoco::cli
