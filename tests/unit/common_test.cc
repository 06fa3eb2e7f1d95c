#include <gtest/gtest.h>

#include <algorithm>

#include "common/checksum.h"
#include "common/flags.h"
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

TEST(Checksum, Crc32cKnownValue) {
  // The standard CRC-32C check value for "123456789".
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  std::string big(1000, 'x');
  EXPECT_EQ(crc32c(big.data(), big.size()), crc32c(big.data() + 500, 500, crc32c(big.data(), 500)));
}

TEST(Flags, ParsesAndNamesErrors) {
  const char* argv[] = {"prog", "cmd", "--a", "1", "--b=x", "--json", "pos", "--list", "1, 2,3"};
  auto f = Flags::parse(9, const_cast<char**>(argv), 2, {"a", "b", "json", "list"}, {"json"});
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->get_int("a", 0).value(), 1);
  EXPECT_EQ(f->get("b"), "x");
  EXPECT_TRUE(f->get_bool("json"));
  EXPECT_EQ(f->positional().size(), 1u);
  EXPECT_EQ(f->get_int_list("list").value(), (std::vector<int64_t>{1, 2, 3}));
  const char* bad[] = {"prog", "cmd", "--nope", "1"};
  auto g = Flags::parse(4, const_cast<char**>(bad), 2, {"a"});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("--nope"), std::string::npos);
  const char* badint[] = {"prog", "cmd", "--a", "x1"};
  auto h = Flags::parse(4, const_cast<char**>(badint), 2, {"a"});
  ASSERT_TRUE(h.ok());
  EXPECT_NE(h->get_int("a", 0).status().message().find("--a"), std::string::npos);
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
  const char* argv[] = {"prog", "--b", "cli", arg.c_str()};
  auto f = Flags::parse(4, const_cast<char**>(argv), 1, {"a", "b", "d", "json", "config"}, {"json"});
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->get_int("a", 0).value(), 7);
  EXPECT_EQ(f->get("b"), "cli");  // the command line wins
  EXPECT_TRUE(f->get_bool("json"));
  EXPECT_DOUBLE_EQ(f->get_double("d", 0).value(), 0.25);

  std::ofstream(cfg) << R"({"zzz": 1})";
  auto g = Flags::parse(4, const_cast<char**>(argv), 1, {"a", "b", "d", "json", "config"}, {"json"});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("zzz"), std::string::npos);
  std::ofstream(cfg) << R"({"json": "yes"})";
  auto h = Flags::parse(4, const_cast<char**>(argv), 1, {"a", "b", "d", "json", "config"}, {"json"});
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("json"), std::string::npos);
}

}  // namespace
}  // namespace yoco
