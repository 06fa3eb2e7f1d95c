// Tokenizer: UTF-8 and byte-level helpers, regex dialects, BPE merge equivalence (fast vs
// plain), tokenizer.json / tiktoken parsing and their errors, added/special tokens, streaming
// decode, tokenizer_config.json, and the comparison with the `tokenizers` and `tiktoken`
// Python packages on the >= 1 MB corpus made by tests/tokenizer/make_reference.py.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/json.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace yoco {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::vector<std::string> lines;
  std::ifstream f(p, std::ios::binary);
  std::string line;
  while (std::getline(f, line)) lines.push_back(line);
  return lines;
}

std::string lossy(std::string_view s) {
  std::string out;
  utf8::append_lossy(out, s);
  return out;
}

std::string byte_level_spelling(std::string_view raw) {
  std::string out;
  byte_level::encode(out, raw);
  return out;
}

// A tokenizer.json with the 256 byte tokens (ids 0..255), the given merges (raw bytes, each
// merged token gets the next id) and added tokens, so tests can reason about ids.
struct HfSpec {
  std::vector<std::pair<std::string, std::string>> merges;
  Json::Array added;  // objects; "id" filled in from 1000 on when absent
  Json pre_tokenizer = Json(Json::Object{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}});
  Json normalizer;
  Json::Object model_extra;
};

std::string make_hf_json(const HfSpec& spec) {
  Json::Object vocab;
  for (int b = 0; b < 256; ++b) vocab.emplace(std::string(byte_level::char_of(static_cast<uint8_t>(b))), b);
  Json::Array merges;
  int next = 256;
  for (const auto& [l, r] : spec.merges) {
    const std::string ls = byte_level_spelling(l), rs = byte_level_spelling(r);
    merges.push_back(Json(Json::Array{Json(ls), Json(rs)}));
    if (!vocab.count(ls + rs)) vocab.emplace(ls + rs, next++);
  }
  Json::Object model{{"type", "BPE"}, {"vocab", Json(std::move(vocab))}, {"merges", Json(std::move(merges))}};
  for (const auto& [k, v] : spec.model_extra) model[k] = v;
  Json::Array added = spec.added;
  for (size_t i = 0; i < added.size(); ++i) {
    auto& o = added[i].mutable_object();
    if (!o.count("id")) o["id"] = Json(static_cast<int64_t>(1000 + i));
  }
  Json::Object root{{"version", "1.0"},
                    {"added_tokens", Json(std::move(added))},
                    {"normalizer", spec.normalizer},
                    {"pre_tokenizer", spec.pre_tokenizer},
                    {"model", Json(std::move(model))},
                    {"decoder", Json(Json::Object{{"type", "ByteLevel"}})}};
  return Json(std::move(root)).dump();
}

Json added_token(const std::string& content, bool special, Json::Object extra = {}) {
  Json::Object o{{"content", content}, {"special", special}, {"normalized", !special}};
  for (auto& [k, v] : extra) o[k] = v;
  return Json(std::move(o));
}

