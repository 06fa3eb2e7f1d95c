// The bytes each token id writes, as the constraint compiler reads a vocabulary: byte-level BPE
// tokens decoded to their raw bytes (so "Ġthe" is " the"), special and unused ids as "" (never
// text), padded with "" to the model's vocab_size (an embedding table may be larger).
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace yoco {

std::vector<std::string> token_vocab(const Tokenizer& tok, int vocab_size);

}  // namespace yoco
