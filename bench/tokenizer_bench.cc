// Tokenizer benchmark: single-thread encode and decode speed over a corpus (JSON lines with a
// "text" field, as tests/tokenizer/make_corpus.py writes). Encode is measured cold (a freshly
// loaded tokenizer, every piece a cache miss) and warm (pieces memoised). Never asserts speed.
//   tokenizer_bench --tokenizer MODEL_DIR --corpus corpus.jsonl [--repeats 3] [--allow-special] [--json]
// bench/tokenizer_baseline.py runs this next to Hugging Face tokenizers and tiktoken.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/json.h"
#include "tokenizer/tokenizer.h"

using namespace yoco;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

int die(const Status& s) {
  std::fprintf(stderr, "tokenizer_bench: %s\n", s.message().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f("tokenizer_bench", "single-thread tokenizer encode (cold and warm) and decode speed over a corpus",
          {flag::str("tokenizer", "model directory holding the tokenizer (required)"),
           flag::str("corpus", "JSON lines with a \"text\" field (required)"),
           flag::integer("repeats", "timed passes over the corpus, best kept", 3, 1, 1 << 20),
           flag::boolean("allow-special", "encode special-token text as special tokens"),
           flag::boolean("json", "print JSON instead of a table")});
  if (Status s = f.parse(argc, argv, 1); !s.ok()) return die(s);
  if (!f.has("tokenizer") || !f.has("corpus")) return die(invalid_argument("--tokenizer and --corpus are required"));
  const int64_t repeats = f.integer("repeats");
  const bool allow_special = f.boolean("allow-special");

  std::vector<std::string> texts;
  size_t bytes = 0;
  {
    std::ifstream in(f.str("corpus"), std::ios::binary);
    if (!in) return die(io_error(f.str("corpus") + ": cannot open"));
    std::string line;
    while (std::getline(in, line)) {
      auto j = Json::parse(line);
      if (!j.ok() || !j->find("text") || !j->find("text")->is_string())
        return die(invalid_argument("corpus line " + std::to_string(texts.size() + 1) + ": expected {\"text\": ...}"));
      texts.push_back(j->find("text")->as_string());
      bytes += texts.back().size();
    }
  }

  double cold = 1e30, warm = 1e30, decode = 1e30;
  size_t n_tokens = 0;
  for (int64_t r = 0; r < repeats; ++r) {
    auto tok = Tokenizer::load(f.str("tokenizer"));  // fresh: an empty piece cache
    if (!tok.ok()) return die(tok.status());
    const Tokenizer& t = *tok.value();
    std::vector<std::vector<int32_t>> ids(texts.size());
    auto t0 = clock_type::now();
    for (size_t d = 0; d < texts.size(); ++d) t.encode_to(texts[d], allow_special, false, ids[d]);
    cold = std::min(cold, seconds_since(t0));
    t0 = clock_type::now();
    for (size_t d = 0; d < texts.size(); ++d) t.encode_to(texts[d], allow_special, false, ids[d]);
    warm = std::min(warm, seconds_since(t0));
    n_tokens = 0;
    size_t out_bytes = 0;
    t0 = clock_type::now();
    for (size_t d = 0; d < texts.size(); ++d) {
      out_bytes += t.decode(ids[d]).size();
      n_tokens += ids[d].size();
    }
    decode = std::min(decode, seconds_since(t0));
    if (out_bytes == 0 && bytes != 0) return die(internal_error("decode produced nothing"));
  }
  const double mb = bytes / 1e6;
  if (f.boolean("json")) {
    Json::Object o{{"documents", static_cast<int64_t>(texts.size())},
                   {"bytes", static_cast<int64_t>(bytes)},
                   {"tokens", static_cast<int64_t>(n_tokens)},
                   {"encode_cold_mb_s", mb / cold},
                   {"encode_warm_mb_s", mb / warm},
                   {"decode_mb_s", mb / decode}};
    std::printf("%s\n", Json(o).dump().c_str());
  } else {
    std::printf("%zu documents, %.2f MB, %zu tokens (%.2f bytes/token), best of %lld, 1 thread\n", texts.size(), mb,
                n_tokens, static_cast<double>(bytes) / static_cast<double>(n_tokens), static_cast<long long>(repeats));
    std::printf("encode cold  %8.2f MB/s\n", mb / cold);
    std::printf("encode warm  %8.2f MB/s\n", mb / warm);
    std::printf("decode       %8.2f MB/s\n", mb / decode);
  }
  return 0;
}
