// The hiredis implementation of redis_store.h (built only when hiredis is found).
#include "kv_store/redis_store.h"

#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "common/checksum.h"
#include "handoff/bytes.h"
#include "kv_store/redis_conn.h"
#include "kv_store/util.h"

namespace yoco {

namespace {

constexpr char kManifestMagic[8] = {'Y', 'K', 'V', 'R', 'M', 'A', 'N', '1'};
constexpr uint32_t kManifestVersion = 1;
constexpr size_t kManifestBytes = 48;
constexpr uint64_t kMaxChunkBytes = uint64_t{512} << 20;  // Redis's own value limit

// Deletes the manifest and its chunks only if the manifest still holds what the reader saw: a
// writer may have replaced the value since.
constexpr char kDeleteIfSame[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then "
    "for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end return 1 end return 0";

struct Manifest {
  uint32_t chunks = 0;
  uint64_t total = 0;
  uint64_t chunk_bytes = 0;
  uint64_t writer = 0;
  uint32_t crc = 0;

  uint64_t chunk_len(uint32_t i) const {
    return i + 1 < chunks ? chunk_bytes : total - static_cast<uint64_t>(chunks - 1) * chunk_bytes;
  }
};

std::string encode_manifest(const Manifest& m) {
  std::string s(kManifestBytes, '\0');
  std::memcpy(s.data(), kManifestMagic, 8);
  store_le<uint32_t>(s.data() + 8, kManifestVersion);
  store_le<uint32_t>(s.data() + 12, m.chunks);
  store_le<uint64_t>(s.data() + 16, m.total);
  store_le<uint64_t>(s.data() + 24, m.chunk_bytes);
  store_le<uint64_t>(s.data() + 32, m.writer);
  store_le<uint32_t>(s.data() + 40, m.crc);
  store_le<uint32_t>(s.data() + 44, crc32c(s.data(), 44));
  return s;
}

bool decode_manifest(std::string_view s, uint64_t max_value_bytes, Manifest& m) {
  if (s.size() != kManifestBytes || std::memcmp(s.data(), kManifestMagic, 8) != 0) return false;
  if (crc32c(s.data(), 44) != load_le<uint32_t>(s.data() + 44)) return false;
  if (load_le<uint32_t>(s.data() + 8) != kManifestVersion) return false;
  m.chunks = static_cast<uint32_t>(load_le<uint32_t>(s.data() + 12));
  m.total = load_le<uint64_t>(s.data() + 16);
  m.chunk_bytes = load_le<uint64_t>(s.data() + 24);
  m.writer = load_le<uint64_t>(s.data() + 32);
  m.crc = static_cast<uint32_t>(load_le<uint32_t>(s.data() + 40));
  if (m.chunk_bytes == 0 || m.chunk_bytes > kMaxChunkBytes || m.total > max_value_bytes) return false;
  return m.chunks == (m.total + m.chunk_bytes - 1) / m.chunk_bytes;
}

using redis::ReplyPtr;

bool is_ok_status(const redisReply* r) {
  return r->type == REDIS_REPLY_STATUS && r->len == 2 && std::memcmp(r->str, "OK", 2) == 0;
}
std::string reply_text(const redisReply* r) { return std::string(r->str ? r->str : "", r->str ? r->len : 0); }

class RedisStore final : public KvStore {
 public:
  RedisStore(RedisOptions opt, std::shared_ptr<redis::TlsContext> tls) : opt_(std::move(opt)), tls_(std::move(tls)) {}

  KvGetResult get(std::string_view key) override {
    std::string k(key);
    auto r = get_many(std::span<const std::string>(&k, 1));
    return std::move(r[0]);
  }
  std::vector<KvGetResult> get_many(std::span<const std::string> keys) override;
  Status put(std::string_view key, std::string_view value, std::chrono::seconds ttl) override;
  Status del(std::string_view key) override;
  Status set_add(std::string_view set, std::string_view member) override { return set_op("SADD", set, member); }
  Status set_remove(std::string_view set, std::string_view member) override { return set_op("SREM", set, member); }
  Result<std::vector<std::string>> set_members(std::string_view set) override;
  std::string name() const override {
    return std::string(tls_ ? "rediss://" : "redis://") + opt_.host + ":" + std::to_string(opt_.port) + "/" +
           std::to_string(opt_.db);
  }

 private:
  // A pooled connection, returned on destruction (freed if it broke).
  class Lease {
   public:
    Lease(RedisStore* s, std::unique_ptr<redis::Connection> c) : s_(s), c_(std::move(c)) {}
    Lease(Lease&& o) noexcept = default;
    Lease(const Lease&) = delete;
    ~Lease() {
      if (c_) s_->give_back(std::move(c_));
    }
    redis::Connection* get() const { return c_.get(); }

   private:
    RedisStore* s_;
    std::unique_ptr<redis::Connection> c_;
  };

  Result<Lease> borrow();
  void give_back(std::unique_ptr<redis::Connection> c);
  Result<std::unique_ptr<redis::Connection>> connect();
  Status set_op(const char* cmd, std::string_view set, std::string_view member);

  std::string mkey(std::string_view key) const { return opt_.key_prefix + std::string(key); }
  std::string chunk_key(std::string_view key, uint64_t writer, uint32_t i) const {
    return mkey(key) + ":" + kv::hex64(writer) + ":" + std::to_string(i);
  }

  const RedisOptions opt_;
  const std::shared_ptr<redis::TlsContext> tls_;  // null: plain TCP
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<redis::Connection>> idle_;
  int open_ = 0;
};

Result<std::unique_ptr<redis::Connection>> RedisStore::connect() {
  YOCO_ASSIGN_OR_RETURN(
      std::unique_ptr<redis::Connection> conn,
      redis::Connection::open(opt_.host, opt_.port, opt_.connect_timeout, opt_.command_timeout, tls_));
  redis::Connection* c = conn.get();
  if (!opt_.password.empty()) {
    if (opt_.user.empty()) c->append({"AUTH", opt_.password});
    else c->append({"AUTH", opt_.user, opt_.password});
  }
  const std::string db = std::to_string(opt_.db);
  if (opt_.db != 0) c->append({"SELECT", db});
  if (c->pending() > 0) {
    auto replies = c->run("connection setup");
    Status st;
    if (!replies.ok()) {
      st = replies.status();
    } else {
      for (size_t i = 0; i < replies->size() && st.ok(); ++i) {
        const redisReply* r = (*replies)[i].get();
        if (is_ok_status(r)) continue;
        const bool auth = !opt_.password.empty() && i == 0;
        // The message names the command, never the secret.
        st =
            failed_precondition(std::string("redis ") + (auth ? "AUTH" : "SELECT " + db) + " failed: " + reply_text(r));
      }
    }
    if (!st.ok()) return st;
  }
  return conn;
}

Result<RedisStore::Lease> RedisStore::borrow() {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + opt_.command_timeout;
  while (idle_.empty() && open_ >= opt_.pool_size) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && idle_.empty() && open_ >= opt_.pool_size)
      return kv_deadline_exceeded("redis: no free connection in the pool of " + std::to_string(opt_.pool_size) +
                                  " within " + std::to_string(opt_.command_timeout.count()) + " ms");
  }
  if (!idle_.empty()) {
    std::unique_ptr<redis::Connection> c = std::move(idle_.back());
    idle_.pop_back();
    return Lease(this, std::move(c));
  }
  ++open_;
  lock.unlock();
  auto c = connect();
  if (!c.ok()) {
    lock.lock();
    --open_;
    cv_.notify_one();
    return c.status();
  }
  return Lease(this, std::move(*c));
}

void RedisStore::give_back(std::unique_ptr<redis::Connection> c) {
  std::vector<std::unique_ptr<redis::Connection>> stale;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!c->broken()) {
      idle_.push_back(std::move(c));
      cv_.notify_one();
      return;
    }
    // A broken connection usually means the server went away: its idle siblings are as dead,
    // so they go too and the next call connects afresh.
    stale.swap(idle_);
    open_ -= 1 + static_cast<int>(stale.size());
    cv_.notify_all();
  }
  // c and stale close here, outside the lock.
}

