#include "router/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "common/json.h"

namespace yoco {
namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";       // [TOOL_CALLS]name[ARGS]{...}
constexpr std::string_view kMistralCallId = "[CALL_ID]";  // [TOOL_CALLS]name[CALL_ID]id[ARGS]{...}
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr size_t kNpos = std::string_view::npos;
constexpr size_t kMaxDepth = 64;  // as the API's JSON bodies

enum class Scan { kComplete, kPartial, kInvalid };

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  return i;
}

// `rest` is shorter than `marker` and could still grow into it.
bool could_become(std::string_view rest, std::string_view marker) {
  return rest.size() < marker.size() && marker.substr(0, rest.size()) == rest;
}

// The longest end of `s` that could still grow into `marker` (held back from the content).
size_t held_back(std::string_view s, std::string_view marker) {
  for (size_t k = std::min(marker.size() - 1, s.size()); k > 0; --k)
    if (s.substr(s.size() - k) == marker.substr(0, k)) return k;
  return 0;
}

// A JSON string at s[i] == '"': one past its closing quote in *end.
Scan scan_string(std::string_view s, size_t i, size_t* end) {
  for (size_t j = i + 1; j < s.size(); ++j) {
    if (s[j] == '\\') {
      ++j;
    } else if (s[j] == '"') {
      *end = j + 1;
      return Scan::kComplete;
    } else if (static_cast<unsigned char>(s[j]) < 0x20) {
      return Scan::kInvalid;
    }
  }
  return Scan::kPartial;
}

// One JSON value at s[i], lexically (strings, balanced brackets, a primitive up to what follows it):
// where it ends, or that the text ends inside it. Complete values are parsed by Json afterwards.
Scan scan_value(std::string_view s, size_t i, size_t* end) {
  if (i >= s.size()) return Scan::kPartial;
  if (s[i] == '"') return scan_string(s, i, end);
  if (s[i] == '{' || s[i] == '[') {
    std::string closers;
    for (size_t j = i; j < s.size(); ++j) {
      const char c = s[j];
      if (c == '"') {
        size_t e = 0;
        if (Scan r = scan_string(s, j, &e); r != Scan::kComplete) return r;
        j = e - 1;
      } else if (c == '{' || c == '[') {
        closers.push_back(c == '{' ? '}' : ']');
        if (closers.size() > kMaxDepth) return Scan::kInvalid;
      } else if (c == '}' || c == ']') {
        if (closers.empty() || closers.back() != c) return Scan::kInvalid;
        closers.pop_back();
        if (closers.empty()) {
          *end = j + 1;
          return Scan::kComplete;
        }
      }
    }
    return Scan::kPartial;
  }
  size_t j = i;
  auto primitive = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.';
  };
  while (j < s.size() && primitive(s[j])) ++j;
  if (j == i) return Scan::kInvalid;
  if (j == s.size()) return Scan::kPartial;  // a number may go on
  *end = j;
  return Scan::kComplete;
}

// One call object at s[i] == '{': its "name" and its "arguments" (or "parameters") value.
struct CallScan {
  Scan state = Scan::kPartial;
  size_t end = 0;  // complete: one past its '}'
  std::optional<std::string> name, first_key;
  size_t args_begin = kNpos, args_end = kNpos;  // args_end: kNpos while the text ends inside them
};

CallScan scan_call(std::string_view s, size_t i) {
  CallScan c;
  auto fail = [&] {
    c.state = Scan::kInvalid;
    return c;
  };
  size_t j = i + 1;
  for (bool first = true;; first = false) {
    j = skip_ws(s, j);
    if (j >= s.size()) return c;
    if (s[j] == '}') {
      c.state = Scan::kComplete;
      c.end = j + 1;
      return c;
    }
    if (!first) {
      if (s[j] != ',') return fail();
      j = skip_ws(s, j + 1);
      if (j >= s.size()) return c;
    }
    if (s[j] != '"') return fail();
    size_t key_end = 0;
    if (Scan r = scan_string(s, j, &key_end); r != Scan::kComplete) {
      c.state = r;
      return c;
    }
    auto key = Json::parse(s.substr(j, key_end - j));
    if (!key.ok() || !key->is_string()) return fail();
    if (!c.first_key) c.first_key = key->as_string();
    j = skip_ws(s, key_end);
    if (j >= s.size()) return c;
    if (s[j] != ':') return fail();
    j = skip_ws(s, j + 1);
    if (j >= s.size()) return c;
    const bool args = key->as_string() == "arguments" || key->as_string() == "parameters";
    if (args) {
      c.args_begin = j;
      c.args_end = kNpos;
    }
    size_t value_end = 0;
    if (Scan r = scan_value(s, j, &value_end); r != Scan::kComplete) {
      c.state = r;
      return c;
    }
    if (key->as_string() == "name") {
      auto v = Json::parse(s.substr(j, value_end - j));
      if (!v.ok() || !v->is_string() || v->as_string().empty()) return fail();
      c.name = v->as_string();
    }
    if (args) c.args_end = value_end;
    j = value_end;
  }
}

