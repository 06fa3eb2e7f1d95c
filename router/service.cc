#include "router/service.h"

#include <algorithm>
#include <span>

#include "common/document_id.h"
#include "common/log.h"
#include "proto/grpc_util.h"
#include "router/call_util.h"
#include "router/documents.h"
#include "router/generate_call.h"
#include "tokenizer/utf8.h"

namespace yoco {
namespace {

using Clock = std::chrono::steady_clock;

// The API key scope an RPC needs (router/api_keys.h, kApiScopes); "" for those any valid key may call.
std::string_view scope_of(std::string_view rpc) {
  if (rpc == "Generate") return "generate";
  if (rpc == "Score") return "score";
  if (rpc == "CacheDocument" || rpc == "GetDocument" || rpc == "ListDocuments" || rpc == "DeleteDocument")
    return "documents";
  return "";
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

grpc::Status no_tokenizer(const char* field) {
  return {grpc::StatusCode::FAILED_PRECONDITION, std::string(field) + ": the router has no tokenizer; send tokens"};
}

grpc::Status unauthenticated(const std::string& message) { return {grpc::StatusCode::UNAUTHENTICATED, message}; }

// gRPC metadata "yoco-fork-group: GROUP/INDEX/N": the call is choice INDEX of N of one prompt
// (router/fork_groups.h). Absent: no group.
grpc::Status fork_member(const grpc::ServerContext& ctx, ForkMember* out) {
  const auto& md = ctx.client_metadata();
  const auto it = md.find("yoco-fork-group");
  if (it == md.end()) return grpc::Status::OK;
  const std::string v(it->second.data(), it->second.size());
  const size_t b = v.rfind('/'), a = b == std::string::npos || b == 0 ? std::string::npos : v.rfind('/', b - 1);
  const auto bad =
      grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                   "metadata yoco-fork-group: \"" + v.substr(0, 80) + "\" is not GROUP/INDEX/N (0 <= INDEX < N <= 64)");
  if (a == std::string::npos || a == 0) return bad;
  const std::string index = v.substr(a + 1, b - a - 1), n = v.substr(b + 1);
  auto number = [](const std::string& t) {
    return !t.empty() && t.size() <= 2 && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })
               ? std::stoi(t)
               : -1;
  };
  const int i = number(index), k = number(n);
  if (i < 0 || k < 1 || k > 64 || i >= k) return bad;
  *out = ForkMember{v.substr(0, a), i, k};
  return grpc::Status::OK;
}

}  // namespace

template <class Fn>
grpc::Status RouterService::keyed(grpc::ServerContext* ctx, const char* rpc, const std::string& request_id, Fn fn) {
  ApiKeys* keys = core_.keys();
  if (!keys) return fn(static_cast<KeyLease*>(nullptr));
  const auto& md = ctx->client_metadata();
  const auto it = md.find("authorization");
  AuthResult auth =
      keys->authenticate(it == md.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size()));
  grpc::Status st;
  switch (auth.error) {
    case AuthError::kNone:
      if (const std::string denied = auth.lease->scope_denial(scope_of(rpc), rpc); !denied.empty())
        st = {grpc::StatusCode::PERMISSION_DENIED, denied};
      else st = fn(auth.lease.get());
      break;
    case AuthError::kConcurrency:
      st = {grpc::StatusCode::RESOURCE_EXHAUSTED, auth.message};
      break;
    default:
      st = unauthenticated(auth.message);
      break;
  }
  // The key's name, never the key (the messages above never contain it).
  const std::string name = auth.lease ? auth.lease->name() : auth.key_name;
  core_.metrics().observe_key_request(name, st.error_code());
  if (!st.ok())
    YOCO_LOG(LogLevel::kInfo, "request failed",
             LogFields()
                 .kv("rpc", rpc)
                 .kv("key", name)
                 .kv("request_id", request_id)
                 .kv("code", grpc_code_label(st.error_code()))
                 .kv("message", st.error_message()));
  return st;
}

grpc::Status RouterService::Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                                     grpc::ServerWriter<v1::GenerateResponse>* writer) {
  return keyed(ctx, "Generate", req->request_id(), [&](KeyLease* key) {
    const auto t0 = Clock::now();
    ServerGenerateSink client(ctx, writer);
    ForkMember fork;
    grpc::Status st = fork_member(*ctx, &fork);
    if (st.ok()) st = GenerateCall(core_, client, *req, key, std::move(fork)).run();
    core_.metrics().observe_finished(st.error_code(), since(t0));
    if (!st.ok() && !key)  // with keys, keyed logs it with the key's name
      YOCO_LOG(LogLevel::kInfo, "generate failed",
               LogFields()
                   .kv("request_id", req->request_id())
                   .kv("code", grpc_code_label(st.error_code()))
                   .kv("message", st.error_message()));
    return st;
  });
}

