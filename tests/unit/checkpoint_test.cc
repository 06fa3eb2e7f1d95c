// Hostile checkpoints (docs/design.md §9): every malformed file gives a clear error naming the tensor or
// field, never a crash. Also params.json validation, sharded loading and dtype conversion.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "model/model.h"
#include "model/random_model.h"
#include "model/safetensors.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

// Builds raw safetensors bytes from a header JSON string and a data section.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

Result<SafetensorsHeader> parse(const std::string& bytes) {
  return parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), bytes.size());
}

void expect_error(const Result<SafetensorsHeader>& r, const std::string& needle) {
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(SafetensorsHeader, AcceptsAValidFile) {
  auto r = parse(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}})",
                          std::string(8, '\0')));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_NE(r->find("a"), nullptr);
  EXPECT_EQ(r->metadata.at("format"), "pt");
}

TEST(SafetensorsHeader, RejectsHostileHeaders) {
  const std::string data(16, '\0');
  expect_error(parse("abc"), "too short");
  // Header length past the end of the file.
  std::string past = raw_file("{}", "");
  past[0] = 100;
  expect_error(parse(past), "past the end");
  std::string huge(8, '\xff');
  expect_error(parse(huge + "{}"), "exceeds the limit");
  expect_error(parse(raw_file("[1,2]", data)), "JSON object");
  expect_error(parse(raw_file("{\"a\":", data)), "JSON parse error");
  expect_error(
      parse(raw_file(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
          data)),
      "duplicate key \"a\"");
  expect_error(parse(raw_file(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})", data)), "unknown dtype");
  expect_error(parse(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,100]}})", data)), "out of range");
  expect_error(parse(raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data)), "need 12");
  expect_error(parse(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data)), "begin > end");
  expect_error(parse(raw_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data)), "non-negative");
  expect_error(parse(raw_file(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", data)),
               "too large");
  expect_error(
      parse(raw_file(
          R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
          data)),
      "overlap");
  expect_error(parse(raw_file(R"({"w":{"dtype":"F32","shape":[2]}})", data)), "data_offsets");
  std::string deep(200, '[');
  expect_error(parse(raw_file(deep, data)), "nesting");
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cfg = find_preset("tiny-gret");
    ASSERT_TRUE(cfg.ok());
    ASSERT_TRUE(write_random_model(dir_.sub("good"), cfg.value(), 1, DType::kF32).ok());
    params_ = test::read_file(dir_.sub("good/params.json"));
    weights_ = test::read_file(dir_.sub("good/model.safetensors"));
    auto h = parse(weights_);
    ASSERT_TRUE(h.ok());
    header_ = h.value();
  }
  // Writes a model dir with the given params and weights bytes and returns the load status.
  Status load_with(const std::string& params, const std::string& weights) {
    const std::string d = dir_.sub("case" + std::to_string(n_++));
    std::filesystem::create_directories(d);
    test::write_file(d + "/params.json", params);
    test::write_file(d + "/model.safetensors", weights);
    auto m = Model::load(d);
    return m.ok() ? Status::Ok() : m.status();
  }
  // Rewrites the header JSON (same data section) through a text substitution.
  std::string with_header_edit(const std::string& from, const std::string& to) {
    const std::string header = weights_.substr(8, header_.data_offset - 8);
    std::string edited = header;
    const size_t at = edited.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    edited.replace(at, from.size(), to);
    return raw_file(edited, weights_.substr(header_.data_offset));
  }
  void expect_load_error(const Status& s, const std::string& needle) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  }

  test::TempDir dir_;
  std::string params_, weights_;
  SafetensorsHeader header_;
  int n_ = 0;
};

TEST_F(CheckpointTest, GoodModelLoads) { EXPECT_TRUE(load_with(params_, weights_).ok()); }

TEST_F(CheckpointTest, TruncatedFile) {
  expect_load_error(load_with(params_, weights_.substr(0, weights_.size() / 2)), "out of range");
  expect_load_error(load_with(params_, weights_.substr(0, 5)), "too short");
}

TEST_F(CheckpointTest, MissingTensorIsNamed) {
  expect_load_error(
      load_with(params_, with_header_edit("\"self_decoder.layers.1.mixer.k_proj.weight\"", "\"renamed\"")),
      "missing tensor \"self_decoder.layers.1.mixer.k_proj.weight\"");
}

