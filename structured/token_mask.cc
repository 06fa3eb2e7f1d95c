#include "structured/token_mask.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "structured/xgrammar_impl.h"

namespace yoco {

struct TokenMask::Impl {
  Impl(const xgrammar::CompiledGrammar& g, std::optional<std::vector<int>> stops, bool end_when_complete)
      : matcher(g, std::move(stops), end_when_complete),
        vocab(g.GetTokenizerInfo().GetVocabSize()),
        bits(xgrammar::GetBitmaskSize(vocab)) {}

  xgrammar::GrammarMatcher matcher;
  const int vocab;
  std::vector<int32_t> bits;
  std::vector<int> stop_ids;

  void fill() {
    int64_t shape[1] = {static_cast<int64_t>(bits.size())};
    DLTensor t{};
    t.data = bits.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = xgrammar::GetBitmaskDLType();
    t.shape = shape;
    try {
      matcher.FillNextTokenBitmask(&t);
    } catch (const std::exception&) {  // a terminated matcher: only a stop token remains
      std::fill(bits.begin(), bits.end(), 0);
      for (int id : stop_ids) bits[id >> 5] |= static_cast<int32_t>(1u << (id & 31));
    }
  }
  bool allows(int id) const { return id < vocab && (static_cast<uint32_t>(bits[id >> 5]) >> (id & 31)) & 1u; }
};

TokenMask::TokenMask(std::shared_ptr<const CompiledConstraint> c, std::span<const int32_t> stop_ids) {
  const int vocab = c->grammar.GetTokenizerInfo().GetVocabSize();
  std::vector<int> stops;
  for (int32_t id : stop_ids)
    if (id >= 0 && id < vocab) stops.push_back(id);
  const bool end_when_complete = stops.empty();
  impl_ =
      std::make_unique<Impl>(c->grammar, end_when_complete ? std::nullopt : std::optional(stops), end_when_complete);
  impl_->stop_ids = std::move(stops);
}

TokenMask::~TokenMask() = default;
TokenMask::TokenMask(TokenMask&&) noexcept = default;
TokenMask& TokenMask::operator=(TokenMask&&) noexcept = default;

void TokenMask::apply(float* logits, int n) {
  impl_->fill();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int words = std::min<int>(static_cast<int>(impl_->bits.size()), (n + 31) / 32);
  for (int w = 0; w < words; ++w) {
    const uint32_t word = static_cast<uint32_t>(impl_->bits[w]);
    if (word == 0xffffffffu && (w + 1) * 32 <= impl_->vocab) continue;  // the common run: all allowed
    const int end = std::min(n, (w + 1) * 32);
    for (int i = w * 32; i < end; ++i)
      if (!impl_->allows(i)) logits[i] = kNegInf;
  }
  for (int i = words * 32; i < n; ++i) logits[i] = kNegInf;
}

std::vector<int32_t> TokenMask::allowed() {
  impl_->fill();
  std::vector<int32_t> out;
  for (int i = 0; i < impl_->vocab; ++i)
    if (impl_->allows(i)) out.push_back(i);
  return out;
}

bool TokenMask::accept(int32_t token) {
  if (token < 0 || token >= impl_->vocab) return false;
  try {
    return impl_->matcher.AcceptToken(token);
  } catch (const std::exception&) {
    return false;
  }
}

bool TokenMask::terminated() const { return impl_->matcher.IsTerminated(); }

}  // namespace yoco