std::vector<KvGetResult> RedisStore::get_many(std::span<const std::string> keys) {
  const size_t n = keys.size();
  std::vector<KvGetResult> out;
  out.reserve(n);
  auto fail_all = [&](const Status& st) {
    out.clear();
    for (size_t i = 0; i < n; ++i) {
      stats_.error();
      out.push_back(st);
    }
    return std::move(out);
  };
  if (n == 0) return out;
  auto lease = borrow();
  if (!lease.ok()) return fail_all(lease.status());
  redis::Connection* c = lease->get();
  for (const auto& k : keys) c->append({"GET", mkey(k)});
  auto r1 = c->run("GET");
  if (!r1.ok()) return fail_all(r1.status());

  struct Found {
    size_t index;
    Manifest m;
    std::string raw;
    size_t first_reply;
  };
  struct Damaged {
    size_t index;
    std::string raw;
    std::optional<Manifest> m;  // known: its chunks are deleted too
  };
  std::vector<std::optional<KvGetResult>> res(n);
  std::vector<Found> found;
  std::vector<Damaged> damaged;
  for (size_t i = 0; i < n; ++i) {
    const redisReply* r = (*r1)[i].get();
    if (r->type == REDIS_REPLY_NIL) {
      res[i].emplace(kv_miss());
      continue;
    }
    if (r->type != REDIS_REPLY_STRING) {
      res[i].emplace(kv_unavailable("redis GET " + keys[i] + ": " + reply_text(r)));
      continue;
    }
    Found f{i, {}, reply_text(r), c->pending()};
    if (!decode_manifest(f.raw, static_cast<uint64_t>(opt_.max_value_bytes), f.m)) {
      damaged.push_back({i, std::move(f.raw), std::nullopt});
      continue;
    }
    for (uint32_t j = 0; j < f.m.chunks; ++j) c->append({"GET", chunk_key(keys[i], f.m.writer, j)});
    found.push_back(std::move(f));
  }
  if (c->pending() > 0) {
    auto r2 = c->run("GET chunks");
    if (!r2.ok()) return fail_all(r2.status());
    for (auto& f : found) {
      std::string value;
      value.reserve(f.m.total);
      bool ok = true;
      for (uint32_t j = 0; j < f.m.chunks && ok; ++j) {
        const redisReply* r = (*r2)[f.first_reply + j].get();
        ok = r->type == REDIS_REPLY_STRING && static_cast<uint64_t>(r->len) == f.m.chunk_len(j);
        if (ok) value.append(r->str, r->len);
      }
      ok = ok && value.size() == f.m.total && crc32c(value.data(), value.size()) == f.m.crc;
      if (ok) res[f.index].emplace(KvValue(std::move(value)));
      else damaged.push_back({f.index, std::move(f.raw), f.m});
    }
  } else {
    for (auto& f : found) res[f.index].emplace(KvValue(std::string()));  // empty values
  }
  if (!damaged.empty()) {
    for (const auto& d : damaged) {
      std::vector<std::string> ks{mkey(keys[d.index])};
      if (d.m)
        for (uint32_t j = 0; j < d.m->chunks; ++j) ks.push_back(chunk_key(keys[d.index], d.m->writer, j));
      const std::string nkeys = std::to_string(ks.size());
      std::vector<std::string_view> args{"EVAL", kDeleteIfSame, nkeys};
      for (const auto& k : ks) args.push_back(k);
      args.push_back(d.raw);
      c->append(args);
      stats_.corrupt();
      res[d.index].emplace(kv_miss());
    }
    (void)c->run("delete damaged");  // best effort; a broken connection is dropped by the lease
  }
  for (size_t i = 0; i < n; ++i) {
    KvGetResult& r = *res[i];
    if (!r.ok()) stats_.error();
    else if (r->has_value()) stats_.hit((*r)->size());
    else stats_.miss();
    out.push_back(std::move(r));
  }
  return out;
}

