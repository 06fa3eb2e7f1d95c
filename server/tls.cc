#include "server/tls.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <fstream>

#include "common/log.h"

namespace yoco {
namespace {

using grpc::experimental::FileWatcherCertificateProvider;

// A missing or unreadable file is a flag error at start-up, not a handshake failure later.
void check_file(ServerFlags& flags, const std::string& name, const std::string& path) {
  if (path.empty()) return;
  std::ifstream in(path);
  if (!in) flags.fail("--" + name + ": cannot read " + path);
}

}  // namespace

FlagTable server_tls_flags() {
  return {flag::str("tls-cert", "PEM certificate chain of the listeners (with --tls-key; none: plaintext)"),
          flag::str("tls-key", "PEM private key of --tls-cert"),
          flag::str("tls-client-ca", "PEM CA: clients must present a certificate it signed (mTLS)"),
          flag::integer("tls-reload-seconds", "how often changed certificate files are re-read", 60, 1, 86400)};
}

FlagTable channel_tls_flags(const std::string& prefix, const std::string& peer) {
  return {
      flag::str(prefix + "tls-ca", "PEM CA that signed " + peer + "'s certificates (none: plaintext)"),
      flag::str(prefix + "tls-cert", "PEM client certificate presented to " + peer + " (with --" + prefix + "tls-key)"),
      flag::str(prefix + "tls-key", "PEM private key of --" + prefix + "tls-cert"),
      flag::str(prefix + "tls-server-name",
                "the name checked against " + peer + "'s certificates instead of the dialled host")};
}

ServerTls read_server_tls(ServerFlags& flags) {
  ServerTls t;
  t.cert = flags.str("tls-cert");
  t.key = flags.str("tls-key");
  t.client_ca = flags.str("tls-client-ca");
  t.reload_seconds = static_cast<int>(flags.integer("tls-reload-seconds"));
  if (t.cert.empty() != t.key.empty())
    flags.fail(t.cert.empty() ? "--tls-cert: required with --tls-key" : "--tls-key: required with --tls-cert");
  if (!t.client_ca.empty() && t.cert.empty()) flags.fail("--tls-cert: required with --tls-client-ca");
  check_file(flags, "tls-cert", t.cert);
  check_file(flags, "tls-key", t.key);
  check_file(flags, "tls-client-ca", t.client_ca);
  return t;
}

void require_client_ca(ServerFlags& flags, const ServerTls& tls) {
  if (tls.enabled() && tls.client_ca.empty())
    flags.fail(
        "--tls-client-ca: required with --tls-cert (the internal services accept only clients with a "
        "certificate from this CA: the router)");
}

ChannelTls read_channel_tls(ServerFlags& flags, const std::string& prefix) {
  ChannelTls t;
  t.ca = flags.str(prefix + "tls-ca");
  t.cert = flags.str(prefix + "tls-cert");
  t.key = flags.str(prefix + "tls-key");
  t.server_name = flags.str(prefix + "tls-server-name");
  if (flags.declares("tls-reload-seconds")) t.reload_seconds = static_cast<int>(flags.integer("tls-reload-seconds"));
  if (t.cert.empty() != t.key.empty())
    flags.fail(t.cert.empty() ? "--" + prefix + "tls-cert: required with --" + prefix + "tls-key"
                              : "--" + prefix + "tls-key: required with --" + prefix + "tls-cert");
  if (!t.server_name.empty() && t.ca.empty())
    flags.fail("--" + prefix + "tls-ca: required with --" + prefix + "tls-server-name");
  if (!t.cert.empty() && t.ca.empty()) flags.fail("--" + prefix + "tls-ca: required with --" + prefix + "tls-cert");
  check_file(flags, prefix + "tls-ca", t.ca);
  check_file(flags, prefix + "tls-cert", t.cert);
  check_file(flags, prefix + "tls-key", t.key);
  return t;
}

std::shared_ptr<grpc::ServerCredentials> server_credentials(const ServerTls& tls, const std::string& what) {
  if (!tls.enabled()) {
    YOCO_LOG(LogLevel::kWarn, "plaintext listener: no TLS (--tls-cert, --tls-key)", LogFields().kv("listener", what));
    return grpc::InsecureServerCredentials();
  }
  const bool mtls = !tls.client_ca.empty();
  auto provider = std::make_shared<FileWatcherCertificateProvider>(tls.key, tls.cert, tls.client_ca,
                                                                   static_cast<unsigned>(tls.reload_seconds));
  grpc::experimental::TlsServerCredentialsOptions opts(provider);
  opts.watch_identity_key_cert_pairs();
  if (mtls) {
    opts.watch_root_certs();
    opts.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    opts.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  YOCO_LOG(LogLevel::kInfo, "tls listener",
           LogFields().kv("listener", what).kv("client_certificates", mtls ? "required" : "not requested"));
  return grpc::experimental::TlsServerCredentials(opts);
}

std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const ChannelTls& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  auto provider = std::make_shared<FileWatcherCertificateProvider>(tls.key, tls.cert, tls.ca,
                                                                   static_cast<unsigned>(tls.reload_seconds));
  grpc::experimental::TlsChannelCredentialsOptions opts;
  opts.set_certificate_provider(provider);
  opts.watch_root_certs();
  if (!tls.cert.empty()) opts.watch_identity_key_cert_pairs();
  return grpc::experimental::TlsCredentials(opts);
}

}  // namespace yoco
