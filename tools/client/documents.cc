// yoco-cli cache-doc, get-doc, list-docs, delete-doc --router: RAG pre-caching (docs/design.md §5),
// each printing the answer as JSON.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "common/json.h"
#include "tools/client/commands.h"
#include "tools/client/connection.h"
#include "tools/client/output.h"

namespace yoco::cli {
namespace {

// get-doc, list-docs, delete-doc: parse (--id when `needs_id`), connect, one call, print the
// JSON `call` builds.
template <class Call>
int doc_command(int argc, char** argv, const std::string& about, bool needs_id, Call call) {
  ServerFlags f =
      command_flags(argc, argv, about, needs_id ? FlagTable{flag::str("id", "the document's id")} : FlagTable{});
  if (f.ok() && needs_id && !f.has("id")) f.fail("--id: required");
  auto conn = connect(f);
  if (!f.ok()) return flag_fail(f);
  grpc::ClientContext ctx;
  conn->prepare(ctx);
  Json out;
  if (grpc::Status st = call(*conn->stub, ctx, f.str("id"), out); !st.ok()) return rpc_fail(st);
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int cmd_cache_doc(int argc, char** argv) {
  ServerFlags f = command_flags(
      argc, argv, "compute a document's K/V into the cluster's store (RAG pre-caching)",
      {flag::str("text", "the document's text (or --tokens, --file)"),
       token_ids_flag("tokens", "the document's token ids, comma-separated"),
       flag::str("file", "a file holding the document's text"),
       flag::integer("ttl-seconds", "how long the store keeps it (0: the store's default)", 0, 0, UINT32_MAX)});
  if (!f.ok()) return flag_fail(f);
  v1::CacheDocumentRequest req;
  const int given = f.has("text") + f.has("tokens") + f.has("file");
  if (given != 1) f.fail("--text, --tokens or --file: give exactly one");
  if (f.has("text")) {
    req.set_text(f.str("text"));
  } else if (f.has("file")) {
    std::ifstream in(f.str("file"), std::ios::binary);
    if (!in) f.fail("--file: cannot read " + f.str("file"));
    std::stringstream ss;
    ss << in.rdbuf();
    req.set_text(ss.str());
  } else {
    for (int32_t t : token_ids(f, "tokens")) req.mutable_tokens()->add_ids(t);
  }
  req.set_ttl_seconds(static_cast<uint32_t>(f.integer("ttl-seconds")));
  auto conn = connect(f);
  if (!f.ok()) return flag_fail(f);
  grpc::ClientContext ctx;
  conn->prepare(ctx);
  v1::Document doc;
  if (grpc::Status st = conn->stub->CacheDocument(&ctx, req, &doc); !st.ok()) return rpc_fail(st);
  std::printf("%s\n", document_json(doc).dump().c_str());
  return 0;
}

int cmd_get_doc(int argc, char** argv) {
  return doc_command(argc, argv, "a cached document's record", true,
                     [](auto& stub, grpc::ClientContext& ctx, const std::string& id, Json& out) {
                       v1::GetDocumentRequest req;
                       req.set_id(id);
                       v1::Document doc;
                       grpc::Status st = stub.GetDocument(&ctx, req, &doc);
                       out = document_json(doc);
                       return st;
                     });
}

int cmd_list_docs(int argc, char** argv) {
  return doc_command(argc, argv, "the cached documents", false,
                     [](auto& stub, grpc::ClientContext& ctx, const std::string&, Json& out) {
                       v1::ListDocumentsResponse resp;
                       grpc::Status st = stub.ListDocuments(&ctx, v1::ListDocumentsRequest(), &resp);
                       Json::Array docs;
                       for (const auto& d : resp.documents()) docs.push_back(document_json(d));
                       out = Json(std::move(docs));
                       return st;
                     });
}

int cmd_delete_doc(int argc, char** argv) {
  return doc_command(argc, argv, "delete a cached document", true,
                     [](auto& stub, grpc::ClientContext& ctx, const std::string& id, Json& out) {
                       v1::DeleteDocumentRequest req;
                       req.set_id(id);
                       v1::DeleteDocumentResponse resp;
                       grpc::Status st = stub.DeleteDocument(&ctx, req, &resp);
                       out = Json(Json::Object{{"deleted", Json(resp.deleted())}});
                       return st;
                     });
}

}  // namespace yoco::cli
