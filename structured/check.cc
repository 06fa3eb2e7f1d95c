// Checks over xgrammar (without it: no_xgrammar.cc).
#include "structured/check.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "structured/xgrammar_impl.h"

namespace yoco {
namespace {

std::atomic<int> g_background{0};  // bounded runs still going after their caller gave up

// xgrammar's messages start "[12:00:00] path/file.cc:123: "; the caller needs only the rest.
std::string xgrammar_message(const char* what) {
  std::string m = what;
  if (!m.empty() && m[0] == '[') {
    const size_t close = m.find("] ");
    const size_t colon = close == std::string::npos ? close : m.find(": ", close + 2);
    if (colon != std::string::npos) m = m.substr(colon + 2);
  }
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

}  // namespace

bool structured_outputs_enabled() { return true; }

int background_compiles() { return g_background.load(); }

std::string ebnf_literal(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

xgrammar::Grammar to_grammar(const StructuredOutput& s) {
  using K = StructuredOutput::Kind;
  const std::pair<std::string, std::string> separators{", ", ": "};
  switch (s.kind) {
    case K::kJsonObject:
      return xgrammar::Grammar::FromJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false, std::nullopt,
                                               separators, /*strict_mode=*/false);
    case K::kJsonSchema:
      return xgrammar::Grammar::FromJSONSchema(s.text, /*any_whitespace=*/false, std::nullopt, separators,
                                               /*strict_mode=*/true);
    case K::kRegex:
      return xgrammar::Grammar::FromRegex(s.text);
    case K::kGrammar:
      return xgrammar::Grammar::FromEBNF(s.text, "root");
    case K::kChoice: {
      std::string ebnf = "root ::= ";
      for (size_t i = 0; i < s.choices.size(); ++i) ebnf += (i ? " | " : "") + ebnf_literal(s.choices[i]);
      return xgrammar::Grammar::FromEBNF(ebnf, "root");
    }
    case K::kNone:
      break;
  }
  throw std::logic_error("no constraint");
}

Status check_sizes(const StructuredOutput& s, std::string_view field, const StructuredLimits& lim) {
  const std::string f(field);
  if (s.text.size() > lim.max_text_bytes)
    return invalid_argument(f + ": " + std::to_string(s.text.size()) + " bytes, at most " +
                            std::to_string(lim.max_text_bytes));
  if (s.kind == StructuredOutput::Kind::kChoice) {
    if (s.choices.empty()) return invalid_argument(f + ": at least one choice");
    if (static_cast<int>(s.choices.size()) > lim.max_choices)
      return invalid_argument(f + ": at most " + std::to_string(lim.max_choices) + " choices");
    for (size_t i = 0; i < s.choices.size(); ++i) {
      if (s.choices[i].empty()) return invalid_argument(f + "[" + std::to_string(i) + "]: empty");
      if (s.choices[i].size() > lim.max_choice_bytes)
        return invalid_argument(f + "[" + std::to_string(i) + "]: longer than " + std::to_string(lim.max_choice_bytes) +
                                " bytes");
    }
  }
  if ((s.kind == StructuredOutput::Kind::kJsonSchema || s.kind == StructuredOutput::Kind::kRegex ||
       s.kind == StructuredOutput::Kind::kGrammar) &&
      s.text.empty())
    return invalid_argument(f + ": empty");
  return Status::Ok();
}

Status run_bounded(std::function<void()> fn, std::string_view field, const StructuredLimits& lim) {
  if (g_background.load() >= lim.max_background)
    return Status(StatusCode::kResourceExhausted,
                  std::string(field) + ": earlier constraints are still compiling; try again later");
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false, abandoned = false;
    std::string error;
  };
  auto sh = std::make_shared<Shared>();
  std::thread([sh, fn = std::move(fn)] {
    std::string error;
    try {
      fn();
    } catch (const std::exception& e) {
      error = xgrammar_message(e.what());
      if (error.empty()) error = "does not compile";
    } catch (...) {
      error = "does not compile";
    }
    std::lock_guard<std::mutex> lock(sh->mu);
    sh->done = true;
    sh->error = std::move(error);
    if (sh->abandoned) g_background.fetch_sub(1);
    sh->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(sh->mu);
  if (!sh->cv.wait_for(lock, lim.timeout, [&] { return sh->done; })) {
    sh->abandoned = true;
    g_background.fetch_add(1);
    return invalid_argument(std::string(field) + ": did not compile within " + std::to_string(lim.timeout.count()) +
                            " ms (too large or too ambiguous)");
  }
  if (!sh->error.empty()) return invalid_argument(std::string(field) + ": " + sh->error);
  return Status::Ok();
}

Status check_structured_output(const StructuredOutput& s, std::string_view field, const StructuredLimits& lim) {
  if (!s.constrained()) return Status::Ok();
  if (Status st = check_sizes(s, field, lim); !st.ok()) return st;
  return run_bounded([s] { (void)to_grammar(s); }, field, lim);
}

}  // namespace yoco