TEST_F(CheckpointTest, WrongShapeIsNamed) {
  // Same byte count, different shape.
  const TensorInfo* t = header_.find("cross_decoder.layers.0.ffn.fc2.weight");
  ASSERT_NE(t, nullptr);
  const std::string from = "\"shape\":[" + std::to_string(t->shape[0]) + "," + std::to_string(t->shape[1]) + "]";
  const std::string header = weights_.substr(8, header_.data_offset - 8);
  const size_t key = header.find("\"cross_decoder.layers.0.ffn.fc2.weight\"");
  const size_t at = header.find(from, key);
  ASSERT_NE(at, std::string::npos);
  std::string edited = header;
  edited.replace(at, from.size(),
                 "\"shape\":[" + std::to_string(t->shape[1]) + "," + std::to_string(t->shape[0]) + "]");
  expect_load_error(load_with(params_, raw_file(edited, weights_.substr(header_.data_offset))),
                    "tensor \"cross_decoder.layers.0.ffn.fc2.weight\" has shape [160, 64], expected [64, 160]");
}

TEST_F(CheckpointTest, NonFloatDtypeIsNamed) {
  const TensorInfo* t = header_.find("layer_norm.weight");
  ASSERT_NE(t, nullptr);
  const std::string header = weights_.substr(8, header_.data_offset - 8);
  std::string edited = header;
  const size_t key = edited.find("\"layer_norm.weight\"");
  const size_t at = edited.find("\"F32\"", key);
  edited.replace(at, 5, "\"I32\"");
  expect_load_error(load_with(params_, raw_file(edited, weights_.substr(header_.data_offset))),
                    "tensor \"layer_norm.weight\" has dtype I32");
}

TEST_F(CheckpointTest, NanWeightIsNamed) {
  const TensorInfo* t = header_.find("self_decoder.layers.0.mixer.v_proj.weight");
  ASSERT_NE(t, nullptr);
  std::string w = weights_;
  const float nan = std::nanf("");
  std::memcpy(&w[header_.data_offset + t->begin + 4 * 17], &nan, 4);
  expect_load_error(load_with(params_, w),
                    "tensor \"self_decoder.layers.0.mixer.v_proj.weight\" has a non-finite value");
}

TEST_F(CheckpointTest, BadParamsAreNamed) {
  expect_load_error(load_with("{\"dim\": 64}", weights_), "missing required key \"n_layers\"");
  expect_load_error(load_with("not json", weights_), "params.json");
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string p = params_;
    const size_t at = p.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    p.replace(at, from.size(), to);
    return p;
  };
  expect_load_error(load_with(edit("\"dim\":64", "\"dim\":\"64\""), weights_), "\"dim\" must be an integer");
  expect_load_error(load_with(edit("\"n_self_layers\":2", "\"n_self_layers\":4"), weights_), "n_self_layers");
  expect_load_error(load_with(edit("\"n_attn_kv_heads\":2", "\"n_attn_kv_heads\":3"), weights_), "n_attn_kv_heads");
  expect_load_error(load_with(edit("\"dim\":64", "\"dim\":65"), weights_), "divisible");
  // A consistent config that does not match the tensors: the first mismatching tensor is named.
  expect_load_error(load_with(edit("\"hidden_dim\":160", "\"hidden_dim\":128"), weights_),
                    "ffn.fc1.weight\" has shape");
}

