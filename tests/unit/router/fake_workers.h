// In-memory workers behind router/worker_calls.h, scripted per test: load reports, Describe, and
// per call what a Decode stream or a Prefill call does. Calls consume the scripts in the order
// they are made, whichever worker they go to, and are recorded for the test to check. A call
// waits (for a commit, a silence, a hang) until it is cancelled or its client's call ends, as
// gRPC's cancellation propagation would end it.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "router/generate_call.h"
#include "router/worker_calls.h"

namespace yoco::test {

inline constexpr const char* kFingerprint = "00000000000000ab";

// What one Decode call does, in order: a reservation (unless `silent_from_start`), then, once a
// Prefill filled that reservation, `tokens` one event each, then the end.
struct DecodeScript {
  bool silent_from_start = false;  // no reservation: silent until cancelled
  std::vector<int32_t> tokens{};
  std::chrono::milliseconds silence_before_tokens{0};  // after the commit
  bool silent_after_tokens = false;                    // then silent until cancelled
  grpc::Status end = grpc::Status::OK;                 // OK: a `finished` event first
  std::string reason = "length";
  bool worker_hangs = false;  // the worker's load polls get no answer from the call's start on
};

// What one Prefill call does.
struct PrefillScript {
  grpc::Status status = grpc::Status::OK;
  bool hang = false;  // never answers: waits until cancelled
  std::chrono::milliseconds delay{0};
  std::function<void()> on_start{};  // runs when the call starts waiting (on the caller's thread)
};

// What a test sees of one call after the fact.
struct DecodeRecord {
  std::string address;
  internal::v1::DecodeRequest req;
  bool cancelled = false;
};
struct PrefillRecord {
  std::string address;
  internal::v1::PrefillRequest req;
  bool cancelled = false;
};

class FakeWorkers final : public WorkerCalls {
 public:
  // A decode worker's load report; `hung`: its polls get no answer.
  void set_decode(const std::string& address, bool hung = false) {
    std::lock_guard<std::mutex> lock(mu_);
    decode_hung_[address] = hung;
  }
  void script_decode(DecodeScript s) {
    std::lock_guard<std::mutex> lock(mu_);
    decode_scripts_.push_back(std::move(s));
  }
  void script_prefill(PrefillScript s) {
    std::lock_guard<std::mutex> lock(mu_);
    prefill_scripts_.push_back(std::move(s));
  }
  std::vector<DecodeRecord> decodes() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<DecodeRecord> out;
    for (const auto& d : decodes_) out.push_back({d->address, d->req, d->cancelled});
    return out;
  }
  std::vector<PrefillRecord> prefills() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<PrefillRecord> out;
    for (const auto& p : prefills_) out.push_back({p->address, p->req, p->cancelled});
    return out;
  }

  std::unique_ptr<DecodeCall> open_decode(const std::string& address, const internal::v1::DecodeRequest& req,
                                          const CallParent& parent) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto state = std::make_shared<DecodeState>();
    state->address = address;
    state->req = req;
    state->reservation = "res-" + std::to_string(decodes_.size());
    if (!decode_scripts_.empty()) {
      state->script = decode_scripts_.front();
      decode_scripts_.pop_front();
    }
    if (state->script.worker_hangs) decode_hung_[address] = true;
    decodes_.push_back(state);
    return std::make_unique<Decode>(*this, state, parent);
  }

  std::unique_ptr<PrefillCall> prefill(const std::string& address, const internal::v1::PrefillRequest& req,
                                       const CallParent& parent) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto state = std::make_shared<PrefillState>();
    state->address = address;
    state->req = req;
    if (!prefill_scripts_.empty()) {
      state->script = prefill_scripts_.front();
      prefill_scripts_.pop_front();
    }
    prefills_.push_back(state);
    return std::make_unique<Prefill>(*this, state, parent);
  }

  grpc::Status score(const std::string&, const v1::ScoreRequest&, v1::ScoreResponse*, const CallParent&) override {
    return {grpc::StatusCode::UNIMPLEMENTED, "not scripted"};
  }

  grpc::Status prefill_load(const std::string&, std::chrono::milliseconds, internal::v1::PrefillLoad* load) override {
    load->set_serving(true);
    load->set_fingerprint(kFingerprint);
    return grpc::Status::OK;
  }

  grpc::Status decode_load(const std::string& address, std::chrono::milliseconds,
                           internal::v1::DecodeLoad* load) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (decode_hung_[address]) return {grpc::StatusCode::DEADLINE_EXCEEDED, "hung"};
    load->set_serving(true);
    load->set_fingerprint(kFingerprint);
    load->set_block_size(16);
    load->set_free_kv_blocks(1000);
    load->set_total_kv_blocks(1000);
    return grpc::Status::OK;
  }

  grpc::Status describe(const std::string&, std::chrono::milliseconds, v1::ModelInfo* info) override {
    info->set_fingerprint(kFingerprint);
    info->set_vocab_size(1000);
    info->set_max_seq_len(4096);
    return grpc::Status::OK;
  }

 private:
  struct DecodeState {
    std::string address, reservation;
    internal::v1::DecodeRequest req;
    DecodeScript script;
    bool committed = false, cancelled = false;
  };
  struct PrefillState {
    std::string address;
    internal::v1::PrefillRequest req;
    PrefillScript script;
    bool cancelled = false;
  };

  // Waits until `done` holds, the call is cancelled or its client's call ends (checked every
  // millisecond: the parent has no way to wake us), or `until`; false when cancelled or ended. A
  // hang lasts at most kMaxHang, so a case whose cancellation is broken fails instead of hanging.
  static constexpr std::chrono::seconds kMaxHang{2};
  template <class Done>
  bool wait(std::unique_lock<std::mutex>& lock, const bool& cancelled, const CallParent& parent, Done done,
            std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max()) {
    until = std::min(until, std::chrono::steady_clock::now() + kMaxHang);
    while (!done()) {
      if (cancelled || parent.end()) return false;
      if (std::chrono::steady_clock::now() >= until) return true;
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
    return !(cancelled || parent.end());
  }

  class Decode final : public DecodeCall {
   public:
    Decode(FakeWorkers& w, std::shared_ptr<DecodeState> s, const CallParent& parent)
        : w_(w), s_(std::move(s)), parent_(parent) {}
    bool read(internal::v1::DecodeEvent* ev) override {
      ev->Clear();  // as a gRPC read replaces the message
      std::unique_lock<std::mutex> lock(w_.mu_);
      const DecodeScript& sc = s_->script;
      const auto never = [] { return false; };
      if (step_ == 0) {
        ++step_;
        if (sc.silent_from_start || !w_.wait(lock, s_->cancelled, parent_, [] { return true; }))
          return fail(lock, never);
        ev->mutable_reservation()->set_transfer_descriptor(s_->reservation);
        return true;
      }
      if (step_ == 1) {
        ++step_;
        if (!w_.wait(lock, s_->cancelled, parent_, [this] { return s_->committed; }) || !s_->committed)
          return fail(lock, never);
        if (!w_.wait(lock, s_->cancelled, parent_, never, std::chrono::steady_clock::now() + sc.silence_before_tokens))
          return fail(lock, never);
      }
      if (s_->cancelled || parent_.end()) return fail(lock, never);
      if (next_token_ < sc.tokens.size()) {
        ev->mutable_tokens()->add_ids(sc.tokens[next_token_++]);
        return true;
      }
      if (sc.silent_after_tokens) return fail(lock, never);
      if (sc.end.ok() && !finished_sent_) {
        finished_sent_ = true;
        ev->mutable_finished()->set_reason(sc.reason);
        return true;
      }
      end_ = sc.end;
      return false;
    }
    grpc::Status finish() override { return end_; }
    void cancel() override {
      std::lock_guard<std::mutex> lock(w_.mu_);
      s_->cancelled = true;
      w_.cv_.notify_all();
    }

   private:
    // Silent until cancelled (or the client's end); the stream then ends CANCELLED.
    template <class Done>
    bool fail(std::unique_lock<std::mutex>& lock, Done never) {
      end_ = w_.wait(lock, s_->cancelled, parent_, never)
                 ? grpc::Status(grpc::StatusCode::INTERNAL, "the fake's hang ran out: never cancelled")
                 : grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      return false;
    }
    FakeWorkers& w_;
    std::shared_ptr<DecodeState> s_;
    const CallParent& parent_;
    int step_ = 0;
    size_t next_token_ = 0;
    bool finished_sent_ = false;
    grpc::Status end_{grpc::StatusCode::INTERNAL, "finish before the end"};
  };

  class Prefill final : public PrefillCall {
   public:
    Prefill(FakeWorkers& w, std::shared_ptr<PrefillState> s, const CallParent& parent)
        : w_(w), s_(std::move(s)), parent_(parent) {}
    grpc::Status wait(internal::v1::PrefillResponse*) override {
      if (s_->script.on_start) s_->script.on_start();
      std::unique_lock<std::mutex> lock(w_.mu_);
      const PrefillScript& sc = s_->script;
      const auto never = [] { return false; };
      const auto until =
          sc.hang ? std::chrono::steady_clock::time_point::max() : std::chrono::steady_clock::now() + sc.delay;
      if (!w_.wait(lock, s_->cancelled, parent_, never, until)) return {grpc::StatusCode::CANCELLED, "cancelled"};
      if (sc.hang) return {grpc::StatusCode::INTERNAL, "the fake's hang ran out: never cancelled"};
      if (!sc.status.ok()) return sc.status;
      for (auto& d : w_.decodes_)  // the decode worker acknowledged the commit
        if (d->reservation == s_->req.reservation()) d->committed = true;
      w_.cv_.notify_all();
      return grpc::Status::OK;
    }
    void cancel() override {
      std::lock_guard<std::mutex> lock(w_.mu_);
      s_->cancelled = true;
      w_.cv_.notify_all();
    }

   private:
    FakeWorkers& w_;
    std::shared_ptr<PrefillState> s_;
    const CallParent& parent_;
  };

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, bool> decode_hung_;
  std::deque<DecodeScript> decode_scripts_;
  std::deque<PrefillScript> prefill_scripts_;
  std::vector<std::shared_ptr<DecodeState>> decodes_;
  std::vector<std::shared_ptr<PrefillState>> prefills_;
};

// The client of one Generate: its responses, and a cancel() of its own.
class FakeClient final : public GenerateSink {
 public:
  bool write(const v1::GenerateResponse& resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return false;
    responses_.push_back(resp);
    return true;
  }
  std::optional<grpc::Status> end() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
    return std::nullopt;
  }
  std::unique_ptr<grpc::ClientContext> child() const override { return std::make_unique<grpc::ClientContext>(); }
  void cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
  }
  // Every token id streamed, in order.
  std::vector<int32_t> tokens() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int32_t> out;
    for (const auto& r : responses_)
      if (r.has_delta()) out.insert(out.end(), r.delta().token_ids().begin(), r.delta().token_ids().end());
    return out;
  }
  bool has_final() const {
    std::lock_guard<std::mutex> lock(mu_);
    return std::any_of(responses_.begin(), responses_.end(), [](const auto& r) { return r.has_final(); });
  }

 private:
  mutable std::mutex mu_;
  bool cancelled_ = false;
  std::vector<v1::GenerateResponse> responses_;
};

}  // namespace yoco::test
