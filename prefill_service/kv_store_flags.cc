#include "prefill_service/kv_store_flags.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kv_store/factory.h"

namespace yoco {

namespace {

// --kv-store-password-env: the Redis password comes from the environment (a Kubernetes Secret),
// never from a flag or a config file. It goes into every redis:// (or redis-cluster://) tier that
// has no userinfo, %-encoded as the URL parser expects (a cluster URL's further seeds follow it).
std::string with_redis_password(const std::string& spec, const std::string& password) {
  std::string enc;
  for (unsigned char ch : password) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      enc += static_cast<char>(ch);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", ch);
      enc += buf;
    }
  }
  std::string out;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    std::string tier = spec.substr(pos, end - pos);
    for (const char* scheme : {"redis://", "rediss://", "redis-cluster://", "rediss-cluster://"}) {
      const size_t n = std::strlen(scheme);
      if (tier.rfind(scheme, 0) == 0) {
        const size_t host_end = tier.find_first_of("/?", n);
        const std::string authority = tier.substr(n, host_end == std::string::npos ? std::string::npos : host_end - n);
        if (authority.find('@') == std::string::npos) tier.insert(n, ":" + enc + "@");
        break;
      }
    }
    out += (out.empty() && pos == 0 ? "" : ",") + tier;
    pos = end + 1;
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<KvStore>> open_kv_store(const std::string& spec, const std::string& password_env) {
  std::string with_password = spec;
  std::string password;
  if (!password_env.empty()) {
    const char* pw = std::getenv(password_env.c_str());
    if (!pw) return invalid_argument("--kv-store-password-env: $" + password_env + " is not set");
    password = pw;
    with_password = with_redis_password(spec, password);
  }
  auto s = make_kv_store(with_password);
  if (s.ok()) return s;
  std::string msg = s.status().message();  // never echo the password
  for (size_t at; !password.empty() && (at = msg.find(password)) != std::string::npos;)
    msg.replace(at, password.size(), "***");
  return invalid_argument("--kv-store: " + msg);
}

}  // namespace yoco
