// The model, written once (docs/design.md §2, docs/architecture.md rule 5): every architecture we
// serve as one short sequence of named stages over a narrow backend interface. The CPU Model
// (model/cpu_backend.h) and the CUDA engine (model/cuda/backend.h) are backends: they implement
// the ops and own the memory; neither spells the model out. A model feature is added here once.
//
// A call of the program runs over `rows`: one token each, with its position and its sequence's
// state. A prefill chunk is the rows of one sequence at consecutive positions; a decode step is one
// row per sequence. It is the same program either way: only the ops that touch per-sequence state
// (the mixers and the K/V writes) look at which it is, and pick their kernel (chunkwise retention
// or its recurrence, window attention over a chunk or one step, ...). `Pass` says which stages a
// call runs: prefill exits early after the self-decoder (docs/design.md §2.5), a decode step and
// the full forward (a prefill chunk with every row's logits) run everything, logits() starts from
// each sequence's last_hidden.
//
// The backend concept (B below; `Backend`, checked by the compiler). A backend binds one call's rows before run() and keeps the first
// error as a sticky status that run() checks after every block (the CUDA backend launches nothing
// after a failed kernel, the CPU backend joins no collective after a failed one):
//   using Tensor                       a [rows, cols] view in the backend's memory, row stride ld,
//                                      with Tensor::cols(first, count) for a column range
//   config(), widths(), status(), hidden() (the residual stream h)
//   embed()                            h = √dim · E[token] of each row
//   load_last_hidden() / keep_last_hidden()   h from / into each sequence's last_hidden
//   norm(site, Norm)                   RMSNorm(h) · w, the input of a projection
//   project(site, Matrix, x)           x · Wᵀ (the head's logits land in the caller's buffer)
//   add_projection(site, Matrix, x)    h += x · Wᵀ, summed over tensor-parallel ranks
//   rope(x, heads, head_dim)           interleaved RoPE at each row's position, in place
//   gate_logits(site, x, proj)         gated retention's γ = x · W_gtᵀ
//   retention(site, q, k, v, γ)        §2.3 steps 3-5 on the (loop, layer) state: o before its norm
//   head_norm(o, heads, head_dim)      RMSNorm of each head without weight, in place
//   silu_gate(g, o)                    silu(g) ⊙ o
//   window_attention(site, q, k, v)    SWA over the window ring and these rows; they enter the ring
//   write_kv(site, k, v)               K/V rows at each row's position: the global cache (site kv)
//                                      or a transformer layer's own
//   attention(site, q)                 causal GQA over the K/V rows written so far
//   swiglu(u)                          silu(fc1) ⊙ gate of a fused fc1|gate product (u.width / 2 each)
//   route(site, logits)                an MoE's softmax over the router logits and its top-k
//                                      (Routing: probs, chosen experts as values, their weights)
//   add_experts(site, x, routing)      h += Σ_chosen w_e · SwiGLU_e(x), summed over tensor-parallel ranks
//   tracing(), trace(name, tensor)     the named intermediates (model/trace.h)
// Templates, so a backend's ops are direct calls: no virtual call on the hot path.
#pragma once

#include <concepts>
#include <string>
#include <utility>

#include "common/status.h"
#include "model/config.h"
#include "model/tensor_parallel.h"