std::unique_ptr<Tokenizer> must(Result<std::unique_ptr<Tokenizer>> r) {
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

std::string error_of(Result<std::unique_ptr<Tokenizer>> r) {
  EXPECT_FALSE(r.ok());
  return r.ok() ? std::string() : r.status().message();
}

constexpr const char* kEvilPattern = "(a|aa)+(?:b|c)|z";

std::vector<std::string> matches(const Regex& re, std::string_view s) {
  std::vector<std::string> out;
  re.for_each_match(s, [&](size_t b, size_t e) { out.emplace_back(s.substr(b, e - b)); });
  return out;
}

// ---------------------------------------------------------------------------------------------
TEST(Utf8, ValidityAndMaximalSubparts) {
  EXPECT_TRUE(utf8::is_valid("abc \xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80"));
  for (const char* bad : {"\x80", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff", "\xe2\x82", "\xf5"})
    EXPECT_FALSE(utf8::is_valid(bad)) << bad;
  // One U+FFFD per maximal subpart, as Python's errors="replace".
  EXPECT_EQ(lossy("a\xe2\x82z"), "a\xEF\xBF\xBDz");
  EXPECT_EQ(lossy("\xf0\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(lossy("\xed\xa0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(lossy("\xf0\x9f\x98"), "\xEF\xBF\xBD");
  EXPECT_EQ(utf8::incomplete_tail("ab\xf0\x9f\x98"), 3u);
  EXPECT_EQ(utf8::incomplete_tail("ab\xe4"), 1u);
  EXPECT_EQ(utf8::incomplete_tail("ab\xe4\xb8\xad"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("ab\xf0\x80"), 0u);  // F0 80 can never complete
  EXPECT_TRUE(utf8::is_white_space(0x3000));
  EXPECT_TRUE(utf8::is_white_space(0x85));
  EXPECT_FALSE(utf8::is_white_space(0x200B));
}

TEST(ByteLevel, AlphabetIsGpt2s) {
  EXPECT_EQ(byte_level::char_of(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(byte_level::char_of('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(byte_level::char_of('a'), "a");
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string spelled, back;
  byte_level::encode(spelled, all);
  ASSERT_TRUE(byte_level::decode(back, spelled));
  EXPECT_EQ(back, all);
  EXPECT_FALSE(byte_level::decode(back, " "));  // a raw space is not in the alphabet
}

TEST(Regex, OnigurumaAndRustDialectsDiffer) {
  auto onig = [](const char* p) { return std::move(Regex::compile(p, Regex::Dialect::kOniguruma, "p")).value(); };
  auto rust = [](const char* p) { return std::move(Regex::compile(p, Regex::Dialect::kRust, "p")).value(); };
  // Oniguruma reads X{1,3}+ as (?:X{1,3})+; fancy-regex (tiktoken) reads it as possessive.
  EXPECT_EQ(matches(*onig(R"(\d{1,3}+)"), "1234567 12"), (std::vector<std::string>{"1234567", "12"}));
  EXPECT_EQ(matches(*rust(R"(\p{N}{1,3}+)"), "1234567 12"), (std::vector<std::string>{"123", "456", "7", "12"}));
  // Oniguruma's $ is an end of line; Rust's only the end of the text.
  EXPECT_EQ(matches(*onig("[a-z]+$"), "ab cd\nef gh"), (std::vector<std::string>{"cd", "gh"}));
  EXPECT_EQ(matches(*rust("[a-z]+$"), "ab cd\nef gh"), (std::vector<std::string>{"gh"}));
  EXPECT_EQ(matches(*onig(R"(\d{,2})"), "12345"), (std::vector<std::string>{"12", "34", "5", ""}));
  EXPECT_EQ(matches(*onig(R"(\h+)"), "xx0aFz"), (std::vector<std::string>{"0aF"}));
  EXPECT_EQ(matches(*onig(R"((?i:'s|'t))"), "it'S don't"), (std::vector<std::string>{"'S", "'t"}));
  // \s is Unicode White_Space in both (PCRE2's own \s would also take U+180E); \w is the
  // engine's: Oniguruma counts every number (\u00b2), Rust only decimal digits.
  EXPECT_EQ(matches(*onig(R"(\s+)"),
                    "a\xe1\xa0\x8e \xc2\x85"
                    "b"),
            (std::vector<std::string>{" \xc2\x85"}));
  EXPECT_EQ(matches(*rust(R"([^\s]+)"), "a\xe1\xa0\x8e b"), (std::vector<std::string>{"a\xe1\xa0\x8e", "b"}));
  EXPECT_EQ(matches(*onig(R"(\w+)"), "x\xc2\xb2 y"), (std::vector<std::string>{"x\xc2\xb2", "y"}));
  EXPECT_EQ(matches(*rust(R"(\w+)"), "x\xc2\xb2 y"), (std::vector<std::string>{"x", "y"}));
  // Empty matches advance instead of looping.
  EXPECT_EQ(matches(*rust("x*"), "abxxc"), (std::vector<std::string>{"", "", "xx", "", ""}));
  auto bad = Regex::compile("(unclosed", Regex::Dialect::kOniguruma, "pre_tokenizer.pattern.Regex");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("pre_tokenizer.pattern.Regex: bad regex"), std::string::npos);
}

TEST(Regex, LongRunsAndCatastrophicPatternsStayBounded) {
  auto gpt2 = std::move(Regex::compile(kGpt2Pattern, Regex::Dialect::kOniguruma, "p")).value();
  const std::string spaces(200000, ' ');
  EXPECT_EQ(matches(*gpt2, spaces + "x"), (std::vector<std::string>{spaces.substr(1), " x"}));
  // Exponential backtracking hits PCRE2's match limit and the search gives up where it stood.
  auto evil = std::move(Regex::compile(kEvilPattern, Regex::Dialect::kRust, "p")).value();
  const std::string as(5000, 'a');
  size_t calls = 0;
  EXPECT_EQ(evil->for_each_match(as, [&](size_t, size_t) { ++calls; }), 0u);
  EXPECT_EQ(calls, 0u);
}

// ---------------------------------------------------------------------------------------------
TEST(Bpe, FastMergeEqualsReference) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    BpeModel model(0);
    const int alphabet = 2 + trial % 6;
    int next_id = alphabet;
    const int n_pairs = 5 + trial * 3;
    for (int k = 0; k < n_pairs; ++k) {
      const int32_t l = static_cast<int32_t>(rng() % next_id), r = static_cast<int32_t>(rng() % next_id);
      // Pathological tables too: ranks repeat, results may equal an input.
      const int32_t result = trial % 5 == 0 && k % 7 == 0 ? l : next_id++;
      model.pairs().insert_or_assign(l, r, {static_cast<int32_t>(rng() % (n_pairs / 2 + 1)), result});
    }
    for (int w = 0; w < 50; ++w) {
      const size_t len = 1 + rng() % (w % 5 == 0 ? 400 : 70);
      std::vector<int32_t> word(len);
      for (auto& x : word) x = static_cast<int32_t>(rng() % alphabet);
      std::vector<int32_t> fast = word, ref = word;
      model.merge(fast);
      model.merge_reference(ref);
      ASSERT_EQ(fast, ref) << "trial " << trial << " word " << w << " len " << len;
    }
  }
}

// ---------------------------------------------------------------------------------------------
TEST(HfJson, EncodesWithMergesByRankLeftmostFirst) {
  HfSpec spec;
  spec.merges = {{"l", "l"}, {"h", "e"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {"a", "a"}};
  auto tok = must(Tokenizer::from_hf_json(make_hf_json(spec)));
  ASSERT_TRUE(tok);
  const auto ids = tok->encode("hello wall");
  // "hello" | " wall" -> " w" + "a" "ll"
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(*tok->id_to_token(ids[0]), "hello");
  EXPECT_EQ(*tok->id_to_token(ids[1]), byte_level_spelling(" w"));
  EXPECT_EQ(ids[2], 'a');
  EXPECT_EQ(*tok->id_to_token(ids[3]), "ll");
  EXPECT_EQ(tok->decode(ids), "hello wall");
  // "aaa": the leftmost of equal-rank pairs merges first.
  const auto a3 = tok->encode("aaa");
  ASSERT_EQ(a3.size(), 2u);
  EXPECT_EQ(*tok->id_to_token(a3[0]), "aa");
  EXPECT_EQ(tok->token_to_id("hello"), ids[0]);
  EXPECT_EQ(tok->vocab_size(), 256 + 6);
}

TEST(HfJson, SpecialTokensOnlyWhenAllowedAddedTokensAlways) {
  HfSpec spec;
  spec.added = {added_token("<|endoftext|>", true), added_token("<think>", false)};
  auto tok = must(Tokenizer::from_hf_json(make_hf_json(spec)));
  ASSERT_TRUE(tok);
  const std::string text = "a<|endoftext|>b <think>c";
  const auto plain = tok->encode(text);
  const auto special = tok->encode(text, /*allow_special=*/true);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1000), 0);
  EXPECT_EQ(std::count(special.begin(), special.end(), 1000), 1);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1001), 1);  // non-special: matched regardless
  EXPECT_EQ(tok->decode(plain), text);
  EXPECT_EQ(tok->decode(special), text);
  EXPECT_EQ(tok->decode(special, /*skip_special=*/true), "ab <think>c");
  EXPECT_TRUE(tok->is_special(1000));
  EXPECT_FALSE(tok->is_special(1001));
}

// ---------------------------------------------------------------------------------------------
// NFC (Qwen2-style tokenizer.json). Spelled out in UTF-8: U+0301 combining acute = CC 81,
// U+0323 dot below = CC A3, U+00E9 é = C3 A9, U+212B angstrom sign = E2 84 AB, U+00C5 Å = C3 85,
// jamo U+1100 U+1161 U+11A8 = E1 84 80, E1 85 A1, E1 86 A8, their syllable U+AC01 = EA B0 81.
TEST(Normalizer, NfcComposesReordersAndLeavesInvalidBytesAlone) {
  const Normalizer nfc(Normalizer::Form::kNfc);
  std::string scratch;
  auto n = [&](std::string_view s) { return std::string(nfc.apply(s, scratch)); };
  EXPECT_EQ(n("cafe\xcc\x81"), "caf\xc3\xa9");
  EXPECT_EQ(n("\xe2\x84\xab"), "\xc3\x85");  // a singleton: the sign becomes the letter
  EXPECT_EQ(n("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8"), "\xea\xb0\x81");
  // canonical order: dot below (ccc 220) before acute (ccc 230), whichever came first
  EXPECT_EQ(n("a\xcc\x81\xcc\xa3"), n("a\xcc\xa3\xcc\x81"));
  EXPECT_EQ(n("\xcc\x81x"), "\xcc\x81x");  // a lone mark stays
  // a byte that is not UTF-8 splits the runs: nothing composes across it, it passes through
  EXPECT_EQ(n("e\xff\xcc\x81 e\xcc\x81"), "e\xff\xcc\x81 \xc3\xa9");
  // unchanged text is returned as itself, without a copy
  for (std::string_view same : {std::string_view("plain ASCII"), std::string_view("caf\xc3\xa9 \xe4\xb8\xad")}) {
    EXPECT_EQ(nfc.apply(same, scratch).data(), same.data());
  }
  const Normalizer none;
  const std::string_view d = "e\xcc\x81";
  EXPECT_EQ(none.apply(d, scratch).data(), d.data());
}

TEST(HfJson, NfcNormalizerRunsBeforeNormalizedAddedTokensAndTheRegex) {
  HfSpec spec;
  spec.normalizer = Json(Json::Object{{"type", "NFC"}});
  spec.merges = {{"\xc3", "\xa9"}};
  spec.added = {added_token("<|endoftext|>", true), added_token("<tool_call>", false, {{"normalized", false}}),
                added_token("<cafe\xcc\x81>", false), added_token("o\xcc\x88", false, {{"normalized", false}})};
  auto tok = must(Tokenizer::from_hf_json(make_hf_json(spec)));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->normalizer().form(), Normalizer::Form::kNfc);
  // decomposed and composed spellings encode alike, as the composed one
  EXPECT_EQ(tok->encode("cafe\xcc\x81"), tok->encode("caf\xc3\xa9"));
  EXPECT_EQ(tok->encode("caf\xc3\xa9"), (std::vector<int32_t>{'c', 'a', 'f', 256}));
  EXPECT_EQ(tok->decode(tok->encode("cafe\xcc\x81!")), "caf\xc3\xa9!");
  // a normalized=true token is matched as its own NFC in the normalized text, either spelling
  EXPECT_EQ(tok->encode("a<caf\xc3\xa9>b"), (std::vector<int32_t>{'a', 1002, 'b'}));
  EXPECT_EQ(tok->encode("a<cafe\xcc\x81>b"), (std::vector<int32_t>{'a', 1002, 'b'}));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{1002}), "<caf\xe9>");  // as tokenizers decodes it
  // normalized=false tokens see the raw text: the decomposed spelling matches, the composed not
  EXPECT_EQ(tok->encode("<tool_call>o\xcc\x88"), (std::vector<int32_t>{1001, 1003}));
  EXPECT_EQ(tok->encode("\xc3\xb6"), (std::vector<int32_t>{0xC3, 0xB6}));
  EXPECT_EQ(tok->decode(tok->encode("<|endoftext|>o\xcc\x88", true)), "<|endoftext|>o\xcc\x88");
}

TEST(HfJson, AddedTokenStripAndSingleWordFollowTokenizers) {
  // The cases of tokenizers' own added_vocabulary tests (without its lowercase normalizer).
  HfSpec spec;
  spec.added = {added_token("<mask>", false, {{"single_word", true}})};
  auto tok = must(Tokenizer::from_hf_json(make_hf_json(spec)));
  ASSERT_TRUE(tok);
  auto ids = tok->encode("<mask> My name <mask> A<mask> <mask>ony <mask>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1000), 3);
  ids = tok->encode("<mask>, <mask>- \xe2\x97\x8c\xcc\xb0<mask>");  // a combining mark is a word character
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1000), 2);

  spec.added = {added_token("<mask>", false, {{"single_word", true}, {"lstrip", true}, {"rstrip", true}})};
  tok = must(Tokenizer::from_hf_json(make_hf_json(spec)));
  ASSERT_TRUE(tok);
  ids = tok->encode("Hi <mask> there\t<mask>\t<mask>\xe2\x80\x80");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1000), 3);
  EXPECT_EQ(tok->decode(ids), "Hi<mask>there<mask><mask>");  // the stripped white space belongs to the token
}

