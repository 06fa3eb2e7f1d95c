// Local-directory backend (docs/design.md §5: the embedded default, shared by the processes of one host).
//
// Layout: root/xx/NAME, xx = two hex chars of the key's hash, NAME = the key with every byte
// outside [A-Za-z0-9_.-] percent-encoded (long keys: "h-" + a 128-bit hash). Each file is
//   magic "YOCODIR1", i64 expiry unix ms (0 = none), u32 key bytes, u32 CRC32C of the value,
//   u64 value bytes, key, u32 CRC32C of everything before it, value
// so the backend validates its own files without parsing the objects inside them.
//
// Writes go to a unique temp file in the same directory and are renamed into place: a reader
// sees a complete old or new file, never a partial one, and of two concurrent writers of one
// key the last rename wins. A get touches the file's mtime; when the bytes this process knows
// of pass the budget (or after every max_bytes/8 written, to notice other processes' writes) a
// scan evicts the oldest files down to low_watermark · max_bytes. Files vanishing under a scan
// (another process evicting) are fine. Sets live in root/sets/SET/MEMBER (empty files).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "kv_store/store.h"

namespace yoco {

struct DirStoreOptions {
  std::string root;
  int64_t max_bytes = int64_t{10} << 30;
  // fsync each file before the rename. The directory is not synced: after a power loss a
  // rename may be lost, which a cache reads as a miss.
  bool fsync = false;
  double low_watermark = 0.9;  // eviction frees down to this fraction of max_bytes
};

class DirStore final : public KvStore {
 public:
  // Creates root (and parents) when missing; INVALID_ARGUMENT / IO_ERROR naming the path.
  static Result<std::unique_ptr<DirStore>> open(DirStoreOptions opt);

  KvGetResult get(std::string_view key) override;
  Status put(std::string_view key, std::string_view value, std::chrono::seconds ttl) override;
  Status del(std::string_view key) override;
  Status set_add(std::string_view set, std::string_view member) override;
  Status set_remove(std::string_view set, std::string_view member) override;
  Result<std::vector<std::string>> set_members(std::string_view set) override;
  std::string name() const override;

  // The file a key lives in (tests inject corruption there).
  std::string path_for(std::string_view key) const;
  // Scans the directory now, evicting if over budget; returns the bytes left.
  int64_t scan_and_evict();
  const DirStoreOptions& options() const { return opt_; }

 private:
  explicit DirStore(DirStoreOptions opt) : opt_(std::move(opt)) {}
  void note_written(int64_t delta_bytes, int64_t written);

  const DirStoreOptions opt_;
  std::atomic<int64_t> usage_{0};       // bytes as of the last scan plus this process's writes
  std::atomic<int64_t> since_scan_{0};  // bytes this process wrote since the last scan
  std::mutex evict_mu_;
};

}  // namespace yoco
