// Token masks (structured/token_mask.h) over byte-level vocabularies, and constrained generation
// through the continuous batcher on a bundled model: greedy output always parses as its schema,
// regex, choice or grammar, ends with "stop" when the constraint does, leaves unconstrained
// sequences of the same batch untouched, and continues exactly after a migration.
#include "structured/token_mask.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <regex>

#include "common/json.h"
#include "decode_service/batcher.h"
#include "model/generate.h"
#include "structured/vocab.h"
#include "tokenizer/tokenizer.h"

namespace yoco {
namespace {

using Kind = StructuredOutput::Kind;

StructuredOutput make(Kind k, std::string text, std::vector<std::string> choices = {}) {
  StructuredOutput s;
  s.kind = k;
  s.text = std::move(text);
  s.choices = std::move(choices);
  return s;
}

std::shared_ptr<const CompiledConstraint> compile(ConstraintCompiler& c, const StructuredOutput& s) {
  auto r = c.compile(s, "test");
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : nullptr;
}

class TokenMaskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!structured_outputs_enabled()) GTEST_SKIP() << "built without xgrammar (scripts/setup.sh)";
  }
};

TEST_F(TokenMaskTest, ChoiceAllowsItsPrefixesThenOnlyTheStopToken) {
  // id 0 is the end-of-sequence token (writes no text).
  const std::vector<std::string> vocab = {"", "y", "e", "s", "yes", "no", "n", "o", " ", "x"};
  auto c = ConstraintCompiler::create(vocab, {0});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto compiled = compile(**c, make(Kind::kChoice, "", {"yes", "no"}));
  ASSERT_TRUE(compiled);
  const int32_t stop[] = {0};
  TokenMask m(compiled, stop);
  EXPECT_EQ(m.allowed(), (std::vector<int32_t>{1, 4, 5, 6}));
  std::vector<float> logits(vocab.size(), 1.0f);
  m.apply(logits.data(), static_cast<int>(logits.size()));
  for (int i = 0; i < static_cast<int>(vocab.size()); ++i)
    EXPECT_EQ(std::isinf(logits[i]), !(i == 1 || i == 4 || i == 5 || i == 6)) << i;
  EXPECT_FALSE(m.accept(9));  // "x": refused, nothing changes
  EXPECT_TRUE(m.accept(4));   // "yes"
  EXPECT_FALSE(m.terminated());
  EXPECT_EQ(m.allowed(), (std::vector<int32_t>{0}));  // complete: only the stop token
  EXPECT_TRUE(m.accept(0));
  EXPECT_TRUE(m.terminated());
}

TEST_F(TokenMaskTest, WithoutStopTokensTheMaskEndsWhenTheConstraintIsComplete) {
  const std::vector<std::string> vocab = {"", "a", "b"};
  auto c = ConstraintCompiler::create(vocab, {0});
  ASSERT_TRUE(c.ok());
  TokenMask m(compile(**c, make(Kind::kRegex, "ab")), {});
  EXPECT_TRUE(m.accept(1));
  EXPECT_FALSE(m.terminated());
  EXPECT_TRUE(m.accept(2));
  EXPECT_TRUE(m.terminated());
}

TEST_F(TokenMaskTest, ACompiledConstraintIsCachedPerDistinctConstraint) {
  const std::vector<std::string> vocab = {"", "a", "b"};
  auto c = ConstraintCompiler::create(vocab, {0});
  ASSERT_TRUE(c.ok());
  auto a1 = compile(**c, make(Kind::kRegex, "a+"));
  auto a2 = compile(**c, make(Kind::kRegex, "a+"));
  auto b = compile(**c, make(Kind::kRegex, "b+"));
  EXPECT_EQ(a1.get(), a2.get());
  EXPECT_NE(a1.get(), b.get());
  EXPECT_FALSE((*c)->compile(make(Kind::kGrammar, "a+"), "structured_outputs.grammar").ok());
}