TEST(HfJson, SplitBehavioursAndPrefixSpace) {
  auto with_pre = [](Json pre) {
    HfSpec spec;
    spec.pre_tokenizer = std::move(pre);
    return must(Tokenizer::from_hf_json(make_hf_json(spec)));
  };
  auto split = [](const char* behavior, bool invert) {
    return Json(Json::Object{{"type", "Split"},
                             {"pattern", Json(Json::Object{{"String", "-"}})},
                             {"behavior", behavior},
                             {"invert", invert}});
  };
  auto pieces = [](const Tokenizer& t, std::string_view text) {
    std::vector<std::string> out;
    t.pre_tokenizer().split(text, [&](std::string_view p) { out.emplace_back(p); });
    return out;
  };
  using V = std::vector<std::string>;
  const Json byte_level(Json::Object{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}});
  struct Case {
    const char* behavior;
    bool invert;
    V want;
  } cases[] = {
      {"Removed", false, V{"a", "b", "c"}},
      {"Isolated", false, V{"a", "-", "b", "--", "c"}},
      // Only a match right after a non-match merges: the second dash of "--" stays alone.
      {"MergedWithPrevious", false, V{"a-", "b-", "-", "c"}},
      {"MergedWithNext", false, V{"a", "-b", "-", "-c"}},
      {"Contiguous", false, V{"a", "-", "b", "--", "c"}},
      {"Removed", true, V{"-", "-", "-"}},
  };
  for (const Case& c : cases) {
    auto tok = with_pre(Json(Json::Object{
        {"type", "Sequence"}, {"pretokenizers", Json(Json::Array{split(c.behavior, c.invert), byte_level})}}));
    ASSERT_TRUE(tok);
    // Literal "-" matches each dash separately; Contiguous joins adjacent matches.
    V want = c.want;
    if (std::string(c.behavior) == "Isolated") want = V{"a", "-", "b", "-", "-", "c"};
    EXPECT_EQ(pieces(*tok, "a-b--c"), want) << c.behavior << " invert=" << c.invert;
  }
  auto gpt2 = with_pre(Json(Json::Object{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}));
  ASSERT_TRUE(gpt2);
  EXPECT_EQ(pieces(*gpt2, "hello world's  x"), (V{" hello", " world", "'s", " ", " x"}));
}

