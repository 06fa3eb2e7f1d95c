// The router's OpenAI-compatible HTTP API on a real cluster (docs/design.md, OpenAI HTTP API), as
// plain HTTP on loopback: a greedy completion equals the gRPC Generate, the SSE framing (events,
// usage chunk, [DONE]), echo scoring equals the gRPC Score, 400 naming the field, 401/403 with API
// keys, 404 for an unknown document, 429 with Retry-After when admission refuses, and a client
// that drops its stream cancels the request and gets the decode worker's blocks back; n choices
// share one prefill and equal n separate requests.
#include <arpa/inet.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "router/api_keys.h"
#include "tests/support/cluster_harness.h"

namespace yoco {
namespace {

using std::chrono::milliseconds;
using test::LocalCluster;

const std::string kModel = std::string(YOCO_SOURCE_DIR) + "/models/kjv-yoco";
constexpr int kBlocks = 256;

std::string bearer(const std::string& key) { return key.empty() ? "" : "Authorization: Bearer " + key + "\r\n"; }

Json json_body(const std::string& response) {
  auto j = Json::parse(test::http_body(response));
  EXPECT_TRUE(j.ok()) << response;
  return j.ok() ? *j : Json();
}

std::string error_param(const std::string& response) {
  const Json j = json_body(response);
  const Json* e = j.find("error");
  if (!e || !e->find("param") || e->find("param")->is_null()) return "";
  return e->find("param")->as_string();
}

// The "data: ..." payloads of an SSE body, checking the framing: every event "data: X\n\n".
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    EXPECT_EQ(body.compare(pos, 6, "data: "), 0) << body.substr(pos, 40);
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "an event without its blank line: " << body.substr(pos);
      break;
    }
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

// A connection kept open by the test: sends one request, reads what arrives.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    timeval tv{30, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawClient() { close_now(); }
  bool send(const std::string& s) { return connected_ && write(fd_, s.data(), s.size()) == ssize_t(s.size()); }
  // Reads until `what` has arrived (true) or the connection ends.
  bool read_until(const std::string& what) {
    char buf[4096];
    while (got_.find(what) == std::string::npos) {
      const ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) return false;
      got_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  void close_now() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  const std::string& got() const { return got_; }

 private:
  int fd_;
  bool connected_ = false;
  std::string got_;
};

std::string post_request(const std::string& path, const std::string& body, const std::string& headers) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n" + headers + "\r\n" + body;
}

class OpenAiHttpCluster : public ::testing::Test {
 protected:
  test::TempDir tmp;
  const std::string full = new_api_key(), gen_only = new_api_key();

  std::string keys_file() {
    ApiKeyEntry all, gen;
    all.name = "all";
    gen.name = "gen-only";
    gen.scopes = {"generate"};
    const std::string path = tmp.path() + "/keys.json";
    std::ofstream(path) << "{\"keys\":[" << api_key_entry_json(all, full) << "," << api_key_entry_json(gen, gen_only)
                        << "]}";
    return path;
  }
};

double metric(int port, const std::string& name) {
  return test::metric_value(test::http_get_body(port, "/metrics"), name);
}