// docs/design.md §2.1: an MoE's keys are validated and named, and so is a missing expert tensor.
TEST(CheckpointMoe, BadKeysAndMissingExpertTensorsAreNamed) {
  test::TempDir dir;
  ASSERT_TRUE(write_random_model(dir.sub("good"), find_preset("tiny-moe-gret").value(), 1, DType::kF32).ok());
  const std::string params = test::read_file(dir.sub("good/params.json"));
  const std::string weights = test::read_file(dir.sub("good/model.safetensors"));
  auto header = parse(weights);
  ASSERT_TRUE(header.ok());
  int n = 0;
  auto load_with = [&](const std::string& p, const std::string& w) {
    const std::string d = dir.sub("case" + std::to_string(n++));
    std::filesystem::create_directories(d);
    test::write_file(d + "/params.json", p);
    test::write_file(d + "/model.safetensors", w);
    auto m = Model::load(d);
    return m.ok() ? Status::Ok() : m.status();
  };
  auto expect_named = [](const Status& s, const std::string& needle) {
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  ASSERT_TRUE(load_with(params, weights).ok());
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string p = params;
    const size_t at = p.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    p.replace(at, from.size(), to);
    return p;
  };
  expect_named(load_with(edit("\"n_experts_per_token\":2", "\"n_experts_per_token\":9"), weights),
               "\"n_experts_per_token\" must be in [1, n_experts] = [1, 8], got 9");
  expect_named(load_with(edit("\"n_experts_per_token\":2", "\"n_experts_per_token\":0"), weights),
               "\"n_experts_per_token\"");
  expect_named(load_with(edit("\"expert_hidden_dim\":32", "\"expert_hidden_dim\":0"), weights),
               "\"expert_hidden_dim\" must be > 0");
  expect_named(load_with(edit("\"shared_expert_hidden_dim\":64", "\"shared_expert_hidden_dim\":-1"), weights),
               "\"shared_expert_hidden_dim\" must be >= 0");
  expect_named(load_with(edit("\"n_experts\":8", "\"n_experts\":-8"), weights), "\"n_experts\" must be >= 0");
  expect_named(load_with(edit("\"moe_norm_topk_prob\":false", "\"moe_norm_topk_prob\":1"), weights),
               "\"moe_norm_topk_prob\" must be true or false");
  // Dense with an MoE key left over.
  expect_named(load_with(edit("\"n_experts\":8", "\"n_experts\":0"), weights),
               "\"n_experts_per_token\" needs \"n_experts\" > 0");
  // A consistent config the tensors do not match: fewer experts than stored is fine (extra
  // tensors are ignored), a larger expert is named by its first tensor.
  expect_named(load_with(edit("\"expert_hidden_dim\":32", "\"expert_hidden_dim\":16"), weights),
               "tensor \"self_decoder.layers.0.ffn.experts.0.fc1.weight\" has shape [32, 64], expected [16, 64]");
  // A missing routed expert, router or shared expert tensor is named.
  const std::string h = weights.substr(8, header->data_offset - 8), data = weights.substr(header->data_offset);
  for (const std::string name :
       {"self_decoder.layers.1.ffn.experts.5.gate.weight", "cross_decoder.layers.0.ffn.router.weight",
        "cross_decoder.layers.1.ffn.shared.fc2.weight"}) {
    std::string edited = h;
    const size_t at = edited.find("\"" + name + "\"");
    ASSERT_NE(at, std::string::npos) << name;
    edited.replace(at + 1, name.size(), std::string(name.size(), 'x'));
    expect_named(load_with(params, raw_file(edited, data)), "missing tensor \"" + name + "\"");
  }
}

