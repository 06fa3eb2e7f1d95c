// Order-keeping JSON reading for chat-template variables (docs/design.md, chat templates).
#include "tokenizer/jinja/json_order.h"

#include <nlohmann/json.hpp>

namespace yoco::jinja {
namespace {

constexpr int kMaxDepth = 64;

Value to_value(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (const auto& [k, v] : j.items()) d->set(k, to_value(v));
      return Value::dict(std::move(d));
    }
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& v : j) items.push_back(to_value(v));
      return Value(std::move(items));
    }
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get_ref<const std::string&>());
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    default:
      return Value::none();
  }
}

}  // namespace

std::optional<Value> parse_json_ordered(std::string_view text) {
  // Non-throwing; a container nested past the limit is dropped, which makes the whole hint void.
  bool too_deep = false;
  const auto depth_limit = [&](int depth, nlohmann::ordered_json::parse_event_t event, nlohmann::ordered_json&) {
    const bool opens = event == nlohmann::ordered_json::parse_event_t::object_start ||
                       event == nlohmann::ordered_json::parse_event_t::array_start;
    if (opens && depth > kMaxDepth) too_deep = true;
    return !too_deep;
  };
  const auto j = nlohmann::ordered_json::parse(text, depth_limit, /*allow_exceptions=*/false);
  if (j.is_discarded() || too_deep) return std::nullopt;
  return to_value(j);
}

Value reorder_like(const Value& v, const Value& hint) {
  if (v.is_dict() && hint.is_dict()) {
    auto d = std::make_shared<Dict>();
    for (const auto& [k, h] : hint.dict().items) {
      const Value* mine = v.dict().find(k);
      if (mine) d->items.emplace_back(k, reorder_like(*mine, h));
    }
    for (const auto& [k, mine] : v.dict().items)
      if (!hint.dict().find(k)) d->items.emplace_back(k, mine);
    return Value::dict(std::move(d));
  }
  if (v.is_list() && hint.is_list() && v.list().size() == hint.list().size()) {
    List out;
    out.reserve(v.list().size());
    for (size_t i = 0; i < v.list().size(); ++i) out.push_back(reorder_like(v.list()[i], hint.list()[i]));
    return v.is_tuple() ? Value::tuple(std::move(out)) : Value(std::move(out));
  }
  return v;
}

}  // namespace yoco::jinja