Status RedisStore::put(std::string_view key, std::string_view value, std::chrono::seconds ttl) {
  if (static_cast<int64_t>(value.size()) > opt_.max_value_bytes) {
    stats_.error();
    return kv_resource_exhausted("redis put: value of " + std::to_string(value.size()) +
                                 " bytes over max_value_bytes " + std::to_string(opt_.max_value_bytes));
  }
  Manifest m;
  m.total = value.size();
  m.chunk_bytes = static_cast<uint64_t>(opt_.chunk_bytes);
  m.chunks = static_cast<uint32_t>((m.total + m.chunk_bytes - 1) / m.chunk_bytes);
  m.writer = kv::random64();
  m.crc = crc32c(value.data(), value.size());
  const std::string manifest = encode_manifest(m);
  const std::string px = std::to_string(ttl.count() * 1000);
  const std::string mk = mkey(key);

  auto lease = borrow();
  if (!lease.ok()) {
    stats_.error();
    return lease.status();
  }
  redis::Connection* c = lease->get();
  for (uint32_t i = 0; i < m.chunks; ++i) {
    const std::string ck = chunk_key(key, m.writer, i);
    const std::string_view part = value.substr(static_cast<size_t>(i * m.chunk_bytes), m.chunk_len(i));
    if (ttl.count() > 0) c->append({"SET", ck, part, "PX", px});
    else c->append({"SET", ck, part});
  }
  // SET ... GET (Redis 6.2+) swaps the manifest and names the one it replaced in one step, so
  // of two concurrent writers each removes exactly the chunks it displaced.
  std::vector<std::string_view> set_manifest{"SET", mk, manifest};
  if (ttl.count() > 0) set_manifest.insert(set_manifest.end(), {"PX", px});
  set_manifest.push_back("GET");
  c->append(set_manifest);
  auto replies = c->run("put " + std::string(key));
  if (!replies.ok()) {
    stats_.error();
    return replies.status();
  }
  for (size_t i = 0; i + 1 < replies->size(); ++i) {
    if (!is_ok_status((*replies)[i].get())) {
      stats_.error();
      return kv_unavailable("redis SET: " + reply_text((*replies)[i].get()));
    }
  }
  const redisReply* old = replies->back().get();
  if (old->type == REDIS_REPLY_ERROR) {
    // A server before 6.2 (no SET ... GET): a plain SET; displaced chunks are left to their TTL.
    set_manifest.pop_back();
    c->append(set_manifest);
    auto r = c->run("put " + std::string(key));
    if (!r.ok() || !is_ok_status((*r)[0].get())) {
      stats_.error();
      return r.ok() ? kv_unavailable("redis SET: " + reply_text((*r)[0].get())) : r.status();
    }
  }
  Manifest om;
  if (old->type == REDIS_REPLY_STRING &&
      decode_manifest(std::string_view(old->str, old->len), static_cast<uint64_t>(opt_.max_value_bytes), om) &&
      om.writer != m.writer && om.chunks > 0) {
    std::vector<std::string> ks;
    for (uint32_t j = 0; j < om.chunks; ++j) ks.push_back(chunk_key(key, om.writer, j));
    std::vector<std::string_view> args{"DEL"};
    for (const auto& k : ks) args.push_back(k);
    c->append(args);
    (void)c->run("delete replaced chunks");
  }
  stats_.written(value.size());
  return Status::Ok();
}

