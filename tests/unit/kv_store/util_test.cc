// kv_store/util.h: byte sizes.
#include "kv_store/util.h"

#include <gtest/gtest.h>

#include "tests/unit/kv_store/test_util.h"

namespace yoco {
namespace {

using namespace kv_test;

TEST(KvStoreFactory, ByteSizes) {
  EXPECT_EQ(ok_value(kv::parse_byte_size("256MiB")), int64_t{256} << 20);
  EXPECT_EQ(ok_value(kv::parse_byte_size("10GiB")), int64_t{10} << 30);
  EXPECT_EQ(ok_value(kv::parse_byte_size("1GB")), 1000000000);
  EXPECT_EQ(ok_value(kv::parse_byte_size("1.5KiB")), 1536);
  EXPECT_EQ(ok_value(kv::parse_byte_size("4096")), 4096);
  EXPECT_EQ(ok_value(kv::parse_byte_size("2g")), int64_t{2} << 30);
  EXPECT_FALSE(kv::parse_byte_size("").ok());
  EXPECT_FALSE(kv::parse_byte_size("MiB").ok());
  EXPECT_FALSE(kv::parse_byte_size("1..2").ok());
  EXPECT_FALSE(kv::parse_byte_size("99999999999TiB").ok());
}

}  // namespace
}  // namespace yoco
