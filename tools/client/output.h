// The cluster commands' JSON output (--json): log-probs, token ids, finish reasons. JSON has no
// NaN or infinity (a -inf log-prob, a percentile of nothing): those become null.
#pragma once

#include <cstdint>

#include "common/json.h"
#include "yoco/v1/yoco.pb.h"

namespace yoco::cli {

Json number(double v);
Json token_logprob_json(const v1::TokenLogprob& t);
Json logprob_entry_json(const v1::LogprobEntry& e);  // the chosen token with its "top" alternatives
const char* finish_reason_name(v1::FinishReason r);
Json document_json(const v1::Document& d);

template <class Ids>
Json ids_json(const Ids& ids) {
  Json::Array a;
  for (int32_t t : ids) a.push_back(Json(t));
  return Json(std::move(a));
}

}  // namespace yoco::cli
