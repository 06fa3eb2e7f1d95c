// The CUDA kernels' own status, so that kernels/ includes nothing else of the project: a code and
// a message, the shape of common/status.h's Status with the codes the kernels return. The codes
// keep that header's names and values; the CUDA engine turns a kernel status into its own by
// value (model/cuda/device.h, to_status).
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace yoco::cuda {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument = 1,
  kResourceExhausted = 6,
  kUnimplemented = 8,
  kInternal = 9,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const {
    switch (code_) {
      case StatusCode::kOk:
        return "OK";
      case StatusCode::kInvalidArgument:
        return "INVALID_ARGUMENT: " + message_;
      case StatusCode::kResourceExhausted:
        return "RESOURCE_EXHAUSTED: " + message_;
      case StatusCode::kUnimplemented:
        return "UNIMPLEMENTED: " + message_;
      case StatusCode::kInternal:
        return "INTERNAL: " + message_;
    }
    return "UNKNOWN: " + message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) std::abort();   // an OK status carries no value
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace yoco::cuda

#define YOCO_CUDA_RETURN_IF_ERROR(expr)            \
  do {                                             \
    ::yoco::cuda::Status _yoco_cuda_st = (expr);   \
    if (!_yoco_cuda_st.ok()) return _yoco_cuda_st; \
  } while (0)
