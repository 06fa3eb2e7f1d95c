// API keys on the public API (docs/design.md §9b): a router started with --api-keys refuses calls
// without a key or with an unknown one, holds each key to its limits, keeps every key's documents
// from the others (an admin key sees all), re-reads the key file when it changes, and shows the
// key's name, never the key, in its metrics and logs. Real processes on 127.0.0.1.
#include "router/api_keys.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "tests/support/cluster_harness.h"

namespace yoco {
namespace {

using std::chrono::milliseconds;
using test::greedy;
using test::LocalCluster;

const std::string kGret = std::string(YOCO_SOURCE_DIR) + "/models/kjv-yoco";

std::string entry(const std::string& name, const std::string& key, int64_t conc, int64_t tpm, int64_t ctx, bool admin) {
  ApiKeyEntry k;
  k.name = name;
  k.max_concurrent = conc;
  k.tokens_per_minute = tpm;
  k.max_context = ctx;
  k.admin = admin;
  return api_key_entry_json(k, key);
}

void write_keys(const std::string& path, const std::vector<std::string>& entries) {
  std::string s = "{\"keys\":[";
  for (size_t i = 0; i < entries.size(); ++i) s += (i ? "," : "") + entries[i];
  std::ofstream(path + ".tmp") << s << "]}";
  std::filesystem::rename(path + ".tmp", path);  // swapped whole, as a Secret update does
}

std::vector<int32_t> tokens(int n, int seed) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(10 + (i * 7 + seed * 13) % 200);
  return t;
}

struct Keyed {
  std::string key;
  void apply(grpc::ClientContext& c) const {
    if (!key.empty()) c.AddMetadata("authorization", "Bearer " + key);
  }
};

class ApiKeysCluster : public ::testing::Test {
 protected:
  test::TempDir tmp;
  const std::string a = new_api_key(), b = new_api_key(), admin = new_api_key(), late = new_api_key(),
                    reader = new_api_key();
  std::string file() const { return tmp.path() + "/keys.json"; }
  std::vector<std::string> entries() const {
    ApiKeyEntry gen_only;
    gen_only.name = "gen-only";
    gen_only.scopes = {"generate"};
    return {entry("team-a", a, 1, 0, 0, false), entry("team-b", b, 0, 200, 100, false),
            entry("ops", admin, 0, 0, 0, true), api_key_entry_json(gen_only, reader)};
  }
};

grpc::Status model_info(v1::Yoco::Stub& s, const Keyed& k) {
  grpc::ClientContext c;
  k.apply(c);
  v1::ModelInfo info;
  return s.GetModelInfo(&c, {}, &info);
}

test::Generated generate(v1::Yoco::Stub& s, const Keyed& k, const v1::GenerateRequest& req) {
  grpc::ClientContext c;
  k.apply(c);
  return test::run_generate(s, req, milliseconds(60000), {}, &c);
}

TEST_F(ApiKeysCluster, AuthenticatesLimitsSeparatesDocumentsAndNeverShowsTheKey) {
  write_keys(file(), entries());
  LocalCluster c({.model = kGret,
                  .prefill = 1,
                  .decode = 1,
                  .kv_blocks = 256,
                  .prefill_args = {"--kv-store=memory:64MiB", "--kv-block-tokens=32"},
                  .router_args = {"--api-keys=" + file()}});
  ASSERT_TRUE(c.ready()) << c.logs();
  auto stub = c.stub();
  const Keyed A{a}, B{b}, Admin{admin}, None{""}, Wrong{a + "0"};

  // No key, a wrong key: UNAUTHENTICATED on every public RPC, the key never echoed.
  grpc::Status st = model_info(*stub, None);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(st.error_message(), "authorization: missing bearer key");
  st = model_info(*stub, Wrong);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(st.error_message(), "authorization: unknown key");
  EXPECT_EQ(generate(*stub, None, greedy(tokens(5, 1), 4)).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  {
    grpc::ClientContext cc;
    Wrong.apply(cc);
    v1::TokenizeRequest tr;
    tr.set_text("in the beginning");
    v1::TokenizeResponse resp;
    EXPECT_EQ(stub->Tokenize(&cc, tr, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext cc;
    v1::ListDocumentsResponse resp;
    EXPECT_EQ(stub->ListDocuments(&cc, {}, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_TRUE(model_info(*stub, A).ok());
  EXPECT_TRUE(model_info(*stub, Admin).ok());

  // A key granted only "generate": Generate and GetModelInfo work, Score and the document RPCs
  // are PERMISSION_DENIED naming the key and the scope.
  {
    const Keyed R{reader};
    EXPECT_TRUE(model_info(*stub, R).ok());
    EXPECT_TRUE(generate(*stub, R, greedy(tokens(5, 1), 4)).status.ok());
    grpc::ClientContext sc;
    R.apply(sc);
    v1::ScoreRequest sr;
    for (int32_t t : tokens(6, 2)) sr.mutable_tokens()->add_ids(t);
    v1::ScoreResponse sresp;
    st = stub->Score(&sc, sr, &sresp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(st.error_message(),
              "authorization: key gen-only may not call Score (needs scope \"score\"; granted: generate)");
    grpc::ClientContext lc;
    R.apply(lc);
    v1::ListDocumentsResponse lresp;
    EXPECT_EQ(stub->ListDocuments(&lc, {}, &lresp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }

  // Documents: team-a's are invisible to team-b (NOT_FOUND, as an unknown id); the admin sees all.
  v1::Document doc;
  {
    grpc::ClientContext cc;
    A.apply(cc);
    v1::CacheDocumentRequest creq;
    for (int32_t t : tokens(70, 3)) creq.mutable_tokens()->add_ids(t);
    ASSERT_TRUE(stub->CacheDocument(&cc, creq, &doc).ok()) << c.logs();
  }
  auto get = [&](const Keyed& k) {
    grpc::ClientContext cc;
    k.apply(cc);
    v1::GetDocumentRequest r;
    r.set_id(doc.id());
    v1::Document out;
    return stub->GetDocument(&cc, r, &out);
  };
  auto listed = [&](const Keyed& k) {
    grpc::ClientContext cc;
    k.apply(cc);
    v1::ListDocumentsResponse resp;
    EXPECT_TRUE(stub->ListDocuments(&cc, {}, &resp).ok());
    for (const auto& d : resp.documents())
      if (d.id() == doc.id()) return true;
    return false;
  };
  EXPECT_TRUE(get(A).ok());
  EXPECT_TRUE(get(Admin).ok());
  st = get(B);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(st.error_message(), "id: unknown document \"" + doc.id() + "\"");
  EXPECT_TRUE(listed(A));
  EXPECT_TRUE(listed(Admin));
  EXPECT_FALSE(listed(B));
  {
    v1::GenerateRequest req = greedy(tokens(5, 4), 4);
    req.add_document_ids(doc.id());
    EXPECT_EQ(generate(*stub, B, req).status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_TRUE(generate(*stub, A, req).status.ok());
  }
  {
    grpc::ClientContext cc;
    B.apply(cc);
    v1::DeleteDocumentRequest r;
    r.set_id(doc.id());
    v1::DeleteDocumentResponse resp;
    // Another key's document answers like an unknown id: OK, deleted: false (nothing leaks).
    EXPECT_TRUE(stub->DeleteDocument(&cc, r, &resp).ok());
    EXPECT_FALSE(resp.deleted());
  }
  EXPECT_TRUE(get(A).ok());  // still there

  // team-b: max_context 100 (prompt + max_tokens), then 200 tokens a minute.
  auto r = generate(*stub, B, greedy(tokens(50, 5), 60));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(r.status.error_message().find("max_context 100"), std::string::npos) << r.status.error_message();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(generate(*stub, B, greedy(tokens(10, i), 40)).status.ok()) << i;
  r = generate(*stub, B, greedy(tokens(10, 9), 40));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(r.status.error_message().find("tokens_per_minute 200"), std::string::npos) << r.status.error_message();

  // team-a: max_concurrent 1 while one stream is open.
  {
    grpc::ClientContext cc;
    A.apply(cc);
    std::atomic<bool> streaming{false};
    std::thread long_stream([&] {
      test::run_generate(
          *stub, greedy(tokens(8, 6), 3000), milliseconds(60000),
          [&](grpc::ClientContext&, const test::Generated&) { streaming = true; }, &cc);
    });
    for (int i = 0; i < 3000 && !streaming; ++i) std::this_thread::sleep_for(milliseconds(10));
    ASSERT_TRUE(streaming);
    st = model_info(*stub, A);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(st.error_message().find("max_concurrent is 1"), std::string::npos) << st.error_message();
    EXPECT_TRUE(model_info(*stub, Admin).ok());  // other keys are not held back
    cc.TryCancel();
    long_stream.join();
  }
  for (int i = 0; i < 200 && !model_info(*stub, A).ok(); ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(model_info(*stub, A).ok());

  // The admin deletes team-a's document.
  {
    grpc::ClientContext cc;
    Admin.apply(cc);
    v1::DeleteDocumentRequest dr;
    dr.set_id(doc.id());
    v1::DeleteDocumentResponse resp;
    EXPECT_TRUE(stub->DeleteDocument(&cc, dr, &resp).ok());
    EXPECT_TRUE(resp.deleted());
  }
  EXPECT_EQ(get(A).error_code(), grpc::StatusCode::NOT_FOUND);

  // Rotation: a new file is picked up without a restart; a removed key stops working.
  EXPECT_EQ(model_info(*stub, Keyed{late}).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto rotated = entries();
  rotated[0] = entry("late", late, 0, 0, 0, false);  // team-a goes, "late" comes
  write_keys(file(), rotated);
  for (int i = 0; i < 100 && !model_info(*stub, Keyed{late}).ok(); ++i) std::this_thread::sleep_for(milliseconds(50));
  EXPECT_TRUE(model_info(*stub, Keyed{late}).ok());
  EXPECT_EQ(model_info(*stub, A).error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // yoco-cli's cluster commands: --api-key or $YOCO_API_KEY; without one, exit 1 (UNAUTHENTICATED).
  const char* bin = std::getenv("YOCO_BINARY_DIR");
  const std::string cli =
      std::string(bin && *bin ? bin : YOCO_BINARY_DIR) + "/tools/yoco-cli info --router " + c.router().grpc;
  const std::string quiet = " >/dev/null 2>&1";
  EXPECT_EQ(std::system(("env -u YOCO_API_KEY " + cli + quiet).c_str()), 1 << 8);
  EXPECT_EQ(std::system(("YOCO_API_KEY=" + admin + " " + cli + quiet).c_str()), 0);
  EXPECT_EQ(std::system((cli + " --api-key " + admin + quiet).c_str()), 0);

  // The key's name, never the key, in the router's metrics and logs.
  const std::string m = test::http_get_body(test::port_of(c.router().metrics), "/metrics");
  EXPECT_NE(m.find("yoco_key_requests_total{key=\"team-b\",code=\"resource_exhausted\"}"), std::string::npos) << m;
  EXPECT_NE(m.find("yoco_key_requests_total{key=\"team-a\",code=\"ok\"}"), std::string::npos) << m;
  EXPECT_NE(m.find("yoco_key_requests_total{key=\"\",code=\"unauthenticated\"}"), std::string::npos) << m;
  const std::string log = test::read_file(c.state_dir() + "/router.log");
  EXPECT_NE(log.find("key=team-b"), std::string::npos) << log;
  for (const std::string* k : {&a, &b, &admin, &late}) {
    EXPECT_EQ(m.find(*k), std::string::npos);
    EXPECT_EQ(log.find(*k), std::string::npos);
    EXPECT_EQ(log.find(k->substr(5, 16)), std::string::npos);  // nor a part of it
  }
}

}  // namespace
}  // namespace yoco