TEST_F(OpenAiHttpCluster, CompletionsStreamingErrorsAndDisconnect) {
  LocalCluster c({.model = kModel,
                  .prefill = 1,
                  .decode = 1,
                  .kv_blocks = kBlocks,
                  .prefill_args = {"--kv-store=memory:64MiB"},
                  .router_args = {"--api-keys=" + keys_file(), "--max-in-flight=4"},
                  .secure = false});
  ASSERT_TRUE(c.ready()) << c.logs();
  ASSERT_FALSE(c.router().http.empty()) << c.logs();
  const int port = test::port_of(c.router().http);
  const std::string auth = bearer(full);

  // Greedy over HTTP = greedy over gRPC, token for token (the same Generate underneath).
  const std::string prompt = "In the beginning God created";
  v1::GenerateRequest greq;
  greq.set_text(prompt);
  greq.set_max_tokens(24);
  greq.mutable_sampling()->set_temperature(0);
  greq.set_ignore_eos(true);
  grpc::ClientContext gctx;
  gctx.AddMetadata("authorization", "Bearer " + full);
  auto stub = c.stub();
  const test::Generated g = test::run_generate(*stub, greq, milliseconds(60000), {}, &gctx);
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  const std::string req =
      R"({"model":"kjv-yoco","prompt":")" + prompt + R"(","max_tokens":24,"temperature":0,"ignore_eos":true})";
  const std::string r = test::http_post(port, "/v1/completions", req, auth);
  ASSERT_EQ(test::http_status(r), 200) << r;
  const Json j = json_body(r);
  EXPECT_EQ(j.find("object")->as_string(), "text_completion");
  const Json& choice = j.find("choices")->as_array().at(0);
  EXPECT_EQ(choice.find("text")->as_string(), g.text);
  EXPECT_EQ(choice.find("finish_reason")->as_string(), "length");
  EXPECT_EQ(j.find("usage")->find("completion_tokens")->as_int(), 24);
  EXPECT_EQ(j.find("usage")->find("prompt_tokens")->as_int(), g.final.usage().prompt_tokens());
  EXPECT_TRUE(j.find("usage")->find("prompt_tokens_details")->find("cached_tokens")->is_integer());

  // Streaming: "data: {...}\n\n" events whose texts add up to the same completion, a usage chunk
  // with no choices, then [DONE].
  const std::string sreq = R"({"prompt":")" + prompt +
                           R"(","max_tokens":24,"temperature":0,"ignore_eos":true,"stream":true,)"
                           R"("stream_options":{"include_usage":true}})";
  const std::string sr = test::http_post(port, "/v1/completions", sreq, auth);
  ASSERT_EQ(test::http_status(sr), 200) << sr;
  EXPECT_NE(sr.find("Content-Type: text/event-stream"), std::string::npos) << sr;
  const std::vector<std::string> events = sse_payloads(test::http_body(sr));
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string streamed;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    auto e = Json::parse(events[i]);
    ASSERT_TRUE(e.ok()) << events[i];
    streamed += e->find("choices")->as_array().at(0).find("text")->as_string();
  }
  EXPECT_EQ(streamed, g.text);
  auto usage = Json::parse(events[events.size() - 2]);
  ASSERT_TRUE(usage.ok());
  EXPECT_TRUE(usage->find("choices")->as_array().empty());
  EXPECT_EQ(usage->find("usage")->find("completion_tokens")->as_int(), 24);

  // A stop string: the text ends before it, finish_reason "stop".
  const std::string stop_word = g.text.substr(g.text.size() / 2, 4);
  const std::string stopped =
      test::http_post(port, "/v1/completions",
                      R"({"prompt":")" + prompt + R"(","max_tokens":24,"temperature":0,"ignore_eos":true,"stop":[)" +
                          Json(stop_word).dump() + "]}",
                      auth);
  ASSERT_EQ(test::http_status(stopped), 200) << stopped;
  const Json sj = json_body(stopped);
  const Json& stop_choice = sj.find("choices")->as_array().at(0);
  EXPECT_EQ(stop_choice.find("text")->as_string(), g.text.substr(0, g.text.find(stop_word)));
  EXPECT_EQ(stop_choice.find("finish_reason")->as_string(), "stop");

  // A batch of two prompts, n = 2 each: four choices indexed prompt-major; prompt tokens counted
  // once per prompt.
  const std::string batch = test::http_post(
      port, "/v1/completions",
      R"({"prompt":["And God said","Let there be"],"n":2,"max_tokens":3,"seed":7,"ignore_eos":true})", auth);
  ASSERT_EQ(test::http_status(batch), 200) << batch;
  const Json bj = json_body(batch);
  const Json::Array& bc = bj.find("choices")->as_array();
  ASSERT_EQ(bc.size(), 4u);
  for (size_t i = 0; i < bc.size(); ++i) EXPECT_EQ(bc[i].find("index")->as_int(), static_cast<int64_t>(i));
  EXPECT_EQ(bj.find("usage")->find("completion_tokens")->as_int(), 12);
  int64_t batch_prompt_tokens = 0;
  for (const char* t : {"And God said", "Let there be"})
    batch_prompt_tokens +=
        json_body(test::http_post(port, "/tokenize", R"({"prompt":")" + std::string(t) + R"("})", auth))
            .find("count")
            ->as_int();
  EXPECT_EQ(bj.find("usage")->find("prompt_tokens")->as_int(), batch_prompt_tokens);

  // Echo scoring (max_tokens 0, logprobs): the prompt's own log-probs = the gRPC Score's.
  const std::string er = test::http_post(
      port, "/v1/completions", R"({"prompt":")" + prompt + R"(","max_tokens":0,"echo":true,"logprobs":1})", auth);
  ASSERT_EQ(test::http_status(er), 200) << er;
  v1::ScoreRequest sq;
  sq.set_text(prompt);
  v1::ScoreResponse score;
  grpc::ClientContext sctx;
  sctx.AddMetadata("authorization", "Bearer " + full);
  ASSERT_TRUE(stub->Score(&sctx, sq, &score).ok());
  const Json ej = json_body(er);
  const Json echo = ej.find("choices")->as_array().at(0);
  EXPECT_EQ(echo.find("text")->as_string(), prompt);
  const Json::Array& lps = echo.find("logprobs")->find("token_logprobs")->as_array();
  ASSERT_EQ(lps.size(), static_cast<size_t>(score.token_ids_size()));
  EXPECT_TRUE(lps[0].is_null());
  for (size_t i = 1; i < lps.size(); ++i) EXPECT_NEAR(lps[i].as_double(), score.token_logprobs(int(i) - 1), 1e-6);

  // Errors, as OpenAI shapes them.
  EXPECT_EQ(test::http_status(test::http_post(port, "/v1/completions", req, "")), 401);
  EXPECT_EQ(test::http_status(test::http_post(port, "/v1/completions", req, bearer(full + "0"))), 401);
  const std::string denied = test::http_post(
      port, "/v1/completions", R"({"prompt":"a b c","max_tokens":0,"echo":true,"logprobs":0})", bearer(gen_only));
  EXPECT_EQ(test::http_status(denied), 403) << denied;  // echo scoring needs the "score" scope
  EXPECT_EQ(test::http_status(test::http_post(port, "/v1/completions", req, bearer(gen_only))), 200);
  const std::string bad = test::http_post(port, "/v1/completions", R"({"prompt":"x","top_p":0})", auth);
  EXPECT_EQ(test::http_status(bad), 400) << bad;
  EXPECT_EQ(error_param(bad), "top_p");
  EXPECT_EQ(test::http_status(test::http_post(port, "/v1/completions", "{\"prompt\":", auth)), 400);
  const std::string nodoc = test::http_post(
      port, "/v1/completions", R"({"prompt":"x","document_ids":["doc-0123456789abcdef0123456789abcdef"]})", auth);
  EXPECT_EQ(test::http_status(nodoc), 404) << nodoc;
  EXPECT_EQ(error_param(nodoc), "document_ids");
  EXPECT_EQ(test::http_status(test::http_post(port, "/v1/completions", R"({"prompt":"x","model":"gpt-4"})", auth)),
            404);

  // A long stream of n = 4 choices holds every admission slot (--max-in-flight=4): another
  // request gets 429 with Retry-After. Then the stream's client hangs up: its four calls are
  // cancelled and the decode worker's blocks come back.
  const std::string long_req =
      R"({"prompt":"And God said","n":4,"max_tokens":1500,"temperature":0,"ignore_eos":true,"stream":true})";
  {
    RawClient client(port);
    ASSERT_TRUE(client.send(post_request("/v1/completions", long_req, auth)));
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(client.read_until("\"index\":" + std::to_string(i))) << client.got();
    const std::string refused = test::http_post(port, "/v1/completions", req, auth);
    EXPECT_EQ(test::http_status(refused), 429) << refused;
    EXPECT_NE(refused.find("Retry-After: "), std::string::npos) << refused;
    client.close_now();
  }
  const int router_metrics = test::port_of(c.router().metrics);
  const int decode_metrics = test::port_of(c.decode()[0].metrics);
  bool freed = false;
  for (int i = 0; i < 300 && !freed; ++i) {
    freed = metric(decode_metrics, "yoco_kv_cache_blocks_free") == kBlocks &&
            metric(router_metrics, "yoco_requests_running") == 0;
    if (!freed) std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_TRUE(freed) << test::http_get_body(decode_metrics, "/metrics");
  const std::string rm = test::http_get_body(router_metrics, "/metrics");
  EXPECT_NE(rm.find("yoco_requests_total{status=\"cancelled\"} 4"), std::string::npos) << rm;
  EXPECT_NE(rm.find("yoco_http_requests_total{endpoint=\"/v1/completions\",code=\"429\"} 1"), std::string::npos) << rm;

  // The other endpoints.
  const std::string models =
      test::http_raw(port, "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + auth + "\r\n");
  ASSERT_EQ(test::http_status(models), 200) << models;
  EXPECT_EQ(json_body(models).find("data")->as_array().at(0).find("id")->as_string(), "kjv-yoco");
  const std::string tk = test::http_post(port, "/tokenize", R"({"prompt":")" + prompt + R"("})", auth);
  ASSERT_EQ(test::http_status(tk), 200) << tk;
  EXPECT_EQ(json_body(tk).find("count")->as_int(), score.token_ids_size());
  const std::string health = test::http_raw(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(test::http_status(health), 200) << health;
  const std::string chat =
      test::http_post(port, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hello"}]})", auth);
  EXPECT_EQ(test::http_status(chat), 400) << chat;  // kjv-yoco has no chat template
  EXPECT_NE(chat.find("--chat-template"), std::string::npos) << chat;

  // SIGTERM with a stream in flight: the router drains, /health answers 503 and new requests 503
  // while the stream goes on.
  RawClient held(port);
  ASSERT_TRUE(held.send(post_request("/v1/completions", long_req, auth)));
  ASSERT_TRUE(held.read_until("\"index\":3")) << held.got();
  ASSERT_EQ(kill(c.router().pid, SIGTERM), 0);
  int health_status = 0;
  for (int i = 0; i < 100 && health_status != 503; ++i) {
    health_status =
        test::http_status(test::http_raw(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    if (health_status != 503) std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(health_status, 503);
  const std::string draining = test::http_post(port, "/v1/completions", req, auth);
  EXPECT_EQ(test::http_status(draining), 503) << draining;
  EXPECT_NE(draining.find("draining"), std::string::npos) << draining;
  held.close_now();
}

// Chat through a real template (--chat-template, Llama 3's): the template writes the BOS and the
// router adds none; a greedy chat completion is the completion of the rendered prompt's tokens;
// the stream starts with the assistant role and ends with finish_reason.
TEST(OpenAiHttpChat, TemplateTokensAndStream) {
  LocalCluster c(
      {.model = kModel,
       .prefill = 0,
       .decode = 1,
       .kv_blocks = kBlocks,
       .router_args = {"--chat-template=" + std::string(YOCO_SOURCE_DIR) + "/tests/data/chat_templates/llama3.jinja"},
       .secure = false});
  ASSERT_TRUE(c.ready()) << c.logs();
  const int port = test::port_of(c.router().http);
  const std::string messages = R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Who?"}])";

  const std::string tk = test::http_post(port, "/tokenize", R"({"messages":)" + messages + "}");
  ASSERT_EQ(test::http_status(tk), 200) << tk;
  const Json tkj = json_body(tk);
  const Json::Array& ids = tkj.find("tokens")->as_array();
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0].as_int(), 0);  // kjv-yoco's BOS (<|endoftext|>), written by the template once
  EXPECT_NE(ids[1].as_int(), 0);
  std::string id_list;
  for (const Json& t : ids) id_list += (id_list.empty() ? "" : ",") + std::to_string(t.as_int());

  const std::string chat = test::http_post(
      port, "/v1/chat/completions",
      R"({"messages":)" + messages + R"(,"max_tokens":10,"temperature":0,"ignore_eos":true,"logprobs":true})");
  ASSERT_EQ(test::http_status(chat), 200) << chat;
  const Json cj = json_body(chat);
  EXPECT_EQ(cj.find("object")->as_string(), "chat.completion");
  const Json& choice = cj.find("choices")->as_array().at(0);
  EXPECT_EQ(choice.find("message")->find("role")->as_string(), "assistant");
  EXPECT_EQ(choice.find("finish_reason")->as_string(), "length");
  EXPECT_EQ(choice.find("logprobs")->find("content")->as_array().size(), 10u);
  EXPECT_EQ(cj.find("usage")->find("prompt_tokens")->as_int(), static_cast<int64_t>(ids.size()));
  const std::string completion = test::http_post(
      port, "/v1/completions", R"({"prompt":[)" + id_list + R"(],"max_tokens":10,"temperature":0,"ignore_eos":true})");
  ASSERT_EQ(test::http_status(completion), 200) << completion;
  EXPECT_EQ(choice.find("message")->find("content")->as_string(),
            json_body(completion).find("choices")->as_array().at(0).find("text")->as_string());

  const std::string stream = test::http_post(
      port, "/v1/chat/completions",
      R"({"messages":)" + messages + R"(,"max_tokens":5,"temperature":0,"ignore_eos":true,"stream":true})");
  ASSERT_EQ(test::http_status(stream), 200) << stream;
  const std::vector<std::string> events = sse_payloads(test::http_body(stream));
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  auto first = Json::parse(events.front());
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->find("object")->as_string(), "chat.completion.chunk");
  EXPECT_EQ(first->find("choices")->as_array().at(0).find("delta")->find("role")->as_string(), "assistant");
  auto last = Json::parse(events[events.size() - 2]);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->find("choices")->as_array().at(0).find("finish_reason")->as_string(), "length");
}

// n choices share one prefill (docs/design.md §3.3, n choices): on a router + prefill + decode
// cluster, the n choices of one prompt equal n separate requests with seeds seed + j (whole and
// streamed), the prefill worker computes the prompt once, and the decode worker forks it n − 1 times.
TEST(OpenAiHttpChoices, NChoicesShareOnePrefillAndEqualSeparateRequests) {
  LocalCluster c({.model = kModel, .prefill = 1, .decode = 1, .kv_blocks = kBlocks, .secure = false});
  ASSERT_TRUE(c.ready()) << c.logs();
  const int port = test::port_of(c.router().http);
  const int prefill_metrics = test::port_of(c.prefill()[0].metrics);
  const int decode_metrics = test::port_of(c.decode()[0].metrics);
  auto wait_metric = [&](int mport, const std::string& name, double want) {
    double v = metric(mport, name);
    for (int i = 0; i < 100 && v != want; ++i) {
      std::this_thread::sleep_for(milliseconds(50));
      v = metric(mport, name);
    }
    return v;
  };
  const std::string prompt =
      "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
      "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.";
  auto body = [&](int n, int seed, bool stream, int max_tokens) {
    return R"({"prompt":")" + prompt + R"(","n":)" + std::to_string(n) + R"(,"seed":)" + std::to_string(seed) +
           R"(,"temperature":1.0,"max_tokens":)" + std::to_string(max_tokens) + R"(,"ignore_eos":true,"stream":)" +
           (stream ? "true" : "false") + "}";
  };
  auto texts = [&](const std::string& response, bool stream, size_t n) {
    std::vector<std::string> out(n);
    std::vector<Json> objects;
    if (!stream) {
      objects.push_back(json_body(response));
    } else {
      for (const std::string& e : sse_payloads(test::http_body(response)))
        if (e != "[DONE]") {
          auto parsed = Json::parse(e);
          EXPECT_TRUE(parsed.ok()) << e;
          if (parsed.ok()) objects.push_back(*parsed);
        }
    }
    for (const Json& o : objects)
      for (const Json& ch : o.find("choices")->as_array()) {
        const size_t i = static_cast<size_t>(ch.find("index")->as_int());
        EXPECT_LT(i, n);
        if (i < n) out[i] += ch.find("text")->as_string();
      }
    return out;
  };
  std::vector<std::string> separate;
  for (int j = 0; j < 4; ++j) {
    const std::string r = test::http_post(port, "/v1/completions", body(1, 7 + j, false, 8));
    ASSERT_EQ(test::http_status(r), 200) << r;
    separate.push_back(texts(r, false, 1)[0]);
  }
  EXPECT_NE(separate[0], separate[1]);  // the seeds differ
  const double forks0 = wait_metric(decode_metrics, "yoco_decode_forks_total", 0);
  EXPECT_EQ(forks0, 0);
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "stream" : "whole");
    const std::string r = test::http_post(port, "/v1/completions", body(4, 7, stream, 8));
    ASSERT_EQ(test::http_status(r), 200) << r;
    EXPECT_EQ(texts(r, stream, 4), separate);
  }
  EXPECT_EQ(wait_metric(decode_metrics, "yoco_decode_forks_total", 6), 6);

  // n = 8 on a fresh prompt: the prefill worker takes its tokens once.
  const double tokens0 = metric(prefill_metrics, "yoco_prompt_tokens_total");
  const std::string r = test::http_post(port, "/v1/completions", body(8, 99, false, 1));
  ASSERT_EQ(test::http_status(r), 200) << r;
  const Json j = json_body(r);
  EXPECT_EQ(j.find("choices")->as_array().size(), 8u);
  const double prompt_tokens = static_cast<double>(j.find("usage")->find("prompt_tokens")->as_int());
  EXPECT_EQ(metric(prefill_metrics, "yoco_prompt_tokens_total") - tokens0, prompt_tokens);
  EXPECT_EQ(wait_metric(decode_metrics, "yoco_decode_forks_total", 13), 13);
}

}  // namespace
}  // namespace yoco
