// Inter-token latency of constrained decoding against unconstrained, through the decode worker's
// continuous batcher (docs/design.md §3.2c; bench/README.md, structured outputs): `--batch`
// sequences at once, greedy, each mode timed `--repeats` times on the same engine. The goal is a
// constrained stream within 10% of an unconstrained one at batch 16.
//
//   build/bench/structured_bench [--model models/kjv-yoco] [--device cpu|cuda[:N]] [--batch 16]
//                                [--tokens 128] [--repeats 3] [--threads T]
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "common/flags.h"
#include "decode_service/batcher.h"
#include "model/engine.h"
#include "structured/vocab.h"
#include "tokenizer/tokenizer.h"

namespace yoco {
namespace {

using SteadyClock = std::chrono::steady_clock;

int die(const Status& s) {
  std::fprintf(stderr, "structured_bench: %s\n", s.message().c_str());
  return 2;
}

struct Mode {
  const char* name;
  StructuredOutput so;
};

// The constraints: free text that only a rare '#' completes (so every sequence runs all --tokens
// steps and the batch stays full), and a JSON schema (a long string member, then a number).
std::vector<Mode> modes() {
  std::vector<Mode> m;
  m.push_back({"unconstrained", {}});
  StructuredOutput text;
  text.kind = StructuredOutput::Kind::kGrammar;
  text.text = R"(root ::= [a-zA-Z ,.;:'\n]* "#")";
  m.push_back({"grammar", text});
  StructuredOutput schema;
  schema.kind = StructuredOutput::Kind::kJsonSchema;
  schema.text = R"({"type": "object", "properties": {"verse": {"type": "string"}, "chapter": {"type": "integer"}},
                    "required": ["verse", "chapter"]})";
  m.push_back({"json_schema", schema});
  return m;
}

struct Timing {
  double mean_itl = 0, p50_itl = 0, p90_itl = 0;
  int64_t tokens = 0;
};

Result<Timing> run_mode(const Model& model, KvPool& pool, Engine* engine, const Tokenizer& tok,
                        ConstraintCompiler& compiler, const Mode& mode, int batch, int max_tokens) {
  std::shared_ptr<const CompiledConstraint> compiled;
  if (mode.so.constrained()) {
    auto c = compiler.compile(mode.so, mode.name);
    if (!c.ok()) return c.status();
    compiled = *c;
  }
  BatcherLimits lim;
  lim.max_running = batch;
  ContinuousBatcher b(model, pool, lim, engine);
  b.start();
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<std::vector<SteadyClock::time_point>> stamps(batch);
  const char* prompts[] = {"In the beginning God created", "And the LORD spake unto Moses, saying",
                           "The LORD is my shepherd", "And God said, Let there be light"};
  for (int i = 0; i < batch; ++i) {
    DecodeRequest r;
    r.prompt = tok.encode(prompts[i % 4]);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.constraint = compiled;
    r.on_token = [&stamps, &mu, i](int32_t) {
      std::lock_guard<std::mutex> lock(mu);
      stamps[i].push_back(SteadyClock::now());
    };
    r.on_finish = [&](const FinishInfo&) {
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      cv.notify_all();
    };
    if (auto id = b.submit(std::move(r)); !id.ok()) return id.status();
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == batch; });
  }
  b.stop(true);
  std::vector<double> itl;
  Timing t;
  for (const auto& s : stamps) {
    t.tokens += static_cast<int64_t>(s.size());
    for (size_t k = 1; k < s.size(); ++k) itl.push_back(std::chrono::duration<double>(s[k] - s[k - 1]).count());
  }
  if (itl.empty()) return t;
  std::sort(itl.begin(), itl.end());
  double sum = 0;
  for (double x : itl) sum += x;
  t.mean_itl = sum / static_cast<double>(itl.size());
  t.p50_itl = itl[itl.size() / 2];
  t.p90_itl = itl[itl.size() * 9 / 10];
  return t;
}

}  // namespace
}  // namespace yoco

int main(int argc, char** argv) {
  using namespace yoco;
  Flags f("structured_bench", "inter-token latency of constrained against unconstrained decoding (batcher)",
          {flag::str("model", "model directory (weights and tokenizer)", "models/kjv-yoco"),
           flag::str("device", "cpu, cuda or cuda:N", "cpu"),
           flag::integer("batch", "sequences decoded at once", 16, 1, 1 << 16),
           flag::integer("tokens", "tokens generated per sequence", 128, 1, 1 << 20),
           flag::integer("repeats", "timed runs per mode", 3, 1, 1 << 20),
           flag::integer("threads", "CPU threads (0: the runtime's default)", 0, 0, 4096)});
  if (Status s = f.parse(argc, argv, 1); !s.ok()) return die(s);
  if (!structured_outputs_enabled()) return die(Status(StatusCode::kUnimplemented, "built without xgrammar"));
  const std::string dir = f.str("model");
  const int64_t batch = f.integer("batch"), tokens = f.integer("tokens"), repeats = f.integer("repeats"),
                threads = f.integer("threads");
  auto device = parse_device_flag(f.str("device"));
  if (!device.ok()) return die(device.status());
  auto model = Model::load(dir);
  if (!model.ok()) return die(model.status());
  auto tok = Tokenizer::load(dir);
  if (!tok.ok()) return die(tok.status());
  const int V = (*model)->config().vocab_size;
  std::vector<int32_t> stops;
  if ((*tok)->eos_id()) stops.push_back(*(*tok)->eos_id());
  auto compiler = ConstraintCompiler::create(token_vocab(**tok, V), stops);
  if (!compiler.ok()) return die(compiler.status());
  auto pool = KvPool::create(4096, 32, (*model)->config().kv_dim());
  if (!pool.ok()) return die(pool.status());
  EngineOptions eo;
  eo.device = *device;
  eo.threads = static_cast<int>(threads);
  eo.cuda.max_sequences = eo.cuda.max_batch = static_cast<int>(batch);
  auto engine = make_engine(**model, pool->get(), eo);
  if (!engine.ok()) return die(engine.status());
  std::printf("%-14s %6s %8s %14s %14s %14s\n", "mode", "batch", "tokens", "mean ITL ms", "p50 ITL ms", "p90 ITL ms");
  for (int rep = 0; rep < repeats; ++rep) {  // modes interleaved, so drift hits each alike
    for (const Mode& m : modes()) {
      auto t = run_mode(**model, **pool, engine->get(), **tok, **compiler, m, static_cast<int>(batch),
                        static_cast<int>(tokens));
      if (!t.ok()) return die(t.status());
      std::printf("%-14s %6lld %8lld %14.3f %14.3f %14.3f\n", m.name, static_cast<long long>(batch),
                  static_cast<long long>(t->tokens), t->mean_itl * 1e3, t->p50_itl * 1e3, t->p90_itl * 1e3);
    }
  }
  return 0;
}
