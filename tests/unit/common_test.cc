#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/checksum.h"
#include "common/flags.h"
#include "common/huge_pages.h"
#include "common/json.h"
#include "common/log.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

// One log_line with `fields`, as written to stderr.
std::string logged(const LogFields& fields) {
  testing::internal::CaptureStderr();
  log_line(LogLevel::kWarn, "moving request", fields.str());
  return testing::internal::GetCapturedStderr();
}

TEST(Log, ANewlineInAClientStringNeverForgesARecord) {
  const std::string forged = "abc\n{\"level\":\"error\",\"msg\":\"fake\"}\nts=x level=error msg=\"fake\"\r";
  const std::string out = logged(LogFields().kv("request_id", forged).kv("worker", "127.0.0.1:1"));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(std::count(out.begin(), out.end(), '\r'), 0) << out;
  EXPECT_NE(out.find("request_id=\"abc\\n{\\\"level\\\""), std::string::npos) << out;
  EXPECT_NE(out.find(" worker=127.0.0.1:1\n"), std::string::npos) << out;
}

TEST(Log, ControlBytesDelAndInvalidUtf8AreEscapedValidUtf8Kept) {
  EXPECT_EQ(log_escape("a\tb\x01\x7f\x1b[31m"), "a\\tb\\x01\\x7f\\x1b[31m");
  EXPECT_EQ(log_escape("\xff\xc3(\xed\xa0\x80"), "\\xff\\xc3(\\xed\\xa0\\x80");  // bad byte, cut, surrogate
  EXPECT_EQ(log_escape("caf\xc3\xa9 \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xf0\x9f\x98\x80");
  const std::string out = logged(LogFields().kv("key\nlevel", "\x1b]0;x\x07").kv("plain", "ok"));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_NE(out.find(" plain=ok\n"), std::string::npos) << out;
}

TEST(Json, ParsesAndDumpsRoundTrip) {
  auto j = Json::parse(R"({"a": [1, -2.5, true, null, "x\"\u00e9\ud83d\ude00"], "b": {"c": 1e3}})");
  ASSERT_TRUE(j.ok()) << j.status().to_string();
  EXPECT_EQ(j->find("a")->as_array()[0].as_int(), 1);
  EXPECT_TRUE(j->find("a")->as_array()[0].is_integer());
  EXPECT_EQ(j->find("a")->as_array()[1].as_double(), -2.5);
  EXPECT_EQ(j->find("a")->as_array()[4].as_string(), "x\"\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(j->find("b")->find("c")->as_double(), 1000.0);
  auto again = Json::parse(j->dump());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->dump(), j->dump());
}

TEST(Json, RejectsMalformedInput) {
  for (const char* bad : {"", "{", "[1,]", "{\"a\":1,}", "01x", "\"\\x\"", "\"\\ud800\"", "{\"a\":1,\"a\":2}", "1 2",
                          "nul", "\"abc", "[1e999]"}) {
    EXPECT_FALSE(Json::parse(bad).ok()) << bad;
  }
  EXPECT_FALSE(Json::parse(std::string(100, '[') + std::string(100, ']')).ok());
}

// The AnonHugePages of the mapping of /proc/self/smaps that holds `addr`, in kB (-1: not found).
long anon_huge_kb_at(const void* addr) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto a = reinterpret_cast<uintptr_t>(addr);
  while (std::getline(f, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= a && a < hi;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::stol(line.substr(14));
  }
  return -1;
}

TEST(HugePages, CollapseKeepsTheContentsAndMovesOnlyWholeHugePages) {
  const size_t page = huge_page_bytes();
  ASSERT_GE(page, static_cast<size_t>(4096));
  ASSERT_EQ(page & (page - 1), 0u);
  std::vector<uint32_t> v(3 * page / 4 + 12345);  // about three huge pages, not aligned to one
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint32_t>(i * 2654435761u);
  const size_t moved = collapse_to_huge_pages(v.data(), v.size() * 4);
  EXPECT_EQ(moved % page, 0u);
  EXPECT_LE(moved, v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], static_cast<uint32_t>(i * 2654435761u)) << i;
  if (moved > 0) EXPECT_GE(anon_huge_kb_at(v.data() + v.size() / 2) * 1024, static_cast<long>(moved));
  else std::printf("no huge pages here (THP off, an older kernel, or none free): only the contents checked\n");
  // Less than one whole huge page, or nothing: nothing to move.
  std::vector<uint32_t> small(page / 8);
  EXPECT_EQ(collapse_to_huge_pages(small.data(), small.size() * 4), 0u);
  EXPECT_EQ(collapse_to_huge_pages(nullptr, 1 << 30), 0u);
}

TEST(Checksum, Crc32cKnownValue) {
  // The standard CRC-32C check value for "123456789".
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  std::string big(1000, 'x');
  EXPECT_EQ(crc32c(big.data(), big.size()), crc32c(big.data() + 500, 500, crc32c(big.data(), 500)));
}

