// Moves one request's tokens from the batcher thread to the gRPC handler thread that writes
// them: the batcher never blocks on a slow client, and the handler batches whatever arrived
// since its last write into one message. A client that goes away (or a failed write) cancels
// the request in the batcher, which frees its blocks at once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "decode_service/batcher.h"
#include "server/call.h"
#include "yoco/v1/yoco.pb.h"

namespace yoco {

inline void fill_logprobs(const TokenLogprobs& t, v1::LogprobEntry* e) {
  e->mutable_chosen()->set_id(t.token);
  e->mutable_chosen()->set_logprob(t.logprob);
  for (const auto& [id, lp] : t.top) {
    auto* x = e->add_top();
    x->set_id(id);
    x->set_logprob(lp);
  }
}

struct PumpResult {
  FinishInfo info;
  std::optional<Clock::time_point> first_token;
  bool client_gone = false;
};

// `write(ids, logprobs)` sends one batch and returns false when the stream is broken; logprobs
// is empty unless the request asked for them. Returns when the request finished, or the
// submit error.
inline Result<PumpResult> pump_tokens(
    grpc::ServerContext* ctx, ContinuousBatcher& batcher, DecodeRequest dr,
    const std::function<bool(const std::vector<int32_t>&, const std::vector<TokenLogprobs>&)>& write) {
  struct Channel {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int32_t> tokens;
    std::vector<TokenLogprobs> logprobs;
    std::optional<FinishInfo> done;
  };
  auto ch = std::make_shared<Channel>();
  dr.on_logprobs = [ch](const TokenLogprobs& t) {
    std::lock_guard<std::mutex> lock(ch->mu);
    ch->logprobs.push_back(t);
  };
  dr.on_token = [ch](int32_t t) {
    std::lock_guard<std::mutex> lock(ch->mu);
    ch->tokens.push_back(t);
    ch->cv.notify_all();
  };
  dr.on_finish = [ch](const FinishInfo& f) {
    std::lock_guard<std::mutex> lock(ch->mu);
    ch->done = f;
    ch->cv.notify_all();
  };
  YOCO_ASSIGN_OR_RETURN(const uint64_t id, batcher.submit(std::move(dr)));
  PumpResult out;
  bool cancel_sent = false;
  auto cancel = [&] {
    if (!cancel_sent) batcher.cancel(id);
    cancel_sent = true;
  };
  while (true) {
    std::vector<int32_t> tokens;
    std::vector<TokenLogprobs> logprobs;
    std::optional<FinishInfo> done;
    {
      std::unique_lock<std::mutex> lock(ch->mu);
      ch->cv.wait_for(lock, kCancelPollInterval, [&] { return !ch->tokens.empty() || ch->done; });
      tokens.swap(ch->tokens);
      // on_logprobs runs before on_token: take only the entries of the tokens taken, so a
      // message carries one per id (a later token's entry waits for its token).
      const size_t n = std::min(tokens.size(), ch->logprobs.size());
      logprobs.assign(ch->logprobs.begin(), ch->logprobs.begin() + n);
      ch->logprobs.erase(ch->logprobs.begin(), ch->logprobs.begin() + n);
      done = ch->done;
    }
    if (ctx->IsCancelled()) {
      out.client_gone = true;
      cancel();
    }
    if (!tokens.empty()) {
      if (!out.first_token) out.first_token = Clock::now();
      if (!out.client_gone && !write(tokens, logprobs)) {
        out.client_gone = true;
        cancel();
      }
    }
    if (done && tokens.empty()) {
      out.info = *done;
      return out;
    }
  }
}

}  // namespace yoco