Status RedisStore::del(std::string_view key) {
  auto lease = borrow();
  if (!lease.ok()) {
    stats_.error();
    return lease.status();
  }
  redis::Connection* c = lease->get();
  const std::string mk = mkey(key);
  c->append({"GET", mk});
  auto r = c->run("del " + std::string(key));
  if (!r.ok()) {
    stats_.error();
    return r.status();
  }
  std::vector<std::string> ks{mk};
  const redisReply* old = (*r)[0].get();
  Manifest m;
  if (old->type == REDIS_REPLY_STRING &&
      decode_manifest(std::string_view(old->str, old->len), static_cast<uint64_t>(opt_.max_value_bytes), m))
    for (uint32_t j = 0; j < m.chunks; ++j) ks.push_back(chunk_key(key, m.writer, j));
  std::vector<std::string_view> args{"DEL"};
  for (const auto& k : ks) args.push_back(k);
  c->append(args);
  auto dr = c->run("del " + std::string(key));
  if (!dr.ok()) {
    stats_.error();
    return dr.status();
  }
  if ((*dr)[0]->type == REDIS_REPLY_ERROR) {
    stats_.error();
    return kv_unavailable("redis DEL: " + reply_text((*dr)[0].get()));
  }
  return Status::Ok();
}

Status RedisStore::set_op(const char* cmd, std::string_view set, std::string_view member) {
  auto lease = borrow();
  if (!lease.ok()) {
    stats_.error();
    return lease.status();
  }
  redis::Connection* c = lease->get();
  c->append({cmd, mkey(set), member});
  auto r = c->run(cmd);
  if (!r.ok()) {
    stats_.error();
    return r.status();
  }
  if ((*r)[0]->type != REDIS_REPLY_INTEGER) {
    stats_.error();
    return kv_unavailable(std::string("redis ") + cmd + ": " + reply_text((*r)[0].get()));
  }
  return Status::Ok();
}

