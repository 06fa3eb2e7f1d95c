// yoco-cli: model tools and in-process generation/scoring; with --router the same commands
// (and bench) talk to a running cluster instead (tools/cluster_client.h).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
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

// A command's flags, each declared once (common/flags.h); `about` is its line in --help.
Result<Flags> parse_flags(int argc, char** argv, const std::string& about, FlagTable table) {
  Flags f("yoco-cli " + std::string(argv[1]), about, std::move(table));
  if (Status st = f.parse(argc, argv, 2); !st.ok()) return st;
  return f;
}

FlagSpec model_flag() { return flag::str("model", "a model directory"); }
FlagSpec tokens_flag() { return flag::int_list("tokens", "comma-separated token ids", 0, INT32_MAX); }
FlagSpec threads_flag() { return flag::integer("threads", "CPU threads (0: one per physical core)", 0, 0, 1024); }
FlagSpec chunk_flag() {
  return flag::integer("chunk-tokens", "prompt tokens per prefill chunk", PrefillOptions().chunk_tokens, 1, INT32_MAX);
}
FlagSpec dtype_flag() { return flag::str("dtype", "weights and products: fp32 or bf16", "fp32"); }
FlagSpec json_flag() { return flag::boolean("json", "the answer as JSON"); }

Status require(const Flags& f, const std::string& name) {
  return f.has(name) ? Status::Ok() : invalid_argument("--" + name + ": required (" + f.spec(name).help + ")");
}

Result<std::vector<int32_t>> token_list(const Flags& f) {
  YOCO_RETURN_IF_ERROR(require(f, "tokens"));
  std::vector<int32_t> out;
  for (int64_t v : f.int_list("tokens")) out.push_back(static_cast<int32_t>(v));
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
  YOCO_ASSIGN_OR_RETURN(auto tok, load_tokenizer(f.str("model")));
  const bool bos = add_bos && tok->add_bos_token();
  return tok->encode(f.str(text_flag), /*allow_special=*/false, bos);
#else
  return Status(StatusCode::kUnimplemented, std::string("--") + text_flag + ": built without the tokenizer");
#endif
}

void set_threads(const Flags& f) { cpu::set_num_threads(static_cast<int>(f.integer("threads"))); }

int cmd_make_random_model(int argc, char** argv) {
  auto f = parse_flags(
      argc, argv, "a model of random weights from a preset (yoco-cli presets)",
      {flag::str("preset", "the preset's name (yoco-cli presets)"), flag::str("out", "the directory written"),
       flag::integer("seed", "the weights' seed", 0, 0, INT64_MAX),
       flag::str("dtype", "the stored weights: f32 or bf16", "f32"),
       flag::boolean("tied", "the output projection is the embedding")});
  if (!f.ok()) return fail(f.status());
  for (const char* name : {"preset", "out"})
    if (Status st = require(*f, name); !st.ok()) return fail(st);
  auto cfg = find_preset(f->str("preset"));
  if (!cfg.ok()) return fail(cfg.status());
  if (f->boolean("tied")) cfg->tie_embeddings = true;
  const int64_t seed = f->integer("seed");
  const std::string dt = f->str("dtype");
  if (dt != "f32" && dt != "bf16") return fail(invalid_argument("--dtype: must be f32 or bf16, got " + dt));
  Status st = write_random_model(f->str("out"), cfg.value(), static_cast<uint64_t>(seed),
                                 dt == "f32" ? DType::kF32 : DType::kBF16);
  if (!st.ok()) return fail(st);
  std::printf("wrote %s (preset %s, seed %lld, %s)\n", f->str("out").c_str(), f->str("preset").c_str(),
              static_cast<long long>(seed), dt.c_str());
  return 0;
}

int cmd_presets() {
  for (const auto& p : model_presets()) std::printf("%-12s %s\n", p.name.c_str(), p.summary.c_str());
  return 0;
}