// A Qwen-style byte-level vocabulary: the 256 byte tokens, merges, special tokens past the merged
// ones, and a model vocab_size larger than the tokenizer's (padding ids that write nothing).
std::string byte_unicode(int b) {
  // GPT-2's bytes_to_unicode: printable bytes are themselves, the rest 256 + n.
  static std::map<int, int> map = [] {
    std::map<int, int> m;
    int n = 0;
    for (int c = 0; c < 256; ++c) {
      if ((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)) m[c] = c;
      else m[c] = 256 + n++;
    }
    return m;
  }();
  const int cp = map[b];
  std::string out;
  if (cp < 0x80) out += static_cast<char>(cp);
  else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

std::unique_ptr<Tokenizer> qwen_style_tokenizer() {
  Json::Object vocab;
  auto spell = [](std::string_view bytes) {
    std::string s;
    for (unsigned char b : bytes) s += byte_unicode(b);
    return s;
  };
  for (int b = 0; b < 256; ++b) vocab[byte_unicode(b)] = Json(b);
  vocab[spell(" t")] = Json(256);
  vocab[spell("\xC3\xA9")] = Json(257);  // "é" whole
  Json::Array merges = {Json(spell(" ") + " " + spell("t")), Json(spell("\xC3") + " " + spell("\xA9"))};
  Json::Array added;
  int id = 300;
  for (const char* sp : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    Json::Object t{{"id", Json(id++)}, {"content", Json(sp)}, {"special", Json(true)}};
    added.push_back(Json(std::move(t)));
    vocab[sp] = Json(id - 1);
  }
  Json::Object model{{"type", Json("BPE")}, {"vocab", Json(std::move(vocab))}, {"merges", Json(std::move(merges))}};
  Json::Object pre{{"type", Json("ByteLevel")}, {"add_prefix_space", Json(false)}, {"use_regex", Json(true)}};
  Json::Object doc{{"model", Json(std::move(model))},
                   {"pre_tokenizer", Json(std::move(pre))},
                   {"decoder", Json(Json::Object{{"type", Json("ByteLevel")}})},
                   {"added_tokens", Json(std::move(added))}};
  auto tok = Tokenizer::from_hf_json(Json(std::move(doc)).dump());
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

TEST_F(TokenMaskTest, QwenStyleVocabularyMasksBytesOfSplitCharacters) {
  auto tok = qwen_style_tokenizer();
  ASSERT_TRUE(tok);
  const int model_vocab = 320;
  const std::vector<std::string> vocab = token_vocab(*tok, model_vocab);
  ASSERT_EQ(vocab.size(), 320u);
  EXPECT_EQ(vocab[256], " t");
  EXPECT_EQ(vocab[257], "\xC3\xA9");
  EXPECT_EQ(vocab[300], "");  // special: never text
  EXPECT_EQ(vocab[310], "");  // padding
  auto c = ConstraintCompiler::create(vocab, {300});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const int32_t stop[] = {300};
  TokenMask m(compile(**c, make(Kind::kRegex, "é+ t")), stop);
  // "é" whole or its first byte; never a special or padding id.
  EXPECT_EQ(m.allowed(), (std::vector<int32_t>{0xC3, 257}));
  EXPECT_TRUE(m.accept(0xC3));
  EXPECT_EQ(m.allowed(), (std::vector<int32_t>{0xA9}));
  EXPECT_TRUE(m.accept(0xA9));
  const std::vector<int32_t> next = m.allowed();
  EXPECT_NE(std::find(next.begin(), next.end(), 257), next.end());
  EXPECT_NE(std::find(next.begin(), next.end(), 256), next.end());  // " t" ends it
  EXPECT_EQ(std::find(next.begin(), next.end(), 300), next.end());  // not complete: no stop
  EXPECT_TRUE(m.accept(256));
  EXPECT_EQ(m.allowed(), (std::vector<int32_t>{300}));
  std::vector<float> logits(model_vocab, 0.5f);
  m.apply(logits.data(), model_vocab);
  for (int i = 0; i < model_vocab; ++i) EXPECT_EQ(std::isinf(logits[i]), i != 300) << i;
}

// ---- constrained generation on the bundled model ----

struct Outcome {
  std::vector<int32_t> tokens;
  FinishInfo info;
  bool done = false;
};

class BundledModel : public TokenMaskTest {
 protected:
  void SetUp() override {
    TokenMaskTest::SetUp();
    if (IsSkipped()) return;
    const std::string dir = std::string(YOCO_SOURCE_DIR) + "/models/kjv-yoco";
    auto m = Model::load(dir);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
    auto t = Tokenizer::load(dir);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tok_ = std::move(t).value();
    ASSERT_TRUE(tok_->eos_id().has_value());
    eos_ = *tok_->eos_id();
    auto c = ConstraintCompiler::create(token_vocab(*tok_, model_->config().vocab_size), {eos_});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    compiler_ = std::move(c).value();
    auto pool = KvPool::create(256, 32, model_->config().kv_dim());
    ASSERT_TRUE(pool.ok());
    pool_ = std::move(pool).value();
  }

  DecodeRequest request(const std::string& prompt, const StructuredOutput* so, int max_tokens = 96) {
    DecodeRequest r;
    r.prompt = tok_->encode(prompt);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.stop_token_ids = {eos_};
    if (so) r.constraint = compile(*compiler_, *so);
    return r;
  }

  // Runs every request in one batcher at once; each outcome in order.
  std::vector<Outcome> run(std::vector<DecodeRequest> reqs) {
    std::vector<Outcome> outs(reqs.size());
    std::mutex mu;
    std::condition_variable cv;
    BatcherLimits lim;
    lim.max_running = 16;
    ContinuousBatcher b(*model_, *pool_, lim);
    b.start();
    for (size_t i = 0; i < reqs.size(); ++i) {
      Outcome* o = &outs[i];
      reqs[i].on_token = [&mu, o](int32_t t) {
        std::lock_guard<std::mutex> lock(mu);
        o->tokens.push_back(t);
      };
      reqs[i].on_finish = [&mu, &cv, o](const FinishInfo& f) {
        std::lock_guard<std::mutex> lock(mu);
        o->info = f;
        o->done = true;
        cv.notify_all();
      };
      auto id = b.submit(std::move(reqs[i]));
      EXPECT_TRUE(id.ok()) << id.status().to_string();
      if (!id.ok()) outs[i].done = true;
    }
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(300), [&] {
      for (const auto& o : outs)
        if (!o.done) return false;
      return true;
    }));
    lock.unlock();
    b.stop(true);
    return outs;
  }

  // The text of a stream that ended on EOS, without it.
  std::string text_of(const Outcome& o) {
    EXPECT_EQ(o.info.reason, "stop");
    EXPECT_FALSE(o.tokens.empty());
    std::vector<int32_t> t = o.tokens;
    if (!t.empty() && t.back() == eos_) t.pop_back();
    return tok_->decode(t);
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<ConstraintCompiler> compiler_;
  std::unique_ptr<KvPool> pool_;
  int32_t eos_ = 0;
};

const char* kSchema = R"({"type": "object", "properties": {
    "book": {"type": "string", "maxLength": 12},
    "chapter": {"type": "integer", "minimum": 1, "maximum": 150},
    "holy": {"type": "boolean"},
    "tribe": {"enum": ["Judah", "Levi", "Dan"]}},
  "required": ["book", "chapter", "holy", "tribe"], "additionalProperties": false})";

