// Every named intermediate of the layer program (model/program.h), dumped from the CPU backend,
// against the float64 reference (tests/reference/, intermediates.safetensors) on each golden
// model: the full forward in chunks (every stage, every row), and prefill in chunks + logits +
// decode steps (the step forms of the mixers, each row at its own position). A failure names the
// first stage and layer over its bound (docs/design.md §2.9).
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/trace.h"
#include "tests/unit/test_util.h"
#include "tests/unit/trace_check.h"

namespace yoco {
namespace {

// The state test's rule (golden_test.cc): |x − ref| ≤ 1e-5 · max|ref| + 1e-4 · |ref|.
constexpr test::StageBound kFp32Bound{1e-5, 1e-4, 0};

std::vector<int32_t> golden_tokens(const std::string& name) {
  auto j = Json::parse(test::read_file(test::goldens_dir() + "/" + name + "/golden.json"));
  EXPECT_TRUE(j.ok()) << j.status().to_string();
  std::vector<int32_t> tokens;
  for (const auto& t : j.value().find("tokens")->as_array()) tokens.push_back(static_cast<int32_t>(t.as_int()));
  return tokens;
}

class IntermediatesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = test::goldens_dir() + "/" + GetParam();
    auto m = Model::load(dir_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
    tokens_ = golden_tokens(GetParam());
    ref_ = test::load_intermediates(dir_ + "/intermediates.safetensors");
    ASSERT_FALSE(ref_.empty());
  }

  std::string dir_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> tokens_;
  std::map<std::string, test::RefTensor> ref_;
};

TEST_P(IntermediatesTest, FullForwardMatchesReferenceStageByStage) {
  test::TraceCollector run;
  {
    TraceScope scope(run.sink());
    PrefillOptions opt;
    opt.chunk_tokens = 7;  // several chunks: each row is compared at its own position
    opt.retention_chunk = 4;
    ASSERT_TRUE(model_
                    ->forward(
                        tokens_, [](int64_t, int, const float*) {}, opt)
                    .ok());
  }
  EXPECT_TRUE(test::stages_match(run, ref_, kFp32Bound, /*every_name=*/true));
}

TEST_P(IntermediatesTest, PrefillAndDecodeStepsMatchReferenceStageByStage) {
  const size_t steps = 5, n0 = tokens_.size() - steps;
  const int V = model_->config().vocab_size;
  test::TraceCollector run;
  SequenceState st = model_->new_sequence();
  SequenceState* one[1] = {&st};
  std::vector<float> logits(V);
  {
    TraceScope scope(run.sink());
    PrefillOptions opt;
    opt.chunk_tokens = 5;
    opt.retention_chunk = 3;
    ASSERT_TRUE(model_->prefill(st, std::span(tokens_).first(n0), opt).ok());
    ASSERT_TRUE(model_->logits(one, logits.data()).ok());  // the cross-decoder at n0 − 1
    for (size_t p = n0; p < tokens_.size(); ++p) {
      const int32_t tok[1] = {tokens_[p]};
      ASSERT_TRUE(model_->decode_step(one, tok, logits.data()).ok());
    }
  }
  // The self-decoder and the K/V rows at every position; the cross-decoder and head at n0 − 1 on.
  for (const auto& [name, rows] : run.got()) {
    const bool late = name.rfind("cross.", 0) == 0 || name.rfind("head.", 0) == 0;
    EXPECT_EQ(rows.rows.size(), late ? steps + 1 : tokens_.size()) << name;
  }
  EXPECT_TRUE(test::stages_match(run, ref_, kFp32Bound, /*every_name=*/true));
}

INSTANTIATE_TEST_SUITE_P(Configs, IntermediatesTest,
                         ::testing::Values("gret_tied", "gret_gqa3_untied", "swa_w8", "yocou_swa_t3_nope",
                                           "yocou_gret_t3", "gret_selflayers3", "transformer_gqa3", "moe_gret_shared",
                                           "moe_yocou_swa_t3_nope", "moe_swa_k1_shared_norm"));

}  // namespace
}  // namespace yoco
