#include "router/api_keys.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/json.h"

namespace yoco {
namespace {

using namespace std::chrono_literals;

std::string entry(const std::string& name, const std::string& key, int64_t conc = 0, int64_t tpm = 0, int64_t ctx = 0,
                  bool admin = false) {
  ApiKeyEntry k;
  k.name = name;
  k.max_concurrent = conc;
  k.tokens_per_minute = tpm;
  k.max_context = ctx;
  k.admin = admin;
  return api_key_entry_json(k, key);
}

std::string file_of(const std::vector<std::string>& entries) {
  std::string s = "{\"keys\":[";
  for (size_t i = 0; i < entries.size(); ++i) s += (i ? "," : "") + entries[i];
  return s + "]}";
}

struct TempFile {
  std::string path = std::filesystem::temp_directory_path() / ("yoco_keys_" + std::to_string(::getpid()) + ".json");
  ~TempFile() { std::remove(path.c_str()); }
  // Written whole and renamed in place, as a Secret update swaps the file.
  void write(const std::string& text) const {
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, path);
  }
};

TEST(ApiKeyFile, ParseErrorsNameTheField) {
  const std::string good = entry("team-a", "k1");
  EXPECT_TRUE(parse_api_key_file(file_of({good})).ok());
  auto bad = [](const std::string& text) { return parse_api_key_file(text).status().message(); };
  EXPECT_NE(bad("{}").find("keys"), std::string::npos);
  EXPECT_NE(bad("not json").find("api key file"), std::string::npos);
  EXPECT_NE(bad(R"({"keys":[{"salt":"00000000000000000000000000000000","sha256":""}]})").find("keys[0].name"),
            std::string::npos);
  EXPECT_NE(bad(R"({"keys":[{"name":"a","salt":"abc","sha256":""}]})").find("keys[0].salt"), std::string::npos);
  EXPECT_NE(
      bad(R"({"keys":[{"name":"a","salt":"0000000000000000000000000000000z","sha256":""}]})").find("keys[0].salt"),
      std::string::npos);
  EXPECT_NE(
      bad(R"({"keys":[{"name":"a","salt":"00000000000000000000000000000000","sha256":"00"}]})").find("keys[0].sha256"),
      std::string::npos);
  EXPECT_NE(bad(file_of({good, entry("team-a", "k2")})).find("keys[1].name: duplicate"), std::string::npos);
  EXPECT_NE(bad(file_of({good, R"({"name":"b c","salt":"","sha256":""})"})).find("keys[1].name"), std::string::npos);
  auto neg = Json::parse(good).value();
  neg.mutable_object()["max_concurrent"] = Json(int64_t{-1});
  EXPECT_NE(bad(file_of({neg.dump()})).find("keys[0].max_concurrent"), std::string::npos);
  neg.mutable_object()["max_concurrent"] = Json(int64_t{1});
  neg.mutable_object()["admin"] = Json("yes");
  EXPECT_NE(bad(file_of({neg.dump()})).find("keys[0].admin"), std::string::npos);
}

TEST(ApiKeyFile, DigestIsSaltedSha256) {
  // SHA-256("saltkey"), independently computed.
  const Sha256 d = api_key_digest("salt", "key");
  const Sha256 again = api_key_digest("salt", "key");
  EXPECT_EQ(d, again);
  EXPECT_NE(d, api_key_digest("salu", "key"));
  EXPECT_EQ(d[0], 0x4a);  // printf saltkey | sha256sum: 4a466ea0...
  EXPECT_EQ(d[1], 0x46);
  const std::string k1 = new_api_key(), k2 = new_api_key();
  EXPECT_NE(k1, k2);
  EXPECT_EQ(k1.size(), 5u + 64u);
}

TEST(ApiKeys, ScopesLimitWhatAKeyMayCall) {
  TempFile f;
  const std::string all = new_api_key(), gen = new_api_key();
  ApiKeyEntry g;
  g.name = "gen";
  g.scopes = {"generate", "documents"};
  f.write(file_of({entry("all", all), api_key_entry_json(g, gen)}));
  auto keys = ApiKeys::open(f.path, 0ms);
  ASSERT_TRUE(keys.ok()) << keys.status().message();
  auto a = (*keys)->authenticate("Bearer " + all);
  ASSERT_EQ(a.error, AuthError::kNone);
  for (std::string_view s : kApiScopes) EXPECT_TRUE(a.lease->allows(s)) << s;  // no scopes: all
  auto r = (*keys)->authenticate("Bearer " + gen);
  ASSERT_EQ(r.error, AuthError::kNone);
  EXPECT_TRUE(r.lease->allows("generate"));
  EXPECT_TRUE(r.lease->allows("documents"));
  EXPECT_TRUE(r.lease->allows(""));  // Tokenize, GetModelInfo: any valid key
  EXPECT_FALSE(r.lease->allows("score"));
  EXPECT_EQ(r.lease->scope_denial("generate", "Generate"), "");
  EXPECT_EQ(r.lease->scope_denial("score", "Score"),
            "authorization: key gen may not call Score (needs scope \"score\"; granted: generate, documents)");
  // Bad scope lists name the field.
  const std::string base = R"({"keys":[{"name":"x","salt":"00000000000000000000000000000000","sha256":")" +
                           std::string(64, '0') + R"(","scopes":)";
  auto bad = parse_api_key_file(base + R"(["generate","admin"]}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "keys[0].scopes[1]: must be one of generate, score, documents");
  bad = parse_api_key_file(base + R"([]}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "keys[0].scopes: empty (leave it out to grant every scope)");
  bad = parse_api_key_file(base + R"("generate"}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "keys[0].scopes: must be an array of scope names");
}

TEST(ApiKeys, AuthenticatesWithoutEchoingTheKey) {
  TempFile f;
  const std::string key = new_api_key();
  f.write(file_of({entry("team-a", key, 0, 0, 0, true)}));
  auto keys = ApiKeys::open(f.path, 0ms);
  ASSERT_TRUE(keys.ok()) << keys.status().message();
  auto ok = (*keys)->authenticate("Bearer " + key);
  ASSERT_EQ(ok.error, AuthError::kNone);
  EXPECT_EQ(ok.lease->name(), "team-a");
  EXPECT_TRUE(ok.lease->admin());
  auto missing = (*keys)->authenticate("");
  EXPECT_EQ(missing.error, AuthError::kMissing);
  EXPECT_EQ(missing.message, "authorization: missing bearer key");
  EXPECT_EQ((*keys)->authenticate(key).error, AuthError::kMissing);  // no "Bearer "
  auto wrong = (*keys)->authenticate("Bearer " + key + "x");
  EXPECT_EQ(wrong.error, AuthError::kUnknown);
  EXPECT_EQ(wrong.message, "authorization: unknown key");
}

TEST(ApiKeys, LimitsConcurrencyTokensPerMinuteAndContext) {
  TempFile f;
  const std::string key = new_api_key();
  f.write(file_of({entry("team-b", key, 2, 1000, 300)}));
  auto keys = ApiKeys::open(f.path, 0ms).value();
  auto a = keys->authenticate("Bearer " + key);
  auto b = keys->authenticate("Bearer " + key);
  ASSERT_EQ(b.error, AuthError::kNone);
  auto c = keys->authenticate("Bearer " + key);
  EXPECT_EQ(c.error, AuthError::kConcurrency);
  EXPECT_NE(c.message.find("max_concurrent is 2"), std::string::npos);
  EXPECT_EQ(c.message.find(key), std::string::npos);
  b.lease.reset();  // a slot comes back when a request ends
  EXPECT_EQ(keys->authenticate("Bearer " + key).error, AuthError::kNone);

  const auto t0 = std::chrono::steady_clock::now();
  Status ctx = a.lease->charge(250, 100, t0);
  EXPECT_EQ(ctx.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(ctx.message().find("max_context 300"), std::string::npos);
  EXPECT_NE(ctx.message().find("max_tokens"), std::string::npos);
  EXPECT_TRUE(a.lease->charge(200, 100, t0).ok());        // 300
  EXPECT_TRUE(a.lease->charge(200, 100, t0 + 10s).ok());  // 600
  EXPECT_TRUE(a.lease->charge(200, 100, t0 + 20s).ok());  // 900
  Status over = a.lease->charge(100, 100, t0 + 30s);
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("tokens_per_minute 1000"), std::string::npos);
  EXPECT_TRUE(a.lease->charge(100, 100, t0 + 61s).ok());  // the first charge left the minute
}

TEST(ApiKeys, ReloadsOnChangeAndKeepsTheOldKeysOnABadFile) {
  TempFile f;
  const std::string k1 = new_api_key(), k2 = new_api_key();
  f.write(file_of({entry("one", k1)}));
  auto keys = ApiKeys::open(f.path, 20ms).value();
  EXPECT_EQ(keys->authenticate("Bearer " + k2).error, AuthError::kUnknown);
  f.write(file_of({entry("two", k2)}));
  for (int i = 0; i < 200 && keys->authenticate("Bearer " + k2).error != AuthError::kNone; ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(keys->authenticate("Bearer " + k2).error, AuthError::kNone);
  EXPECT_EQ(keys->authenticate("Bearer " + k1).error, AuthError::kUnknown);
  f.write("{\"keys\": [ broken");
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(keys->reload_if_changed());
  EXPECT_EQ(keys->authenticate("Bearer " + k2).error, AuthError::kNone);  // the old keys stay
  EXPECT_EQ(keys->size(), 1u);
}

TEST(ApiKeys, OpenRejectsABadFileNamingTheField) {
  TempFile f;
  f.write(R"({"keys":[{"name":"a"}]})");
  auto keys = ApiKeys::open(f.path, 0ms);
  ASSERT_FALSE(keys.ok());
  EXPECT_NE(keys.status().message().find("keys[0].salt"), std::string::npos);
}

}  // namespace
}  // namespace yoco