// ---- Score: the router tokenizes and checks; a decode worker of the model scores ----

grpc::Status RouterService::Score(grpc::ServerContext* ctx, const v1::ScoreRequest* req, v1::ScoreResponse* resp) {
  return keyed(ctx, "Score", "", [&](KeyLease* key) {
    const auto t0 = Clock::now();
    grpc::Status st = score(ctx, req, resp, key);
    core_.metrics().observe_finished(st.error_code(), since(t0));
    return st;
  });
}

grpc::Status RouterService::score(grpc::ServerContext* ctx, const v1::ScoreRequest* req, v1::ScoreResponse* resp,
                                  KeyLease* key) {
  auto model = core_.model();
  if (!model.ok()) return to_grpc(model.status());
  const Tokenizer* tok = core_.tokenizer();
  v1::ScoreRequest fwd = *req;  // the worker takes tokens only
  if (req->input_case() == v1::ScoreRequest::kText) {
    if (!tok) return no_tokenizer("input.text");
    fwd.mutable_tokens()->Clear();
    for (int32_t t : tok->encode(req->text(), !req->split_special_tokens(), tok->add_bos_token()))
      fwd.mutable_tokens()->add_ids(t);
  }
  const auto& ids = fwd.tokens().ids();
  if (ids.size() < 2) return invalid("input: needs at least two tokens to score");
  const std::span<const int32_t> id_span(ids.data(), static_cast<size_t>(ids.size()));
  if (grpc::Status st = check_token_ids(id_span, (*model)->vocab_size(), "input.tokens"); !st.ok()) return st;
  if (ids.size() > (*model)->max_seq_len())
    return invalid("input: longer than max_seq_len " + std::to_string((*model)->max_seq_len()));
  if (key) {
    if (Status k = key->charge(ids.size(), 0); !k.ok()) return {grpc::StatusCode::RESOURCE_EXHAUSTED, k.message()};
  }
  const ServerCallParent parent(ctx);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::optional<std::string> worker = core_.any_decode_worker();
    if (!worker) return {grpc::StatusCode::UNAVAILABLE, "no healthy decode worker"};
    resp->Clear();
    grpc::Status st = core_.calls().score(*worker, fwd, resp, parent);
    if (st.ok() || final_error(st.error_code()) || client_end(ctx)) return st;
  }
  return {grpc::StatusCode::UNAVAILABLE, "score failed on 3 attempts"};
}

// ---- the tokenizer and the model ----

grpc::Status RouterService::Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest* req,
                                     v1::TokenizeResponse* resp) {
  return keyed(ctx, "Tokenize", "", [&](KeyLease*) -> grpc::Status {
    const Tokenizer* tok = core_.tokenizer();
    if (!tok) return {grpc::StatusCode::FAILED_PRECONDITION, "the router's model directory has no tokenizer"};
    for (int32_t t : tok->encode(req->text(), req->allow_special(), req->add_bos())) resp->add_ids(t);
    return grpc::Status::OK;
  });
}

grpc::Status RouterService::Detokenize(grpc::ServerContext* ctx, const v1::DetokenizeRequest* req,
                                       v1::DetokenizeResponse* resp) {
  return keyed(ctx, "Detokenize", "", [&](KeyLease*) -> grpc::Status {
    const Tokenizer* tok = core_.tokenizer();
    if (!tok) return {grpc::StatusCode::FAILED_PRECONDITION, "the router's model directory has no tokenizer"};
    std::vector<int32_t> ids(req->ids().begin(), req->ids().end());
    auto text = tok->decode_checked(ids, req->skip_special());
    if (!text.ok()) return invalid(text.status().message());
    // A protobuf string is UTF-8: ids that end inside a character show it as U+FFFD.
    utf8::append_lossy(*resp->mutable_text(), text.value());
    return grpc::Status::OK;
  });
}

// The decode workers hold the weights (and so the fingerprint): their Describe, cached; the
// special tokens from the router's tokenizer.
grpc::Status RouterService::GetModelInfo(grpc::ServerContext* ctx, const v1::GetModelInfoRequest*,
                                         v1::ModelInfo* info) {
  return keyed(ctx, "GetModelInfo", "", [&](KeyLease*) -> grpc::Status {
    auto model = core_.model();
    if (!model.ok()) return {grpc::StatusCode::UNAVAILABLE, "no healthy decode worker to describe the model"};
    *info = **model;
    const Tokenizer* tok = core_.tokenizer();
    if (tok && tok->bos_id() && !info->has_bos_id()) info->set_bos_id(*tok->bos_id());
    if (tok && tok->eos_id() && !info->has_eos_id()) info->set_eos_id(*tok->eos_id());
    return grpc::Status::OK;
  });
}

// ---- documents: on a prefill worker (router/documents.h) ----