TEST(HfJson, MalformedFilesGiveClearErrors) {
  EXPECT_NE(error_of(Tokenizer::from_hf_json("{}")).find("model: missing"), std::string::npos);
  EXPECT_NE(error_of(Tokenizer::from_hf_json("not json")).find("JSON parse error at byte"), std::string::npos);
  EXPECT_NE(error_of(Tokenizer::from_hf_json(R"({"model": {"type": "WordPiece", "vocab": {}}})")).find("model.type"),
            std::string::npos);

  std::string good = make_hf_json(HfSpec{});
  ASSERT_TRUE(Tokenizer::from_hf_json(good).ok());
  {
    auto j = std::move(Json::parse(good)).value();
    auto& model = j.mutable_object()["model"].mutable_object();
    model["merges"] = Json(Json::Array{Json("a zz")});
    const std::string e = error_of(Tokenizer::from_hf_json(j.dump()));
    EXPECT_NE(e.find("model.merges[0]"), std::string::npos) << e;
    EXPECT_NE(e.find("\"zz\" is not in model.vocab"), std::string::npos) << e;
    model["merges"] = Json(Json::Array{Json("a b")});  // "ab" is not in the vocabulary
    EXPECT_NE(error_of(Tokenizer::from_hf_json(j.dump())).find("merged token \"ab\""), std::string::npos);
    model["merges"] = Json(Json::Array{Json("a b c")});
    EXPECT_NE(error_of(Tokenizer::from_hf_json(j.dump())).find("model.merges[0]: expected"), std::string::npos);
  }
  {
    HfSpec spec;
    spec.pre_tokenizer = Json(Json::Object{
        {"type", "Sequence"},
        {"pretokenizers", Json(Json::Array{Json(Json::Object{{"type", "Split"},
                                                             {"pattern", Json(Json::Object{{"Regex", "(\\p{L}+"}})},
                                                             {"behavior", "Isolated"}}),
                                           Json(Json::Object{{"type", "ByteLevel"}, {"use_regex", false}})})}});
    const std::string e = error_of(Tokenizer::from_hf_json(make_hf_json(spec)));
    EXPECT_NE(e.find("pre_tokenizer.pretokenizers[0].pattern.Regex: bad regex"), std::string::npos) << e;
  }
  {
    // NFC alone or in a Sequence loads; anything else is refused naming it and its place
    HfSpec spec;
    spec.normalizer = Json(Json::Object{{"type", "NFC"}});
    EXPECT_TRUE(Tokenizer::from_hf_json(make_hf_json(spec)).ok());
    spec.normalizer = Json(
        Json::Object{{"type", "Sequence"}, {"normalizers", Json(Json::Array{Json(Json::Object{{"type", "NFC"}})})}});
    auto seq = must(Tokenizer::from_hf_json(make_hf_json(spec)));
    ASSERT_TRUE(seq);
    EXPECT_EQ(seq->normalizer().form(), Normalizer::Form::kNfc);
    spec.normalizer = Json(Json::Object{{"type", "Sequence"}, {"normalizers", Json(Json::Array{})}});
    seq = must(Tokenizer::from_hf_json(make_hf_json(spec)));
    ASSERT_TRUE(seq);
    EXPECT_TRUE(seq->normalizer().identity());
    spec.normalizer = Json(Json::Object{{"type", "NFKC"}});
    std::string e = error_of(Tokenizer::from_hf_json(make_hf_json(spec)));
    EXPECT_NE(e.find("normalizer.type: \"NFKC\" is not supported"), std::string::npos) << e;
    spec.normalizer = Json(Json::Object{{"type", "Sequence"},
                                        {"normalizers", Json(Json::Array{Json(Json::Object{{"type", "NFC"}}),
                                                                         Json(Json::Object{{"type", "Lowercase"}})})}});
    e = error_of(Tokenizer::from_hf_json(make_hf_json(spec)));
    EXPECT_NE(e.find("normalizer.normalizers[1].type: \"Lowercase\" is not supported"), std::string::npos) << e;
    spec.normalizer = Json(Json::Object{{"type", "Sequence"}});
    e = error_of(Tokenizer::from_hf_json(make_hf_json(spec)));
    EXPECT_NE(e.find("normalizer.normalizers: must be an array"), std::string::npos) << e;
  }
  {
    HfSpec spec;
    spec.pre_tokenizer = Json(Json::Object{
        {"type", "Sequence"},
        {"pretokenizers", Json(Json::Array{Json(Json::Object{{"type", "Digits"}, {"individual_digits", true}}),
                                           Json(Json::Object{{"type", "ByteLevel"}, {"use_regex", false}})})}});
    const std::string e = error_of(Tokenizer::from_hf_json(make_hf_json(spec)));
    EXPECT_NE(e.find("pre_tokenizer.pretokenizers[0].type: \"Digits\" is not supported"), std::string::npos) << e;
  }
  {
    HfSpec spec;
    spec.pre_tokenizer = Json(Json::Object{{"type", "Whitespace"}});
    EXPECT_NE(error_of(Tokenizer::from_hf_json(make_hf_json(spec))).find("pre_tokenizer.type"), std::string::npos);
    spec.pre_tokenizer = Json();
    EXPECT_NE(error_of(Tokenizer::from_hf_json(make_hf_json(spec))).find("ByteLevel"), std::string::npos);
  }
  {
    HfSpec spec;
    spec.added = {added_token("a", true, {{"id", 5}})};  // "a" is id 97 in model.vocab
    EXPECT_NE(error_of(Tokenizer::from_hf_json(make_hf_json(spec))).find("added_tokens[0]"), std::string::npos);
    spec.added = {added_token("<x>", true, {{"id", 9000000}})};
    EXPECT_NE(error_of(Tokenizer::from_hf_json(make_hf_json(spec))).find("sparse"), std::string::npos);
  }
}