int cmd_info(int argc, char** argv) {
  auto f = parse_flags(argc, argv, "a model's config, sizes and fingerprint, as JSON",
                       {model_flag(), flag::boolean("json", "accepted for symmetry: the output is JSON either way")});
  if (!f.ok()) return fail(f.status());
  if (Status st = require(*f, "model"); !st.ok()) return fail(st);
  auto m = Model::load(f->str("model"));
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
  auto f = parse_flags(argc, argv, "the prompt's own log-probs and perplexity, in process",
                       {model_flag(), tokens_flag(), flag::str("text", "the text to score (or --tokens)"), json_flag(),
                        threads_flag(), chunk_flag(), dtype_flag()});
  if (!f.ok()) return fail(f.status());
  if (Status st = require(*f, "model"); !st.ok()) return fail(st);
  set_threads(f.value());
  auto toks = input_ids(f.value(), "text", /*add_bos=*/true);
  if (!toks.ok()) return fail(toks.status());
  auto m = Model::load(f->str("model"));
  if (!m.ok()) return fail(m.status());
  if (Status st = apply_dtype_flag(**m, f->str("dtype"), -1); !st.ok()) return fail(st);
  PrefillOptions opt;
  opt.chunk_tokens = static_cast<int>(f->integer("chunk-tokens"));
  auto lp = (*m)->score(toks.value(), opt);
  if (!lp.ok()) return fail(lp.status());
  double sum = 0;
  for (float x : lp.value()) sum += x;
  const double ppl = std::exp(-sum / static_cast<double>(lp->size()));
  if (f->boolean("json")) {
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
  // Sampling ranges are SamplingParams::validate's (common/sampling_params.h), checked below.
  constexpr double kAny = std::numeric_limits<double>::infinity();
  auto f = parse_flags(
      argc, argv, "generate in process: token ids, or the text with --prompt",
      {model_flag(), tokens_flag(), flag::str("prompt", "the prompt's text (or --tokens)"),
       flag::integer("max-tokens", "tokens to generate", 16, 1, INT32_MAX),
       flag::number("temperature", "sampling temperature (0: greedy)", 0.0, -kAny, kAny),
       flag::integer("top-k", "sample among the k likeliest tokens (0: all)", 0, INT32_MIN, INT32_MAX),
       flag::number("top-p", "nucleus sampling's probability mass", 1.0, -kAny, kAny),
       flag::number("min-p", "drop tokens below this fraction of the likeliest's probability", 0.0, -kAny, kAny),
       flag::number("repetition-penalty", "divides the logits of tokens already seen", 1.0, -kAny, kAny),
       flag::number("presence-penalty", "subtracted from the logits of tokens already seen", 0.0, -kAny, kAny),
       flag::number("frequency-penalty", "subtracted per occurrence of a token already seen", 0.0, -kAny, kAny),
       flag::integer("seed", "the sampler's seed", 0, INT64_MIN, INT64_MAX),
       flag::int_list("stop-token-ids", "token ids that end the generation, comma-separated", INT32_MIN, INT32_MAX),
       json_flag(), threads_flag(), chunk_flag(),
       flag::boolean("ignore-eos", "keep generating past the end-of-sequence token"), dtype_flag()});
  if (!f.ok()) return fail(f.status());
  if (Status st = require(*f, "model"); !st.ok()) return fail(st);
  set_threads(f.value());
  auto toks = input_ids(f.value(), "prompt", /*add_bos=*/true);
  if (!toks.ok()) return fail(toks.status());
  GenerateOptions opt;
  opt.max_tokens = static_cast<int>(f->integer("max-tokens"));
  opt.prefill.chunk_tokens = static_cast<int>(f->integer("chunk-tokens"));
  opt.sampling.temperature = static_cast<float>(f->number("temperature"));
  opt.sampling.top_k = static_cast<int>(f->integer("top-k"));
  opt.sampling.top_p = static_cast<float>(f->number("top-p"));
  opt.sampling.min_p = static_cast<float>(f->number("min-p"));
  opt.sampling.repetition_penalty = static_cast<float>(f->number("repetition-penalty"));
  opt.sampling.presence_penalty = static_cast<float>(f->number("presence-penalty"));
  opt.sampling.frequency_penalty = static_cast<float>(f->number("frequency-penalty"));
  opt.sampling.seed = static_cast<uint64_t>(f->integer("seed"));
  if (Status st = opt.sampling.validate(); !st.ok()) return fail(invalid_argument("--" + st.message()));
  for (int64_t s : f->int_list("stop-token-ids")) opt.stop_token_ids.push_back(static_cast<int32_t>(s));
  auto m = Model::load(f->str("model"));
  if (!m.ok()) return fail(m.status());
  if (Status st = apply_dtype_flag(**m, f->str("dtype"), -1); !st.ok()) return fail(st);
  const bool json = f->boolean("json");
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
    auto t = load_tokenizer(f->str("model"));
    if (!t.ok()) return fail(t.status());
    tok = std::move(t).value();
    stream = std::make_unique<StreamDecoder>(*tok, /*skip_special=*/true);
    if (tok->eos_id() && !f->boolean("ignore-eos")) opt.stop_token_ids.push_back(*tok->eos_id());
    if (!json) std::printf("%s", f->str("prompt").c_str());
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
  auto f = parse_flags(argc, argv, "a model's tokenizer: text to token ids",
                       {model_flag(), flag::str("text", "the text"),
                        flag::boolean("allow-special", "special tokens written in the text are tokens"), json_flag()});
  if (!f.ok()) return fail(f.status());
  for (const char* name : {"model", "text"})
    if (Status st = require(*f, name); !st.ok()) return fail(st);
#if defined(YOCO_HAVE_TOKENIZER)
  auto tok = load_tokenizer(f->str("model"));
  if (!tok.ok()) return fail(tok.status());
  const auto ids = (*tok)->encode(f->str("text"), f->boolean("allow-special"));
  if (f->boolean("json")) {
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
  auto f = parse_flags(argc, argv, "a model's tokenizer: token ids to text", {model_flag(), tokens_flag()});
  if (!f.ok()) return fail(f.status());
  if (Status st = require(*f, "model"); !st.ok()) return fail(st);
  auto ids = token_list(f.value());
  if (!ids.ok()) return fail(ids.status());
#if defined(YOCO_HAVE_TOKENIZER)
  auto tok = load_tokenizer(f->str("model"));
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
  auto f = parse_flags(
      argc, argv, "a new API key and its entry for the router's --api-keys file",
      {flag::str("name", "the key's name in logs and metrics"), flag::boolean("admin", "the key may do anything"),
       flag::integer("max-concurrent", "requests in flight at once (0: unlimited)", 0, 0, INT64_MAX),
       flag::integer("tokens-per-minute", "prompt and generated tokens per minute (0: unlimited)", 0, 0, INT64_MAX),
       flag::integer("max-context", "prompt + generated tokens per request (0: unlimited)", 0, 0, INT64_MAX),
       flag::str("scopes", "what the key may call, comma-separated: generate, score, documents")});
  if (!f.ok()) return fail(f.status());
  ApiKeyEntry k;
  k.name = f->str("name");
  if (k.name.empty()) return fail(invalid_argument("--name: required (the key's name in logs and metrics)"));
  k.admin = f->boolean("admin");
  if (f->has("scopes")) {  // comma-separated; checked below as the router checks the file
    std::string s = f->str("scopes");
    for (size_t a = 0; a <= s.size();) {
      const size_t b = std::min(s.find(',', a), s.size());
      k.scopes.push_back(s.substr(a, b - a));
      a = b + 1;
    }
  }
  k.max_concurrent = f->integer("max-concurrent");
  k.tokens_per_minute = f->integer("tokens-per-minute");
  k.max_context = f->integer("max-context");
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
