// TLS for every gRPC listener and for the router's channels to the workers (docs/design.md §9b).
// Certificates are PEM files read through gRPC's file-watching provider: a file rewritten in place
// (a Kubernetes Secret rotated) is picked up within --tls-reload-seconds, for new connections,
// without a restart. No TLS flags: plaintext, said once in the log.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "server/flags.h"

namespace yoco {

// A listener's TLS (--tls-cert, --tls-key, --tls-client-ca, --tls-reload-seconds).
struct ServerTls {
  std::string cert, key;  // both or neither; neither: plaintext
  std::string client_ca;  // non-empty: client certificates required and verified against it (mTLS)
  int reload_seconds = 60;
  bool enabled() const { return !cert.empty(); }
};

// A channel's TLS: `ca` verifies the server (and its name against the dialled host); cert + key,
// when given, are the client certificate a server with mTLS requires.
struct ChannelTls {
  std::string ca, cert, key;
  // The name checked against the server's certificate instead of the dialled host: a Kubernetes
  // headless Service resolves to pod IPs, which no certificate names (empty: the dialled host).
  std::string server_name;
  int reload_seconds = 60;
  bool enabled() const { return !ca.empty(); }
};

// The listener flags every server takes (part of ServerFlags::common_flags()): --tls-cert,
// --tls-key, --tls-client-ca, --tls-reload-seconds.
FlagTable server_tls_flags();
// A channel's flags: --<prefix>tls-ca, --<prefix>tls-cert, --<prefix>tls-key,
// --<prefix>tls-server-name; `peer` names the server dialled ("the workers", "the router").
FlagTable channel_tls_flags(const std::string& prefix, const std::string& peer);
// Reads them; errors (one of cert/key alone, an unreadable file) go into `flags`, naming the flag.
ServerTls read_server_tls(ServerFlags& flags);
// The internal services (workers) accept only mTLS: with --tls-cert, --tls-client-ca is required.
void require_client_ca(ServerFlags& flags, const ServerTls& tls);

// Reads channel_tls_flags(prefix) (the router: prefix "worker-"); the reload interval is
// --tls-reload-seconds where declared (a server), else 60 s.
ChannelTls read_channel_tls(ServerFlags& flags, const std::string& prefix);

// TLS (file-watching) credentials, or insecure ones with one warn line naming `what`.
std::shared_ptr<grpc::ServerCredentials> server_credentials(const ServerTls& tls, const std::string& what);
std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const ChannelTls& tls);

}  // namespace yoco
