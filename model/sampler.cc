#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace yoco {

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) {  // splitmix64 expands the seed
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    s = z ^ (z >> 31);
  }
}

uint64_t Rng::next() {
  auto rotl = [](uint64_t v, int k) { return (v << k) | (v >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

Sampler::Sampler(const SamplingParams& p, int vocab_size, std::span<const int32_t> prompt)
    : p_(p), vocab_(vocab_size), rng_(p.seed), seen_(vocab_size, 0) {
  for (int32_t t : prompt)
    if (t >= 0 && t < vocab_) seen_[t] = 1;
}

void Sampler::accept(int32_t token) {
  if (token < 0 || token >= vocab_) return;
  seen_[token] = 1;
  ++generated_[token];
}

void Sampler::replay(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) {
    accept(t);
    if (p_.temperature != 0.0f) rng_.next();
  }
}

void Sampler::apply_penalties(float* logits) const {
  if (p_.repetition_penalty != 1.0f) {
    for (int i = 0; i < vocab_; ++i)
      if (seen_[i]) logits[i] = logits[i] > 0 ? logits[i] / p_.repetition_penalty : logits[i] * p_.repetition_penalty;
  }
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
    for (const auto& [tok, count] : generated_)
      logits[tok] -= p_.frequency_penalty * static_cast<float>(count) + p_.presence_penalty;
  }
}

int32_t Sampler::sample(float* logits) {
  apply_penalties(logits);
  int32_t chosen;
  if (p_.temperature == 0.0f) {
    chosen = static_cast<int32_t>(std::max_element(logits, logits + vocab_) - logits);
  } else {
    // Candidates sorted by logit, cut by top-k, then probabilities with temperature.
    idx_.resize(vocab_);
    std::iota(idx_.begin(), idx_.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    int n = vocab_;
    if (p_.top_k > 0 && p_.top_k < vocab_) {
      n = p_.top_k;
      std::partial_sort(idx_.begin(), idx_.begin() + n, idx_.end(), by_logit);
    } else {
      std::sort(idx_.begin(), idx_.end(), by_logit);
    }
    std::vector<double> prob(n);
    const double mx = logits[idx_[0]];
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += prob[i] = std::exp((logits[idx_[i]] - mx) / p_.temperature);
    for (auto& x : prob) x /= sum;
    if (p_.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p
      double cum = 0;
      int keep = n;
      for (int i = 0; i < n; ++i) {
        cum += prob[i];
        if (cum >= p_.top_p) {
          keep = i + 1;
          break;
        }
      }
      n = keep;
    }
    if (p_.min_p > 0.0f) {
      const double floor = p_.min_p * prob[0];
      int keep = 1;
      while (keep < n && prob[keep] >= floor) ++keep;
      n = keep;
    }
    double mass = 0;
    for (int i = 0; i < n; ++i) mass += prob[i];
    double r = rng_.uniform() * mass;
    chosen = idx_[n - 1];
    for (int i = 0; i < n; ++i) {
      r -= prob[i];
      if (r < 0) {
        chosen = idx_[i];
        break;
      }
    }
  }
  accept(chosen);
  return chosen;
}

}  // namespace yoco
