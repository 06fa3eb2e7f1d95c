// kv_store/dir_store.h: files under a directory shared by processes (atomic writes, LRU, TTLs,
// corruption as a counted miss).
#include "kv_store/dir_store.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <thread>

#include "tests/unit/kv_store/test_util.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

using namespace kv_test;

TEST(KvStoreDir, RoundTripBinaryAndOddKeys) {
  test::TempDir tmp;
  auto d = open_dir(tmp.sub("store"));
  ASSERT_TRUE(d);
  const std::string bin = random_bytes(100000, 3) + std::string("\0\0", 2);
  for (const std::string& key : std::vector<std::string>{"kv:0123", "state:ab", "doc-ff", "with/slash", ".hidden",
                                                         "sp ace%", std::string(400, 'L')}) {
    ASSERT_TRUE(d->put(key, bin, 0s).ok()) << key;
    auto r = d->get(key);
    ASSERT_TRUE(r.ok() && r->has_value()) << key;
    EXPECT_EQ(**r, bin) << key;
    EXPECT_TRUE(std::filesystem::exists(d->path_for(key))) << key;
  }
  EXPECT_FALSE(d->get("absent")->has_value());
  ASSERT_TRUE(d->del("kv:0123").ok());
  EXPECT_FALSE(d->get("kv:0123")->has_value());
  ASSERT_TRUE(d->del("kv:0123").ok());
  // An empty value is a value.
  ASSERT_TRUE(d->put("empty", "", 0s).ok());
  auto e = d->get("empty");
  ASSERT_TRUE(e.ok() && e->has_value());
  EXPECT_TRUE((*e)->empty());
  // Sets survive reopening (another process sees them).
  ASSERT_TRUE(d->set_add("docs:1", "doc-a").ok());
  ASSERT_TRUE(d->set_add("docs:1", "doc-b").ok());
  auto d2 = open_dir(tmp.sub("store"));
  EXPECT_EQ(ok_value(d2->set_members("docs:1")), (std::vector<std::string>{"doc-a", "doc-b"}));
  ASSERT_TRUE(d2->set_remove("docs:1", "doc-a").ok());
  EXPECT_EQ(ok_value(d->set_members("docs:1")), (std::vector<std::string>{"doc-b"}));
}

TEST(KvStoreDir, LruEvictionUnderByteBudget) {
  test::TempDir tmp;
  const std::string v(10000, 'v');
  const int64_t file = 32 + 1 + 4 + 10000;            // dir_store.h file layout, one-byte keys
  auto d = open_dir(tmp.sub("store"), file * 7 / 2);  // room for three and a half
  ASSERT_TRUE(d);
  for (const char* k : {"a", "b", "c"}) {
    ASSERT_TRUE(d->put(k, v, 0s).ok());
    std::this_thread::sleep_for(30ms);  // mtimes are coarse (a kernel tick)
  }
  ASSERT_TRUE(d->get("a")->has_value());  // touches a
  std::this_thread::sleep_for(30ms);
  ASSERT_TRUE(d->put("d", v, 0s).ok());  // over budget: the oldest (b) goes
  EXPECT_TRUE(d->get("a")->has_value());
  EXPECT_FALSE(d->get("b")->has_value());
  EXPECT_TRUE(d->get("c")->has_value());
  EXPECT_TRUE(d->get("d")->has_value());
  EXPECT_LE(d->scan_and_evict(), file * 7 / 2);
  EXPECT_EQ(d->put("huge", std::string(file * 4, 'h'), 0s).code(), StatusCode::kResourceExhausted);
}

TEST(KvStoreDir, TtlExpiry) {
  test::TempDir tmp;
  auto d = open_dir(tmp.sub("store"));
  ASSERT_TRUE(d->put("short", "v", 1s).ok());
  ASSERT_TRUE(d->put("long", "v", 0s).ok());
  EXPECT_TRUE(d->get("short")->has_value());
  std::this_thread::sleep_for(1100ms);
  EXPECT_FALSE(d->get("short")->has_value());
  EXPECT_FALSE(std::filesystem::exists(d->path_for("short")));  // expired files are removed
  EXPECT_TRUE(d->get("long")->has_value());
  EXPECT_EQ(d->stats().corrupt, 0u);
}