TEST_F(BundledModel, GreedyOutputAlwaysParsesAsItsConstraint) {
  const StructuredOutput schema = make(Kind::kJsonSchema, kSchema);
  const StructuredOutput regex = make(Kind::kRegex, "(light|darkness|water)-[0-9]{2}");
  const StructuredOutput choice = make(Kind::kChoice, "", {"Genesis", "Exodus", "Leviticus"});
  const StructuredOutput grammar =
      make(Kind::kGrammar, "root ::= word \" and \" word\nword ::= \"heaven\" | \"earth\" | \"sea\"");
  const std::vector<std::string> prompts = {"In the beginning God created", "And the LORD spake unto Moses",
                                            "The LORD is my shepherd"};
  std::vector<DecodeRequest> reqs;
  for (const std::string& p : prompts)
    for (const StructuredOutput* so : {&schema, &regex, &choice, &grammar}) reqs.push_back(request(p, so));
  const std::vector<Outcome> outs = run(std::move(reqs));
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::string js = text_of(outs[p * 4]);
    auto j = Json::parse(js);
    ASSERT_TRUE(j.ok()) << js;
    ASSERT_TRUE(j->is_object()) << js;
    ASSERT_EQ(j->as_object().size(), 4u) << js;
    ASSERT_TRUE(j->find("book") && j->find("book")->is_string()) << js;
    ASSERT_TRUE(j->find("chapter") && j->find("chapter")->is_integer()) << js;
    EXPECT_GE(j->find("chapter")->as_int(), 1) << js;
    EXPECT_LE(j->find("chapter")->as_int(), 150) << js;
    EXPECT_TRUE(j->find("holy") && j->find("holy")->is_bool()) << js;
    ASSERT_TRUE(j->find("tribe") && j->find("tribe")->is_string()) << js;
    const std::string tribe = j->find("tribe")->as_string();
    EXPECT_TRUE(tribe == "Judah" || tribe == "Levi" || tribe == "Dan") << js;
    const std::string re = text_of(outs[p * 4 + 1]);
    EXPECT_TRUE(std::regex_match(re, std::regex("(light|darkness|water)-[0-9]{2}"))) << re;
    const std::string ch = text_of(outs[p * 4 + 2]);
    EXPECT_TRUE(ch == "Genesis" || ch == "Exodus" || ch == "Leviticus") << ch;
    const std::string gr = text_of(outs[p * 4 + 3]);
    EXPECT_TRUE(std::regex_match(gr, std::regex("(heaven|earth|sea) and (heaven|earth|sea)"))) << gr;
  }
}

