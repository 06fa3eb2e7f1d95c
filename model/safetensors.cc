#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "common/json.h"
#include "handoff/bytes.h"

namespace yoco {

namespace {
constexpr struct {
  const char* name;
  DType dtype;
  size_t size;
} kDTypes[] = {
    {"F64", DType::kF64, 8}, {"F32", DType::kF32, 4},   {"F16", DType::kF16, 2},        {"BF16", DType::kBF16, 2},
    {"I64", DType::kI64, 8}, {"I32", DType::kI32, 4},   {"I16", DType::kI16, 2},        {"I8", DType::kI8, 1},
    {"U8", DType::kU8, 1},   {"BOOL", DType::kBool, 1}, {"F8_E4M3", DType::kF8E4M3, 1}, {"F8_E5M2", DType::kF8E5M2, 1},
};
}  // namespace

Result<DType> parse_dtype(const std::string& s) {
  for (const auto& d : kDTypes)
    if (s == d.name) return d.dtype;
  return invalid_argument("unknown dtype \"" + s + "\"");
}

const char* dtype_name(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e.name;
  return "?";
}

size_t dtype_size(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e.size;
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

const TensorInfo* SafetensorsHeader::find(const std::string& name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const TensorInfo& t, const std::string& n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

Result<SafetensorsHeader> parse_safetensors_header(const uint8_t* data, size_t available, uint64_t file_size) {
  if (file_size < 8 || available < 8)
    return invalid_argument("safetensors: file is " + std::to_string(file_size) +
                            " bytes, too short for the header length");
  const uint64_t hlen = load_le<uint64_t>(data);
  if (hlen > kMaxSafetensorsHeaderBytes)
    return invalid_argument("safetensors: header length " + std::to_string(hlen) + " exceeds the limit of " +
                            std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  if (hlen > file_size - 8)
    return invalid_argument("safetensors: header length " + std::to_string(hlen) + " runs past the end of the file (" +
                            std::to_string(file_size) + " bytes)");
  if (hlen > available - 8) return invalid_argument("safetensors: header truncated");
  auto parsed = Json::parse(std::string_view(reinterpret_cast<const char*>(data + 8), hlen));
  if (!parsed.ok()) return invalid_argument("safetensors header: " + parsed.status().message());
  const Json& root = parsed.value();
  if (!root.is_object()) return invalid_argument("safetensors header: must be a JSON object");

  SafetensorsHeader h;
  h.data_offset = 8 + hlen;
  const uint64_t data_size = file_size - h.data_offset;
  for (const auto& [key, entry] : root.as_object()) {
    const std::string& name = key;  // clang 14 cannot capture structured bindings in lambdas
    if (name == "__metadata__") {
      if (!entry.is_object()) return invalid_argument("safetensors header: __metadata__ must be an object");
      for (const auto& [k, v] : entry.as_object()) {
        if (!v.is_string())
          return invalid_argument("safetensors header: __metadata__ value \"" + k + "\" must be a string");
        h.metadata[k] = v.as_string();
      }
      continue;
    }
    auto err = [&](const std::string& what) {
      return invalid_argument("safetensors tensor \"" + name + "\": " + what);
    };
    if (!entry.is_object()) return err("entry must be an object");
    const Json* dt = entry.find("dtype");
    const Json* shape = entry.find("shape");
    const Json* offs = entry.find("data_offsets");
    if (!dt || !dt->is_string()) return err("missing or non-string \"dtype\"");
    if (!shape || !shape->is_array()) return err("missing or non-array \"shape\"");
    if (!offs || !offs->is_array() || offs->as_array().size() != 2) return err("\"data_offsets\" must be [begin, end]");
    TensorInfo t;
    t.name = name;
    auto dtype = parse_dtype(dt->as_string());
    if (!dtype.ok()) return err(dtype.status().message());
    t.dtype = dtype.value();
    if (shape->as_array().size() > 8) return err("more than 8 dimensions");
    // numel is bounded by the data size, so the running product cannot overflow unnoticed.
    uint64_t numel = 1;
    for (const Json& d : shape->as_array()) {
      if (!d.is_integer() || d.as_int() < 0) return err("shape entries must be non-negative integers");
      const uint64_t dim = static_cast<uint64_t>(d.as_int());
      if (dim != 0 && numel > (data_size + 1) / dim) return err("shape too large for the file");
      numel *= dim;
      t.shape.push_back(d.as_int());
    }
    const Json& b = offs->as_array()[0];
    const Json& e = offs->as_array()[1];
    if (!b.is_integer() || !e.is_integer() || b.as_int() < 0 || e.as_int() < 0)
      return err("data_offsets must be non-negative integers");
    t.begin = static_cast<uint64_t>(b.as_int());
    t.end = static_cast<uint64_t>(e.as_int());
    if (t.begin > t.end) return err("data_offsets begin > end");
    if (t.end > data_size)
      return err("data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                 "] out of range: the data section has " + std::to_string(data_size) + " bytes");
    if (t.end - t.begin != numel * dtype_size(t.dtype))
      return err("data_offsets span " + std::to_string(t.end - t.begin) + " bytes but shape and dtype need " +
                 std::to_string(numel * dtype_size(t.dtype)));
    h.tensors.push_back(std::move(t));
  }
  // The JSON object is keyed by name, so the tensors come out sorted and duplicate-free.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : h.tensors)
    if (t.end > t.begin) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* x, auto* y) { return x->begin < y->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      return invalid_argument("safetensors: tensors \"" + by_offset[i - 1]->name + "\" and \"" + by_offset[i]->name +
                              "\" overlap");
  return h;
}

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(path + ": not a regular file");
  }
  std::unique_ptr<MappedFile> m(new MappedFile());
  m->size_ = static_cast<uint64_t>(st.st_size);
  if (m->size_ > 0) {
    void* p = mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return io_error("mmap " + path + ": " + std::strerror(errno));
    }
    m->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return m;
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  auto map = MappedFile::open(path);
  if (!map.ok()) return map.status();
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_ = std::move(map).value();
  auto h = parse_safetensors_header(f->map_->data(), f->map_->size(), f->map_->size());
  if (!h.ok()) return invalid_argument(path + ": " + h.status().message());
  f->header_ = std::move(h).value();
  return f;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float f;
  if (exp == 0) f = std::ldexp(static_cast<float>(mant), -24);  // zero and subnormals
  else if (exp == 31) f = mant ? std::nanf("") : INFINITY;
  else f = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -f : f;
}

Status convert_to_f32(DType dtype, const uint8_t* src, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return Status::Ok();
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, src + 2 * i, 2);
        dst[i] = bf16_to_f32(v);
      }
      return Status::Ok();
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, src + 2 * i, 2);
        dst[i] = f16_to_f32(v);
      }
      return Status::Ok();
    case DType::kF64:
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, src + 8 * i, 8);
        dst[i] = static_cast<float>(v);
      }
      return Status::Ok();
    default:
      return invalid_argument(std::string("dtype ") + dtype_name(dtype) + " is not a floating-point weight type");
  }
}