TEST(Decode, UnknownIdIsAnErrorNamingItsIndex) {
  auto tok = must(Tokenizer::from_hf_json(make_hf_json(HfSpec{})));
  ASSERT_TRUE(tok);
  const std::vector<int32_t> ids = {'a', 'b', 5000, 'c'};
  auto r = tok->decode_checked(ids);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("ids[2]: unknown token id 5000", 0), 0u) << r.status().message();
  EXPECT_EQ(tok->decode(ids), "abc");  // the lenient path skips it
  const std::vector<int32_t> negative = {-1};
  EXPECT_FALSE(tok->check_ids(negative).ok());
}

// ---------------------------------------------------------------------------------------------
std::string tiktoken_bytes_file(int extra_ranks = 0) {
  std::string out;
  static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  auto enc = [&](const std::string& s) {
    std::string r;
    size_t i = 0;
    for (; i + 3 <= s.size(); i += 3) {
      uint32_t v = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8) | uint8_t(s[i + 2]);
      for (int k = 3; k >= 0; --k) r += b64[(v >> (6 * k)) & 63];
    }
    if (s.size() - i == 1) {
      uint32_t v = uint8_t(s[i]) << 16;
      r += b64[(v >> 18) & 63];
      r += b64[(v >> 12) & 63];
      r += "==";
    } else if (s.size() - i == 2) {
      uint32_t v = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8);
      r += b64[(v >> 18) & 63];
      r += b64[(v >> 12) & 63];
      r += b64[(v >> 6) & 63];
      r += "=";
    }
    return r;
  };
  for (int b = 0; b < 256; ++b) out += enc(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  const char* merged[] = {"he", "ll", "hell", "hello", " w", "or", " wor", " world"};
  for (int k = 0; k < extra_ranks && k < 8; ++k) out += enc(merged[k]) + " " + std::to_string(256 + k) + "\n";
  return out;
}

