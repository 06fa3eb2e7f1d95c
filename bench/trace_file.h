// engine_bench's --trace-out: a run's named intermediates (model/trace.h, docs/design.md §2.9) by
// name and position, written as safetensors (F32 [positions, values] per name; positions a run did
// not reach stay zero), to compare two runs (fp32 and bf16, two builds, two machines) or a run with
// tests/reference/ stage by stage.
#pragma once

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "model/trace.h"

namespace yoco::bench {

class TraceFile {
 public:
  TraceSink sink() {
    return [this](const TraceRows& t) {
      Named& n = named_[std::string(t.name)];
      n.cols = t.cols;
      for (int r = 0; r < t.rows; ++r)
        n.rows[t.positions[r]].assign(t.data + static_cast<size_t>(r) * t.cols,
                                      t.data + static_cast<size_t>(r + 1) * t.cols);
    };
  }
  size_t names() const { return named_.size(); }

  Status write(const std::string& path) const {
    std::vector<TensorSpec> specs;
    std::vector<const Named*> order;
    for (const auto& [name, n] : named_) {
      const int64_t rows = n.rows.empty() ? 0 : n.rows.rbegin()->first + 1;
      specs.push_back({name, DType::kF32, {rows, n.cols}});
      order.push_back(&n);
    }
    return write_safetensors(path, specs, [&](size_t i, std::vector<uint8_t>& bytes) {
      const Named& n = *order[i];
      bytes.assign(static_cast<size_t>(specs[i].shape[0]) * n.cols * 4, 0);
      for (const auto& [pos, values] : n.rows)
        std::memcpy(bytes.data() + static_cast<size_t>(pos) * n.cols * 4, values.data(), values.size() * 4);
      return Status::Ok();
    });
  }

 private:
  struct Named {
    int cols = 0;
    std::map<int64_t, std::vector<float>> rows;
  };
  std::map<std::string, Named> named_;
};

}  // namespace yoco::bench
