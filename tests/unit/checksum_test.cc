// CRC32C: the hardware three-stream version (common/checksum.cc) against the table version over
// random lengths, alignments and running CRCs, across the block sizes where the streams change.
#include "common/checksum.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace yoco {
namespace {

TEST(Crc32c, KnownValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c_portable("123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, MatchesTableOverLengthsAndAlignments) {
  std::mt19937 g(5);
  std::vector<unsigned char> buf(3 * 4096 * 3 + 4096);
  for (auto& b : buf) b = static_cast<unsigned char>(g());
  // Every length around the stream sizes (3·128, 3·4096 bytes) and their multiples, then random ones.
  std::vector<size_t> lens;
  for (size_t base : {size_t{0}, size_t{384}, size_t{768}, size_t{2048}, size_t{12288}, size_t{24576}})
    for (size_t d = 0; d < 17; ++d) lens.push_back(base + d), lens.push_back(base > d ? base - d : 0);
  for (int i = 0; i < 300; ++i) lens.push_back(g() % (buf.size() - 64));
  for (size_t len : lens) {
    const size_t off = g() % 64;
    const uint32_t start = (len % 3 == 0) ? 0 : static_cast<uint32_t>(g());
    ASSERT_EQ(crc32c(buf.data() + off, len, start), crc32c_portable(buf.data() + off, len, start))
        << "len " << len << " offset " << off << " start " << start;
  }
}

TEST(Crc32c, ContinuesAcrossSplits) {
  std::vector<unsigned char> buf(40000);
  std::mt19937 g(9);
  for (auto& b : buf) b = static_cast<unsigned char>(g());
  const uint32_t whole = crc32c(buf.data(), buf.size());
  for (size_t cut : {size_t{1}, size_t{383}, size_t{12289}, size_t{39999}})
    EXPECT_EQ(whole, crc32c(buf.data() + cut, buf.size() - cut, crc32c(buf.data(), cut))) << cut;
}

}  // namespace
}  // namespace yoco
