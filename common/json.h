// A small strict JSON reader/writer for configs and file headers. Hostile input is bounded:
// nesting depth, and every error names the byte offset. Duplicate object keys are errors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace yoco {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Array = std::vector<Json>;
  using Object = std::map<std::string, Json, std::less<>>;

  Json() = default;
  Json(std::nullptr_t) {}
  Json(bool b) : type_(Type::kBool), bool_(b) {}
  Json(double d) : type_(Type::kNumber), num_(d) {}
  Json(int v) : Json(static_cast<int64_t>(v)) {}
  Json(int64_t v) : type_(Type::kNumber), num_(static_cast<double>(v)), int_(v), is_int_(true) {}
  Json(uint64_t v) : Json(static_cast<int64_t>(v)) {}
  Json(std::string s) : type_(Type::kString), str_(std::make_shared<std::string>(std::move(s))) {}
  Json(const char* s) : Json(std::string(s)) {}
  Json(Array a) : type_(Type::kArray), arr_(std::make_shared<Array>(std::move(a))) {}
  Json(Object o) : type_(Type::kObject), obj_(std::make_shared<Object>(std::move(o))) {}

  // On an error, `error_path` (when given) receives where it was found: "" at the top, else the
  // member/element path ("messages[2].content").
  static Result<Json> parse(std::string_view text, int max_depth = 64, std::string* error_path = nullptr);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_integer() const { return type_ == Type::kNumber && is_int_; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  bool as_bool() const { return bool_; }
  double as_double() const { return num_; }
  int64_t as_int() const { return is_int_ ? int_ : static_cast<int64_t>(num_); }
  const std::string& as_string() const { return *str_; }
  const Array& as_array() const { return *arr_; }
  const Object& as_object() const { return *obj_; }
  Array& mutable_array() { return *arr_; }
  Object& mutable_object() { return *obj_; }

  // Object lookup; nullptr when absent or when this is not an object.
  const Json* find(std::string_view key) const;

  std::string dump() const;

 private:
  void dump_to(std::string& out) const;

  Type type_ = Type::kNull;
  bool bool_ = false;
  double num_ = 0;
  int64_t int_ = 0;
  bool is_int_ = false;
  std::shared_ptr<std::string> str_;
  std::shared_ptr<Array> arr_;
  std::shared_ptr<Object> obj_;
};

const char* json_type_name(Json::Type t);

}  // namespace yoco