Result<std::vector<std::string>> RedisStore::set_members(std::string_view set) {
  auto lease = borrow();
  if (!lease.ok()) {
    stats_.error();
    return lease.status();
  }
  redis::Connection* c = lease->get();
  c->append({"SMEMBERS", mkey(set)});
  auto r = c->run("SMEMBERS");
  if (!r.ok()) {
    stats_.error();
    return r.status();
  }
  const redisReply* a = (*r)[0].get();
  if (a->type != REDIS_REPLY_ARRAY) {
    stats_.error();
    return kv_unavailable("redis SMEMBERS: " + reply_text(a));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < a->elements; ++i)
    if (a->element[i]->type == REDIS_REPLY_STRING) out.push_back(reply_text(a->element[i]));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Result<std::unique_ptr<KvStore>> make_redis_store(const RedisOptions& opt) {
  if (opt.host.empty()) return invalid_argument("redis kv store: empty host");
  if (opt.port < 1 || opt.port > 65535) return invalid_argument("redis kv store: port out of range");
  if (opt.pool_size < 1) return invalid_argument("redis kv store: pool size must be at least 1");
  if (opt.chunk_bytes < 1 || static_cast<uint64_t>(opt.chunk_bytes) > kMaxChunkBytes)
    return invalid_argument("redis kv store: chunk_bytes must be in [1, 512MiB]");
  if (opt.command_timeout.count() <= 0 || opt.connect_timeout.count() <= 0)
    return invalid_argument("redis kv store: timeouts must be positive");
  std::shared_ptr<redis::TlsContext> tls;
  if (opt.tls) {
    YOCO_ASSIGN_OR_RETURN(tls, redis::TlsContext::create(opt.tls_options));
  } else if (!opt.tls_options.ca_file.empty() || !opt.tls_options.cert_file.empty() ||
             !opt.tls_options.key_file.empty() || !opt.tls_options.server_name.empty() || !opt.tls_options.verify) {
    return invalid_argument("redis kv store: tls_* options given without tls (use rediss:// or tls=1)");
  }
  static std::once_flag sigpipe_once;
  std::call_once(sigpipe_once, [] {
    struct sigaction sa;
    if (sigaction(SIGPIPE, nullptr, &sa) == 0 && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  });
  return std::unique_ptr<KvStore>(new RedisStore(opt, std::move(tls)));
}

}  // namespace yoco