TEST(Tiktoken, MergesByRankOfTheConcatenation) {
  std::map<std::string, int32_t> specials{{"<|endoftext|>", 300}};
  auto tok = must(Tokenizer::from_tiktoken(tiktoken_bytes_file(8), kCl100kPattern, specials));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("hello world"), (std::vector<int32_t>{259, 263}));
  EXPECT_EQ(tok->encode("hello<|endoftext|>", true), (std::vector<int32_t>{259, 300}));
  // As text: "hello" | "<|" | "endoftext" | "|>", with no merges inside the last three.
  EXPECT_EQ(tok->encode("hello<|endoftext|>").size(), 1u + 2u + 9u + 2u);
  EXPECT_EQ(tok->vocab_size(), 301);
  EXPECT_FALSE(tok->is_known(290));  // the hole between ranks and specials
  EXPECT_EQ(tok->decode(tok->encode("hello<|endoftext|>", true)), "hello<|endoftext|>");
}

TEST(Tiktoken, APatternThatGivesUpStillEncodesEverything) {
  auto tok = must(Tokenizer::from_tiktoken(tiktoken_bytes_file(8), kEvilPattern, {}));
  ASSERT_TRUE(tok);
  const std::string text = std::string(3000, 'a') + " hello";
  EXPECT_EQ(tok->decode(tok->encode(text)), text);  // the unscanned rest is one piece, not dropped
}

TEST(Tiktoken, MalformedRankFilesGiveClearErrors) {
  const std::map<std::string, int32_t> none;
  std::string e = error_of(Tokenizer::from_tiktoken("!!!! 0\n", kCl100kPattern, none));
  EXPECT_NE(e.find("ranks line 1: token is not valid base64"), std::string::npos) << e;
  e = error_of(Tokenizer::from_tiktoken("QQ== x\n", kCl100kPattern, none));
  EXPECT_NE(e.find("ranks line 1: rank"), std::string::npos) << e;
  e = error_of(Tokenizer::from_tiktoken(tiktoken_bytes_file() + "aGk= 65\n", kCl100kPattern, none));
  EXPECT_NE(e.find("id 65 is given to both"), std::string::npos) << e;
  e = error_of(Tokenizer::from_tiktoken("QQ== 0\n", kCl100kPattern, none));
  EXPECT_NE(e.find("byte 0 has no rank"), std::string::npos) << e;
  e = error_of(Tokenizer::from_tiktoken(tiktoken_bytes_file(), "(?<!", none));
  EXPECT_NE(e.find("tiktoken pattern: bad regex"), std::string::npos) << e;
  e = error_of(Tokenizer::from_tiktoken(tiktoken_bytes_file(), kCl100kPattern, {{"<|x|>", 65}}));
  EXPECT_NE(e.find("id 65"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------------------------
TEST(StreamDecoder, HoldsBackHalfCharacters) {
  auto tok = must(Tokenizer::from_hf_json(make_hf_json(HfSpec{})));  // byte tokens only
  ASSERT_TRUE(tok);
  const std::string text = "a\xc3\xa9\xf0\x9f\x98\x80z";
  const auto ids = tok->encode(text);
  ASSERT_EQ(ids.size(), text.size());
  StreamDecoder sd(*tok);
  std::vector<std::string> outs;
  for (int32_t id : ids) outs.push_back(sd.push(id));
  outs.push_back(sd.flush());
  EXPECT_EQ(outs, (std::vector<std::string>{"a", "", "\xc3\xa9", "", "", "", "\xf0\x9f\x98\x80", "z", ""}));
  // Bytes that can never complete become U+FFFD, at the latest on flush.
  StreamDecoder bad(*tok);
  EXPECT_EQ(bad.push(0xFF), "\xEF\xBF\xBD");
  EXPECT_EQ(bad.push(0xE4), "");
  EXPECT_EQ(bad.push('x'), "\xEF\xBF\xBDx");
  EXPECT_EQ(bad.push(0xF0), "");
  EXPECT_EQ(bad.flush(), "\xEF\xBF\xBD");
}

TEST(TokenizerConfig, BosEosAndFlags) {
  HfSpec spec;
  spec.added = {added_token("<s>", true), added_token("</s>", true)};
  auto tok = must(Tokenizer::from_hf_json(make_hf_json(spec)));
  ASSERT_TRUE(tok);
  ASSERT_TRUE(tok->apply_config(R"({"bos_token": "<s>", "eos_token": {"content": "</s>", "lstrip": false},
                                    "add_bos_token": true})")
                  .ok());
  EXPECT_EQ(tok->bos_id(), 1000);
  EXPECT_EQ(tok->eos_id(), 1001);
  EXPECT_TRUE(tok->add_bos_token());
  EXPECT_EQ(tok->encode("x", false, true), (std::vector<int32_t>{1000, 'x'}));
  auto st = tok->apply_config(R"({"bos_token": "<nope>"})");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("\"bos_token\" \"<nope>\" is not in the vocabulary"), std::string::npos);
  EXPECT_FALSE(tok->apply_config(R"({"add_bos_token": "yes"})").ok());
}

TEST(TokenizerLoad, FindsTokenizerJsonOrTiktokenFile) {
  const fs::path dir = fs::temp_directory_path() / ("yoco_tok_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "hf");
  fs::create_directories(dir / "tt");
  fs::create_directories(dir / "empty");
  std::ofstream(dir / "hf" / "tokenizer.json") << make_hf_json(HfSpec{});
  std::ofstream(dir / "tt" / "x.tiktoken") << tiktoken_bytes_file(8);
  std::ofstream(dir / "tt" / "tokenizer_config.json")
      << R"({"special_tokens": {"<|endoftext|>": 300}, "eos_token": "<|endoftext|>"})";
  auto hf = Tokenizer::load((dir / "hf").string());
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  auto tt = Tokenizer::load((dir / "tt").string());
  ASSERT_TRUE(tt.ok()) << tt.status().to_string();
  EXPECT_EQ(tt.value()->eos_id(), 300);
  EXPECT_EQ(tt.value()->encode("hello"), (std::vector<int32_t>{259}));
  auto none = Tokenizer::load((dir / "empty").string());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  std::ofstream(dir / "hf" / "tokenizer.json") << "{";
  auto broken = Tokenizer::load((dir / "hf").string());
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().message().rfind("tokenizer.json: ", 0), 0u) << broken.status().message();
  fs::remove_all(dir);
}

TEST(Encode, InvalidUtf8RoundTripsAndNeverReachesTheRegex) {
  HfSpec spec;
  spec.merges = {{"\xff", "\xfe"}, {"a", "b"}};
  auto tok = must(Tokenizer::from_hf_json(make_hf_json(spec)));
  ASSERT_TRUE(tok);
  const std::string text = "ab\xff\xfe cd\xed\xa0\x80\xe4\xb8 \xf0\x9f\x98\x80\x80";
  const auto ids = tok->encode(text);
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_NE(std::find(ids.begin(), ids.end(), 256), ids.end());  // the invalid run is BPE-merged too
}

// ---------------------------------------------------------------------------------------------
// The comparison with the real libraries.
struct Reference {
  std::vector<std::string> texts;
  std::vector<std::string> invalid;  // documents that are not UTF-8
  std::string skip_reason;
};

const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    const fs::path dir(YOCO_TOKENIZER_TESTDATA);
    if (fs::exists(dir / "SKIPPED")) {
      r.skip_reason = read_all(dir / "SKIPPED");
      return r;
    }
    if (!fs::exists(dir / "STAMP")) {
      r.skip_reason = "no reference data in " + dir.string() +
                      ": run `ctest -R tokenizer_reference_data` (or tests/tokenizer/make_reference.py)";
      return r;
    }
    for (const std::string& line : read_lines(dir / "corpus.jsonl"))
      r.texts.push_back(std::move(Json::parse(line)).value().find("text")->as_string());
    for (const std::string& line : read_lines(dir / "corpus_bytes.jsonl")) {
      const std::string hex = std::move(Json::parse(line)).value().find("hex")->as_string();
      std::string bytes;
      for (size_t i = 0; i + 1 < hex.size(); i += 2)
        bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
      r.invalid.push_back(std::move(bytes));
    }
    return r;
  }();
  return ref;
}

