// Every named intermediate of the layer program (model/program.h), dumped from the CUDA backend:
//   - against the float64 reference on each golden model (tests/reference/, as
//     tests/unit/intermediates_test.cc does for the CPU backend): prefill in chunks, logits, decode
//     steps, each row at its own position;
//   - against the CPU backend on the random presets of cuda_engine_test.cc, the same calls on both.
// Bound: relative L2 per stage (bf16 weights and product inputs, docs/design.md §2.5). Each run
// prints one line per stage in program order, so a disagreement is located to the first stage and
// layer where it grows (docs/design.md §2.9). Label "gpu": skips without a CUDA device.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/ops.h"
#include "model/cuda/cuda_engine.h"
#include "model/model.h"
#include "model/random_model.h"
#include "model/trace.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/unit/test_util.h"
#include "tests/unit/trace_check.h"

namespace yoco {
namespace {

constexpr test::StageBound kBf16Bound{0, 0, 5e-2};

CudaEngineOptions small_options() {
  CudaEngineOptions o;
  o.max_sequences = 4;
  o.max_batch = 4;
  o.max_chunk_tokens = 64;
  o.max_context = 1024;
  o.kv_blocks = 64;
  o.kv_block_size = 32;
  return o;
}

// prefill(tokens[0, n0)) in chunks of `chunk`, logits, then decode steps for the rest: on the CUDA
// engine, or on the CPU Model when `gpu` is null.
void run_calls(const Model& cpu, CudaEngine* gpu, std::span<const int32_t> tokens, size_t n0, int chunk) {
  const int V = cpu.config().vocab_size;
  std::vector<float> logits(V);
  if (gpu) {
    auto id = gpu->new_sequence();
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    const CudaEngine::SeqId one[1] = {*id};
    ASSERT_TRUE(gpu->prefill(*id, tokens.first(n0), chunk).ok());
    ASSERT_TRUE(gpu->logits(one, logits.data()).ok());
    for (size_t p = n0; p < tokens.size(); ++p)
      ASSERT_TRUE(gpu->decode_step(one, tokens.subspan(p, 1), logits.data()).ok());
    ASSERT_TRUE(gpu->release(*id).ok());
    return;
  }
  SequenceState st = cpu.new_sequence();
  SequenceState* one[1] = {&st};
  PrefillOptions opt;
  opt.chunk_tokens = chunk;
  ASSERT_TRUE(cpu.prefill(st, tokens.first(n0), opt).ok());
  ASSERT_TRUE(cpu.logits(one, logits.data()).ok());
  for (size_t p = n0; p < tokens.size(); ++p)
    ASSERT_TRUE(cpu.decode_step(one, tokens.subspan(p, 1), logits.data()).ok());
}

class CudaIntermediatesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaIntermediatesTest, PrefillAndDecodeStepsMatchReferenceStageByStage) {
  SKIP_WITHOUT_GPU();
  const std::string dir = test::goldens_dir() + "/" + GetParam();
  auto m = Model::load(dir);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto j = Json::parse(test::read_file(dir + "/golden.json"));
  ASSERT_TRUE(j.ok());
  std::vector<int32_t> tokens;
  for (const auto& t : j.value().find("tokens")->as_array()) tokens.push_back(static_cast<int32_t>(t.as_int()));
  auto gpu = CudaEngine::create(**m, small_options());
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  test::TraceCollector run;
  {
    TraceScope scope(run.sink());
    run_calls(**m, gpu->get(), tokens, tokens.size() - 5, 5);
  }
  EXPECT_TRUE(test::stages_match(run, test::load_intermediates(dir + "/intermediates.safetensors"), kBf16Bound,
                                 /*every_name=*/true));
}

INSTANTIATE_TEST_SUITE_P(Configs, CudaIntermediatesTest,
                         ::testing::Values("gret_tied", "gret_gqa3_untied", "swa_w8", "yocou_swa_t3_nope",
                                           "yocou_gret_t3", "gret_selflayers3", "transformer_gqa3", "moe_gret_shared",
                                           "moe_yocou_swa_t3_nope", "moe_swa_k1_shared_norm"));

class CudaVsCpuIntermediatesTest : public ::testing::TestWithParam<std::string> {};

// The presets of cuda_engine_test.cc, where the engines' log-probs come closest to its bar: the
// same prefill (two chunks, longer than the window) and decode steps on both backends.
TEST_P(CudaVsCpuIntermediatesTest, EveryStageMatchesTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  test::TempDir dir;
  ASSERT_TRUE(write_random_model(dir.path(), find_preset(GetParam()).value(), 42, DType::kF32).ok());
  auto m = Model::load(dir.path());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  std::mt19937 g(7);
  std::vector<int32_t> tokens(100);
  for (auto& t : tokens) t = static_cast<int32_t>(g() % (*m)->config().vocab_size);
  auto gpu = CudaEngine::create(**m, small_options());
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  test::TraceCollector on_cpu, on_gpu;
  {
    TraceScope scope(on_cpu.sink());
    run_calls(**m, nullptr, tokens, 90, 64);
  }
  {
    TraceScope scope(on_gpu.sink());
    run_calls(**m, gpu->get(), tokens, 90, 64);
  }
  EXPECT_TRUE(test::stages_match(on_gpu, test::as_reference(on_cpu), kBf16Bound, /*every_name=*/true));
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaVsCpuIntermediatesTest,
                         ::testing::Values("tiny-gret", "tiny-swa", "tiny-yocou", "tiny-transformer"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace yoco