namespace yoco::program {

// Where in the network a stage runs. Its trace names: "embed", "self.<loop>.<layer>.<stage>",
// "kv.<stage>", "cross.<layer>.<stage>", "layer.<layer>.<stage>" (transformer), "head.<stage>".
enum class Part { kEmbed, kSelf, kGlobalKv, kCross, kLayer, kHead };

struct Site {
  Part part = Part::kEmbed;
  int layer = 0;
  int loop = 0;   // YOCO-U loop of a self-decoder layer
  int state = 0;  // its (loop, layer) state: loop · n_self_layers + layer (docs/design.md §2.3)
};

enum class Norm { kMixer, kFfn, kKv, kFinal };
// kMixerIn: the mixer's fused input product (self q|k|v(|g); cross q; transformer q|k|v).
// kRouter, kSharedUp, kSharedDown: an MoE FFN's router and shared expert (fc1|gate, fc2).
enum class Matrix { kMixerIn, kOut, kFfnUp, kFfnDown, kKv, kOutput, kRouter, kSharedUp, kSharedDown };
enum class Mixer { kRetention, kWindow, kGlobalAttention, kOwnAttention };

// The widths the program slices by, this rank's under tensor parallelism (docs/design.md §2.8).
struct Widths {
  int dim = 0;                             // the residual stream (replicated)
  int hidden = 0;                          // FFN hidden units (0 in an MoE model)
  int experts = 0, experts_per_token = 0;  // E and k of an MoE (docs/design.md §2.2)
  int expert_hidden = 0, shared_hidden = 0;
  int vocab = 0;
  int self_heads = 0, self_head_dim = 0, self_width = 0;  // self_width = self_heads · self_head_dim
  int attn_heads = 0, kv_heads = 0, attn_head_dim = 0;
  int attn_width = 0;  // attn_heads · attn_head_dim: a query row
  int kv_dim = 0;      // kv_heads · attn_head_dim: one layer's K (or V) row
};

inline Widths widths(const ModelConfig& c, const ShardDims& s) {
  Widths w;
  w.dim = c.dim;
  w.hidden = s.hidden;
  w.experts = c.n_experts;
  w.experts_per_token = c.n_experts_per_token;
  w.expert_hidden = s.expert_hidden;
  w.shared_hidden = s.shared_hidden;
  w.vocab = c.vocab_size;
  w.self_heads = s.self_heads;
  w.self_head_dim = c.self_head_dim();
  w.self_width = s.self_width;
  w.attn_heads = s.attn_heads;
  w.kv_heads = s.attn_kv_heads;
  w.attn_head_dim = c.cross_head_dim();
  w.attn_width = s.attn_width;
  w.kv_dim = s.kv_dim;
  return w;
}

inline Mixer mixer_of(const ModelConfig& c, Part p) {
  if (p == Part::kCross) return Mixer::kGlobalAttention;
  if (p == Part::kLayer) return Mixer::kOwnAttention;
  return c.is_swa() ? Mixer::kWindow : Mixer::kRetention;
}

// The stages a call runs.
struct Pass {
  bool from_tokens = true;        // h = the rows' embeddings; false: each sequence's last_hidden
  bool self_decoder = true;       // YOCO: every (loop, layer), then the global K/V; transformer: every layer
  bool keep_last_hidden = false;  // each sequence's last_hidden = its last row after those
  bool cross_decoder = false;     // YOCO's cross-decoder (a transformer has none)
  bool head = false;              // the logits