std::vector<int32_t> ids_of(const Json& j) {
  std::vector<int32_t> out;
  for (const Json& v : j.as_array()) out.push_back(static_cast<int32_t>(v.as_int()));
  return out;
}

std::string first_difference(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  std::ostringstream os;
  os << "first difference at token " << i << " of " << want.size() << " (got " << got.size() << "): got [";
  for (size_t k = i; k < std::min(got.size(), i + 6); ++k) os << got[k] << " ";
  os << "] want [";
  for (size_t k = i; k < std::min(want.size(), i + 6); ++k) os << want[k] << " ";
  os << "]";
  return os.str();
}

class ReferenceTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ReferenceTest, IdenticalIdsAndRoundTripOnTheCorpus) {
  const Reference& ref = reference();
  if (!ref.skip_reason.empty()) GTEST_SKIP() << ref.skip_reason;
  const fs::path dir = fs::path(YOCO_TOKENIZER_TESTDATA) / GetParam();
  auto tok = Tokenizer::load(dir.string());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const Tokenizer& t = *tok.value();
  const auto expected = read_lines(dir / "expected.jsonl");
  ASSERT_EQ(expected.size(), ref.texts.size());
  size_t bytes = 0, failures = 0;
  for (size_t d = 0; d < ref.texts.size(); ++d) {
    const std::string& text = ref.texts[d];
    bytes += text.size();
    const Json row = std::move(Json::parse(expected[d])).value();
    const auto want_plain = ids_of(*row.find("plain"));
    const auto want_special = ids_of(*row.find("special"));
    const auto plain = t.encode(text, false);
    const auto special = t.encode(text, true);
    if (plain != want_plain && failures++ < 5)
      ADD_FAILURE() << GetParam() << " doc " << d
                    << " (special tokens as text): " << first_difference(plain, want_plain);
    if (special != want_special && failures++ < 5)
      ADD_FAILURE() << GetParam() << " doc " << d
                    << " (special tokens allowed): " << first_difference(special, want_special);
    // Identical round-trip text: the library's decode, which is the document itself unless the
    // tokenizer adds a prefix space, strips white space around a special token or normalizes.
    // The libraries' decode repairs invalid UTF-8 (a normalized added token can decode to a
    // lone byte); ours returns the bytes, so the comparison repairs them the same way.
    const Json* decoded = row.find("decoded");
    const Json* decoded_plain = row.find("decoded_plain");
    EXPECT_EQ(lossy(t.decode(want_special)), decoded ? decoded->as_string() : text) << GetParam() << " doc " << d;
    EXPECT_EQ(lossy(t.decode(want_plain)), decoded_plain ? decoded_plain->as_string() : text)
        << GetParam() << " doc " << d;
    // A second pass is served from the piece cache: same ids.
    if (d % 7 == 0) {
      EXPECT_EQ(t.encode(text, false), plain);
    }
  }
  EXPECT_EQ(failures, 0u);
  EXPECT_GE(bytes, 1000000u) << "the corpus must be at least 1 MB";
  std::printf("%s: %zu documents, %zu bytes: identical ids with special tokens as text and as specials\n", GetParam(),
              ref.texts.size(), bytes);
}

