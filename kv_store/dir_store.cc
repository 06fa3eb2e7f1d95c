#include "kv_store/dir_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/checksum.h"
#include "handoff/bytes.h"
#include "kv_store/format.h"
#include "kv_store/util.h"

namespace yoco {

namespace {

constexpr char kMagic[8] = {'Y', 'O', 'C', 'O', 'D', 'I', 'R', '1'};
constexpr size_t kFixedBytes = 32;  // magic, expiry, key bytes, value CRC, value bytes
constexpr size_t kMaxKeyBytes = 4096;
constexpr size_t kMaxNameBytes = 180;
constexpr char kTempPrefix[] = ".tmp-";
constexpr int64_t kStaleTempMs = 10 * 60 * 1000;  // a writer that died mid-write

std::string errno_text(int e) { return std::strerror(e); }

// File-name form of a key or set member: reversible percent-encoding.
std::string encode_name(std::string_view key) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    const bool plain = std::isalnum(c) || c == '_' || c == '-' || (c == '.' && i > 0);
    if (plain) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string file_name(std::string_view key) {
  std::string n = encode_name(key);
  if (n.size() <= kMaxNameBytes && !n.empty()) return n;
  // The file header carries the key, so a shared hashed name cannot return the wrong value.
  const uint64_t a = fnv1a64(key), b = mix64(fnv1a64(key, 0x84222325cbf29ce4ull), key.size());
  return "h-" + kv::hex64(a) + kv::hex64(b);
}

int64_t mtime_ms(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

// Removes `path` only if it still is the file we examined: a writer may have renamed a fresh
// file over it since.
void remove_if_same(const std::string& path, const struct stat& seen) {
  struct stat now;
  if (::stat(path.c_str(), &now) == 0 && now.st_ino == seen.st_ino && now.st_dev == seen.st_dev) ::unlink(path.c_str());
}

Status write_all(int fd, const struct iovec* iov, int n) {
  std::vector<struct iovec> v(iov, iov + n);
  size_t i = 0;
  while (i < v.size()) {
    const ssize_t w = ::writev(fd, v.data() + i, static_cast<int>(v.size() - i));
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error(errno_text(errno));
    }
    size_t left = static_cast<size_t>(w);
    while (i < v.size() && left >= v[i].iov_len) left -= v[i++].iov_len;
    if (i < v.size()) {
      v[i].iov_base = static_cast<char*>(v[i].iov_base) + left;
      v[i].iov_len -= left;
    }
  }
  return Status::Ok();
}

bool read_all(int fd, char* p, size_t n) {
  size_t off = 0;
  while (off < n) {
    const ssize_t r = ::pread(fd, p + off, n - off, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    off += static_cast<size_t>(r);
  }
  return true;
}

Status make_dir(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return io_error("dir store: cannot create " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<DirStore>> DirStore::open(DirStoreOptions opt) {
  if (opt.root.empty()) return invalid_argument("dir store: empty root path");
  if (opt.max_bytes <= 0) return invalid_argument("dir store: max_bytes must be positive");
  if (!(opt.low_watermark > 0 && opt.low_watermark <= 1))
    return invalid_argument("dir store: low_watermark must be in (0, 1]");
  while (opt.root.size() > 1 && opt.root.back() == '/') opt.root.pop_back();
  YOCO_RETURN_IF_ERROR(make_dir(opt.root));
  if (::access(opt.root.c_str(), R_OK | W_OK | X_OK) != 0)
    return io_error("dir store: " + opt.root + " is not writable: " + errno_text(errno));
  std::unique_ptr<DirStore> s(new DirStore(std::move(opt)));
  s->scan_and_evict();
  return s;
}

std::string DirStore::name() const { return "dir:" + opt_.root; }

std::string DirStore::path_for(std::string_view key) const {
  return opt_.root + "/" + kv::hex64(fnv1a64(key)).substr(14) + "/" + file_name(key);
}

KvGetResult DirStore::get(std::string_view key) {
  const std::string path = path_for(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      stats_.miss();
      return kv_miss();
    }
    stats_.error();
    return io_error("dir store: open " + path + ": " + errno_text(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    stats_.error();
    return io_error("dir store: stat " + path + ": " + errno_text(e));
  }
  auto damaged = [&]() -> KvGetResult {
    ::close(fd);
    remove_if_same(path, st);
    stats_.corrupt();
    stats_.miss();
    return kv_miss();
  };
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kFixedBytes + 4 || size > (uint64_t{1} << 40)) return damaged();
  std::string buf(size, '\0');
  if (!read_all(fd, buf.data(), size)) return damaged();
  const char* p = buf.data();
  if (std::memcmp(p, kMagic, 8) != 0) return damaged();
  const int64_t expiry = static_cast<int64_t>(load_le<uint64_t>(p + 8));
  const uint64_t key_len = load_le<uint32_t>(p + 16);
  const uint32_t value_crc = static_cast<uint32_t>(load_le<uint32_t>(p + 20));
  const uint64_t value_len = load_le<uint64_t>(p + 24);
  if (key_len > kMaxKeyBytes || kFixedBytes + key_len + 4 > size) return damaged();
  const size_t header = kFixedBytes + key_len + 4;
  if (crc32c(p, kFixedBytes + key_len) != static_cast<uint32_t>(load_le<uint32_t>(p + kFixedBytes + key_len)))
    return damaged();
  if (value_len != size - header) return damaged();
  if (crc32c(p + header, value_len) != value_crc) return damaged();
  if (std::string_view(p + kFixedBytes, key_len) != key) {
    // Another key under the same hashed name: a plain miss.
    ::close(fd);
    stats_.miss();
    return kv_miss();
  }
  if (expiry != 0 && expiry <= unix_ms_now()) {
    ::close(fd);
    remove_if_same(path, st);
    stats_.miss();
    return kv_miss();
  }
  ::futimens(fd, nullptr);  // recency for LRU eviction; best effort
  ::close(fd);
  buf.erase(0, header);
  stats_.hit(buf.size());
  return KvValue(std::move(buf));
}

Status DirStore::put(std::string_view key, std::string_view value, std::chrono::seconds ttl) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    stats_.error();
    return invalid_argument("dir store: key length " + std::to_string(key.size()) + " not in [1, 4096]");
  }
  const int64_t file_bytes = static_cast<int64_t>(kFixedBytes + key.size() + 4 + value.size());
  if (file_bytes > opt_.max_bytes) {
    stats_.error();
    return kv_resource_exhausted("dir store: value of " + std::to_string(value.size()) + " bytes exceeds max_bytes " +
                                 std::to_string(opt_.max_bytes));
  }
  const std::string path = path_for(key);
  const std::string dir = path.substr(0, path.rfind('/'));
  std::string header(kFixedBytes + key.size() + 4, '\0');
  std::memcpy(header.data(), kMagic, 8);
  store_le<uint64_t>(header.data() + 8,
                     ttl.count() > 0 ? static_cast<uint64_t>(unix_ms_now() + ttl.count() * 1000) : 0);
  store_le<uint32_t>(header.data() + 16, key.size());
  store_le<uint32_t>(header.data() + 20, crc32c(value.data(), value.size()));
  store_le<uint64_t>(header.data() + 24, value.size());
  std::memcpy(header.data() + kFixedBytes, key.data(), key.size());
  store_le<uint32_t>(header.data() + kFixedBytes + key.size(), crc32c(header.data(), kFixedBytes + key.size()));

  const std::string tmp = dir + "/" + kTempPrefix + kv::random_hex();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ENOENT) {
    if (Status st = make_dir(dir); !st.ok()) {
      stats_.error();
      return st;
    }
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  }
  if (fd < 0) {
    stats_.error();
    return io_error("dir store: create " + tmp + ": " + errno_text(errno));
  }
  struct iovec iov[2] = {{header.data(), header.size()}, {const_cast<char*>(value.data()), value.size()}};
  Status st = write_all(fd, iov, 2);
  if (st.ok() && opt_.fsync && ::fsync(fd) != 0) st = io_error("fsync: " + errno_text(errno));
  if (::close(fd) != 0 && st.ok()) st = io_error("close: " + errno_text(errno));
  struct stat old;
  const int64_t old_bytes = ::stat(path.c_str(), &old) == 0 ? static_cast<int64_t>(old.st_size) : 0;
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = io_error("rename: " + errno_text(errno));
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    stats_.error();
    return io_error("dir store: write " + path + ": " + st.message());
  }
  stats_.written(value.size());
  note_written(file_bytes - old_bytes, file_bytes);
  return Status::Ok();
}

void DirStore::note_written(int64_t delta_bytes, int64_t written) {
  const int64_t used = usage_.fetch_add(delta_bytes) + delta_bytes;
  const int64_t since = since_scan_.fetch_add(written) + written;
  if (used > opt_.max_bytes || since > opt_.max_bytes / 8) scan_and_evict();
}

int64_t DirStore::scan_and_evict() {
  std::unique_lock<std::mutex> lock(evict_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return usage_.load();  // another thread is at it
  since_scan_.store(0);
  struct FileInfo {
    int64_t mtime;
    int64_t bytes;
    std::string path;
  };
  std::vector<FileInfo> files;
  int64_t total = 0;
  const int64_t now = unix_ms_now();
  DIR* root = ::opendir(opt_.root.c_str());
  if (!root) return usage_.load();
  std::vector<std::string> fan;
  while (dirent* e = ::readdir(root)) {
    const std::string n = e->d_name;
    if (n.size() == 2 && std::isxdigit(static_cast<unsigned char>(n[0])) &&
        std::isxdigit(static_cast<unsigned char>(n[1])))
      fan.push_back(opt_.root + "/" + n);
  }
  ::closedir(root);
  for (const auto& d : fan) {
    DIR* dp = ::opendir(d.c_str());
    if (!dp) continue;  // evicted or removed meanwhile
    while (dirent* e = ::readdir(dp)) {
      const std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      std::string path = d + "/" + n;
      struct stat st;
      if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // vanished
      const int64_t bytes = static_cast<int64_t>(st.st_size);
      if (n.rfind(kTempPrefix, 0) == 0) {
        if (now - mtime_ms(st) > kStaleTempMs) ::unlink(path.c_str());
        else total += bytes;  // a write in progress: counted, never evicted
        continue;
      }
      total += bytes;
      files.push_back({mtime_ms(st), bytes, std::move(path)});
    }
    ::closedir(dp);
  }
  if (total > opt_.max_bytes) {
    const int64_t target = static_cast<int64_t>(static_cast<double>(opt_.max_bytes) * opt_.low_watermark);
    std::sort(files.begin(), files.end(), [](const FileInfo& a, const FileInfo& b) { return a.mtime < b.mtime; });
    for (const auto& f : files) {
      if (total <= target) break;
      if (::unlink(f.path.c_str()) == 0 || errno == ENOENT) total -= f.bytes;
    }
  }
  usage_.store(total);
  return total;
}

Status DirStore::del(std::string_view key) {
  const std::string path = path_for(key);
  struct stat st;
  const bool had = ::stat(path.c_str(), &st) == 0;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT && errno != ENOTDIR) {
    stats_.error();
    return io_error("dir store: unlink " + path + ": " + errno_text(errno));
  }
  if (had) usage_.fetch_sub(static_cast<int64_t>(st.st_size));
  return Status::Ok();
}

Status DirStore::set_add(std::string_view set, std::string_view member) {
  const std::string sdir = opt_.root + "/sets/" + encode_name(set);
  const std::string m = encode_name(member);
  if (set.empty() || member.empty() || sdir.size() > 4000 || m.size() > kMaxNameBytes)
    return invalid_argument("dir store: set or member name empty or too long");
  YOCO_RETURN_IF_ERROR(make_dir(sdir));
  const std::string path = sdir + "/" + m;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    stats_.error();
    return io_error("dir store: create " + path + ": " + errno_text(errno));
  }
  ::close(fd);
  return Status::Ok();
}

Status DirStore::set_remove(std::string_view set, std::string_view member) {
  const std::string path = opt_.root + "/sets/" + encode_name(set) + "/" + encode_name(member);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT && errno != ENOTDIR) {
    stats_.error();
    return io_error("dir store: unlink " + path + ": " + errno_text(errno));
  }
  return Status::Ok();
}

Result<std::vector<std::string>> DirStore::set_members(std::string_view set) {
  const std::string sdir = opt_.root + "/sets/" + encode_name(set);
  std::vector<std::string> out;
  DIR* dp = ::opendir(sdir.c_str());
  if (!dp) {
    if (errno == ENOENT) return out;
    stats_.error();
    return io_error("dir store: list " + sdir + ": " + errno_text(errno));
  }
  while (dirent* e = ::readdir(dp)) {
    const std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    auto decoded = kv::percent_decode(n);
    if (decoded.ok()) out.push_back(std::move(decoded).value());
  }
  ::closedir(dp);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace yoco
