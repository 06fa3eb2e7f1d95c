#include "router/openai_generate.h"

#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "router/openai_tools.h"

namespace yoco {

int respond_error(HttpExchange& ex, const ApiError& e) {
  HttpHeaders extra;
  if (e.http_status == 429) extra.emplace_back("Retry-After", "1");
  ex.respond(e.http_status, "application/json", e.body(), extra);
  return e.http_status;
}

namespace {

struct ChoiceState {
  std::string text;
  std::vector<LogprobItem> logprobs;
  int64_t offset = 0;  // streamed text_offset so far
  v1::FinishReason finish = v1::FINISH_REASON_LENGTH;
  v1::Usage usage;
  bool began = false;                   // streaming: its first chunk is out
  std::optional<ToolCallStream> tools;  // streaming chat with tools: the reply parsed as it comes
  std::vector<ToolCallOut> calls;       // streaming: the calls begun (their ids and names)
};

class Generation {
 public:
  Generation(v1::Yoco::Stub& stub, const GenerationJob& job, HttpExchange& ex)
      : stub_(stub), job_(job), ex_(ex), st_(job.choices.size()) {
    for (size_t i = 0; i < job.choices.size(); ++i) {
      ctxs_.push_back(std::make_unique<grpc::ClientContext>());
      if (!job.authorization.empty()) ctxs_.back()->AddMetadata("authorization", job.authorization);
      if (const ChoicePlan& p = job.choices[i]; p.fork_n > 1 && p.generate)
        ctxs_.back()->AddMetadata("yoco-fork-group", job.head.id + "-" + std::to_string(p.prompt_index) + "/" +
                                                         std::to_string(p.fork_index) + "/" + std::to_string(p.fork_n));
      if (job.chat && job.stream && job.tool_format != ToolCallFormat::kNone)
        st_[i].tools.emplace(job.tool_format, job.max_tool_calls, job.tool_end_text);
    }
  }

  int run() {
    {
      ClientWatch watch(ex_, [this] { client_went_away(); });
      if (job_.choices.size() == 1) {
        run_choice(0);
      } else {
        std::vector<std::thread> threads;
        for (size_t i = 0; i < job_.choices.size(); ++i) threads.emplace_back([this, i] { run_choice(i); });
        for (auto& t : threads) t.join();
      }
    }
    if (gone_ || ex_.client_gone()) return 499;
    return job_.stream ? end_stream() : answer_whole();
  }

 private:
  void client_went_away() {
    std::lock_guard<std::mutex> lk(mu_);
    gone_ = true;
    for (auto& c : ctxs_) c->TryCancel();
  }

  void run_choice(size_t i) {
    const ChoicePlan& p = job_.choices[i];
    if (job_.stream && !p.echo_text.empty()) emit_delta(i, p.echo_text, p.echo_logprobs);
    if (!p.generate) {
      std::lock_guard<std::mutex> lk(mu_);
      st_[i].usage.set_prompt_tokens(static_cast<uint32_t>(p.prompt_tokens));
      if (job_.stream) emit_finish(i);
      return;
    }
    auto reader = stub_.Generate(ctxs_[i].get(), p.req);
    v1::GenerateResponse r;
    while (reader->Read(&r)) {
      if (r.has_delta()) on_delta(i, r.delta());
      else if (r.has_final()) on_final(i, r.final());
    }
    if (grpc::Status s = reader->Finish(); !s.ok()) on_error(s);
  }

  std::vector<LogprobItem> items(const v1::Delta& d) const {
    std::vector<LogprobItem> out;
    if (job_.logprobs < 0) return out;
    for (const auto& e : d.logprobs()) out.push_back(logprob_item(e, job_.logprobs, !job_.chat));
    return out;
  }

  void on_delta(size_t i, const v1::Delta& d) {
    std::vector<LogprobItem> lps = items(d);
    if (st_[i].tools) return emit_tool_step(i, st_[i].tools->push(d.text()), lps);
    if (job_.stream) return emit_delta(i, d.text(), lps);
    std::lock_guard<std::mutex> lk(mu_);
    st_[i].text += d.text();
    st_[i].logprobs.insert(st_[i].logprobs.end(), lps.begin(), lps.end());
  }

