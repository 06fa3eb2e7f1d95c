#include "router/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "common/json.h"
#include "common/log.h"

namespace yoco {
namespace {

using Clock = std::chrono::steady_clock;

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<std::string> from_hex(const std::string& s, size_t bytes, const std::string& field) {
  if (s.size() != 2 * bytes)
    return invalid_argument(field + ": needs " + std::to_string(2 * bytes) + " hex chars, has " +
                            std::to_string(s.size()));
  std::string out(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) {
    const int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return invalid_argument(field + ": not hex");
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

std::string to_hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += {d[p[i] >> 4], d[p[i] & 15]};
  return s;
}

Result<int64_t> limit(const Json& e, const char* name, const std::string& at) {
  const Json* v = e.find(name);
  if (!v) return int64_t{0};
  if (!v->is_integer() || v->as_int() < 0) return invalid_argument(at + "." + name + ": must be an integer >= 0");
  return v->as_int();
}

Result<ApiKeyEntry> parse_entry(const Json& e, const std::string& at) {
  if (!e.is_object()) return invalid_argument(at + ": must be an object");
  ApiKeyEntry k;
  const Json* name = e.find("name");
  if (!name || !name->is_string() || name->as_string().empty())
    return invalid_argument(at + ".name: a non-empty string is required");
  k.name = name->as_string();
  for (char c : k.name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      return invalid_argument(at + ".name: only letters, digits, '-', '_' and '.' (it is a metric label)");
  const Json* salt = e.find("salt");
  if (!salt || !salt->is_string()) return invalid_argument(at + ".salt: 32 hex chars are required");
  auto s = from_hex(salt->as_string(), 16, at + ".salt");
  if (!s.ok()) return s.status();
  k.salt = std::move(s).value();
  const Json* sha = e.find("sha256");
  if (!sha || !sha->is_string()) return invalid_argument(at + ".sha256: 64 hex chars are required");
  auto d = from_hex(sha->as_string(), 32, at + ".sha256");
  if (!d.ok()) return d.status();
  std::copy(d->begin(), d->end(), k.sha256.begin());
  for (auto [field, dst] :
       {std::pair{"max_concurrent", &k.max_concurrent}, std::pair{"tokens_per_minute", &k.tokens_per_minute},
        std::pair{"max_context", &k.max_context}}) {
    auto v = limit(e, field, at);
    if (!v.ok()) return v.status();
    *dst = *v;
  }
  if (const Json* a = e.find("admin")) {
    if (!a->is_bool()) return invalid_argument(at + ".admin: must be true or false");
    k.admin = a->as_bool();
  }
  if (const Json* sc = e.find("scopes")) {
    if (!sc->is_array()) return invalid_argument(at + ".scopes: must be an array of scope names");
    for (size_t j = 0; j < sc->as_array().size(); ++j) {
      const Json& v = sc->as_array()[j];
      const std::string where = at + ".scopes[" + std::to_string(j) + "]";
      if (!v.is_string() ||
          std::find(std::begin(kApiScopes), std::end(kApiScopes), v.as_string()) == std::end(kApiScopes))
        return invalid_argument(where + ": must be one of generate, score, documents");
      k.scopes.push_back(v.as_string());
    }
    if (k.scopes.empty()) return invalid_argument(at + ".scopes: empty (leave it out to grant every scope)");
  }
  return k;
}

}  // namespace

Result<std::vector<ApiKeyEntry>> parse_api_key_file(std::string_view json) {
  auto doc = Json::parse(json);
  if (!doc.ok()) return invalid_argument("api key file: " + doc.status().message());
  const Json* keys = doc->find("keys");
  if (!keys || !keys->is_array()) return invalid_argument("keys: an array is required");
  std::vector<ApiKeyEntry> out;
  for (size_t i = 0; i < keys->as_array().size(); ++i) {
    auto k = parse_entry(keys->as_array()[i], "keys[" + std::to_string(i) + "]");
    if (!k.ok()) return k.status();
    for (const auto& prev : out)
      if (prev.name == k->name) return invalid_argument("keys[" + std::to_string(i) + "].name: duplicate " + k->name);
    out.push_back(std::move(k).value());
  }
  return out;
}

Sha256 api_key_digest(std::string_view salt, std::string_view key) {
  Sha256 d{};
  EVP_MD_CTX* c = EVP_MD_CTX_new();
  YOCO_CHECK(c && EVP_DigestInit_ex(c, EVP_sha256(), nullptr) == 1);
  EVP_DigestUpdate(c, salt.data(), salt.size());
  EVP_DigestUpdate(c, key.data(), key.size());
  unsigned int n = 0;
  EVP_DigestFinal_ex(c, d.data(), &n);
  EVP_MD_CTX_free(c);
  return d;
}

std::string new_api_key() {
  uint8_t b[32];
  YOCO_CHECK(RAND_bytes(b, sizeof b) == 1);
  return "yoco_" + to_hex(b, sizeof b);
}

std::string api_key_entry_json(const ApiKeyEntry& k, std::string_view key) {
  uint8_t salt[16];
  YOCO_CHECK(RAND_bytes(salt, sizeof salt) == 1);
  const std::string s(reinterpret_cast<const char*>(salt), sizeof salt);
  const Sha256 d = api_key_digest(s, key);
  Json::Object o{{"name", k.name},
                 {"salt", to_hex(salt, sizeof salt)},
                 {"sha256", to_hex(d.data(), d.size())},
                 {"max_concurrent", k.max_concurrent},
                 {"tokens_per_minute", k.tokens_per_minute},
                 {"max_context", k.max_context},
                 {"admin", k.admin}};
  if (!k.scopes.empty()) {
    Json::Array a;
    for (const auto& s : k.scopes) a.emplace_back(s);
    o.emplace("scopes", Json(std::move(a)));
  }
  return Json(std::move(o)).dump();
}

bool KeyLease::allows(std::string_view scope) const {
  return scope.empty() || key_.scopes.empty() ||
         std::find(key_.scopes.begin(), key_.scopes.end(), scope) != key_.scopes.end();
}

std::string KeyLease::scope_denial(std::string_view scope, std::string_view rpc) const {
  if (allows(scope)) return {};
  std::string granted;
  for (const auto& s : key_.scopes) granted += (granted.empty() ? "" : ", ") + s;
  return "authorization: key " + key_.name + " may not call " + std::string(rpc) + " (needs scope \"" +
         std::string(scope) + "\"; granted: " + granted + ")";
}

KeyLease::~KeyLease() {
  std::lock_guard lk(usage_->mu);
  --usage_->in_flight;
}

Status KeyLease::charge(int64_t prompt_tokens, int64_t max_tokens, Clock::time_point now) {
  const int64_t need = prompt_tokens + max_tokens;
  if (key_.max_context > 0 && need > key_.max_context)
    return {StatusCode::kResourceExhausted, "prompt (" + std::to_string(prompt_tokens) + " tokens) + max_tokens (" +
                                                std::to_string(max_tokens) + ") exceed key " + key_.name +
                                                "'s max_context " + std::to_string(key_.max_context)};
  if (key_.tokens_per_minute <= 0) return Status::Ok();
  std::lock_guard lk(usage_->mu);
  auto& w = usage_->minute;
  std::erase_if(w, [&](const auto& e) { return now - e.first >= std::chrono::minutes(1); });
  int64_t used = 0;
  for (const auto& e : w) used += e.second;
  if (used + need > key_.tokens_per_minute)
    return {StatusCode::kResourceExhausted, "key " + key_.name + " is over its tokens_per_minute " +
                                                std::to_string(key_.tokens_per_minute) + " (" + std::to_string(used) +
                                                " used in the last minute, this request needs " + std::to_string(need) +
                                                ": prompt + max_tokens)"};
  w.emplace_back(now, need);
  return Status::Ok();
}

Result<std::unique_ptr<ApiKeys>> ApiKeys::open(std::string path, std::chrono::milliseconds watch) {
  std::unique_ptr<ApiKeys> k(new ApiKeys(std::move(path)));
  struct stat st {};
  if (::stat(k->path_.c_str(), &st) != 0) return io_error("--api-keys " + k->path_ + ": cannot stat");
  if (Status s =
          k->load({st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec, st.st_size, static_cast<int64_t>(st.st_ino)});
      !s.ok())
    return Status(s.code(), "--api-keys " + k->path_ + ": " + s.message());
  if (watch.count() > 0) k->watcher_ = std::thread([p = k.get(), watch] { p->watch_loop(watch); });
  return k;
}

ApiKeys::~ApiKeys() {
  {
    std::lock_guard lk(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

Status ApiKeys::load(const FileId& id) {
  std::ifstream f(path_, std::ios::binary);
  if (!f) return io_error("cannot read");
  std::stringstream ss;
  ss << f.rdbuf();
  auto keys = parse_api_key_file(ss.str());
  std::lock_guard lk(mu_);
  loaded_ = id;  // a bad file is not retried until it changes again
  if (!keys.ok()) return keys.status();
  keys_ = std::move(keys).value();
  for (const auto& k : keys_)
    if (!usage_.count(k.name)) usage_.emplace(k.name, std::make_shared<KeyUsage>());
  return Status::Ok();
}

bool ApiKeys::reload_if_changed() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return false;  // mid-swap of a Secret: the old keys stay
  const FileId id{st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec, st.st_size, static_cast<int64_t>(st.st_ino)};
  {
    std::lock_guard lk(mu_);
    if (id == loaded_) return false;
  }
  if (Status s = load(id); !s.ok()) {
    YOCO_LOG(LogLevel::kError, "api key file rejected; the old keys stay",
             LogFields().kv("path", path_).kv("error", s.message()));
    return false;
  }
  YOCO_LOG(LogLevel::kInfo, "api keys reloaded",
           LogFields().kv("path", path_).kv("keys", static_cast<int64_t>(size())));
  return true;
}

size_t ApiKeys::size() const {
  std::lock_guard lk(mu_);
  return keys_.size();
}

void ApiKeys::watch_loop(std::chrono::milliseconds interval) {
  std::unique_lock lk(stop_mu_);
  while (!stop_cv_.wait_for(lk, interval, [&] { return stop_; })) {
    lk.unlock();
    reload_if_changed();
    lk.lock();
  }
}

AuthResult ApiKeys::authenticate(std::string_view authorization) {
  AuthResult r;
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() <= kBearer.size() || authorization.substr(0, kBearer.size()) != kBearer) {
    r.error = AuthError::kMissing;
    r.message = "authorization: missing bearer key";
    return r;
  }
  const std::string_view key = authorization.substr(kBearer.size());
  std::shared_ptr<KeyUsage> usage;
  const ApiKeyEntry* match = nullptr;
  std::lock_guard lk(mu_);
  // Every entry is hashed and compared, so the time taken says nothing about which one matched.
  for (const auto& k : keys_) {
    const Sha256 d = api_key_digest(k.salt, key);
    if (CRYPTO_memcmp(d.data(), k.sha256.data(), d.size()) == 0) match = &k;
  }
  if (!match) {
    r.error = AuthError::kUnknown;
    r.message = "authorization: unknown key";
    return r;
  }
  usage = usage_.at(match->name);
  {
    std::lock_guard ul(usage->mu);
    if (match->max_concurrent > 0 && usage->in_flight >= match->max_concurrent) {
      r.error = AuthError::kConcurrency;
      r.key_name = match->name;
      r.message = "key " + match->name + " has " + std::to_string(usage->in_flight) +
                  " requests in flight, its max_concurrent is " + std::to_string(match->max_concurrent);
      return r;
    }
    ++usage->in_flight;
  }
  r.lease = std::make_unique<KeyLease>(*match, std::move(usage));
  return r;
}

}  // namespace yoco
