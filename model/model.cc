#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/ops.h"
#include "model/cpu_backend.h"
#include "model/program.h"

namespace yoco {

namespace {

std::vector<int64_t> consecutive(int64_t pos0, int n) {
  std::vector<int64_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = pos0 + i;
  return p;
}

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Tensor parallelism splits YOCO's heads only (model/tensor_parallel.h); a transformer runs
// whole on one rank.
Status transformer_not_split(const ModelConfig& c, const TensorParallel& tp) {
  if (c.is_transformer() && tp.world != 1)
    return Status(StatusCode::kUnimplemented,
                  "tensor parallel: arch \"transformer\" is not supported (world must be 1, got " +
                      std::to_string(tp.world) + ")");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, WeightSet set, const TensorParallel& tp) {
  if (tp.world != 1) {  // reject a bad split before reading the weights
    auto c = load_model_config(dir + "/params.json");
    if (!c.ok()) return c.status();
    YOCO_RETURN_IF_ERROR(transformer_not_split(c.value(), tp));
    YOCO_RETURN_IF_ERROR(validate_tensor_parallel(c.value(), tp));
  }
  auto w = load_model_dir(dir, set);
  if (!w.ok()) return w.status();
  if (tp.world == 1 && !tp.comm) return std::make_unique<Model>(std::move(w).value());
  return create(std::move(w).value(), tp);
}

Result<std::unique_ptr<Model>> Model::create(LoadedWeights w, const TensorParallel& tp) {
  YOCO_RETURN_IF_ERROR(transformer_not_split(w.config, tp));
  YOCO_RETURN_IF_ERROR(validate_tensor_parallel(w.config, tp));
  shard_weights(w.config, tp, w.weights);
  return std::unique_ptr<Model>(new Model(std::move(w), tp));
}

Model::Model(LoadedWeights w) : Model(std::move(w), TensorParallel{}) {}

Model::Model(LoadedWeights w, const TensorParallel& tp)
    : cfg_(w.config),
      w_(std::move(w.weights)),
      fingerprint_(w.fingerprint),
      tp_(tp),
      sd_(shard_dims(cfg_, tp.world)),
      kv_row_(cfg_.is_transformer() ? cfg_.n_layers * sd_.kv_dim : sd_.kv_dim) {
  YOCO_CHECK(!cfg_.is_transformer() || tp.world == 1);
}

Status Model::agree(const Status& local) const {
  if (tp_.world == 1) return local;
  float rejected = local.ok() ? 0.0f : 1.0f;
  YOCO_RETURN_IF_ERROR(tp_.comm->all_reduce_sum(&rejected, 1));
  if (!local.ok()) return local;
  if (rejected > 0)
    return Status(StatusCode::kCancelled, "tensor parallel: " + std::to_string(static_cast<int>(rejected)) +
                                              " other rank(s) rejected this call; nothing was computed");
  return Status::Ok();
}

Status Model::add_row_parallel(const float* x, const std::vector<float>& w, float* h, int rows, int k) const {
  const int D = cfg_.dim;
  if (tp_.world == 1) {
    linear(x, w, h, rows, D, k, /*accumulate=*/true);
    return Status::Ok();
  }
  // Sum the partial products first, then add: every rank adds the same bits to the same h.
  std::vector<float> y(static_cast<size_t>(rows) * D);
  linear(x, w, y.data(), rows, D, k);
  YOCO_RETURN_IF_ERROR(tp_.comm->all_reduce_sum(y.data(), y.size()));
  cpu::add_inplace(h, y.data(), static_cast<int64_t>(y.size()));
  return Status::Ok();
}

Status Model::validate_tokens(std::span<const int32_t> tokens, int64_t start_position, const char* field) const {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= cfg_.vocab_size)
      return invalid_argument(std::string(field) + "[" + std::to_string(i) + "]: token id " +
                              std::to_string(tokens[i]) + " is outside the vocabulary [0, " +
                              std::to_string(cfg_.vocab_size) + ")");
  if (start_position + static_cast<int64_t>(tokens.size()) > cfg_.max_seq_len)
    return invalid_argument(std::string(field) + ": sequence of " +
                            std::to_string(start_position + static_cast<int64_t>(tokens.size())) +
                            " tokens exceeds max_seq_len " + std::to_string(cfg_.max_seq_len));
  return Status::Ok();
}

Status Model::make_room(SequenceState& st, int64_t rows) const {
  const int64_t need = st.position + rows;
  if (st.pages) {
    if (st.pages->kv_dim != kv_row_ || st.pages->block_size % kKvChunkRows != 0)
      return invalid_argument("KV pages do not match the model (kv_dim or block size)");
    if (st.pages->capacity() < need)
      return Status(StatusCode::kResourceExhausted, "KV pool: the sequence needs " + std::to_string(need) +
                                                        " rows, its blocks hold " +
                                                        std::to_string(st.pages->capacity()));
    return Status::Ok();
  }
  // A transformer's rows come in whole chunks (model/state.h).
  const int64_t alloc = cfg_.is_transformer() ? round_up(need, kKvChunkRows) : need;
  if (!cfg_.is_transformer() || static_cast<int64_t>(st.k.size()) < alloc * kv_row_) {
    st.k.resize(static_cast<size_t>(alloc) * kv_row_);
    st.v.resize(static_cast<size_t>(alloc) * kv_row_);
  }
  return Status::Ok();
}

// The drivers of the layer program (model/program.h): each call checks its arguments (on every
// rank: agree), binds its rows to the CPU backend, runs the program's pass and moves the positions.

Status Model::prefill(SequenceState& st, std::span<const int32_t> tokens, const PrefillOptions& opt) const {
  YOCO_RETURN_IF_ERROR(agree([&]() -> Status {
    if (opt.chunk_tokens <= 0) return invalid_argument("chunk_tokens must be > 0");
    if (opt.retention_chunk <= 0) return invalid_argument("retention_chunk must be > 0");
    YOCO_RETURN_IF_ERROR(validate_tokens(tokens, st.position));
    return make_room(st, static_cast<int64_t>(tokens.size()));
  }()));
  CpuBackend be(*this, opt.retention_chunk);
  SequenceState* one[1] = {&st};
  for (size_t off = 0; off < tokens.size(); off += opt.chunk_tokens) {
    const int n = static_cast<int>(std::min<size_t>(opt.chunk_tokens, tokens.size() - off));
    const std::vector<int64_t> positions = consecutive(st.position, n);
    be.bind({n, positions.data(), one, /*chunk=*/true, tokens.data() + off, nullptr});
    YOCO_RETURN_IF_ERROR(program::run(be, program::Pass::prefill()));
    st.position += n;
  }
  return Status::Ok();
}

Status Model::logits(std::span<SequenceState* const> states, float* out) const {
  const int B = static_cast<int>(states.size()), D = cfg_.dim;
  YOCO_RETURN_IF_ERROR(agree([&]() -> Status {
    if (!has_cross_decoder())
      return failed_precondition("this model was loaded without the cross-decoder (prefill weights)");
    for (int b = 0; b < B; ++b)
      if (states[b]->position <= 0 || static_cast<int>(states[b]->last_hidden.size()) != D)
        return failed_precondition("sequence " + std::to_string(b) + " has consumed no tokens");
    return Status::Ok();
  }()));
  std::vector<int64_t> positions(B);
  for (int b = 0; b < B; ++b) positions[b] = states[b]->position - 1;
  CpuBackend be(*this, PrefillOptions{}.retention_chunk);
  be.bind({B, positions.data(), states, /*chunk=*/false, nullptr, out});
  return program::run(be, program::Pass::logits());
}

Status Model::decode_step(std::span<SequenceState* const> states, std::span<const int32_t> tokens, float* out) const {
  const int B = static_cast<int>(states.size());
  YOCO_RETURN_IF_ERROR(agree([&]() -> Status {
    if (!has_cross_decoder())
      return failed_precondition("this model was loaded without the cross-decoder (prefill weights)");
    if (tokens.size() != states.size()) return invalid_argument("decode_step: one token per sequence");
    for (int b = 0; b < B; ++b) YOCO_RETURN_IF_ERROR(validate_tokens(tokens.subspan(b, 1), states[b]->position));
    for (int b = 0; b < B; ++b)
      if (states[b]->pages && states[b]->pages->capacity() < states[b]->position + 1)
        return Status(StatusCode::kResourceExhausted, "sequence " + std::to_string(b) + ": its KV blocks are full");
    // Paged: checked above; contiguous: grows by the step's row.
    for (int b = 0; b < B; ++b) YOCO_RETURN_IF_ERROR(make_room(*states[b], 1));
    return Status::Ok();
  }()));
  std::vector<int64_t> positions(B);
  for (int b = 0; b < B; ++b) positions[b] = states[b]->position;
  CpuBackend be(*this, PrefillOptions{}.retention_chunk);
  be.bind({B, positions.data(), states, /*chunk=*/false, tokens.data(), out});
  YOCO_RETURN_IF_ERROR(program::run(be, program::Pass::decode_step()));
  for (SequenceState* st : states) st->position += 1;
  return Status::Ok();
}

Status Model::forward(SequenceState& st, std::span<const int32_t> tokens, float* out, const PrefillOptions& opt) const {
  YOCO_RETURN_IF_ERROR(agree([&]() -> Status {
    if (!has_cross_decoder())
      return failed_precondition("this model was loaded without the cross-decoder (prefill weights)");
    if (opt.chunk_tokens <= 0 || opt.retention_chunk <= 0) return invalid_argument("chunk sizes must be > 0");
    YOCO_RETURN_IF_ERROR(validate_tokens(tokens, st.position));
    return make_room(st, static_cast<int64_t>(tokens.size()));
  }()));
  const int V = cfg_.vocab_size;
  CpuBackend be(*this, opt.retention_chunk);
  SequenceState* one[1] = {&st};
  for (size_t off = 0; off < tokens.size(); off += opt.chunk_tokens) {
    const int n = static_cast<int>(std::min<size_t>(opt.chunk_tokens, tokens.size() - off));
    const std::vector<int64_t> positions = consecutive(st.position, n);
    be.bind({n, positions.data(), one, /*chunk=*/true, tokens.data() + off, out + off * V});
    YOCO_RETURN_IF_ERROR(program::run(be, program::Pass::forward()));
    st.position += n;
  }
  return Status::Ok();
}

Status Model::forward(std::span<const int32_t> tokens, const LogitsSink& sink, const PrefillOptions& opt) const {
  YOCO_RETURN_IF_ERROR(agree([&]() -> Status {
    if (!has_cross_decoder())
      return failed_precondition("this model was loaded without the cross-decoder (prefill weights)");
    if (opt.chunk_tokens <= 0 || opt.retention_chunk <= 0) return invalid_argument("chunk sizes must be > 0");
    return validate_tokens(tokens, 0);
  }()));
  const int V = cfg_.vocab_size;
  // Bound the logits buffer (rows × vocab) to ~256 MB whatever the vocabulary.
  const int chunk = std::max(1, std::min(opt.chunk_tokens, (1 << 26) / V));
  SequenceState st = new_sequence();
  YOCO_RETURN_IF_ERROR(make_room(st, static_cast<int64_t>(tokens.size())));  // rows allocated once
  std::vector<float> logits;
  for (size_t off = 0; off < tokens.size(); off += chunk) {
    const int n = static_cast<int>(std::min<size_t>(chunk, tokens.size() - off));
    const int64_t pos0 = st.position;
    logits.resize(static_cast<size_t>(n) * V);
    YOCO_RETURN_IF_ERROR(forward(st, tokens.subspan(off, n), logits.data(), opt));
    sink(pos0, n, logits.data());
  }
  return Status::Ok();
}

Result<std::vector<float>> Model::score(std::span<const int32_t> tokens, const PrefillOptions& opt) const {
  // A rejected call still takes part in the one agreement its peers' forward() makes.
  if (tokens.size() < 2) return agree(invalid_argument("tokens: scoring needs at least 2 tokens"));
  std::vector<float> out(tokens.size() - 1);
  const int V = cfg_.vocab_size;
  Status st = forward(
      tokens,
      [&](int64_t pos0, int rows, const float* logits) {
        std::vector<float> row(V);
        for (int r = 0; r < rows; ++r) {
          const int64_t p = pos0 + r;
          if (p + 1 >= static_cast<int64_t>(tokens.size())) break;
          std::memcpy(row.data(), logits + static_cast<size_t>(r) * V, V * 4);
          cpu::log_softmax(row.data(), V);
          out[p] = row[tokens[p + 1]];
        }
      },
      opt);
  if (!st.ok()) return st;
  return out;
}

}  // namespace yoco