TEST_F(BundledModel, JsonObjectStartsWithABrace) {
  auto compiled = compile(*compiler_, make(Kind::kJsonObject, ""));
  ASSERT_TRUE(compiled);
  const int32_t stop[] = {eos_};
  TokenMask m(compiled, stop);
  const std::vector<int32_t> first = m.allowed();
  ASSERT_FALSE(first.empty());
  for (int32_t id : first) EXPECT_EQ(tok_->decode(std::vector<int32_t>{id}).substr(0, 1), "{") << id;
}

TEST_F(BundledModel, UnconstrainedSequencesOfTheSameBatchAreUntouched) {
  const StructuredOutput choice = make(Kind::kChoice, "", {"Genesis", "Exodus"});
  std::vector<DecodeRequest> reqs;
  reqs.push_back(request("And God said, Let there be light", nullptr, 24));
  reqs.push_back(request("In the beginning", &choice));
  reqs.push_back(request("The LORD is my shepherd", nullptr, 24));
  reqs.push_back(request("And Moses went up", &choice));
  const std::vector<Outcome> outs = run(reqs);
  for (size_t i : {0u, 2u}) {
    GenerateOptions opt;
    opt.max_tokens = reqs[i].max_tokens;
    opt.sampling = reqs[i].sampling;
    opt.stop_token_ids = reqs[i].stop_token_ids;
    auto ref = generate(*model_, reqs[i].prompt, opt);
    ASSERT_TRUE(ref.ok());
    EXPECT_EQ(outs[i].tokens, ref->tokens) << i;
  }
}

TEST_F(BundledModel, AMigratedStreamContinuesInsideItsConstraint) {
  const StructuredOutput schema = make(Kind::kJsonSchema, kSchema);
  const std::vector<Outcome> whole = run({request("In the beginning God created", &schema)});
  ASSERT_GE(whole[0].tokens.size(), 6u);
  const size_t k = whole[0].tokens.size() / 2;
  DecodeRequest moved = request("In the beginning God created", &schema);
  moved.generated_before.assign(whole[0].tokens.begin(), whole[0].tokens.begin() + k);
  const std::vector<Outcome> rest = run({moved});
  EXPECT_EQ(rest[0].info.reason, "stop");
  EXPECT_EQ(rest[0].tokens, std::vector<int32_t>(whole[0].tokens.begin() + k, whole[0].tokens.end()));
  // Tokens outside the constraint cannot be carried over.
  ContinuousBatcher b(*model_, *pool_, BatcherLimits{});
  DecodeRequest bad = request("In the beginning", &schema);
  bad.generated_before = tok_->encode("not json");
  Status st = b.validate(bad);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("generated[0]", 0), 0u) << st.message();
}

}  // namespace
}  // namespace yoco
