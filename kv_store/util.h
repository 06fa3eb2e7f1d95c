// Small helpers the backends share: randomness that survives fork(), hex, byte sizes, URL
// pieces.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/checksum.h"
#include "common/status.h"

namespace yoco::kv {

// A random 64-bit value; reseeded per thread and again in a forked child.
uint64_t random64();
using yoco::hex64;         // common/checksum.h
std::string random_hex();  // 16 hex chars

// "256MiB", "10GiB", "1.5GB", "4096", "64KiB": binary (KiB..TiB, K/M/G/T) and decimal (KB..TB)
// suffixes, case-insensitive; INVALID_ARGUMENT naming the text.
Result<int64_t> parse_byte_size(std::string_view text);
// A non-negative integer; INVALID_ARGUMENT naming `what`.
Result<int64_t> parse_int(std::string_view text, std::string_view what);
Result<bool> parse_bool(std::string_view text, std::string_view what);

// %XX decoding (URL user info, query values); INVALID_ARGUMENT on a bad escape.
Result<std::string> percent_decode(std::string_view s);
// "a=1&b=2" → {a: 1, b: 2}; duplicate keys are errors.
Result<std::map<std::string, std::string>> parse_query(std::string_view q);

}  // namespace yoco::kv