TEST(KvStoreDir, CorruptionIsAMissCountedAndDeleted) {
  test::TempDir tmp;
  auto d = open_dir(tmp.sub("store"));
  const std::string v = random_bytes(5000, 11);
  struct Damage {
    const char* name;
    std::function<void(std::string&)> edit;
  };
  std::vector<Damage> damages = {
      {"bit flip in the value", [](std::string& f) { f[f.size() - 100] ^= 0x04; }},
      {"bit flip in the header", [](std::string& f) { f[9] ^= 0x01; }},
      {"bit flip in the key", [](std::string& f) { f[33] ^= 0x01; }},
      {"truncated value", [](std::string& f) { f.resize(f.size() - 1); }},
      {"truncated header", [](std::string& f) { f.resize(20); }},
      {"empty file", [](std::string& f) { f.clear(); }},
      {"bad magic", [](std::string& f) { f[0] = 'X'; }},
      {"trailing bytes", [](std::string& f) { f += "junk"; }},
  };
  uint64_t expected_corrupt = 0;
  for (const auto& dmg : damages) {
    ASSERT_TRUE(d->put("victim", v, 0s).ok());
    const std::string path = d->path_for("victim");
    std::string f = test::read_file(path);
    dmg.edit(f);
    test::write_file(path, f);
    auto r = d->get("victim");
    ASSERT_TRUE(r.ok()) << dmg.name;
    EXPECT_FALSE(r->has_value()) << dmg.name;
    EXPECT_EQ(d->stats().corrupt, ++expected_corrupt) << dmg.name;
    EXPECT_FALSE(std::filesystem::exists(path)) << dmg.name;
  }
}

TEST(KvStoreDir, TwoProcessesWritingOneKeyNeverShowAPartialValue) {
  test::TempDir tmp;
  const std::string root = tmp.sub("store");
  auto reader = open_dir(root);
  ASSERT_TRUE(reader);
  const size_t n = 256 << 10;
  std::vector<pid_t> kids;
  for (int w = 0; w < 2; ++w) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      DirStoreOptions o;
      o.root = root;
      auto s = DirStore::open(o);
      if (!s.ok()) _exit(2);
      for (int i = 0; i < 60; ++i) {
        // Every value is uniform: one writer's byte, so a mix or a partial file shows.
        std::string val(n, static_cast<char>('A' + w));
        val[0] = static_cast<char>(i);
        if (!(*s)->put("shared", val, 0s).ok()) _exit(3);
      }
      _exit(0);
    }
    kids.push_back(pid);
  }
  int reads = 0, hits = 0, bad = 0;
  std::map<pid_t, int> exit_status;
  auto alive = [&] {
    bool any = false;
    for (pid_t p : kids) {
      if (exit_status.count(p)) continue;
      int status = 0;
      if (waitpid(p, &status, WNOHANG) == p) exit_status[p] = status;
      else any = true;
    }
    return any;
  };
  auto check = [&](const std::string& val) {
    if (val.size() != n) return false;
    const char c = val[1];
    if (c != 'A' && c != 'B') return false;
    return std::all_of(val.begin() + 1, val.end(), [c](char x) { return x == c; });
  };
  while (alive() || reads < 20) {
    auto r = reader->get("shared");
    ++reads;
    if (!r.ok()) ++bad;
    else if (r->has_value()) {
      ++hits;
      if (!check(**r)) ++bad;
    }
    if (reads > 100000) break;
  }
  for (pid_t p : kids) {
    if (!exit_status.count(p)) waitpid(p, &exit_status[p], 0);
    const int status = exit_status[p];
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer status " << status;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(reader->stats().corrupt, 0u);
  auto last = reader->get("shared");
  ASSERT_TRUE(last.ok() && last->has_value());
  EXPECT_TRUE(check(**last));
  // No temp files left behind.
  for (auto& e : std::filesystem::recursive_directory_iterator(root))
    EXPECT_EQ(e.path().filename().string().rfind(".tmp-", 0), std::string::npos) << e.path();
  std::cout << "[ info ] " << reads << " reads, " << hits << " hits during the writes\n";
}

TEST(KvStoreDir, ConcurrentEvictorsTolerateVanishingFiles) {
  test::TempDir tmp;
  const std::string root = tmp.sub("store");
  const int64_t budget = 400 << 10;
  auto a = open_dir(root, budget), b = open_dir(root, budget);
  std::atomic<int> errors{0};
  auto work = [&](DirStore* s, int id) {
    for (int i = 0; i < 150; ++i) {
      if (!s->put(key_name({id, i}), std::string(8000, 'x'), 0s).ok()) ++errors;
      auto r = s->get(key_name({1 - id, i / 2}));
      if (!r.ok()) ++errors;
    }
  };
  std::thread t1(work, a.get(), 0), t2(work, b.get(), 1);
  t1.join();
  t2.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(a->scan_and_evict(), budget);
  EXPECT_EQ(a->stats().corrupt + b->stats().corrupt, 0u);
}

}  // namespace
}  // namespace yoco