  static Pass prefill() { return {true, true, true, false, false}; }
  static Pass decode_step() { return {true, true, true, true, true}; }
  static Pass logits() { return {false, false, false, true, true}; }
  // A chunk's rows with the logits of each; it keeps last_hidden, so a forward resumes like a prefill.
  static Pass forward() { return {true, true, true, true, true}; }
};

// An MoE's routing for the bound rows: probs [rows, E] (softmax of the router logits), experts
// [rows, k] (the chosen expert indices as values, best first) and weights [rows, k].
template <class T>
struct Routing {
  T probs, experts, weights;
};

// The backend interface of the header comment, checked by the compiler: each backend
// static_asserts it (model/cpu_backend.cc, model/cuda/backend.cc), and every stage below takes
// only a Backend, so an op missing or mistyped in one backend is an error naming the op here.
template <class B>
concept Backend = requires(B& be, const B& cbe, const Site& at, const typename B::Tensor& t, Norm n, Matrix m,
                           int heads, const std::string& name) {
  typename B::Tensor;
  { t.cols(0, 1) } -> std::same_as<typename B::Tensor>;
  { cbe.config() } -> std::convertible_to<const ModelConfig&>;
  { cbe.widths() } -> std::convertible_to<const Widths&>;
  { cbe.status() } -> std::convertible_to<Status>;
  { be.hidden() } -> std::same_as<typename B::Tensor>;
  be.embed();
  be.load_last_hidden();
  be.keep_last_hidden();
  { be.norm(at, n) } -> std::same_as<typename B::Tensor>;
  { be.project(at, m, t) } -> std::same_as<typename B::Tensor>;
  be.add_projection(at, m, t);
  be.rope(t, heads, heads);
  { be.gate_logits(at, t, t) } -> std::same_as<typename B::Tensor>;
  { be.retention(at, t, t, t, t) } -> std::same_as<typename B::Tensor>;
  be.head_norm(t, heads, heads);
  { be.silu_gate(t, t) } -> std::same_as<typename B::Tensor>;
  { be.window_attention(at, t, t, t) } -> std::same_as<typename B::Tensor>;
  be.write_kv(at, t, t);
  { be.attention(at, t) } -> std::same_as<typename B::Tensor>;
  { be.swiglu(t) } -> std::same_as<typename B::Tensor>;
  { be.route(at, t) } -> std::same_as<Routing<typename B::Tensor>>;
  be.add_experts(at, t, std::declval<const Routing<typename B::Tensor>&>());
  { cbe.tracing() } -> std::convertible_to<bool>;
  be.trace(name, t);
};

inline std::string trace_name(const Site& at, const char* stage) {
  switch (at.part) {
    case Part::kEmbed:
      return "embed";
    case Part::kSelf:
      return "self." + std::to_string(at.loop) + "." + std::to_string(at.layer) + "." + stage;
    case Part::kGlobalKv:
      return std::string("kv.") + stage;
    case Part::kCross:
      return "cross." + std::to_string(at.layer) + "." + stage;
    case Part::kLayer:
      return "layer." + std::to_string(at.layer) + "." + stage;
    case Part::kHead:
      return std::string("head.") + stage;
  }
  return stage;
}

template <Backend B>
void trace(B& be, const Site& at, const char* stage, const typename B::Tensor& t) {
  if (be.tracing()) be.trace(trace_name(at, stage), t);
}

// Gated retention (docs/design.md §2.3).
template <Backend B>
typename B::Tensor retention_mixer(B& be, const Site& at, const typename B::Tensor& x) {
  const Widths& w = be.widths();
  const int width = w.self_width;
  const auto proj = be.project(at, Matrix::kMixerIn, x);
  const auto q = proj.cols(0, width), k = proj.cols(width, width), v = proj.cols(2 * width, width),
             g = proj.cols(3 * width, width);
  be.rope(q, w.self_heads, w.self_head_dim);
  be.rope(k, w.self_heads, w.self_head_dim);
  trace(be, at, "q", q);
  trace(be, at, "k", k);
  trace(be, at, "v", v);
  const auto gate = be.gate_logits(at, x, proj);
  trace(be, at, "gate_logits", gate);
  const auto o = be.retention(at, q, k, v, gate);
  trace(be, at, "retention", o);
  be.head_norm(o, w.self_heads, w.self_head_dim);
  const auto out = be.silu_gate(g, o);
  trace(be, at, "mixer_out", out);
  return out;
}

// Sliding-window attention (docs/design.md §2.3).
template <Backend B>
typename B::Tensor window_mixer(B& be, const Site& at, const typename B::Tensor& x) {
  const Widths& w = be.widths();
  const int width = w.self_width;
  const auto proj = be.project(at, Matrix::kMixerIn, x);
  const auto q = proj.cols(0, width), k = proj.cols(width, width), v = proj.cols(2 * width, width);
  be.rope(q, w.self_heads, w.self_head_dim);
  be.rope(k, w.self_heads, w.self_head_dim);
  trace(be, at, "q", q);
  trace(be, at, "k", k);
  trace(be, at, "v", v);
  const auto o = be.window_attention(at, q, k, v);
  trace(be, at, "attention", o);
  return o;
}

// The cross-decoder's attention over the global K/V (docs/design.md §2.4; NoPE without RoPE).
template <Backend B>
typename B::Tensor global_attention_mixer(B& be, const Site& at, const typename B::Tensor& x) {
  const Widths& w = be.widths();
  const auto q = be.project(at, Matrix::kMixerIn, x);
  if (be.config().cross_decoder_rope) be.rope(q, w.attn_heads, w.attn_head_dim);
  trace(be, at, "q", q);
  const auto o = be.attention(at, q);
  trace(be, at, "attention", o);
  return o;
}

// A transformer layer's attention over its own K/V (docs/design.md §2.6).
template <Backend B>
typename B::Tensor own_attention_mixer(B& be, const Site& at, const typename B::Tensor& x) {
  const Widths& w = be.widths();
  const auto proj = be.project(at, Matrix::kMixerIn, x);
  const auto q = proj.cols(0, w.attn_width), k = proj.cols(w.attn_width, w.kv_dim),
             v = proj.cols(w.attn_width + w.kv_dim, w.kv_dim);
  be.rope(q, w.attn_heads, w.attn_head_dim);
  be.rope(k, w.kv_heads, w.attn_head_dim);
  trace(be, at, "q", q);
  trace(be, at, "k", k);
  trace(be, at, "v", v);
  be.write_kv(at, k, v);
  const auto o = be.attention(at, q);
  trace(be, at, "attention", o);
  return o;
}

// The mixture-of-experts FFN (docs/design.md §2.2): h += SwiGLU_shared(x) (when there is a shared
// expert), then h += Σ_chosen w_e · SwiGLU_e(x). The router is replicated under tensor
// parallelism, so every rank routes alike.
template <Backend B>
void moe_ffn(B& be, const Site& at, const typename B::Tensor& x) {
  const auto logits = be.project(at, Matrix::kRouter, x);
  trace(be, at, "router_logits", logits);
  const Routing<typename B::Tensor> r = be.route(at, logits);
  trace(be, at, "router_probs", r.probs);
  trace(be, at, "experts", r.experts);
  trace(be, at, "expert_weights", r.weights);
  if (be.widths().shared_hidden > 0) {
    const auto act = be.swiglu(be.project(at, Matrix::kSharedUp, x));
    trace(be, at, "shared_act", act);
    be.add_projection(at, Matrix::kSharedDown, act);
    trace(be, at, "h_shared", be.hidden());
  }
  be.add_experts(at, x, r);
}

// One block, every layer of every decoder (docs/design.md §2.2):
// h += Mixer(RMSNorm_mixer(h)), then h += FFN(RMSNorm_final(h)).
template <Backend B>
Status block(B& be, const Site& at) {
  const auto x = be.norm(at, Norm::kMixer);
  trace(be, at, "mixer_norm", x);
  typename B::Tensor o;
  switch (mixer_of(be.config(), at.part)) {
    case Mixer::kRetention:
      o = retention_mixer(be, at, x);
      break;
    case Mixer::kWindow:
      o = window_mixer(be, at, x);
      break;
    case Mixer::kGlobalAttention:
      o = global_attention_mixer(be, at, x);
      break;
    case Mixer::kOwnAttention:
      o = own_attention_mixer(be, at, x);
      break;
  }
  be.add_projection(at, Matrix::kOut, o);
  trace(be, at, "h_mixer", be.hidden());
  const auto xf = be.norm(at, Norm::kFfn);
  trace(be, at, "ffn_norm", xf);
  if (be.config().is_moe()) {
    moe_ffn(be, at, xf);
  } else {
    const auto act = be.swiglu(be.project(at, Matrix::kFfnUp, xf));
    trace(be, at, "ffn_act", act);
    be.add_projection(at, Matrix::kFfnDown, act);
  }
  trace(be, at, "h_out", be.hidden());
  return be.status();
}

// The global K/V rows (docs/design.md §2.4): z = RMSNorm_kv(h), K = z·W_kᵀ (RoPE unless NoPE), V.
template <Backend B>
void global_kv(B& be) {
  const Widths& w = be.widths();
  const Site at{Part::kGlobalKv};
  const auto z = be.norm(at, Norm::kKv);
  trace(be, at, "norm", z);
  const auto kv = be.project(at, Matrix::kKv, z);
  const auto k = kv.cols(0, w.kv_dim), v = kv.cols(w.kv_dim, w.kv_dim);
  if (be.config().cross_decoder_rope) be.rope(k, w.kv_heads, w.attn_head_dim);
  trace(be, at, "k", k);
  trace(be, at, "v", v);
  be.write_kv(at, k, v);
}

// logits = RMSNorm_final(h) · Oᵀ.
template <Backend B>
void head(B& be) {
  const Site at{Part::kHead};
  const auto x = be.norm(at, Norm::kFinal);
  trace(be, at, "norm", x);
  const auto logits = be.project(at, Matrix::kOutput, x);
  trace(be, at, "logits", logits);
}

// The whole network for the bound rows.
template <Backend B>
Status run(B& be, const Pass& pass) {
  const ModelConfig& c = be.config();
  if (pass.from_tokens) {
    be.embed();
    trace(be, Site{Part::kEmbed}, "", be.hidden());
  } else {
    be.load_last_hidden();
  }
  if (pass.self_decoder) {
    if (c.is_transformer()) {
      for (int l = 0; l < c.n_layers; ++l) YOCO_RETURN_IF_ERROR(block(be, Site{Part::kLayer, l}));
    } else {
      for (int loop = 0; loop < c.n_loops; ++loop)
        for (int l = 0; l < c.n_self_layers; ++l)
          YOCO_RETURN_IF_ERROR(block(be, Site{Part::kSelf, l, loop, loop * c.n_self_layers + l}));
      global_kv(be);
    }
    if (pass.keep_last_hidden) be.keep_last_hidden();
  }
  if (pass.cross_decoder && !c.is_transformer())
    for (int l = 0; l < c.n_cross_layers(); ++l) YOCO_RETURN_IF_ERROR(block(be, Site{Part::kCross, l}));
  if (pass.head) head(be);
  return be.status();
}

}  // namespace yoco::program
