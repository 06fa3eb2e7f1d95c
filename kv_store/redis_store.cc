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
#include "kv_store/redis_cluster.h"
#include "kv_store/redis_conn.h"
#include "kv_store/redis_exec.h"
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

using redis::Batch;
using redis::is_ok_status;
using redis::Replies;
using redis::reply_text;
using redis::ReplyPtr;

// The reply of one command, or why there is none: a failure of the server or an error reply.
Result<const redisReply*> reply_of(const Replies& rs, size_t i, const std::string& what) {
  if (!rs[i].ok()) return rs[i].status();
  const redisReply* r = rs[i]->get();
  if (r->type == REDIS_REPLY_ERROR) return kv_unavailable("redis " + what + ": " + reply_text(r));
  return r;
}

class RedisStore final : public KvStore {
 public:
  RedisStore(RedisOptions opt, std::unique_ptr<redis::Executor> exec, std::string name)
      : opt_(std::move(opt)), exec_(std::move(exec)), name_(std::move(name)) {}

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
  std::string name() const override { return name_; }
  KvStoreStatsSnapshot stats() const override {
    KvStoreStatsSnapshot s = stats_.snapshot();
    s += exec_->stats();
    return s;
  }

 private:
  Status set_op(const char* cmd, std::string_view set, std::string_view member);
  // A failed command of a get: an error, or (cluster, a node down) a miss counted as an error.
  KvGetResult get_failed(const Status& st) {
    if (exec_->node_failure_is_miss()) return kv_miss();  // the executor counted the failure
    return st;
  }

  // On a cluster the user key is a hash tag, so a value's manifest and chunks share one slot:
  // PREFIX "{" KEY "}" (docs/design.md §5, Redis Cluster). One server keeps the plain names.
  std::string mkey(std::string_view key) const {
    return opt_.cluster ? opt_.key_prefix + "{" + std::string(key) + "}" : opt_.key_prefix + std::string(key);
  }
  std::string chunk_key(std::string_view key, uint64_t writer, uint32_t i) const {
    return mkey(key) + ":" + kv::hex64(writer) + ":" + std::to_string(i);
  }

  const RedisOptions opt_;
  const std::unique_ptr<redis::Executor> exec_;
  const std::string name_;
};

