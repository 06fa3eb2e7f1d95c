// kv_store/factory.h: store specs (tiers, options), errors that name the bad part.
#include "kv_store/factory.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/unit/kv_store/test_util.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

using namespace kv_test;

TEST(KvStoreFactory, ParsesSpecsAndNamesTheBadPart) {
  test::TempDir tmp;
  auto m = make_kv_store("memory:1MiB");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->name(), "memory");
  auto t = make_kv_store("memory:64MiB, dir://" + tmp.sub("d") + "?max_bytes=10MiB&fsync=1");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->name(), "tiered(memory,dir:" + tmp.sub("d") + ")");
  ASSERT_TRUE((*t)->put("x", "y", 0s).ok());
  EXPECT_TRUE(std::filesystem::exists(tmp.sub("d")));
  auto err = [](const std::string& spec) {
    auto r = make_kv_store(spec);
    EXPECT_FALSE(r.ok()) << spec;
    return r.ok() ? std::string() : r.status().to_string();
  };
  EXPECT_NE(err("bogus").find("tier 1 'bogus'"), std::string::npos);
  EXPECT_NE(err("memory,ftp://x").find("tier 2"), std::string::npos);
  EXPECT_NE(err("memory:12XB").find("unit"), std::string::npos);
  EXPECT_NE(err("dir:" + tmp.sub("e") + "?colour=red").find("colour"), std::string::npos);
  EXPECT_NE(err("redis://127.0.0.1:99999").find("port"), std::string::npos);
  EXPECT_NE(err("redis://127.0.0.1:6379?pool=0").find("pool"), std::string::npos);
  EXPECT_NE(err("redis://127.0.0.1:6379?what=1").find("what"), std::string::npos);
  EXPECT_NE(err("memory,,memory").find("empty"), std::string::npos);
  // A password never appears in an error.
  const std::string e = err("redis://user:hunter2@127.0.0.1:6379?bogus=1");
  EXPECT_EQ(e.find("hunter2"), std::string::npos) << e;
  // TLS: files are read when the store is made, and a bad one is named.
  EXPECT_NE(err("rediss://127.0.0.1:6380?tls_ca=" + tmp.sub("none.pem")).find("tls_ca"), std::string::npos);
  EXPECT_NE(err("rediss://127.0.0.1:6380?tls_cert=" + tmp.sub("c.pem")).find("tls_key"), std::string::npos);
  EXPECT_NE(err("redis://127.0.0.1:6380?tls_verify=0").find("without tls"), std::string::npos);
  EXPECT_NE(err("rediss://127.0.0.1:6380?tls_ca=").find("tls_ca"), std::string::npos);
  // Without a server nothing connects yet: making a TLS store succeeds (system trust store).
  auto lazy = make_kv_store("rediss://127.0.0.1:6380?breaker=0");
  ASSERT_TRUE(lazy.ok()) << lazy.status().to_string();
  EXPECT_EQ((*lazy)->name(), "rediss://127.0.0.1:6380/0");
}

}  // namespace
}  // namespace yoco
