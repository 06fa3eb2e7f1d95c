// Redis Cluster's key slots (docs/design.md §5, Redis Cluster); plain code, built with or
// without hiredis.
#pragma once

#include <cstdint>
#include <string_view>

namespace yoco::redis {

constexpr int kClusterSlots = 16384;

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0, no reflection), as Redis Cluster
// defines it: crc16_xmodem("123456789") == 0x31C3.
uint16_t crc16_xmodem(std::string_view data);
// The key's hash slot: CRC16 of the hash tag (the text between the first '{' and the first '}'
// after it, if that is not empty) or else of the whole key, modulo 16384.
int key_slot(std::string_view key);

}  // namespace yoco::redis
