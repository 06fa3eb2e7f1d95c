// safetensors: an 8-byte little-endian header length, a JSON header, then raw tensor bytes.
// Everything here is validated as hostile input: a bad file gives an error naming the tensor
// or field, never a crash (fuzzed in tests/fuzz/safetensors_header_fuzz.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "handoff/kv_rows.h"

namespace yoco {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool, kF8E4M3, kF8E5M2 };

Result<DType> parse_dtype(const std::string& s);
const char* dtype_name(DType d);
size_t dtype_size(DType d);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets relative to the data section
  int64_t numel() const;
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;         // 8 + header length: where the data section starts in the file
  std::vector<TensorInfo> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
  const TensorInfo* find(const std::string& name) const;
};

// Largest header accepted; real checkpoints stay far below this.
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// `data` holds the first `available` bytes of a file of `file_size` bytes.
Result<SafetensorsHeader> parse_safetensors_header(const uint8_t* data, size_t available, uint64_t file_size);

// A read-only memory map.
class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  const SafetensorsHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  const uint8_t* tensor_data(const TensorInfo& t) const { return map_->data() + header_.data_offset + t.begin; }

 private:
  std::string path_;
  std::unique_ptr<MappedFile> map_;
  SafetensorsHeader header_;
};

// Element conversions used by loading and writing (bf16: handoff/kv_rows.h, the one rounding).
float f16_to_f32(uint16_t v);
// Converts n elements of a floating dtype (F32, F16, BF16, F64) to fp32.
Status convert_to_f32(DType dtype, const uint8_t* src, int64_t n, float* dst);

// Streaming writer: tensors are written in the given order; `fill` produces each tensor's
// bytes. The file appears atomically (temp file + rename).
struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};
Status write_safetensors(const std::string& path, const std::vector<TensorSpec>& specs,
                         const std::function<Status(size_t index, std::vector<uint8_t>& bytes)>& fill,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace yoco
