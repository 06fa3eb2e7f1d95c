#include "structured/vocab.h"

#include <algorithm>

namespace yoco {

std::vector<std::string> token_vocab(const Tokenizer& tok, int vocab_size) {
  std::vector<std::string> out(static_cast<size_t>(std::max(vocab_size, 0)));
  for (int32_t id = 0; id < vocab_size && id < tok.vocab_size(); ++id)
    if (tok.is_known(id) && !tok.is_special(id)) out[id] = std::string(tok.token_bytes(id));
  return out;
}

}  // namespace yoco