  void on_final(size_t i, const v1::Final& f) {
    std::lock_guard<std::mutex> lk(mu_);
    st_[i].finish = f.finish_reason();
    st_[i].usage = f.usage();
    if (st_[i].tools) emit_tool_step_locked(i, st_[i].tools->finish(), {});
    if (job_.stream) emit_finish(i);
  }

  // The first failure decides the answer while nothing is sent (400, 429, ... as an HTTP status);
  // once the stream is under way it can only be an error event.
  void on_error(const grpc::Status& s) {
    std::lock_guard<std::mutex> lk(mu_);
    if (gone_) return;
    if (ex_.started()) {
      write_locked(sse_event(blame(s).json()));
      return;
    }
    if (failed_) return;
    failed_ = blame(s);
    for (auto& c : ctxs_) c->TryCancel();  // the other choices of a failed request
  }

  // A chat prompt is rendered from the messages: what the router says of "prompt" is theirs.
  ApiError blame(const grpc::Status& s) const {
    ApiError e = from_grpc(s);
    if (!job_.chat || e.param != "prompt") return e;
    e.param = "messages";
    const std::string rest = e.message.rfind("prompt: ", 0) == 0 ? e.message.substr(8) : e.message;
    e.message = "messages: the chat prompt rendered from them: " + rest;
    return e;
  }

  // ---- streaming ----

  bool write_locked(std::string_view data) {
    if (gone_ || failed_) return false;
    if (!ex_.started() && !ex_.start_stream(200, "text/event-stream", {})) gone_ = true;
    if (!gone_ && !ex_.write(data)) gone_ = true;
    if (gone_)
      for (auto& c : ctxs_) c->TryCancel();
    return !gone_;
  }

  Json chunk(Json choice) const { return response_json(job_.head, Json::Array{std::move(choice)}); }

  void emit_delta(size_t i, const std::string& text, const std::vector<LogprobItem>& lps) {
    if (text.empty() && lps.empty()) return;
    std::lock_guard<std::mutex> lk(mu_);
    ChoiceState& s = st_[i];
    const int index = static_cast<int>(i);
    if (job_.chat && !s.began)
      write_locked(sse_event(
          chunk(chat_delta_choice(index, Json::Object{{"role", "assistant"}, {"content", ""}}, Json(), Json()))));
    s.began = true;
    Json lp;
    if (!lps.empty()) lp = job_.chat ? chat_logprobs(lps) : completion_logprobs(lps, s.offset);
    s.offset += logprob_text_length(lps);
    write_locked(sse_event(chunk(job_.chat ? chat_delta_choice(index, Json::Object{{"content", text}}, lp, Json())
                                           : completion_choice(index, text, lp, Json()))));
  }

  void emit_tool_step(size_t i, const ToolCallStep& step, const std::vector<LogprobItem>& lps) {
    std::lock_guard<std::mutex> lk(mu_);
    emit_tool_step_locked(i, step, lps);
  }

  // Content first, then each call's news; the delta's log-probs ride on the first chunk (on an
  // empty content chunk while the text is held back: it may still become a call's marker).
  void emit_tool_step_locked(size_t i, const ToolCallStep& step, const std::vector<LogprobItem>& lps) {
    if (step.empty() && lps.empty()) return;
    ChoiceState& s = st_[i];
    const int index = static_cast<int>(i);
    if (!s.began)
      write_locked(sse_event(
          chunk(chat_delta_choice(index, Json::Object{{"role", "assistant"}, {"content", ""}}, Json(), Json()))));
    s.began = true;
    Json lp = lps.empty() ? Json() : chat_logprobs(lps);
    if (!step.content.empty() || step.calls.empty()) {
      write_locked(sse_event(chunk(chat_delta_choice(index, Json::Object{{"content", step.content}}, lp, Json()))));
      lp = Json();
    }
    for (const ToolCallDelta& d : step.calls) {
      std::optional<ToolCallOut> first;
      if (d.name) {
        s.calls.push_back({new_tool_call_id(job_.tool_format), *d.name, ""});
        first = s.calls.back();
      }
      write_locked(
          sse_event(chunk(chat_delta_choice(index, tool_call_delta(d.index, first, d.arguments), lp, Json()))));
      lp = Json();
    }
  }

