#include "structured/compiler.h"

#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "structured/xgrammar_impl.h"

namespace yoco {

struct ConstraintCompiler::Impl {
  Impl(xgrammar::TokenizerInfo info, StructuredLimits lim)
      : compiler(info, /*max_threads=*/1, /*cache_enabled=*/false), limits(lim), vocab_size(info.GetVocabSize()) {}

  xgrammar::GrammarCompiler compiler;
  const StructuredLimits limits;
  const int vocab_size;

  // Compiled constraints by StructuredOutput::cache_key, least recently used first.
  struct Entry {
    std::shared_ptr<const CompiledConstraint> compiled;
    int64_t bytes = 0;
    std::list<std::string>::iterator lru;
  };
  std::mutex mu;
  std::unordered_map<std::string, Entry> cache;
  std::list<std::string> lru;
  int64_t cached_bytes = 0;

  std::shared_ptr<const CompiledConstraint> find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it == cache.end()) return nullptr;
    lru.splice(lru.end(), lru, it->second.lru);
    return it->second.compiled;
  }

  void keep(const std::string& key, std::shared_ptr<const CompiledConstraint> c) {
    const int64_t bytes = static_cast<int64_t>(c->grammar.MemorySizeBytes() + key.size());
    std::lock_guard<std::mutex> lock(mu);
    if (cache.count(key) || bytes > limits.cache_bytes) return;
    while (cached_bytes + bytes > limits.cache_bytes && !lru.empty()) {
      auto old = cache.find(lru.front());
      cached_bytes -= old->second.bytes;
      cache.erase(old);
      lru.pop_front();
    }
    lru.push_back(key);
    cache.emplace(key, Entry{std::move(c), bytes, std::prev(lru.end())});
    cached_bytes += bytes;
  }
};

ConstraintCompiler::ConstraintCompiler(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
ConstraintCompiler::~ConstraintCompiler() = default;

Result<std::unique_ptr<ConstraintCompiler>> ConstraintCompiler::create(const std::vector<std::string>& vocab,
                                                                       std::vector<int32_t> stop_ids,
                                                                       StructuredLimits limits) {
  if (vocab.empty()) return invalid_argument("vocab: empty");
  for (int32_t id : stop_ids)
    if (id < 0 || id >= static_cast<int32_t>(vocab.size()))
      return invalid_argument("stop_ids: " + std::to_string(id) + " is not in the vocabulary");
  try {
    xgrammar::TokenizerInfo info(vocab, xgrammar::VocabType::RAW, static_cast<int>(vocab.size()), stop_ids);
    return std::unique_ptr<ConstraintCompiler>(new ConstraintCompiler(std::make_shared<Impl>(std::move(info), limits)));
  } catch (const std::exception& e) {
    return invalid_argument(std::string("vocab: ") + e.what());
  }
}

int ConstraintCompiler::vocab_size() const { return impl_->vocab_size; }

Result<std::shared_ptr<const CompiledConstraint>> ConstraintCompiler::compile(const StructuredOutput& s,
                                                                              std::string_view field) {
  if (!s.constrained()) return invalid_argument(std::string(field) + ": no constraint to compile");
  const std::string key = s.cache_key();
  if (auto hit = impl_->find(key)) return hit;
  YOCO_RETURN_IF_ERROR(check_sizes(s, field, impl_->limits));
  // The result travels through a shared slot: a compile past its timeout finishes into it unseen.
  auto slot = std::make_shared<std::optional<xgrammar::CompiledGrammar>>();
  std::shared_ptr<Impl> impl = impl_;
  Status st = run_bounded([impl, slot, s] { slot->emplace(impl->compiler.CompileGrammar(to_grammar(s))); }, field,
                          impl_->limits);
  if (!st.ok()) return st;
  auto compiled = std::make_shared<const CompiledConstraint>(CompiledConstraint{std::move(**slot)});
  impl_->keep(key, compiled);
  return std::shared_ptr<const CompiledConstraint>(compiled);
}

}  // namespace yoco
