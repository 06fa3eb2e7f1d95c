#include "tools/client/output.h"

#include <cmath>

namespace yoco::cli {

Json number(double v) { return std::isfinite(v) ? Json(v) : Json(); }

Json token_logprob_json(const v1::TokenLogprob& t) {
  Json::Object o;
  o["id"] = Json(t.id());
  o["logprob"] = number(t.logprob());
  o["text"] = Json(t.text());
  return Json(std::move(o));
}

Json logprob_entry_json(const v1::LogprobEntry& e) {
  Json o = token_logprob_json(e.chosen());
  Json::Array top;
  for (const auto& t : e.top()) top.push_back(token_logprob_json(t));
  o.mutable_object()["top"] = Json(std::move(top));
  return o;
}

const char* finish_reason_name(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_EOS:
      return "eos";
    default:
      return "unspecified";
  }
}

Json document_json(const v1::Document& d) {
  Json::Object o;
  o["id"] = Json(d.id());
  o["token_count"] = Json(static_cast<int64_t>(d.token_count()));
  o["stored_bytes"] = Json(static_cast<int64_t>(d.stored_bytes()));
  o["created_unix_ms"] = Json(d.created_unix_ms());
  o["ttl_seconds"] = Json(static_cast<int64_t>(d.ttl_seconds()));
  o["already_cached"] = Json(d.already_cached());
  return Json(std::move(o));
}

}  // namespace yoco::cli