// With an NFC normalizer the round trip gives each well-formed run normalized, the rest as it was.
TEST(NormalizedRoundTrip, InvalidUtf8KeepsItsBytes) {
  const Reference& ref = reference();
  if (!ref.skip_reason.empty()) GTEST_SKIP() << ref.skip_reason;
  auto tok = Tokenizer::load((fs::path(YOCO_TOKENIZER_TESTDATA) / "hf_qwen").string());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const Tokenizer& t = *tok.value();
  ASSERT_EQ(t.normalizer().form(), Normalizer::Form::kNfc);
  std::string scratch;
  size_t checked = 0;
  for (size_t d = 0; d < ref.invalid.size(); ++d) {
    const std::string& bytes = ref.invalid[d];
    const std::string_view normalized = t.normalizer().apply(bytes, scratch);
    // The normalized added token decodes as tokenizers decodes it, not as its text ("<caf" 0xE9 ">").
    if (normalized.find("<caf\xc3\xa9>") != std::string_view::npos) continue;
    ASSERT_EQ(t.decode(t.encode(bytes, false)), normalized) << "doc " << d;
    ++checked;
  }
  EXPECT_GE(checked, ref.invalid.size() * 9 / 10);
}

// Tokenizers without add_prefix_space (which puts a space before text) round-trip any bytes.
class ExactRoundTripTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ExactRoundTripTest, InvalidUtf8RoundTrips) {
  const Reference& ref = reference();
  if (!ref.skip_reason.empty()) GTEST_SKIP() << ref.skip_reason;
  auto tok = Tokenizer::load((fs::path(YOCO_TOKENIZER_TESTDATA) / GetParam()).string());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  for (size_t d = 0; d < ref.invalid.size(); ++d) {
    const std::string& bytes = ref.invalid[d];
    ASSERT_FALSE(utf8::is_valid(bytes));
    const auto ids = tok.value()->encode(bytes, false);
    ASSERT_EQ(tok.value()->decode(ids), bytes) << "doc " << d;
    ASSERT_TRUE(tok.value()->check_ids(ids).ok());
  }
}

TEST_P(ReferenceTest, StreamingDecodeNeverSplitsACharacter) {
  const Reference& ref = reference();
  if (!ref.skip_reason.empty()) GTEST_SKIP() << ref.skip_reason;
  auto tok = Tokenizer::load((fs::path(YOCO_TOKENIZER_TESTDATA) / GetParam()).string());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const Tokenizer& t = *tok.value();
  auto check = [&](const std::string& text) {
    const auto ids = t.encode(text, true);
    StreamDecoder sd(t);
    std::string all;
    for (int32_t id : ids) {
      const std::string piece = sd.push(id);
      ASSERT_TRUE(utf8::is_valid(piece));
      all += piece;
    }
    all += sd.flush();
    const std::string whole = t.decode(ids);
    // equal to whole itself when that is valid UTF-8 (a normalized added token can make it not)
    ASSERT_EQ(all, lossy(whole));
  };
  for (size_t d = 0; d < ref.texts.size(); d += 3) check(ref.texts[d]);
  for (const std::string& bytes : ref.invalid) check(bytes);
}

TEST_P(ReferenceTest, ConcurrentEncodersAgree) {
  const Reference& ref = reference();
  if (!ref.skip_reason.empty()) GTEST_SKIP() << ref.skip_reason;
  auto tok = Tokenizer::load((fs::path(YOCO_TOKENIZER_TESTDATA) / GetParam()).string());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const Tokenizer& t = *tok.value();
  const size_t n = std::min<size_t>(ref.texts.size(), 400);
  std::vector<std::vector<int32_t>> a(n), b(n);
  std::thread th([&] {
    for (size_t d = 0; d < n; ++d) a[d] = t.encode(ref.texts[d]);
  });
  for (size_t d = n; d-- > 0;) b[d] = t.encode(ref.texts[d]);
  th.join();
  EXPECT_EQ(a, b);
}

INSTANTIATE_TEST_SUITE_P(Libraries, ReferenceTest, ::testing::Values("hf", "hf_gpt2", "hf_qwen", "tiktoken"));
INSTANTIATE_TEST_SUITE_P(Libraries, ExactRoundTripTest, ::testing::Values("hf", "tiktoken"));

}  // namespace
}  // namespace yoco