template <class Req, class Resp, class Call>
grpc::Status RouterService::on_prefill_worker(grpc::ServerContext* ctx, const Req& req, Resp* resp, Call call,
                                              std::optional<uint64_t> affinity) {
  const auto t0 = Clock::now();
  const grpc::Status st = call_prefill_worker(core_, ServerCallParent(ctx), req, resp, call, affinity);
  core_.metrics().observe_finished(st.error_code(), since(t0));
  return st;
}

grpc::Status RouterService::CacheDocument(grpc::ServerContext* ctx, const v1::CacheDocumentRequest* req,
                                          v1::Document* doc) {
  return keyed(ctx, "CacheDocument", "", [&](KeyLease* key) {
    if (core_.colocated()) return no_documents_when_colocated();
    return cache_document(ctx, req, doc, key);
  });
}

grpc::Status RouterService::cache_document(grpc::ServerContext* ctx, const v1::CacheDocumentRequest* req,
                                           v1::Document* doc, KeyLease* key) {
  auto model = core_.model();
  if (!model.ok()) return to_grpc(model.status());
  const Tokenizer* tok = core_.tokenizer();
  std::vector<int32_t> ids;
  if (req->content_case() == v1::CacheDocumentRequest::kText) {
    if (!tok) return no_tokenizer("content.text");
    ids = tok->encode(req->text(), false, false);
  } else {
    ids.assign(req->tokens().ids().begin(), req->tokens().ids().end());
  }
  if (ids.empty()) return invalid("content: empty document (give text or at least one token id)");
  if (grpc::Status st = check_token_ids(ids, (*model)->vocab_size(), "content.tokens"); !st.ok()) return st;
  if (static_cast<int64_t>(ids.size()) >= (*model)->max_seq_len())
    return invalid("content: " + std::to_string(ids.size()) + " tokens; a document must leave room in max_seq_len " +
                   std::to_string((*model)->max_seq_len()));
  if (key) {
    if (Status k = key->charge(static_cast<int64_t>(ids.size()), 0); !k.ok())
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, k.message()};
  }
  const std::optional<std::string> owner = document_owner(key);
  v1::CacheDocumentRequest fwd;
  fwd.set_ttl_seconds(req->ttl_seconds());
  fwd.mutable_tokens()->mutable_ids()->Add(ids.begin(), ids.end());
  // Computed where later prompts starting with this document will go (its memory tier).
  return on_prefill_worker(
      ctx, fwd, doc,
      [&owner](auto& stub, grpc::ClientContext* c, const auto& r, auto* out) {
        add_owner(c, owner);
        return stub.CacheDocument(c, r, out);
      },
      core_.prefix_hash(ids));
}

// A non-admin key sees only its own documents: the prefill worker answers any other id NOT_FOUND,
// as an unknown one ("yoco-owner", worker.proto).
grpc::Status RouterService::GetDocument(grpc::ServerContext* ctx, const v1::GetDocumentRequest* req,
                                        v1::Document* doc) {
  return keyed(ctx, "GetDocument", "", [&](KeyLease* key) {
    if (!is_document_id(req->id())) return invalid(not_a_document_id("id", req->id()));
    const std::optional<std::string> owner = document_owner(key);
    internal::v1::DocumentRecord rec;
    grpc::Status st =
        on_prefill_worker(ctx, *req, &rec, [&owner](auto& stub, grpc::ClientContext* c, const auto& r, auto* out) {
          add_owner(c, owner);
          return stub.GetDocument(c, r, out);
        });
    if (st.ok()) *doc = rec.document();
    return st;
  });
}

grpc::Status RouterService::ListDocuments(grpc::ServerContext* ctx, const v1::ListDocumentsRequest* req,
                                          v1::ListDocumentsResponse* resp) {
  return keyed(ctx, "ListDocuments", "", [&](KeyLease* key) {
    const std::optional<std::string> owner = document_owner(key);
    return on_prefill_worker(ctx, *req, resp, [&owner](auto& stub, grpc::ClientContext* c, const auto& r, auto* out) {
      add_owner(c, owner);
      return stub.ListDocuments(c, r, out);
    });
  });
}

grpc::Status RouterService::DeleteDocument(grpc::ServerContext* ctx, const v1::DeleteDocumentRequest* req,
                                           v1::DeleteDocumentResponse* resp) {
  return keyed(ctx, "DeleteDocument", "", [&](KeyLease* key) {
    if (!is_document_id(req->id())) return invalid(not_a_document_id("id", req->id()));
    const std::optional<std::string> owner = document_owner(key);
    return on_prefill_worker(ctx, *req, resp, [&owner](auto& stub, grpc::ClientContext* c, const auto& r, auto* out) {
      add_owner(c, owner);
      return stub.DeleteDocument(c, r, out);
    });
  });
}

}  // namespace yoco