Status write_safetensors(const std::string& path, const std::vector<TensorSpec>& specs,
                         const std::function<Status(size_t, std::vector<uint8_t>&)>& fill,
                         const std::map<std::string, std::string>& metadata) {
  Json::Object root;
  if (!metadata.empty()) {
    Json::Object meta;
    for (const auto& [k, v] : metadata) meta[k] = Json(v);
    root["__metadata__"] = Json(std::move(meta));
  }
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const auto& s : specs) {
    uint64_t numel = 1;
    Json::Array shape;
    for (int64_t d : s.shape) {
      numel *= static_cast<uint64_t>(d);
      shape.push_back(Json(d));
    }
    const uint64_t bytes = numel * dtype_size(s.dtype);
    Json::Object e;
    e["dtype"] = Json(dtype_name(s.dtype));
    e["shape"] = Json(std::move(shape));
    e["data_offsets"] =
        Json(Json::Array{Json(static_cast<int64_t>(offset)), Json(static_cast<int64_t>(offset + bytes))});
    if (!root.emplace(s.name, Json(std::move(e))).second) return invalid_argument("duplicate tensor name " + s.name);
    offset += bytes;
    sizes.push_back(bytes);
  }
  std::string header = Json(std::move(root)).dump();
  while (header.size() % 8) header += ' ';  // keeps the data section 8-byte aligned
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return io_error("cannot write " + tmp + ": " + std::strerror(errno));
  uint8_t len[8];
  store_le<uint64_t>(len, header.size());
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  std::vector<uint8_t> buf;
  Status st;
  for (size_t i = 0; ok && i < specs.size(); ++i) {
    buf.clear();
    st = fill(i, buf);
    if (!st.ok()) break;
    if (buf.size() != sizes[i]) {
      st = internal_error("tensor " + specs[i].name + ": produced " + std::to_string(buf.size()) + " bytes, expected " +
                          std::to_string(sizes[i]));
      break;
    }
    ok = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!st.ok() || !ok) {
    std::remove(tmp.c_str());
    return st.ok() ? io_error("write failed: " + tmp) : st;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return io_error("rename " + tmp + ": " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace yoco