// A complete call is a JSON object with a name, whose arguments (when given) are an object.
bool valid_call(const CallScan& c, std::string_view s, size_t begin) {
  if (!c.name || !Json::parse(s.substr(begin, c.end - begin)).ok()) return false;
  if (c.args_begin == kNpos) return true;
  auto a = Json::parse(s.substr(c.args_begin, c.args_end - c.args_begin));
  return a.ok() && a->is_object();
}

ToolCallText call_text(const CallScan& c, std::string_view s) {
  ToolCallText t;
  if (c.name) t.name = *c.name;
  if (c.args_begin != kNpos)
    t.arguments = std::string(s.substr(c.args_begin, (c.args_end == kNpos ? s.size() : c.args_end) - c.args_begin));
  t.complete = c.state == Scan::kComplete;
  if (t.complete && c.args_begin == kNpos) t.arguments = "{}";
  return t;
}

// What parsing a family's text ends in.
class Parser {
 public:
  Parser(std::string_view s, bool final) : s_(s), final_(final) {}

  // No calls: the whole text is content.
  ToolCallParse plain() const { return ToolCallParse{std::string(s_), {}, false}; }
  // The text went wrong inside the calls' markup.
  ToolCallParse broken() {
    if (final_) return plain();
    p_.broken = true;
    return std::move(p_);
  }
  // The text ends inside a call (or before one).
  ToolCallParse cut() {
    if (final_) return plain();
    return std::move(p_);
  }
  ToolCallParse done() { return std::move(p_); }

  // The call at s[j] == '{'; false when the parse ended (*out then holds the result).
  bool call(size_t j, size_t* after, ToolCallParse* out, bool first_key_is_name = false) {
    CallScan c = scan_call(s_, j);
    if (first_key_is_name && p_.calls.empty()) {
      if (!c.first_key) {
        *out = c.state == Scan::kInvalid || final_ ? plain() : ToolCallParse{};
        return false;
      }
      if (*c.first_key != "name") return *out = plain(), false;
    }
    if (c.state == Scan::kInvalid) return *out = broken(), false;
    p_.calls.push_back(call_text(c, s_));
    if (c.state == Scan::kPartial) return *out = cut(), false;
    if (!valid_call(c, s_, j)) {
      p_.calls.pop_back();
      return *out = broken(), false;
    }
    *after = skip_ws(s_, c.end);
    return true;
  }

  // Content up to `marker`'s first place (held back short of a partial marker); kNpos when absent.
  size_t content_before(std::string_view marker) {
    const size_t at = s_.find(marker);
    if (at != kNpos) p_.content = std::string(s_.substr(0, at));
    else p_.content = std::string(s_.substr(0, s_.size() - (final_ ? 0 : held_back(s_, marker))));
    return at;
  }

  std::string_view s_;
  bool final_;
  ToolCallParse p_;
};

ToolCallParse parse_hermes(std::string_view s, bool final) {
  Parser p(s, final);
  size_t j = p.content_before(kHermesOpen);
  if (j == kNpos) return p.done();
  for (;;) {
    j = skip_ws(s, j + kHermesOpen.size());
    if (j >= s.size()) return p.cut();
    if (s[j] != '{') return p.broken();
    ToolCallParse out;
    if (!p.call(j, &j, &out)) return out;
    const std::string_view rest = s.substr(j);
    if (rest.substr(0, kHermesClose.size()) == kHermesClose) j = skip_ws(s, j + kHermesClose.size());
    else if (could_become(rest, kHermesClose)) return p.done();  // a closing tag cut short by the end
    else return p.broken();
    if (s.substr(j, kHermesOpen.size()) != kHermesOpen) return p.done();  // what follows the calls is dropped
  }
}

bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; }

// The later templates' form: [TOOL_CALLS]name[ARGS]{...} (or name[CALL_ID]id[ARGS]{...}, or
// name{...}) per call, each call after its own marker; j is at the name's first character.
ToolCallParse parse_mistral_args(Parser& p, std::string_view s, size_t j) {
  for (;;) {
    size_t k = j;
    while (k < s.size() && name_char(s[k])) ++k;
    if (k >= s.size()) return p.cut();
    if (k == j) return p.broken();
    ToolCallText call;
    call.name = std::string(s.substr(j, k - j));
    std::string_view rest = s.substr(k);
    if (rest.substr(0, kMistralCallId.size()) == kMistralCallId) {
      k += kMistralCallId.size();
      while (k < s.size() && std::isalnum(static_cast<unsigned char>(s[k]))) ++k;
      rest = s.substr(k);
    } else if (could_become(rest, kMistralCallId)) {
      return p.cut();
    }
    if (rest.substr(0, kMistralArgs.size()) == kMistralArgs) k = skip_ws(s, k + kMistralArgs.size());
    else if (could_become(rest, kMistralArgs)) return p.cut();
    else if (rest[0] != '{') return p.broken();  // name{...}: the form between the two
    // The call begins once its arguments do (as an object): text that goes wrong before that is
    // content, streamed or whole.
    if (k >= s.size()) return p.cut();
    if (s[k] != '{') return p.broken();
    size_t end = 0;
    const Scan r = scan_value(s, k, &end);
    if (r == Scan::kInvalid) return p.broken();
    call.arguments = std::string(s.substr(k, (r == Scan::kComplete ? end : s.size()) - k));
    call.complete = r == Scan::kComplete;
    if (!call.complete) {
      p.p_.calls.push_back(std::move(call));
      return p.cut();
    }
    auto a = Json::parse(call.arguments);
    if (!a.ok() || !a->is_object()) return p.broken();
    p.p_.calls.push_back(std::move(call));
    j = skip_ws(s, end);
    rest = s.substr(j);
    if (rest.substr(0, kMistralMarker.size()) == kMistralMarker) {
      j += kMistralMarker.size();  // the next call
    } else if (could_become(rest, kMistralMarker) && !p.final_) {
      return p.cut();
    } else {
      return p.done();  // what follows the calls is dropped
    }
  }
}

ToolCallParse parse_mistral(std::string_view s, bool final) {
  Parser p(s, final);
  size_t j = p.content_before(kMistralMarker);
  if (j == kNpos) return p.done();
  j = skip_ws(s, j + kMistralMarker.size());
  if (j >= s.size()) return p.cut();
  if (name_char(s[j])) return parse_mistral_args(p, s, j);
  const bool array = s[j] == '[';
  if (array) j = skip_ws(s, j + 1);
  for (;;) {
    if (j >= s.size()) return p.cut();
    if (s[j] != '{') return p.broken();
    ToolCallParse out;
    if (!p.call(j, &j, &out)) return out;
    if (!array || j >= s.size() || s[j] == ']') return p.done();
    if (s[j] != ',') return p.broken();
    j = skip_ws(s, j + 1);
  }
}

// Llama 3.1's JSON calls are the whole reply: a reply that does not start with an object whose
// first key is "name" is content.
ToolCallParse parse_llama3(std::string_view s, bool final) {
  Parser p(s, final);
  size_t j = skip_ws(s, 0);
  const std::string_view rest = s.substr(j);
  if (rest.substr(0, kPythonTag.size()) == kPythonTag) j = skip_ws(s, j + kPythonTag.size());
  else if (!final && could_become(rest, kPythonTag)) return {};
  if (j >= s.size()) return final ? p.plain() : ToolCallParse{};
  if (s[j] != '{') return p.plain();
  for (;;) {
    ToolCallParse out;
    if (!p.call(j, &j, &out, /*first_key_is_name=*/true)) return out;
    if (j < s.size() && s[j] == ';') j = skip_ws(s, j + 1);
    if (j >= s.size() || s[j] != '{') return p.done();
  }
}

}  // namespace

namespace {
// Each format's name, as --tool-call-parser spells it: both directions read this one table.
constexpr std::pair<ToolCallFormat, const char*> kFormatNames[] = {{ToolCallFormat::kHermes, "hermes"},
                                                                   {ToolCallFormat::kLlama3Json, "llama3_json"},
                                                                   {ToolCallFormat::kMistral, "mistral"},
                                                                   {ToolCallFormat::kMistralArgs, "mistral_args"},
                                                                   {ToolCallFormat::kNone, "none"}};
}  // namespace

