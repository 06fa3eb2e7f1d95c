// API keys of the public API (docs/design.md §9b): a JSON file of salted SHA-256 digests, each
// with a name and limits, re-read when it changes (a Kubernetes Secret is updated in place). A
// request's key is checked in constant time against every entry; what it may use (concurrent
// requests, tokens per minute, context) is counted per key name, so the counts survive a reload.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"

namespace yoco {

using Sha256 = std::array<uint8_t, 32>;

struct ApiKeyEntry {
  std::string name;
  std::string salt;            // raw bytes (16, from 32 hex chars)
  Sha256 sha256{};             // SHA-256(salt || key)
  int64_t max_concurrent = 0;  // 0: unlimited
  int64_t tokens_per_minute = 0;
  int64_t max_context = 0;
  bool admin = false;
  // What the key may call (kApiScopes); empty: everything. Outside them: PERMISSION_DENIED.
  std::vector<std::string> scopes;
};

// The scopes a key can be granted: "generate" (Generate), "score" (Score), "documents"
// (CacheDocument, GetDocument, ListDocuments, DeleteDocument). Tokenize, Detokenize and
// GetModelInfo need only a valid key.
inline constexpr std::string_view kApiScopes[] = {"generate", "score", "documents"};

// {"keys":[{"name":..,"salt":..,"sha256":..,"max_concurrent":..,"tokens_per_minute":..,
// "max_context":..,"admin":..}]}; errors name the field (keys[1].salt).
Result<std::vector<ApiKeyEntry>> parse_api_key_file(std::string_view json);

Sha256 api_key_digest(std::string_view salt, std::string_view key);
// A new random key ("yoco_" + 64 hex chars: 256 bits) and its file entry as one JSON object.
std::string new_api_key();
std::string api_key_entry_json(const ApiKeyEntry& limits, std::string_view key);

// What one key is using now, by name (shared by every request of that key).
struct KeyUsage {
  std::mutex mu;
  int64_t in_flight = 0;
  std::vector<std::pair<std::chrono::steady_clock::time_point, int64_t>> minute;  // tokens charged
};

// One authenticated request: holds a concurrency slot of its key until destroyed.
class KeyLease {
 public:
  KeyLease(ApiKeyEntry key, std::shared_ptr<KeyUsage> usage) : key_(std::move(key)), usage_(std::move(usage)) {}
  ~KeyLease();
  KeyLease(const KeyLease&) = delete;
  KeyLease& operator=(const KeyLease&) = delete;

  const std::string& name() const { return key_.name; }
  bool admin() const { return key_.admin; }
  // Whether the key may use `scope` (one of kApiScopes).
  bool allows(std::string_view scope) const;
  // Why the key may not call `rpc` (it names the key, the scope and what was granted): the
  // message of a PERMISSION_DENIED; empty when allowed.
  std::string scope_denial(std::string_view scope, std::string_view rpc) const;
  // A request of `prompt_tokens` that may generate `max_tokens`: max_context, then the
  // sliding-minute tokens_per_minute budget (charged when it fits). RESOURCE_EXHAUSTED naming the limit.
  Status charge(int64_t prompt_tokens, int64_t max_tokens,
                std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

 private:
  ApiKeyEntry key_;
  std::shared_ptr<KeyUsage> usage_;
};

enum class AuthError { kNone, kMissing, kUnknown, kConcurrency };

struct AuthResult {
  std::unique_ptr<KeyLease> lease;  // set when error == kNone
  AuthError error = AuthError::kNone;
  std::string message;   // never contains the key
  std::string key_name;  // the recognised key's name (also on kConcurrency)
};

class ApiKeys {
 public:
  // Reads the file (an error names the field); `watch` > 0 re-reads it when its mtime, size or
  // inode change, polled at that interval; a bad new file is logged and the old keys stay.
  static Result<std::unique_ptr<ApiKeys>> open(std::string path,
                                               std::chrono::milliseconds watch = std::chrono::milliseconds(1000));
  ~ApiKeys();

  // `authorization` is the request's metadata value ("Bearer <key>"), empty when absent.
  AuthResult authenticate(std::string_view authorization);
  // Re-reads the file if it changed; true when new keys were loaded.
  bool reload_if_changed();
  size_t size() const;

 private:
  struct FileId {
    int64_t mtime_ns = 0, size = 0, inode = 0;
    bool operator==(const FileId&) const = default;
  };
  explicit ApiKeys(std::string path) : path_(std::move(path)) {}
  Status load(const FileId& id);
  void watch_loop(std::chrono::milliseconds interval);

  const std::string path_;
  mutable std::mutex mu_;
  std::vector<ApiKeyEntry> keys_;
  FileId loaded_;
  std::map<std::string, std::shared_ptr<KeyUsage>, std::less<>> usage_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread watcher_;
};

}  // namespace yoco
