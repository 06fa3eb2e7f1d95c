// kv_store/redis_slot.h: Redis Cluster's CRC16 and hash tags against the values Redis documents (no
// server needed).
#include "kv_store/redis_slot.h"

#include <gtest/gtest.h>

namespace yoco {
namespace {

TEST(KvStoreClusterSlot, Crc16AndHashTags) {
  EXPECT_EQ(redis::crc16_xmodem("123456789"), 0x31C3);
  EXPECT_EQ(redis::key_slot("foo"), 12182);
  EXPECT_EQ(redis::key_slot("{user1000}.following"), redis::key_slot("{user1000}.followers"));
  EXPECT_EQ(redis::key_slot("foo{}{bar}"), redis::crc16_xmodem("foo{}{bar}") % 16384);  // an empty tag: the whole key
  EXPECT_EQ(redis::key_slot("foo{{bar}}zap"), redis::key_slot("{bar"));
  EXPECT_EQ(redis::key_slot("foo{bar}{zap}"), redis::key_slot("bar"));
  EXPECT_EQ(redis::key_slot("yoco:{k}"), redis::key_slot("yoco:{k}:0123456789abcdef:7"));
}

}  // namespace
}  // namespace yoco