TEST_F(CheckpointTest, ShardedCheckpointLoadsAndMatches) {
  // Split the good model into two shards with an index.
  auto good = Model::load(dir_.sub("good"));
  ASSERT_TRUE(good.ok());
  const std::string d = dir_.sub("sharded");
  std::filesystem::create_directories(d);
  test::write_file(d + "/params.json", params_);
  std::vector<TensorSpec> s1, s2;
  Json::Object map;
  for (size_t i = 0; i < header_.tensors.size(); ++i) {
    const TensorInfo& t = header_.tensors[i];
    const bool first = i % 2 == 0;
    (first ? s1 : s2).push_back({t.name, t.dtype, t.shape});
    map[t.name] = Json(first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors");
  }
  for (auto [specs, name] :
       {std::pair{&s1, "model-00001-of-00002.safetensors"}, {&s2, "model-00002-of-00002.safetensors"}}) {
    ASSERT_TRUE(write_safetensors(d + "/" + name, *specs, [&](size_t i, std::vector<uint8_t>& b) {
                  const TensorInfo* t = header_.find((*specs)[i].name);
                  b.assign(weights_.begin() + header_.data_offset + t->begin,
                           weights_.begin() + header_.data_offset + t->end);
                  return Status::Ok();
                }).ok());
  }
  Json::Object idx;
  idx["weight_map"] = Json(std::move(map));
  test::write_file(d + "/model.safetensors.index.json", Json(std::move(idx)).dump());
  auto sharded = Model::load(d);
  ASSERT_TRUE(sharded.ok()) << sharded.status().to_string();
  EXPECT_EQ((*sharded)->fingerprint(), (*good)->fingerprint());
  std::vector<int32_t> toks = {3, 1, 4, 1, 5, 9, 2, 6};
  EXPECT_EQ((*sharded)->score(toks).value(), (*good)->score(toks).value());
  // An index entry pointing outside the directory is refused.
  test::write_file(d + "/model.safetensors.index.json", R"({"weight_map":{"embed_tokens.weight":"../x.safetensors"}})");
  auto escaped = Model::load(d);
  ASSERT_FALSE(escaped.ok());
  EXPECT_NE(escaped.status().message().find("outside the model directory"), std::string::npos);
}

TEST_F(CheckpointTest, Bf16CheckpointMatchesF32WithinRounding) {
  auto cfg = find_preset("tiny-gret");
  ASSERT_TRUE(write_random_model(dir_.sub("bf16"), cfg.value(), 1, DType::kBF16).ok());
  auto a = Model::load(dir_.sub("good")), b = Model::load(dir_.sub("bf16"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->fingerprint(), (*b)->fingerprint());  // different bytes, different model identity
  std::vector<int32_t> toks = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5};
  auto sa = (*a)->score(toks), sb = (*b)->score(toks);
  EXPECT_LT(test::max_abs_diff(sa->data(), sb->data(), sa->size()), 0.1);
}

TEST(DTypes, Conversions) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.5f)), 1.5f);
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), f32_to_bf16(1.0f));  // ties round to even
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
}

TEST(StateBlob, CorruptionAndMismatchAreDetected) {
  test::TempDir dir;
  for (const char* preset : {"tiny-gret", "tiny-swa"}) {
    auto cfg = find_preset(preset);
    ASSERT_TRUE(write_random_model(dir.sub(preset), cfg.value(), 3, DType::kF32).ok());
  }
  auto g = Model::load(dir.sub("tiny-gret")), s = Model::load(dir.sub("tiny-swa"));
  ASSERT_TRUE(g.ok() && s.ok());
  SequenceState st = (*g)->new_sequence();
  ASSERT_TRUE((*g)->prefill(st, std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}).ok());
  const auto blob = serialize_state(st, (*g)->config(), (*g)->fingerprint());
  SequenceState out;
  ASSERT_TRUE(deserialize_state(blob, (*g)->config(), (*g)->fingerprint(), out).ok());
  for (size_t pos : {size_t{0}, size_t{20}, blob.size() / 2, blob.size() - 1}) {
    auto bad = blob;
    bad[pos] ^= 0x10;
    EXPECT_EQ(deserialize_state(bad, (*g)->config(), (*g)->fingerprint(), out).status().code(), StatusCode::kDataLoss)
        << pos;
  }
  EXPECT_FALSE(
      deserialize_state(std::span(blob).first(blob.size() - 9), (*g)->config(), (*g)->fingerprint(), out).ok());
  EXPECT_EQ(deserialize_state(blob, (*g)->config(), (*g)->fingerprint() ^ 1, out).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_FALSE(deserialize_state(blob, (*s)->config(), (*g)->fingerprint(), out).ok());  // gRet blob into an SWA model
  // A state-only blob keeps position and self state, carries no KV rows.
  StateBlobOptions no_kv;
  no_kv.include_kv = false;
  auto info = deserialize_state(serialize_state(st, (*g)->config(), (*g)->fingerprint(), no_kv), (*g)->config(),
                                (*g)->fingerprint(), out);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->position, 7);
  EXPECT_EQ(info->kv_rows, 0);
  EXPECT_TRUE(out.k.empty());
  // bf16 KV rows round-trip within bf16 precision and are half the bytes.
  StateBlobOptions bf;
  bf.kv_dtype = KvDType::kBF16;
  const auto small = serialize_state(st, (*g)->config(), (*g)->fingerprint(), bf);
  EXPECT_EQ(blob.size() - small.size(), st.k.size() * 2 * 2);
  ASSERT_TRUE(deserialize_state(small, (*g)->config(), (*g)->fingerprint(), out).ok());
  EXPECT_LT(test::max_abs_diff(out.k.data(), st.k.data(), st.k.size()), 0.05);
}

}  // namespace
}  // namespace yoco