// Flags over argv[first..] (common/flags.h); `args` after the program and the command.
Status parse_flags(Flags& f, std::vector<std::string> args) {
  args.insert(args.begin(), {"prog", "cmd"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return f.parse(static_cast<int>(argv.size()), argv.data(), 2);
}

FlagTable abc_flags() {
  return {flag::integer("a", "", 0, -100, 100),
          flag::str("b", ""),
          flag::boolean("json", ""),
          flag::int_list("list", "", -10, 10),
          flag::number("d", "", 0, 0, 1),
          flag::str("config", "")};
}

TEST(Flags, ParsesAndNamesErrors) {
  Flags f("prog", "", abc_flags());
  ASSERT_TRUE(parse_flags(f, {"--a", "1", "--b=x", "--json", "--list", "1, 2,3", "--a", "-5"}).ok());
  EXPECT_EQ(f.integer("a"), -5);  // the last one given wins
  EXPECT_EQ(f.str("b"), "x");
  EXPECT_TRUE(f.boolean("json"));
  EXPECT_EQ(f.int_list("list"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_DOUBLE_EQ(f.number("d"), 0);  // the declared default
  EXPECT_FALSE(f.has("d"));
  ASSERT_TRUE(parse_flags(f, {"--json=false"}).ok());
  EXPECT_FALSE(f.boolean("json"));
  EXPECT_NE(parse_flags(f, {"--nope", "1"}).message().find("--nope"), std::string::npos);
  EXPECT_EQ(parse_flags(f, {"pos"}).message(), "unexpected argument \"pos\"");
  EXPECT_EQ(parse_flags(f, {"--a", "x1"}).message(), "--a: not an integer: x1");
  EXPECT_EQ(parse_flags(f, {"--a", "101"}).message(), "--a: must be in [-100, 100], got 101");
  EXPECT_EQ(parse_flags(f, {"--list", "1,11"}).message(), "--list[1]: must be in [-10, 10], got 11");
  EXPECT_EQ(parse_flags(f, {"--d", "2"}).message(), "--d: must be in [0, 1], got 2");
}

// A list flag's declared default (the benchmarks' `--prefill-lens 1024,4096`) is read when the
// flag is absent, and a list given replaces it whole.
TEST(Flags, IntListDefault) {
  Flags f("prog", "", {flag::int_list("lens", "", 1, 100, "4,8"), flag::int_list("none", "", 1, 100)});
  ASSERT_TRUE(parse_flags(f, {}).ok());
  EXPECT_FALSE(f.has("lens"));
  EXPECT_EQ(f.int_list("lens"), (std::vector<int64_t>{4, 8}));
  EXPECT_TRUE(f.int_list("none").empty());
  ASSERT_TRUE(parse_flags(f, {"--lens", "16"}).ok());
  EXPECT_EQ(f.int_list("lens"), (std::vector<int64_t>{16}));
  EXPECT_NE(f.help_text().find("default 4,8"), std::string::npos);
}

TEST(Flags, DeviceFlag) {
  EXPECT_EQ(parse_device_flag("cpu").value(), -1);
  EXPECT_EQ(parse_device_flag("cuda").value(), 0);
  EXPECT_EQ(parse_device_flag("cuda:3").value(), 3);
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:1234", "CPU"}) {
    auto d = parse_device_flag(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find("--device: must be cpu, cuda or cuda:N"), std::string::npos) << bad;
  }
}

TEST(Flags, ConfigFileFillsWhatTheCommandLineLeaves) {
  test::TempDir dir;
  const std::string cfg = dir.sub("c.json");
  std::ofstream(cfg) << R"({"a": 7, "b": "from-file", "json": true, "d": 0.25})";
  const std::string arg = "--config=" + cfg;
  Flags f("prog", "", abc_flags());
  ASSERT_TRUE(parse_flags(f, {"--b", "cli", arg}).ok());
  EXPECT_EQ(f.integer("a"), 7);
  EXPECT_EQ(f.str("b"), "cli");  // the command line wins
  EXPECT_TRUE(f.boolean("json"));
  EXPECT_DOUBLE_EQ(f.number("d"), 0.25);

  std::ofstream(cfg) << R"({"zzz": 1})";
  Status g = parse_flags(f, {"--b", "cli", arg});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("zzz"), std::string::npos);
  std::ofstream(cfg) << R"({"json": "yes"})";
  Status h = parse_flags(f, {"--b", "cli", arg});
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.message().find("json"), std::string::npos);
  std::ofstream(cfg) << R"({"a": 700})";  // values from the file are checked like the command line's
  EXPECT_EQ(parse_flags(f, {arg}).message(), "--a: must be in [-100, 100], got 700");
}

}  // namespace
}  // namespace yoco
