// A throwaway PKI for TLS tests, made with the openssl command line in a test's temp dir: a CA,
// a server certificate for 127.0.0.1 / localhost, a client certificate, and a second, unrelated
// ("rogue") CA whose own server certificate must not be trusted. Keys are 2048-bit RSA and the
// certificates live one day.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace yoco::test {

struct TestPki {
  std::string ca, ca_key;
  std::string server_cert, server_key;
  std::string client_cert, client_key;
  std::string rogue_ca, rogue_server_cert, rogue_server_key;  // signed by rogue_ca

  // redis-server arguments that replace the plain port by a TLS port requiring a client
  // certificate signed by the CA (Redis's default tls-auth-clients yes, said explicitly).
  std::vector<std::string> redis_server_args(int port) const {
    return {"--port",
            "0",
            "--tls-port",
            std::to_string(port),
            "--tls-cert-file",
            server_cert,
            "--tls-key-file",
            server_key,
            "--tls-ca-cert-file",
            ca,
            "--tls-auth-clients",
            "yes"};
  }
  // The store URL's TLS parameters for a client presenting the client certificate.
  std::string redis_url_query() const { return "tls_ca=" + ca + "&tls_cert=" + client_cert + "&tls_key=" + client_key; }

  // nullopt when `openssl` is missing or fails (the caller skips or fails with a message).
  static std::optional<TestPki> make(const std::string& dir) {
    TestPki p;
    p.ca = dir + "/ca.crt";
    p.ca_key = dir + "/ca.key";
    p.server_cert = dir + "/server.crt";
    p.server_key = dir + "/server.key";
    p.client_cert = dir + "/client.crt";
    p.client_key = dir + "/client.key";
    p.rogue_ca = dir + "/rogue-ca.crt";
    p.rogue_server_cert = dir + "/rogue-server.crt";
    p.rogue_server_key = dir + "/rogue-server.key";
    const std::string q = "cd '" + dir + "' && ";
    const std::string ext = "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext && ";
    auto ca = [](const std::string& name, const std::string& cn) {
      return "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj '/CN=" + cn + "' -keyout " + name + ".key -out " +
             name + ".crt && ";
    };
    auto leaf = [](const std::string& name, const std::string& cn, const std::string& by, bool san) {
      return "openssl req -newkey rsa:2048 -nodes -subj '/CN=" + cn + "' -keyout " + name + ".key -out " + name +
             ".csr && openssl x509 -req -in " + name + ".csr -CA " + by + ".crt -CAkey " + by +
             ".key -CAcreateserial -days 1 -out " + name + ".crt" + (san ? " -extfile san.ext" : "") + " && ";
    };
    const std::string cmd = "(" + q + ext + ca("ca", "yoco-test-ca") + ca("rogue-ca", "rogue-ca") +
                            leaf("server", "localhost", "ca", true) + leaf("client", "yoco-client", "ca", false) +
                            leaf("rogue-server", "localhost", "rogue-ca", true) + "true) > /dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) return std::nullopt;
    return p;
  }
};

}  // namespace yoco::test
