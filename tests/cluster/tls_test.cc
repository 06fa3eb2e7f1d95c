// TLS and mTLS on a --secure cluster (docs/design.md §9b): a plaintext client cannot talk to the
// TLS router; the workers obey only the router: a direct call to DecodeWorker / PrefillWorker in
// plaintext, with TLS but no client certificate, or with a valid certificate of the public CA is
// refused, while the router's certificate is answered; rotated certificate files are presented to
// new connections within the reload interval (1 s here), without a restart.
#include <cstdio>
#include <thread>

#include "tests/support/cluster_harness.h"
#include "yoco/internal/v1/worker.grpc.pb.h"

namespace yoco {
namespace {

using test::LocalCluster;

const std::string kModel = std::string(YOCO_SOURCE_DIR) + "/models/kjv-yoco";

std::string run_command(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(("( " + cmd + " ) 2>/dev/null").c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  return out;
}

// The serial of a certificate file ("serial=ABC...\n").
std::string file_serial(const std::string& crt) { return run_command("openssl x509 -noout -serial -in " + crt); }

// The serial of the certificate a listener presents to a new connection (client_cert/key: for mTLS).
std::string presented_serial(const std::string& addr, const std::string& client_cert = "",
                             const std::string& client_key = "") {
  std::string cmd = "openssl s_client -connect " + addr + " -alpn h2 -showcerts";
  if (!client_cert.empty()) cmd += " -cert " + client_cert + " -key " + client_key;
  return run_command(cmd + " </dev/null | openssl x509 -noout -serial");
}

grpc::SslCredentialsOptions tls_options(const std::string& ca, const std::string& cert = "",
                                        const std::string& key = "") {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = test::read_file(ca);
  if (!cert.empty()) o.pem_cert_chain = test::read_file(cert);
  if (!key.empty()) o.pem_private_key = test::read_file(key);
  return o;
}

grpc::Status decode_get_load(const std::string& addr, std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  internal::v1::DecodeLoad load;
  return internal::v1::DecodeWorker::NewStub(grpc::CreateChannel(addr, creds))
      ->GetLoad(&ctx, internal::v1::LoadRequest(), &load);
}

grpc::Status prefill_list_documents(const std::string& addr, std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ListDocumentsResponse resp;
  return internal::v1::PrefillWorker::NewStub(grpc::CreateChannel(addr, creds))
      ->ListDocuments(&ctx, v1::ListDocumentsRequest(), &resp);
}

TEST(Tls, PlaintextClientIsRefusedTlsClientIsServed) {
  LocalCluster c({.model = kModel, .prefill = 1, .decode = 1, .kv_blocks = 256, .secure = true});
  ASSERT_TRUE(c.ready()) << c.logs();

  const v1::GenerateRequest req = test::greedy({10, 20, 30, 40}, 8);
  auto plain = v1::Yoco::NewStub(grpc::CreateChannel(c.router().grpc, grpc::InsecureChannelCredentials()));
  const test::Generated refused = test::run_generate(*plain, req, std::chrono::milliseconds(5000));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.status.error_message();
  EXPECT_TRUE(refused.ids.empty());

  auto stub = c.stub();  // TLS, the test client's certificate, the admin key
  const test::Generated g = test::run_generate(*stub, req, std::chrono::milliseconds(60000));
  ASSERT_TRUE(g.status.ok()) << g.status.error_message() << c.logs();
  EXPECT_EQ(g.ids.size(), 8u);
}

// The attack: a process on the cluster's network calls the workers' internal services directly,
// bypassing the router's admission and limits. Only the router's client certificate is answered.
TEST(Tls, DirectWorkerCallsWithoutTheRouterCertificateAreRefused) {
  LocalCluster c({.model = kModel, .prefill = 1, .decode = 1, .kv_blocks = 256, .secure = true});
  ASSERT_TRUE(c.ready()) << c.logs();
  const auto& s = *c.secure();
  const std::string decode = c.decode()[0].grpc, prefill = c.prefill()[0].grpc;

  const std::vector<std::pair<std::string, std::shared_ptr<grpc::ChannelCredentials>>> attackers = {
      {"plaintext", grpc::InsecureChannelCredentials()},
      {"tls, no client certificate", grpc::SslCredentials(tls_options(s.ca))},
      {"tls, a public client's certificate", grpc::SslCredentials(tls_options(s.ca, s.client_cert, s.client_key))},
  };
  for (const auto& [who, creds] : attackers) {
    const grpc::Status d = decode_get_load(decode, creds);
    EXPECT_EQ(d.error_code(), grpc::StatusCode::UNAVAILABLE) << who << ": DecodeWorker.GetLoad " << d.error_message();
    const grpc::Status p = prefill_list_documents(prefill, creds);
    EXPECT_EQ(p.error_code(), grpc::StatusCode::UNAVAILABLE)
        << who << ": PrefillWorker.ListDocuments " << p.error_message();
  }
  // The router's certificate (the internal CA's) is answered: the refusals above are the credential's.
  const auto router =
      grpc::SslCredentials(tls_options(s.ca, s.dir + "/router-client.crt", s.dir + "/router-client.key"));
  EXPECT_TRUE(decode_get_load(decode, router).ok());
  EXPECT_TRUE(prefill_list_documents(prefill, router).ok());
}

// Kubernetes rewrites a Secret's files in place: new connections get the new certificate within
// --tls-reload-seconds, on the router's public listener and on a worker's mTLS listener alike.
TEST(Tls, RotatedCertificatesAreServedWithoutARestart) {
  LocalCluster c({.model = kModel, .prefill = 1, .decode = 1, .kv_blocks = 256, .secure = true});
  ASSERT_TRUE(c.ready()) << c.logs();
  const auto& s = *c.secure();
  const std::string rc = s.dir + "/router-client.crt", rk = s.dir + "/router-client.key";
  struct Listener {
    std::string name, addr, cert, key;
  };
  const std::vector<Listener> listeners = {{"router", c.router().grpc, "", ""},
                                           {"decode-0", c.decode()[0].grpc, rc, rk}};
  for (const auto& l : listeners) {
    const std::string crt = s.dir + "/" + l.name + ".crt";
    const std::string before = file_serial(crt);
    ASSERT_FALSE(before.empty());
    ASSERT_EQ(presented_serial(l.addr, l.cert, l.key), before) << l.name;

    // A new key and certificate (new serial) from the same CA, moved over the old files.
    const std::string fresh = s.dir + "/fresh-" + l.name;
    ASSERT_EQ(
        std::system(("cd " + s.dir +
                     " && printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth,"
                     "clientAuth\\nsubjectAltName=IP:127.0.0.1,DNS:localhost\\n' > " +
                     fresh + ".ext && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " +
                     fresh + ".key -out " + fresh + ".csr -subj /CN=" + l.name + " 2>/dev/null && openssl x509 " +
                     "-req -in " + fresh + ".csr -CA " + s.ca + " -CAkey " + s.ca_key +
                     " -set_serial 0x5eed5eed -days 1 -extfile " + fresh + ".ext -out " + fresh +
                     ".crt 2>/dev/null && mv " + fresh + ".key " + s.dir + "/" + l.name + ".key && mv " + fresh +
                     ".crt " + crt)
                        .c_str()),
        0);
    const std::string after = file_serial(crt);
    ASSERT_NE(after, before);
    std::string seen;
    for (int i = 0; i < 100 && seen != after; ++i) {  // the reload interval is 1 s
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      seen = presented_serial(l.addr, l.cert, l.key);
    }
    EXPECT_EQ(seen, after) << l.name << c.logs();
  }
  // The cluster still serves over the rotated certificates (new connections to the router and,
  // from the router, to the decode worker).
  auto stub = c.stub();
  const test::Generated g =
      test::run_generate(*stub, test::greedy({10, 20, 30, 40}, 4), std::chrono::milliseconds(60000));
  EXPECT_TRUE(g.status.ok()) << g.status.error_message() << c.logs();
}

}  // namespace
}  // namespace yoco