  void emit_finish(size_t i) {  // mu_ held
    const int index = static_cast<int>(i);
    const Json reason(job_.chat ? chat_finish_reason_name(st_[i].finish, !st_[i].calls.empty())
                                : finish_reason_name(st_[i].finish));
    if (job_.chat && !st_[i].began)
      write_locked(sse_event(
          chunk(chat_delta_choice(index, Json::Object{{"role", "assistant"}, {"content", ""}}, Json(), Json()))));
    write_locked(sse_event(chunk(job_.chat ? chat_delta_choice(index, Json::Object{}, Json(), reason)
                                           : completion_choice(index, "", Json(), reason))));
  }

  int end_stream() {
    std::lock_guard<std::mutex> lk(mu_);
    if (failed_ && !ex_.started()) return respond_error(ex_, *failed_);
    if (job_.include_usage) write_locked(sse_event(response_json(job_.head, Json::Array{}, usage())));
    write_locked(kSseDone);
    return gone_ ? 499 : 200;
  }

  // ---- one answer ----

  // Prompt tokens count once per prompt (the n choices of a prompt share it), completions per choice.
  Json usage() const {
    std::map<int, const v1::Usage*> per_prompt;
    int64_t completion = 0;
    for (size_t i = 0; i < st_.size(); ++i) {
      per_prompt.emplace(job_.choices[i].prompt_index, &st_[i].usage);
      completion += st_[i].usage.completion_tokens();
    }
    int64_t prompt = 0, cached = 0;
    for (const auto& [_, u] : per_prompt) {
      prompt += u->prompt_tokens();
      cached += u->cached_tokens();
    }
    return usage_json(prompt, completion, cached);
  }

  // The whole reply parsed into content and tool calls (docs/design.md §3.2d).
  Json tool_reply(int index, const ChoiceState& s) const {
    const std::string_view text = strip_end_text(s.text, job_.tool_end_text);
    ToolCallParse p = parse_tool_calls(job_.tool_format, text, /*final=*/true);
    std::vector<ToolCallOut> calls;
    for (const ToolCallText& c : p.calls) {
      if (static_cast<int>(calls.size()) == job_.max_tool_calls) break;
      calls.push_back({new_tool_call_id(job_.tool_format), c.name, c.arguments});
    }
    const Json lp = job_.logprobs >= 0 ? chat_logprobs(s.logprobs) : Json();
    const Json reason(chat_finish_reason_name(s.finish, !calls.empty()));
    if (calls.empty()) return chat_message_choice(index, std::string(text), lp, reason);
    return chat_tool_calls_choice(index, p.content, calls, lp, reason);
  }

  int answer_whole() {
    if (failed_) return respond_error(ex_, *failed_);
    Json::Array choices;
    for (size_t i = 0; i < st_.size(); ++i) {
      const ChoicePlan& p = job_.choices[i];
      ChoiceState& s = st_[i];
      const int index = static_cast<int>(i);
      const Json reason(finish_reason_name(s.finish));
      if (job_.chat && job_.tool_format != ToolCallFormat::kNone) {
        choices.push_back(tool_reply(index, s));
        continue;
      }
      if (job_.chat) {
        choices.push_back(
            chat_message_choice(index, s.text, job_.logprobs >= 0 ? chat_logprobs(s.logprobs) : Json(), reason));
        continue;
      }
      Json lp;
      if (job_.logprobs >= 0) {
        std::vector<LogprobItem> all = p.echo_logprobs;
        all.insert(all.end(), s.logprobs.begin(), s.logprobs.end());
        lp = completion_logprobs(all, 0);
      }
      choices.push_back(completion_choice(index, p.echo_text + s.text, lp, reason));
    }
    ex_.respond(200, "application/json", response_json(job_.head, std::move(choices), usage()).dump(), {});
    return 200;
  }

  v1::Yoco::Stub& stub_;
  const GenerationJob& job_;
  HttpExchange& ex_;
  std::mutex mu_;
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs_;
  std::vector<ChoiceState> st_;
  std::optional<ApiError> failed_;
  bool gone_ = false;
};

}  // namespace

int run_generation(v1::Yoco::Stub& stub, const GenerationJob& job, HttpExchange& ex) {
  return Generation(stub, job, ex).run();
}

}  // namespace yoco
