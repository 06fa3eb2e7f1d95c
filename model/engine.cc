#include "model/engine.h"

#include <cstring>
#include <limits>
#include <vector>

namespace yoco {

namespace {

// yoco::Model behind the Engine interface: a table of host states.
class CpuEngine final : public Engine {
 public:
  CpuEngine(const Model& model, KvPool* pool) : model_(model), pool_(pool) {}
  ~CpuEngine() override {
    for (auto& s : slots_)
      if (s && s->pages && pool_) pool_->release(*s->pages);
  }

  const ModelConfig& config() const override { return model_.config(); }
  std::string device() const override { return "cpu"; }

  Result<SeqId> adopt(SequenceState& st) override {
    if (st.pages && (!pool_ || st.pages->k_pool != pool_->k_data()))
      return invalid_argument("state: its K/V rows are paged in a pool this engine does not own");
    SeqId id = 0;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      id = static_cast<SeqId>(slots_.size());
      slots_.emplace_back();
    }
    auto s = std::make_unique<SequenceState>(std::move(st));
    st = SequenceState{};
    // A fresh state in a pooled engine keeps its rows in pool blocks, as a shipped one does.
    if (pool_ && !s->pages && s->position == 0) s->pages = pool_->new_pages();
    slots_[id] = std::move(s);
    return id;
  }

  Status release(SeqId id) override {
    SequenceState* s = find(id);
    if (!s) return unknown(id);
    if (s->pages && pool_) pool_->release(*s->pages);
    slots_[id].reset();
    free_.push_back(id);
    return Status::Ok();
  }

  int64_t position(SeqId id) const override {
    const SequenceState* s = find(id);
    return s ? s->position : -1;
  }
  int64_t capacity(SeqId id) const override {
    const SequenceState* s = find(id);
    if (!s) return -1;
    return s->pages ? s->pages->capacity() : std::numeric_limits<int64_t>::max();
  }
  Status reserve(SeqId id, int64_t rows) override {
    SequenceState* s = find(id);
    if (!s) return unknown(id);
    if (!s->pages) return Status::Ok();  // contiguous rows grow as they are written
    return pool_->reserve(*s->pages, rows);
  }

  Status prefill(SeqId id, std::span<const int32_t> tokens, const PrefillOptions& opt) override {
    SequenceState* s = find(id);
    if (!s) return unknown(id);
    return model_.prefill(*s, tokens, opt);
  }
  Status logits(std::span<const SeqId> ids, float* out) override {
    std::vector<SequenceState*> states;
    YOCO_RETURN_IF_ERROR(gather(ids, states));
    return model_.logits(states, out);
  }
  Status decode_step(std::span<const SeqId> ids, std::span<const int32_t> tokens, float* out) override {
    std::vector<SequenceState*> states;
    YOCO_RETURN_IF_ERROR(gather(ids, states));
    return model_.decode_step(states, tokens, out);
  }

  Status read_rows(SeqId id, int64_t first, int64_t n, float* k, float* v) const override {
    const SequenceState* s = find(id);
    if (!s) return unknown(id);
    if (first < 0 || n < 0 || first + n > s->position)
      return invalid_argument("rows: [" + std::to_string(first) + ", " + std::to_string(first + n) +
                              ") is outside the sequence's " + std::to_string(s->position) + " rows");
    const int KV = model_.shard().kv_dim;
    for (int64_t r = 0; r < n; ++r) {
      std::memcpy(k + r * KV, s->k_row(first + r, KV), static_cast<size_t>(KV) * 4);
      std::memcpy(v + r * KV, s->v_row(first + r, KV), static_cast<size_t>(KV) * 4);
    }
    return Status::Ok();
  }
  Status snapshot(SeqId id, SequenceState& out) const override {
    const SequenceState* s = find(id);
    if (!s) return unknown(id);
    SequenceState c;
    c.position = s->position;
    c.self = s->self;
    c.last_hidden = s->last_hidden;
    out = std::move(c);
    return Status::Ok();
  }
  const SequenceState* host_state(SeqId id) const override { return find(id); }

 private:
  SequenceState* find(SeqId id) const {
    return id >= 0 && id < static_cast<SeqId>(slots_.size()) ? slots_[id].get() : nullptr;
  }
  static Status unknown(SeqId id) {
    return Status(StatusCode::kNotFound, "engine: no sequence " + std::to_string(id));
  }
  Status gather(std::span<const SeqId> ids, std::vector<SequenceState*>& states) const {
    states.reserve(ids.size());
    for (SeqId id : ids) {
      SequenceState* s = find(id);
      if (!s) return unknown(id);
      states.push_back(s);
    }
    return Status::Ok();
  }

  const Model& model_;
  KvPool* const pool_;
  std::vector<std::unique_ptr<SequenceState>> slots_;
  std::vector<SeqId> free_;
};

}  // namespace

Result<int> parse_device_flag(const std::string& value) {
  if (value == "cpu") return -1;
  if (value == "cuda") return 0;
  if (value.rfind("cuda:", 0) == 0 && value.size() > 5 && value.size() <= 8 &&
      value.find_first_not_of("0123456789", 5) == std::string::npos)
    return std::stoi(value.substr(5));
  return invalid_argument("--device: must be cpu, cuda or cuda:N, got \"" + value + "\"");
}

std::unique_ptr<Engine> make_cpu_engine(const Model& model, KvPool* pool) {
  return std::make_unique<CpuEngine>(model, pool);
}

}  // namespace yoco