std::optional<ToolCallFormat> tool_call_format_named(std::string_view name) {
  for (const auto& [f, n] : kFormatNames)
    if (name == n) return f;
  return std::nullopt;
}

const char* tool_call_format_name(ToolCallFormat f) {
  for (const auto& [g, n] : kFormatNames)
    if (g == f) return n;
  return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view t) {
  if (t.find(kHermesOpen) != kNpos) return ToolCallFormat::kHermes;
  if (t.find(kMistralMarker) != kNpos)
    return t.find(kMistralArgs) != kNpos ? ToolCallFormat::kMistralArgs : ToolCallFormat::kMistral;
  if (t.find(kPythonTag) != kNpos || t.find("ipython") != kNpos) return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kNone;
}

ToolCallSyntax tool_call_syntax(ToolCallFormat f, std::string_view name) {
  const std::string head = "{\"name\": \"" + std::string(name) + "\", ";
  switch (f) {
    case ToolCallFormat::kHermes:
      return {"<tool_call>\n" + head + "\"arguments\": ", "}\n</tool_call>"};
    case ToolCallFormat::kLlama3Json:
      return {head + "\"parameters\": ", "}"};
    case ToolCallFormat::kMistral:
      return {std::string(kMistralMarker) + "[" + head + "\"arguments\": ", "}]"};
    case ToolCallFormat::kMistralArgs:
      return {std::string(kMistralMarker) + std::string(name) + std::string(kMistralArgs), ""};
    case ToolCallFormat::kNone:
      break;
  }
  return {};
}

ToolCallParse parse_tool_calls(ToolCallFormat f, std::string_view text, bool final) {
  switch (f) {
    case ToolCallFormat::kHermes:
      return parse_hermes(text, final);
    case ToolCallFormat::kLlama3Json:
      return parse_llama3(text, final);
    case ToolCallFormat::kMistral:
    case ToolCallFormat::kMistralArgs:
      return parse_mistral(text, final);
    case ToolCallFormat::kNone:
      break;
  }
  return ToolCallParse{std::string(text), {}, false};
}

ToolCallStep ToolCallStream::push(std::string_view text) {
  text_ += text;
  return step(false);
}

ToolCallStep ToolCallStream::finish() { return step(true); }

std::string_view strip_end_text(std::string_view text, std::string_view end_text) {
  if (!end_text.empty() && text.ends_with(end_text)) text.remove_suffix(end_text.size());
  return text;
}

ToolCallStep ToolCallStream::step(bool final) {
  ToolCallStep out;
  // The stop token's text, or what may still become it, is not the reply's.
  std::string_view text = text_;
  if (final) {
    text = strip_end_text(text, end_text_);
  } else if (!end_text_.empty()) {
    size_t held = text.ends_with(end_text_) ? end_text_.size() : held_back(text, end_text_);
    text.remove_suffix(held);
  }
  if (!plain_) {
    ToolCallParse p = parse_tool_calls(format_, text, final);
    if (p.broken && args_sent_.empty()) {
      plain_ = true;
    } else if (p.calls.empty() && !args_sent_.empty()) {
      return out;  // the whole text did not parse after all: the calls sent stand
    } else {
      if (p.content.size() > content_sent_) {
        out.content = p.content.substr(content_sent_);
        content_sent_ = p.content.size();
      }
      for (size_t i = 0; i < p.calls.size() && static_cast<int>(i) < max_calls_; ++i) {
        const ToolCallText& c = p.calls[i];
        if (c.name.empty()) break;  // its name (and so its first delta) is still to come
        if (i == args_sent_.size()) {
          out.calls.push_back({static_cast<int>(i), c.name, c.arguments});
          args_sent_.push_back(c.arguments.size());
        } else if (c.arguments.size() > args_sent_[i]) {
          out.calls.push_back({static_cast<int>(i), std::nullopt, c.arguments.substr(args_sent_[i])});
          args_sent_[i] = c.arguments.size();
        }
      }
      return out;
    }
  }
  if (text.size() > content_sent_) {
    out.content = std::string(text.substr(content_sent_));
    content_sent_ = text.size();
  }
  return out;
}

}  // namespace yoco
