// yoco-cli: model tools and in-process generation/scoring; with --router the same commands
// (and bench) talk to a running cluster instead (tools/cluster_client.h).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "common/checksum.h"
#include "common/flags.h"
#include "common/json.h"
#include "kernels/cpu/ops.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/random_model.h"
#if defined(YOCO_HAVE_TOKENIZER)
#include "tokenizer/tokenizer.h"
#endif
#include "router/api_keys.h"
#if defined(YOCO_HAVE_GRPC)
#include "tools/cluster_client.h"
#endif

namespace {

using namespace yoco;

int fail(const Status& st) {
  std::fprintf(stderr, "yoco-cli: %s\n", st.message().c_str());
  return st.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

void usage() {
  std::fprintf(stderr,
               "usage: yoco-cli COMMAND [flags]\n"
               "  make-random-model --preset NAME --out DIR [--seed S] [--dtype f32|bf16] [--tied]\n"
               "  presets                               list the model presets\n"
               "  info --model DIR [--json]             config, sizes and fingerprint\n"
               "  score --model DIR (--tokens 1,2,3 | --text TEXT) [--json] [--threads N] [--dtype fp32|bf16]\n"
               "  generate --model DIR (--tokens 1,2,3 | --prompt TEXT) --max-tokens N [--temperature T]\n"
               "           [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R] [--presence-penalty P]\n"
               "           [--frequency-penalty F] [--seed S] [--stop-token-ids 1,2] [--ignore-eos] [--json]\n"
               "           [--threads N] [--chunk-tokens N] [--dtype fp32|bf16]\n"
               "  tokenize --model DIR --text TEXT [--allow-special] [--json]\n"
               "  detokenize --model DIR --tokens 1,2,3\n"
               "  make-key --name NAME [--admin] [--max-concurrent N] [--tokens-per-minute N] [--max-context N]\n"
               "           [--scopes generate,score,documents]\n"
               "                                        a new API key (line 1) and its key-file entry (line 2, JSON)\n"
               "Text needs the model directory's tokenizer (tokenizer.json or *.tiktoken).\n");
#if defined(YOCO_HAVE_GRPC)
  cli::cluster_usage();
#else
  std::fprintf(stderr, "(built without gRPC: no --router cluster mode)\n");
#endif
}

Result<std::vector<int32_t>> token_list(const Flags& f) {
  if (!f.has("tokens")) return invalid_argument("--tokens: required (comma-separated token ids)");
  auto list = f.get_int_list("tokens");
  if (!list.ok()) return list.status();
  std::vector<int32_t> out;
  for (size_t i = 0; i < list.value().size(); ++i) {
    const int64_t v = list.value()[i];
    if (v < 0 || v > INT32_MAX) return invalid_argument("--tokens[" + std::to_string(i) + "]: negative or too large");
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

#if defined(YOCO_HAVE_TOKENIZER)
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& dir) {
  auto t = Tokenizer::load(dir);
  if (!t.ok()) return Status(t.status().code(), "tokenizer: " + t.status().message());
  return t;
}
#endif

// The ids to run: --tokens, or the text flag encoded with the model's tokenizer.
Result<std::vector<int32_t>> input_ids(const Flags& f, const char* text_flag, bool add_bos) {
  if (f.has("tokens") && f.has(text_flag))
    return invalid_argument(std::string("--tokens and --") + text_flag + " are alternatives; give one");
  if (!f.has(text_flag)) return token_list(f);
#if defined(YOCO_HAVE_TOKENIZER)
  YOCO_ASSIGN_OR_RETURN(auto tok, load_tokenizer(f.get("model")));
  const bool bos = add_bos && tok->add_bos_token();
  return tok->encode(f.get(text_flag), /*allow_special=*/false, bos);
#else
  return Status(StatusCode::kUnimplemented, std::string("--") + text_flag + ": built without the tokenizer");
#endif
}

Status set_threads(const Flags& f) {
  auto t = f.get_int("threads", 0);
  if (!t.ok()) return t.status();
  if (t.value() < 0) return invalid_argument("--threads: must be >= 0");
  cpu::set_num_threads(static_cast<int>(t.value()));
  return Status::Ok();
}

int cmd_make_random_model(int argc, char** argv) {
  auto f = Flags::parse(argc, argv, 2, {"preset", "out", "seed", "dtype", "tied"}, {"tied"});
  if (!f.ok()) return fail(f.status());
  if (!f->has("preset")) return fail(invalid_argument("--preset: required"));
  if (!f->has("out")) return fail(invalid_argument("--out: required"));
  auto cfg = find_preset(f->get("preset"));
  if (!cfg.ok()) return fail(cfg.status());
  if (f->get_bool("tied")) cfg->tie_embeddings = true;
  auto seed = f->get_int("seed", 0);
  if (!seed.ok()) return fail(seed.status());
  const std::string dt = f->get("dtype", "f32");
  if (dt != "f32" && dt != "bf16") return fail(invalid_argument("--dtype: must be f32 or bf16, got " + dt));
  Status st = write_random_model(f->get("out"), cfg.value(), static_cast<uint64_t>(seed.value()),
                                 dt == "f32" ? DType::kF32 : DType::kBF16);
  if (!st.ok()) return fail(st);
  std::printf("wrote %s (preset %s, seed %lld, %s)\n", f->get("out").c_str(), f->get("preset").c_str(),
              static_cast<long long>(seed.value()), dt.c_str());
  return 0;
}

int cmd_presets() {
  for (const auto& p : model_presets()) std::printf("%-12s %s\n", p.name.c_str(), p.summary.c_str());
  return 0;
}

int cmd_info(int argc, char** argv) {
  auto f = Flags::parse(argc, argv, 2, {"model", "json"}, {"json"});
  if (!f.ok()) return fail(f.status());
  if (!f->has("model")) return fail(invalid_argument("--model: required"));
  auto m = Model::load(f->get("model"));
  if (!m.ok()) return fail(m.status());
  const auto& c = (*m)->config();
  Json::Object o;
  o["config"] = c.to_json();
  o["fingerprint"] = Json(hex64((*m)->fingerprint()));
  o["weight_bytes_f32"] = Json((*m)->weights().bytes());
  o["kv_bytes_per_token_f32"] = Json(static_cast<int64_t>(2) * c.kv_dim() * 4);
  std::cout << Json(std::move(o)).dump() << "\n";
  return 0;
}

int cmd_score(int argc, char** argv) {
  auto f =
      Flags::parse(argc, argv, 2, {"model", "tokens", "text", "json", "threads", "chunk-tokens", "dtype"}, {"json"});
  if (!f.ok()) return fail(f.status());
  if (!f->has("model")) return fail(invalid_argument("--model: required"));
  if (Status st = set_threads(f.value()); !st.ok()) return fail(st);
  auto toks = input_ids(f.value(), "text", /*add_bos=*/true);
  if (!toks.ok()) return fail(toks.status());
  auto m = Model::load(f->get("model"));
  if (!m.ok()) return fail(m.status());
  if (Status st = apply_dtype_flag(**m, f->get("dtype", "fp32"), -1); !st.ok()) return fail(st);
  PrefillOptions opt;
  auto chunk = f->get_int("chunk-tokens", opt.chunk_tokens);
  if (!chunk.ok()) return fail(chunk.status());
  opt.chunk_tokens = static_cast<int>(chunk.value());
  auto lp = (*m)->score(toks.value(), opt);
  if (!lp.ok()) return fail(lp.status());
  double sum = 0;
  for (float x : lp.value()) sum += x;
  const double ppl = std::exp(-sum / static_cast<double>(lp->size()));
  if (f->get_bool("json")) {
    Json::Array arr;
    for (float x : lp.value()) arr.push_back(Json(static_cast<double>(x)));
    Json::Object o;
    o["token_logprobs"] = Json(std::move(arr));
    o["tokens"] = Json(static_cast<int64_t>(toks->size()));
    o["sum_logprob"] = Json(sum);
    o["perplexity"] = Json(ppl);
    std::cout << Json(std::move(o)).dump() << "\n";
  } else {
    for (size_t i = 0; i < lp->size(); ++i) std::printf("%zu\t%d\t%.6f\n", i + 1, toks.value()[i + 1], lp.value()[i]);
    std::printf("sum_logprob %.6f perplexity %.4f\n", sum, ppl);
  }
  return 0;
}

int cmd_generate(int argc, char** argv) {
  auto f = Flags::parse(argc, argv, 2,
                        {"model", "tokens", "prompt", "max-tokens", "temperature", "top-k", "top-p", "min-p",
                         "repetition-penalty", "presence-penalty", "frequency-penalty", "seed", "stop-token-ids",
                         "json", "threads", "chunk-tokens", "ignore-eos", "dtype"},
                        {"json", "ignore-eos"});
  if (!f.ok()) return fail(f.status());
  if (!f->has("model")) return fail(invalid_argument("--model: required"));
  if (Status st = set_threads(f.value()); !st.ok()) return fail(st);
  auto toks = input_ids(f.value(), "prompt", /*add_bos=*/true);
  if (!toks.ok()) return fail(toks.status());
  GenerateOptions opt;
  auto max_tokens = f->get_int("max-tokens", 16);
  auto temperature = f->get_double("temperature", 0.0);
  auto top_k = f->get_int("top-k", 0);
  auto top_p = f->get_double("top-p", 1.0);
  auto min_p = f->get_double("min-p", 0.0);
  auto rep = f->get_double("repetition-penalty", 1.0);
  auto pres = f->get_double("presence-penalty", 0.0);
  auto freq = f->get_double("frequency-penalty", 0.0);
  auto seed = f->get_int("seed", 0);
  auto chunk = f->get_int("chunk-tokens", opt.prefill.chunk_tokens);
  for (const Status* st :
       {&max_tokens.status(), &temperature.status(), &top_k.status(), &top_p.status(), &min_p.status(), &rep.status(),
        &pres.status(), &freq.status(), &seed.status(), &chunk.status()})
    if (!st->ok()) return fail(*st);
  if (max_tokens.value() < 1 || max_tokens.value() > INT32_MAX)
    return fail(invalid_argument("--max-tokens: must be >= 1"));
  if (chunk.value() < 1 || chunk.value() > INT32_MAX) return fail(invalid_argument("--chunk-tokens: must be >= 1"));
  opt.max_tokens = static_cast<int>(max_tokens.value());
  opt.prefill.chunk_tokens = static_cast<int>(chunk.value());
  opt.sampling.temperature = static_cast<float>(temperature.value());
  opt.sampling.top_k = static_cast<int>(top_k.value());
  opt.sampling.top_p = static_cast<float>(top_p.value());
  opt.sampling.min_p = static_cast<float>(min_p.value());
  opt.sampling.repetition_penalty = static_cast<float>(rep.value());
  opt.sampling.presence_penalty = static_cast<float>(pres.value());
  opt.sampling.frequency_penalty = static_cast<float>(freq.value());
  opt.sampling.seed = static_cast<uint64_t>(seed.value());
  if (Status st = opt.sampling.validate(); !st.ok()) return fail(invalid_argument("--" + st.message()));
  if (f->has("stop-token-ids")) {
    auto stops = f->get_int_list("stop-token-ids");
    if (!stops.ok()) return fail(stops.status());
    for (int64_t s : stops.value()) opt.stop_token_ids.push_back(static_cast<int32_t>(s));
  }
  auto m = Model::load(f->get("model"));
  if (!m.ok()) return fail(m.status());
  if (Status st = apply_dtype_flag(**m, f->get("dtype", "fp32"), -1); !st.ok()) return fail(st);
  const bool json = f->get_bool("json");
  // With a text prompt the output is text, streamed as tokens arrive, and EOS ends it.
  std::function<void(int32_t)> on_token = [&](int32_t t) {
    if (!json) {
      std::printf("%d ", t);
      std::fflush(stdout);
    }
  };
  std::string text;
#if defined(YOCO_HAVE_TOKENIZER)
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<StreamDecoder> stream;
  if (f->has("prompt")) {
    auto t = load_tokenizer(f->get("model"));
    if (!t.ok()) return fail(t.status());
    tok = std::move(t).value();
    stream = std::make_unique<StreamDecoder>(*tok, /*skip_special=*/true);
    if (tok->eos_id() && !f->get_bool("ignore-eos")) opt.stop_token_ids.push_back(*tok->eos_id());
    if (!json) std::printf("%s", f->get("prompt").c_str());
    on_token = [&](int32_t t) {
      const std::string piece = stream->push(t);
      text += piece;
      if (!json) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
    };
  }
#endif
  auto res = generate(**m, toks.value(), opt, on_token);
  if (!res.ok()) return fail(res.status());
#if defined(YOCO_HAVE_TOKENIZER)
  if (stream) {
    const std::string rest = stream->flush();
    text += rest;
    if (!json) std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
#endif
  const double tps = res->decode_seconds > 0 ? (res->tokens.size() - 1) / res->decode_seconds : 0;
  if (json) {
    Json::Array arr;
    for (int32_t t : res->tokens) arr.push_back(Json(t));
    Json::Object o;
    o["tokens"] = Json(std::move(arr));
    if (f->has("prompt")) o["text"] = Json(text);
    o["prompt_tokens"] = Json(static_cast<int64_t>(toks->size()));
    o["finish_reason"] = Json(res->finish_reason);
    o["prefill_seconds"] = Json(res->prefill_seconds);
    o["decode_tokens_per_second"] = Json(tps);
    std::cout << Json(std::move(o)).dump() << "\n";
  } else {
    std::printf("\n[%zu tokens, finish=%s, prefill %.3f s, decode %.1f tok/s]\n", res->tokens.size(),
                res->finish_reason.c_str(), res->prefill_seconds, tps);
  }
  return 0;
}

int cmd_tokenize(int argc, char** argv) {
  auto f = Flags::parse(argc, argv, 2, {"model", "text", "allow-special", "json"}, {"allow-special", "json"});
  if (!f.ok()) return fail(f.status());
  if (!f->has("model")) return fail(invalid_argument("--model: required"));
  if (!f->has("text")) return fail(invalid_argument("--text: required"));
#if defined(YOCO_HAVE_TOKENIZER)
  auto tok = load_tokenizer(f->get("model"));
  if (!tok.ok()) return fail(tok.status());
  const auto ids = (*tok)->encode(f->get("text"), f->get_bool("allow-special"));
  if (f->get_bool("json")) {
    Json::Array arr;
    for (int32_t t : ids) arr.push_back(Json(t));
    Json::Object o;
    o["tokens"] = Json(std::move(arr));
    std::cout << Json(std::move(o)).dump() << "\n";
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? "," : "", ids[i]);
    std::printf("\n");
  }
  return 0;
#else
  return fail(Status(StatusCode::kUnimplemented, "built without the tokenizer"));
#endif
}

int cmd_detokenize(int argc, char** argv) {
  auto f = Flags::parse(argc, argv, 2, {"model", "tokens"});
  if (!f.ok()) return fail(f.status());
  if (!f->has("model")) return fail(invalid_argument("--model: required"));
  auto ids = token_list(f.value());
  if (!ids.ok()) return fail(ids.status());
#if defined(YOCO_HAVE_TOKENIZER)
  auto tok = load_tokenizer(f->get("model"));
  if (!tok.ok()) return fail(tok.status());
  auto text = (*tok)->decode_checked(ids.value());
  if (!text.ok()) return fail(Status(text.status().code(), "--" + text.status().message()));
  std::fwrite(text->data(), 1, text->size(), stdout);
  std::printf("\n");
  return 0;
#else
  return fail(Status(StatusCode::kUnimplemented, "built without the tokenizer"));
#endif
}

// A new API key and its entry for the router's --api-keys file (docs/design.md §9b). Only the
// salted digest goes into the file; the key itself is shown once, here.
int cmd_make_key(int argc, char** argv) {
  auto f = Flags::parse(argc, argv, 2,
                        {"name", "admin", "max-concurrent", "tokens-per-minute", "max-context", "scopes"}, {"admin"});
  if (!f.ok()) return fail(f.status());
  ApiKeyEntry k;
  k.name = f->get("name");
  if (k.name.empty()) return fail(invalid_argument("--name: required (the key's name in logs and metrics)"));
  k.admin = f->has("admin");
  if (f->has("scopes")) {  // comma-separated; checked below as the router checks the file
    std::string s = f->get("scopes");
    for (size_t a = 0; a <= s.size();) {
      const size_t b = std::min(s.find(',', a), s.size());
      k.scopes.push_back(s.substr(a, b - a));
      a = b + 1;
    }
  }
  for (auto [flag, dst] :
       {std::pair{"max-concurrent", &k.max_concurrent}, std::pair{"tokens-per-minute", &k.tokens_per_minute},
        std::pair{"max-context", &k.max_context}}) {
    auto v = f->get_int(flag, 0);
    if (!v.ok()) return fail(v.status());
    if (*v < 0) return fail(invalid_argument(std::string("--") + flag + ": must be >= 0 (0: unlimited)"));
    *dst = *v;
  }
  const std::string key = new_api_key();
  const std::string entry = api_key_entry_json(k, key);
  // The entry must load as the router would load it (the name's characters included).
  if (auto check = parse_api_key_file("{\"keys\":[" + entry + "]}"); !check.ok()) return fail(check.status());
  std::printf("%s\n%s\n", key.c_str(), entry.c_str());
  return 0;
}

// `--router HOST:PORT` (or `--router=...`) sends the command to a cluster.
bool has_router_flag(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--router" || a.rfind("--router=", 0) == 0) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage();
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "bench" || cmd == "cache-doc" || cmd == "get-doc" || cmd == "list-docs" || cmd == "delete-doc" ||
      ((cmd == "generate" || cmd == "score" || cmd == "tokenize" || cmd == "detokenize" || cmd == "info") &&
       has_router_flag(argc, argv))) {
#if defined(YOCO_HAVE_GRPC)
    return yoco::cli::run_cluster_command(cmd, argc, argv);
#else
    std::fprintf(stderr, "yoco-cli: %s --router: built without gRPC\n", cmd.c_str());
    return 2;
#endif
  }
  if (cmd == "make-random-model") return cmd_make_random_model(argc, argv);
  if (cmd == "presets") return cmd_presets();
  if (cmd == "make-key") return cmd_make_key(argc, argv);
  if (cmd == "info") return cmd_info(argc, argv);
  if (cmd == "score") return cmd_score(argc, argv);
  if (cmd == "generate") return cmd_generate(argc, argv);
  if (cmd == "tokenize") return cmd_tokenize(argc, argv);
  if (cmd == "detokenize") return cmd_detokenize(argc, argv);
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    usage();
    return 0;
  }
  std::fprintf(stderr, "yoco-cli: unknown command \"%s\"\n", cmd.c_str());
  usage();
  return 2;
}