std::vector<KvGetResult> RedisStore::get_many(std::span<const std::string> keys) {
  const size_t n = keys.size();
  std::vector<KvGetResult> out;
  out.reserve(n);
  if (n == 0) return out;
  Batch b;
  for (const auto& k : keys) b.add({"GET", b.keep(mkey(k))});
  const Replies r1 = exec_->run(b, "GET");

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
    if (!r1[i].ok()) {
      res[i].emplace(get_failed(r1[i].status()));
      continue;
    }
    const redisReply* r = r1[i]->get();
    if (r->type == REDIS_REPLY_NIL) {
      res[i].emplace(kv_miss());
      continue;
    }
    if (r->type != REDIS_REPLY_STRING) {
      res[i].emplace(get_failed(kv_unavailable("redis GET " + keys[i] + ": " + reply_text(r))));
      continue;
    }
    Found f{i, {}, reply_text(r), b.size()};
    if (!decode_manifest(f.raw, static_cast<uint64_t>(opt_.max_value_bytes), f.m)) {
      damaged.push_back({i, std::move(f.raw), std::nullopt});
      continue;
    }
    for (uint32_t j = 0; j < f.m.chunks; ++j) b.add({"GET", b.keep(chunk_key(keys[i], f.m.writer, j))});
    found.push_back(std::move(f));
  }
  if (!b.empty()) {
    const Replies r2 = exec_->run(b, "GET chunks");
    for (auto& f : found) {
      std::string value;
      value.reserve(f.m.total);
      bool ok = true;
      std::optional<Status> failed;
      for (uint32_t j = 0; j < f.m.chunks && ok; ++j) {
        const Result<ReplyPtr>& rr = r2[f.first_reply + j];
        if (!rr.ok()) {
          failed = rr.status();
          break;
        }
        const redisReply* r = rr->get();
        ok = r->type == REDIS_REPLY_STRING && static_cast<uint64_t>(r->len) == f.m.chunk_len(j);
        if (ok) value.append(r->str, r->len);
      }
      if (failed) {
        res[f.index].emplace(get_failed(*failed));
        continue;
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
      std::vector<std::string_view> args{"EVAL", kDeleteIfSame, ""};
      args.push_back(b.keep(mkey(keys[d.index])));
      if (d.m)
        for (uint32_t j = 0; j < d.m->chunks; ++j) args.push_back(b.keep(chunk_key(keys[d.index], d.m->writer, j)));
      args[2] = b.keep(std::to_string(args.size() - 3));
      args.push_back(d.raw);
      b.add(std::move(args), 3);
      stats_.corrupt();
      res[d.index].emplace(kv_miss());
    }
    (void)exec_->run(b, "delete damaged");  // best effort
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
  const std::string what = "put " + std::string(key);

  Batch b;
  for (uint32_t i = 0; i < m.chunks; ++i) {
    const std::string_view ck = b.keep(chunk_key(key, m.writer, i));
    const std::string_view part = value.substr(static_cast<size_t>(i * m.chunk_bytes), m.chunk_len(i));
    if (ttl.count() > 0) b.add({"SET", ck, part, "PX", px});
    else b.add({"SET", ck, part});
  }
  // SET ... GET (Redis 6.2+) swaps the manifest and names the one it replaced in one step, so
  // of two concurrent writers each removes exactly the chunks it displaced.
  std::vector<std::string_view> set_manifest{"SET", mk, manifest};
  if (ttl.count() > 0) set_manifest.insert(set_manifest.end(), {"PX", px});
  set_manifest.push_back("GET");
  b.add(set_manifest);
  const Replies replies = exec_->run(b, what);
  for (size_t i = 0; i + 1 < replies.size(); ++i) {
    auto r = reply_of(replies, i, "SET");
    if (!r.ok() || !is_ok_status(*r)) {
      stats_.error();
      return r.ok() ? kv_unavailable("redis SET: " + reply_text(*r)) : r.status();
    }
  }
  if (!replies.back().ok()) {
    stats_.error();
    return replies.back().status();
  }
  const redisReply* old = replies.back()->get();
  if (old->type == REDIS_REPLY_ERROR) {
    // A server before 6.2 (no SET ... GET): a plain SET; displaced chunks are left to their TTL.
    set_manifest.pop_back();
    b.add(set_manifest);
    const Replies again = exec_->run(b, what);
    auto r = reply_of(again, 0, "SET");
    if (!r.ok() || !is_ok_status(*r)) {
      stats_.error();
      return r.ok() ? kv_unavailable("redis SET: " + reply_text(*r)) : r.status();
    }
  }
  Manifest om;
  if (old->type == REDIS_REPLY_STRING &&
      decode_manifest(std::string_view(old->str, old->len), static_cast<uint64_t>(opt_.max_value_bytes), om) &&
      om.writer != m.writer && om.chunks > 0) {
    std::vector<std::string_view> args{"DEL"};
    for (uint32_t j = 0; j < om.chunks; ++j) args.push_back(b.keep(chunk_key(key, om.writer, j)));
    b.add(std::move(args));
    (void)exec_->run(b, "delete replaced chunks");
  }
  stats_.written(value.size());
  return Status::Ok();
}

Status RedisStore::del(std::string_view key) {
  const std::string mk = mkey(key);
  const std::string what = "del " + std::string(key);
  Batch b;
  b.add({"GET", mk});
  const Replies r = exec_->run(b, what);
  if (!r[0].ok()) {
    stats_.error();
    return r[0].status();
  }
  std::vector<std::string_view> args{"DEL", mk};
  const redisReply* old = r[0]->get();
  Manifest m;
  if (old->type == REDIS_REPLY_STRING &&
      decode_manifest(std::string_view(old->str, old->len), static_cast<uint64_t>(opt_.max_value_bytes), m))
    for (uint32_t j = 0; j < m.chunks; ++j) args.push_back(b.keep(chunk_key(key, m.writer, j)));
  b.add(std::move(args));
  const Replies dr = exec_->run(b, what);
  auto d = reply_of(dr, 0, "DEL");
  if (!d.ok()) {
    stats_.error();
    return d.status();
  }
  return Status::Ok();
}

Status RedisStore::set_op(const char* cmd, std::string_view set, std::string_view member) {
  const std::string sk = mkey(set);
  Batch b;
  b.add({cmd, sk, member});
  const Replies r = exec_->run(b, cmd);
  auto rr = reply_of(r, 0, cmd);
  if (!rr.ok() || (*rr)->type != REDIS_REPLY_INTEGER) {
    stats_.error();
    return rr.ok() ? kv_unavailable(std::string("redis ") + cmd + ": " + reply_text(*rr)) : rr.status();
  }
  return Status::Ok();
}

Result<std::vector<std::string>> RedisStore::set_members(std::string_view set) {
  const std::string sk = mkey(set);
  Batch b;
  b.add({"SMEMBERS", sk});
  const Replies r = exec_->run(b, "SMEMBERS");
  auto rr = reply_of(r, 0, "SMEMBERS");
  if (!rr.ok() || (*rr)->type != REDIS_REPLY_ARRAY) {
    stats_.error();
    return rr.ok() ? kv_unavailable("redis SMEMBERS: " + reply_text(*rr)) : rr.status();
  }
  const redisReply* a = *rr;
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
  redis::ConnectOptions co;
  co.user = opt.user;
  co.password = opt.password;
  co.db = opt.db;
  co.connect_timeout = opt.connect_timeout;
  co.command_timeout = opt.command_timeout;
  co.pool_size = opt.pool_size;
  co.tls = tls;
  const std::string scheme = tls ? "rediss" : "redis";
  if (opt.cluster) {
    if (opt.db != 0) return invalid_argument("redis-cluster kv store: a cluster has only database 0");
    if (opt.key_prefix.find_first_of("{}") != std::string::npos)
      return invalid_argument("redis-cluster kv store: prefix must not contain { or } (the hash tag is the key)");
    std::vector<std::pair<std::string, int>> seeds = opt.seeds;
    if (seeds.empty()) seeds.emplace_back(opt.host, opt.port);
    std::string name = scheme + "-cluster://";
    for (size_t i = 0; i < seeds.size(); ++i)
      name += (i ? "," : "") + seeds[i].first + ":" + std::to_string(seeds[i].second);
    auto exec =
        redis::make_cluster_executor(seeds, co, opt.breaker ? std::optional(opt.breaker_options) : std::nullopt);
    return std::unique_ptr<KvStore>(new RedisStore(opt, std::move(exec), std::move(name)));
  }
  auto exec = std::make_unique<redis::SingleExecutor>(opt.host, opt.port, co);
  return std::unique_ptr<KvStore>(new RedisStore(
      opt, std::move(exec), scheme + "://" + opt.host + ":" + std::to_string(opt.port) + "/" + std::to_string(opt.db)));
}

}  // namespace yoco
