#!/usr/bin/env python3
"""Train a small YOCO language model on the King James Bible; evaluate; export to docs/design.md §2.1.

The model is written from docs/design.md §2:
  embedding h0 = sqrt(dim) E[token]; self-decoder of n_self_layers blocks (gated retention, or
  sliding-window attention when sliding_window is set), looped n_loops times with shared weights;
  one global K/V from RMSNorm_kv(h_self); cross-decoder blocks doing causal GQA over that K/V;
  logits RMSNorm(h) E^T (tied) or output_projection. Blocks are pre-norm: h += Mixer(RMSNorm(h)),
  h += SwiGLU(RMSNorm(h)) with fc2(silu(fc1 x) * gate x). RoPE is interleaved-pair with
  f_j = theta^(-j/(d/2-1)). Module names equal the tensor names of docs/design.md §2.1, so state_dict() is the
  checkpoint layout. Gated retention trains in its parallel form (exact, O(T^2) per head).

Steps (see tools/train/README.md):
  train:   python3 tools/train/train_yoco.py train --data D --tokenizer D/tokenizer --work W \
               [--preset yoco|yoco-u] [--steps N] ...          (resumes from W/ckpt.pt)
  export:  python3 tools/train/train_yoco.py export --work W --out models/kjv-yoco [--dtype bf16]
           (W/ckpt.pt -> tools/convert_checkpoint.py -> model dir; then reloads the exported
           weights and writes the evaluation, see `eval`)
  eval:    python3 tools/train/train_yoco.py eval --model models/kjv-yoco --data D [--window 256]

Evaluation protocol: the held-out books (val.txt), each book encoded on its own and followed by
<|endoftext|>, concatenated into one token sequence; cut into consecutive windows of --window
tokens (the last one shorter); each window is scored independently from its own first token,
which is not predicted (so a window of n tokens contributes n-1 predictions, positions 0..n-1).
perplexity = exp(-(sum of log-probs over all windows) / (number of predicted tokens)).
Computed in float64 from the exported (bf16-rounded) weights; eval.json keeps every window's
token ids, sum of log-probs and count so `yoco-cli score` can be compared window by window.
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # tools/ for convert_checkpoint
import convert_checkpoint  # noqa: E402
from kjv_data import encode_books, load_tokenizer, read_books  # noqa: E402

PRESETS = {
    # gated-retention YOCO: 4 self + 4 cross layers
    "yoco": dict(dim=256, n_layers=8, hidden_dim=704, n_self_heads=4, n_attn_heads=4, n_attn_kv_heads=2,
                 vocab_size=4096, rope_theta=10000.0, norm_eps=1e-5, sliding_window=None, n_loops=1,
                 cross_decoder_rope=True, n_self_layers=4, gate_logit_normalizer=16.0, max_seq_len=4096,
                 tie_embeddings=True, arch="yoco"),
    # YOCO-U: a 2-layer SWA self-decoder looped 3 times (8 block applications, like "yoco"), NoPE
    # cross-decoder of 2 layers; ~4M parameters so that both models fit models/ (<= 25 MB)
    "yoco-u": dict(dim=256, n_layers=4, hidden_dim=704, n_self_heads=4, n_attn_heads=4, n_attn_kv_heads=2,
                   vocab_size=4096, rope_theta=10000.0, norm_eps=1e-5, sliding_window=64, n_loops=3,
                   cross_decoder_rope=False, n_self_layers=2, gate_logit_normalizer=16.0, max_seq_len=4096,
                   tie_embeddings=True, arch="yoco"),
    # YOCO-U with MoE FFNs: 8 routed experts of 176, top-2, and a shared expert of 352, so the
    # active FFN width (2 * 176 + 352 = 704) equals yoco-u's hidden_dim (unused by any FFN here)
    "yoco-u-moe": dict(dim=256, n_layers=4, hidden_dim=704, n_self_heads=4, n_attn_heads=4, n_attn_kv_heads=2,
                       vocab_size=4096, rope_theta=10000.0, norm_eps=1e-5, sliding_window=64, n_loops=3,
                       cross_decoder_rope=False, n_self_layers=2, gate_logit_normalizer=16.0, max_seq_len=4096,
                       tie_embeddings=True, arch="yoco", n_experts=8, n_experts_per_token=2,
                       expert_hidden_dim=176, shared_expert_hidden_dim=352, moe_norm_topk_prob=False),
}
# params.json keys of the MoE FFN (docs/design.md §2.1); absent = dense.
MOE_KEYS = ("n_experts", "n_experts_per_token", "expert_hidden_dim", "shared_expert_hidden_dim", "moe_norm_topk_prob")
ARCH_ARGS = ("dim", "n_layers", "hidden_dim", "n_self_heads", "n_attn_heads", "n_attn_kv_heads",
             "sliding_window", "n_loops", "n_self_layers", "n_experts", "n_experts_per_token", "expert_hidden_dim",
             "shared_expert_hidden_dim")


# ===================================================================================== model
def at_least_fp32(x):
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


class RMSNorm(nn.Module):
    def __init__(self, dim, eps, affine=True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None

    def forward(self, x):
        x = at_least_fp32(x)  # statistics in fp32 even under autocast
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return y if self.weight is None else y * self.weight


def rms_noweight(x, eps):
    x = at_least_fp32(x)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rope_tables(T, d, theta, device, dtype):
    """cos, sin [T, d/2]: angle = position * theta^(-j/(d/2-1)), computed in float64."""
    half = d // 2
    assert d % 2 == 0 and half >= 2, "RoPE needs an even head dim >= 4"
    f = theta ** (-torch.arange(half, dtype=torch.float64) / (half - 1))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * f[None, :]
    return ang.cos().to(device=device, dtype=dtype), ang.sin().to(device=device, dtype=dtype)


def apply_rope(x, cos, sin):
    """x [B, T, H, d]; interleaved pairs (2j, 2j+1) rotated by position * f_j."""
    c, s = cos[:, None, :], sin[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


def attention(q, k, v, mask):
    """q [B, Hq, T, d], k/v [B, Hkv, S, d]; query head i uses kv head i // (Hq/Hkv); mask [T, S]
    bool (True = may attend); scale 1/sqrt(d)."""
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    s = s.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(at_least_fp32(s), dim=-1).to(v.dtype), v)


class FFN(nn.Module):
    """SwiGLU with the YOCO naming: fc1 is the activated branch, gate the linear one."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, bias=False)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.fc2(F.silu(self.fc1(x)) * self.gate(x))


class MoEFFN(nn.Module):
    """Mixture of SwiGLU experts (docs/design.md §2, MoE FFN): p = softmax(router x) over all E
    experts in fp32 (or float64), the k largest chosen (ties towards the lower index), each
    weighted by its p (divided by the chosen sum when norm_topk_prob), plus an always-on shared
    expert. Each application also records the load-balancing term E * sum_e f_e P_e (f_e: the
    fraction of the N*k assignments that went to e, P_e: the mean router probability of e),
    which is 1 for uniform routing; YOCO.moe_aux_loss() collects them."""

    def __init__(self, dim, n_experts, k, hidden, shared_hidden, norm_topk_prob):
        super().__init__()
        assert 1 <= k <= n_experts
        self.k, self.norm_topk_prob = k, norm_topk_prob
        self.router = nn.Linear(dim, n_experts, bias=False)
        self.experts = nn.ModuleList(FFN(dim, hidden) for _ in range(n_experts))
        self.shared = FFN(dim, shared_hidden) if shared_hidden else None
        self.aux_terms = []
        self.load = None  # f_e of the last application, for the log

    def route(self, x):
        """x [N, dim] -> (p [N, E], chosen [N, k] expert ids, w [N, k] weights), all >= fp32."""
        with torch.autocast(device_type=x.device.type, enabled=False):
            logits = F.linear(at_least_fp32(x), at_least_fp32(self.router.weight))
        p = torch.softmax(logits, dim=-1)
        # a stable descending sort keeps equal probabilities in index order: ties go to the lower index
        top, chosen = torch.sort(p, dim=-1, descending=True, stable=True)
        w, chosen = top[:, :self.k], chosen[:, :self.k]
        if self.norm_topk_prob:
            w = w / w.sum(-1, keepdim=True)
        return p, chosen, w

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        p, chosen, w = self.route(x)
        out = torch.zeros(x.shape, dtype=p.dtype, device=x.device)
        for e, expert in enumerate(self.experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(x[rows]).to(p.dtype) * w[rows, slot, None])
        if self.shared is not None:
            out = out + self.shared(x).to(p.dtype)
        if self.training:
            E = p.shape[-1]
            f = torch.bincount(chosen.reshape(-1), minlength=E).to(p.dtype) / chosen.numel()
            self.aux_terms.append(E * (f * p.mean(0)).sum())
            self.load = f.detach()
        return out.reshape(shape)


def moe_ffn_plain(ffn, x):
    """The MoE FFN one token at a time, straight from the definition (float64): the
    equivalence oracle of MoEFFN (tools/train/test_train_model.py)."""
    out = []
    for t in x.reshape(-1, x.shape[-1]).double():
        logits = [float(torch.dot(r.double(), t)) for r in ffn.router.weight]
        m = max(logits)
        ex = [math.exp(v - m) for v in logits]
        p = [v / sum(ex) for v in ex]
        order = sorted(range(len(p)), key=lambda e: (-p[e], e))[:ffn.k]
        total = sum(p[e] for e in order) if ffn.norm_topk_prob else 1.0
        y = torch.zeros_like(t)
        for e in order:
            ex_ = ffn.experts[e]
            h = F.silu(ex_.fc1.weight.double() @ t) * (ex_.gate.weight.double() @ t)
            y += (p[e] / total) * (ex_.fc2.weight.double() @ h)
        if ffn.shared is not None:
            s = ffn.shared
            y += s.fc2.weight.double() @ (F.silu(s.fc1.weight.double() @ t) * (s.gate.weight.double() @ t))
        out.append(y)
    return torch.stack(out).reshape(x.shape)


def make_ffn(p):
    if p.get("n_experts", 0) > 0:
        return MoEFFN(p["dim"], p["n_experts"], p["n_experts_per_token"], p["expert_hidden_dim"],
                      p.get("shared_expert_hidden_dim", 0), p.get("moe_norm_topk_prob", False))
    return FFN(p["dim"], p["hidden_dim"])


class GatedRetention(nn.Module):
    def __init__(self, p):
        super().__init__()
        dim, self.H = p["dim"], p["n_self_heads"]
        self.hd = dim // self.H
        self.eps, self.gln = p["norm_eps"], p["gate_logit_normalizer"]
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.g_proj = nn.Linear(dim, dim, bias=False)
        self.gt_proj = nn.Linear(dim, self.H, bias=False)
        self.out_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, D = x.shape
        q = apply_rope(self.q_proj(x).view(B, T, self.H, self.hd), cos, sin).transpose(1, 2)
        k = apply_rope(self.k_proj(x).view(B, T, self.H, self.hd), cos, sin).transpose(1, 2)
        k = k * self.hd ** -0.5
        v = self.v_proj(x).view(B, T, self.H, self.hd).transpose(1, 2)
        # log-decays a_t = logsigmoid(gt)/tau and their cumulative sums, in (at least) fp32
        a = (F.logsigmoid(at_least_fp32(self.gt_proj(x))) / self.gln).transpose(1, 2)  # [B, H, T]
        b = a.cumsum(-1)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        # parallel form: o_t = sum_{s<=t} exp(b_t - b_s) (q_t . k_s) v_s ; -inf before exp so
        # the (positive, possibly huge) upper triangle never overflows
        decay = (b[..., :, None] - b[..., None, :]).masked_fill(~causal, float("-inf")).exp()
        o = torch.matmul(torch.matmul(q, k.transpose(-1, -2)) * decay.to(q.dtype), v)
        o = rms_noweight(o, self.eps).transpose(1, 2).reshape(B, T, D)
        o = F.silu(self.g_proj(x)) * o
        return self.out_proj(o)


class SlidingWindowAttention(nn.Module):
    def __init__(self, p):
        super().__init__()
        dim, self.H = p["dim"], p["n_self_heads"]
        self.hd, self.W = dim // self.H, p["sliding_window"]
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.out_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, D = x.shape
        q = apply_rope(self.q_proj(x).view(B, T, self.H, self.hd), cos, sin).transpose(1, 2)
        k = apply_rope(self.k_proj(x).view(B, T, self.H, self.hd), cos, sin).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.H, self.hd).transpose(1, 2)
        i = torch.arange(T, device=x.device)[:, None]
        j = torch.arange(T, device=x.device)[None, :]
        mask = (j <= i) & (j > i - self.W)
        o = attention(q, k, v, mask).transpose(1, 2).reshape(B, T, D)
        return self.out_proj(o)


class SelfBlock(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.mixer_layer_norm = RMSNorm(p["dim"], p["norm_eps"])
        self.mixer = GatedRetention(p) if p["sliding_window"] is None else SlidingWindowAttention(p)
        self.final_layer_norm = RMSNorm(p["dim"], p["norm_eps"])
        self.ffn = make_ffn(p)

    def forward(self, h, cos, sin):
        h = h + self.mixer(self.mixer_layer_norm(h), cos, sin)
        return h + self.ffn(self.final_layer_norm(h))


class SelfDecoder(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.n_loops = p["n_loops"]
        self.layers = nn.ModuleList(SelfBlock(p) for _ in range(p["n_self_layers"]))

    def forward(self, h, cos, sin):
        for _ in range(self.n_loops):  # YOCO-U: same weights, same positions every loop
            for layer in self.layers:
                h = layer(h, cos, sin)
        return h


class CrossAttention(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.q_proj = nn.Linear(p["dim"], p["dim"], bias=False)
        self.out_proj = nn.Linear(p["dim"], p["dim"], bias=False)
        self.H, self.hd = p["n_attn_heads"], p["dim"] // p["n_attn_heads"]
        self.rope = p["cross_decoder_rope"]

    def forward(self, x, K, V, cos, sin):
        B, T, D = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.hd)
        if self.rope:
            q = apply_rope(q, cos, sin)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        o = attention(q.transpose(1, 2), K, V, causal).transpose(1, 2).reshape(B, T, D)
        return self.out_proj(o)


class CrossBlock(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.mixer_layer_norm = RMSNorm(p["dim"], p["norm_eps"])
        self.mixer = CrossAttention(p)
        self.final_layer_norm = RMSNorm(p["dim"], p["norm_eps"])
        self.ffn = make_ffn(p)

    def forward(self, h, K, V, cos, sin):
        h = h + self.mixer(self.mixer_layer_norm(h), K, V, cos, sin)
        return h + self.ffn(self.final_layer_norm(h))


class CrossDecoder(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.Hkv, self.hd = p["n_attn_kv_heads"], p["dim"] // p["n_attn_heads"]
        self.rope = p["cross_decoder_rope"]
        self.kv_layer_norm = RMSNorm(p["dim"], p["norm_eps"])
        self.k_proj = nn.Linear(p["dim"], self.Hkv * self.hd, bias=False)
        self.v_proj = nn.Linear(p["dim"], self.Hkv * self.hd, bias=False)
        self.layers = nn.ModuleList(CrossBlock(p) for _ in range(p["n_layers"] - p["n_self_layers"]))

    def forward(self, h, cos, sin):
        B, T, _ = h.shape
        z = self.kv_layer_norm(h)
        K = self.k_proj(z).view(B, T, self.Hkv, self.hd)
        if self.rope:
            K = apply_rope(K, cos, sin)
        K = K.transpose(1, 2)
        V = self.v_proj(z).view(B, T, self.Hkv, self.hd).transpose(1, 2)
        for layer in self.layers:  # the one global K/V is shared by every cross layer
            h = layer(h, K, V, cos, sin)
        return h


class YOCO(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p
        self.embed_tokens = nn.Embedding(p["vocab_size"], p["dim"])
        self.self_decoder = SelfDecoder(p)
        self.cross_decoder = CrossDecoder(p)
        self.layer_norm = RMSNorm(p["dim"], p["norm_eps"])
        self.output_projection = None if p["tie_embeddings"] else nn.Linear(p["dim"], p["vocab_size"], bias=False)

    def init_weights(self, std=0.02):
        """Normal(0, std) matrices and embedding, residual-branch outputs (out_proj, fc2) scaled by
        1/sqrt(2 * blocks applied), norms 1. (A larger embedding, e.g. dim^-1/2, makes the tied
        output predict the input token with logit ~ dim * std at init.)"""
        p = self.p
        depth = p["n_self_layers"] * p["n_loops"] + (p["n_layers"] - p["n_self_layers"])
        for name, w in self.named_parameters():
            if w.dim() == 1:
                nn.init.ones_(w)
            elif name.endswith(("out_proj.weight", "fc2.weight")):
                nn.init.normal_(w, std=std / math.sqrt(2 * depth))
            else:
                nn.init.normal_(w, std=std)

    def moe_aux_loss(self):
        """The mean load-balancing term over every MoE FFN application since the last call
        (None for a dense model); clears them."""
        terms = []
        for m in self.modules():
            if isinstance(m, MoEFFN):
                terms += m.aux_terms
                m.aux_terms = []
        return torch.stack(terms).mean() if terms else None

    def expert_load(self):
        """max_e f_e * E over the MoE layers' last applications (1 = perfectly balanced)."""
        loads = [m.load for m in self.modules() if isinstance(m, MoEFFN) and m.load is not None]
        return max(float(f.max()) * f.numel() for f in loads) if loads else None

    def forward(self, tokens):
        """tokens [B, T] -> logits [B, T, vocab]; positions 0..T-1."""
        B, T = tokens.shape
        d_self, d_cross = self.p["dim"] // self.p["n_self_heads"], self.p["dim"] // self.p["n_attn_heads"]
        dtype = self.embed_tokens.weight.dtype
        cs_self = rope_tables(T, d_self, self.p["rope_theta"], tokens.device, dtype)
        cs_cross = cs_self if d_cross == d_self else rope_tables(T, d_cross, self.p["rope_theta"], tokens.device, dtype)
        h = self.embed_tokens(tokens) * math.sqrt(self.p["dim"])
        h = self.self_decoder(h, *cs_self)
        h = self.cross_decoder(h, *cs_cross)
        x = self.layer_norm(h)
        w = self.embed_tokens.weight if self.output_projection is None else self.output_projection.weight
        return F.linear(x, w)


def count_params(model):
    return sum(p.numel() for p in model.parameters())


# ====================================================================================== data
def token_stream(data_dir, tokenizer, split):
    return encode_books(tokenizer, read_books(os.path.join(data_dir, f"{split}.txt")))


class Batches:
    """Deterministic epochs of non-overlapping (T+1)-token windows. Epoch e starts at a random
    offset in [0, T) and visits its windows in a random order; both come from
    numpy.random.default_rng([seed, e]), so batch s is a pure function of (seed, s) and a resumed
    run sees exactly the batches an uninterrupted run would."""

    def __init__(self, ids, T, B, seed):
        self.ids = torch.tensor(ids, dtype=torch.long)
        self.T, self.B, self.seed = T, B, seed
        self.n_windows = (len(ids) - T) // (T + 1)  # leaves room for any offset < T
        self._epoch, self._perm, self._offset = None, None, 0

    def _plan(self, epoch):
        if self._epoch != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            self._offset = int(rng.integers(0, self.T))
            self._perm = rng.permutation(self.n_windows)
            self._epoch = epoch

    def get(self, step):
        rows = []
        for i in range(step * self.B, (step + 1) * self.B):
            epoch, k = divmod(i, self.n_windows)
            self._plan(epoch)
            start = self._offset + int(self._perm[k]) * (self.T + 1)
            rows.append(self.ids[start:start + self.T + 1])
        batch = torch.stack(rows)
        return batch[:, :-1], batch[:, 1:]

    def epochs(self, step):
        return step * self.B / self.n_windows


# ================================================================================ evaluation
def eval_windows(ids, window):
    wins = [ids[i:i + window] for i in range(0, len(ids), window)]
    return [w for w in wins if len(w) >= 2]


@torch.no_grad()
def score_windows(model, windows, device, batch=16):
    """Per window: (sum of log-probs of tokens 1..n-1 given their prefix, n-1)."""
    model.eval()
    out = []
    by_len = {}
    for i, w in enumerate(windows):
        by_len.setdefault(len(w), []).append(i)
    res = {}
    for n, idx in by_len.items():
        for j in range(0, len(idx), batch):
            sel = idx[j:j + batch]
            x = torch.tensor([windows[i] for i in sel], dtype=torch.long, device=device)
            lp = torch.log_softmax(model(x[:, :-1]).double(), dim=-1)
            tok_lp = lp.gather(-1, x[:, 1:, None]).squeeze(-1).sum(-1)
            for i, s in zip(sel, tok_lp.tolist()):
                res[i] = (s, n - 1)
    out = [res[i] for i in range(len(windows))]
    return out


def perplexity(scores):
    tot = sum(s for s, _ in scores)
    cnt = sum(c for _, c in scores)
    return math.exp(-tot / cnt), tot, cnt


# ============================================================================== checkpoints
def load_model_dir(model_dir, dtype=torch.float64, device="cpu"):
    """Reload an exported model directory (docs/design.md §2.1) into the training model."""
    with open(os.path.join(model_dir, "params.json")) as f:
        p = json.load(f)
    tensors = convert_checkpoint.read_safetensors(os.path.join(model_dir, "model.safetensors"))
    model = YOCO(p)
    missing, unexpected = model.load_state_dict({k: v.to(torch.float32) for k, v in tensors.items()}, strict=False)
    if missing or unexpected:
        raise SystemExit(f"{model_dir}: missing {missing}, unexpected {unexpected}")
    return model.to(device=device, dtype=dtype), p


def moe_expected_shapes(p):
    """docs/design.md §2.1's tensor names -> shapes for a model whose FFNs are all MoE: the dense
    names with every block's ffn.{fc1,gate,fc2} replaced by ffn.router, ffn.experts.{e}.* and,
    when shared_expert_hidden_dim > 0, ffn.shared.*."""
    dim, E = p["dim"], p["n_experts"]
    H, S = p["expert_hidden_dim"], p["shared_expert_hidden_dim"]
    want = {}
    for name, shape in convert_checkpoint.expected_shapes(p).items():
        if not name.endswith(("ffn.fc1.weight", "ffn.gate.weight", "ffn.fc2.weight")):
            want[name] = shape
        elif name.endswith("ffn.fc1.weight"):
            pre = name[: -len("fc1.weight")]
            want[pre + "router.weight"] = (E, dim)
            for branch, hidden in [(f"experts.{e}.", H) for e in range(E)] + ([("shared.", S)] if S else []):
                want[pre + branch + "fc1.weight"] = (hidden, dim)
                want[pre + branch + "gate.weight"] = (hidden, dim)
                want[pre + branch + "fc2.weight"] = (dim, hidden)
    return want


def moe_params(raw):
    """params.json of an MoE run with every key explicit (convert_checkpoint's for the rest)."""
    p = convert_checkpoint.normalise_params({k: v for k, v in raw.items() if k not in MOE_KEYS}, False)

    def positive(k, v, zero_ok=False):
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if zero_ok else 1):
            raise convert_checkpoint.ConvertError(f"params.json: {k} must be a {'non-negative' if zero_ok else 'positive'}"
                                                  f" integer, got {v!r}")
        return v

    p["n_experts"] = positive("n_experts", raw["n_experts"])
    p["n_experts_per_token"] = positive("n_experts_per_token", raw["n_experts_per_token"])
    if p["n_experts_per_token"] > p["n_experts"]:
        raise convert_checkpoint.ConvertError("params.json: n_experts_per_token must be <= n_experts")
    p["expert_hidden_dim"] = positive("expert_hidden_dim", raw["expert_hidden_dim"])
    p["shared_expert_hidden_dim"] = positive("shared_expert_hidden_dim", raw.get("shared_expert_hidden_dim", 0), True)
    if not isinstance(raw.get("moe_norm_topk_prob", False), bool):
        raise convert_checkpoint.ConvertError("params.json: moe_norm_topk_prob must be true or false")
    p["moe_norm_topk_prob"] = raw.get("moe_norm_topk_prob", False)
    return p


def export_checkpoint(ckpt, params_path, out_dir, dtype, tokenizer):
    """WORK/ckpt.pt -> model directory. Dense: tools/convert_checkpoint.py. MoE: the same checks
    (every tensor of moe_expected_shapes present with its shape, finite; nothing else) and the
    same writer, with the MoE keys in params.json."""
    with open(params_path) as f:
        raw = json.load(f)
    if not raw.get("n_experts"):
        return convert_checkpoint.convert(ckpt, params_path, out_dir, dtype=dtype, tokenizer=tokenizer,
                                          state_key="model")
    p = moe_params(raw)
    sd = convert_checkpoint.load_state_dict(ckpt, "model")
    want = moe_expected_shapes(p)
    missing, extra = sorted(set(want) - set(sd)), sorted(set(sd) - set(want))
    if missing or extra:
        raise convert_checkpoint.ConvertError(f"tensors missing: {missing[:5]}, not in the model: {extra[:5]}")
    tensors = {}
    for name, shape in want.items():
        t = sd[name]
        if tuple(t.shape) != shape:
            raise convert_checkpoint.ConvertError(f"{name}: shape {tuple(t.shape)}, expected {shape}")
        if not bool(torch.isfinite(t.float()).all()):
            raise convert_checkpoint.ConvertError(f"{name}: has non-finite values")
        tensors[name] = t.detach().to(convert_checkpoint.OUT_DTYPES[dtype]).contiguous()
    os.makedirs(out_dir, exist_ok=True)
    convert_checkpoint.write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(out_dir, "params.json"), "w") as f:
        json.dump(p, f, indent=2)
        f.write("\n")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        if tokenizer and os.path.exists(os.path.join(tokenizer, fn)):
            shutil.copyfile(os.path.join(tokenizer, fn), os.path.join(out_dir, fn))
    print(f"wrote {out_dir}: {len(tensors)} tensors, {sum(t.numel() for t in tensors.values()):,} parameters",
          flush=True)
    return tensors, p


def save_atomic(obj, path):
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_checkpoint(path, model, opt, step, p, args):
    """ckpt.pt = {"model": state dict, "optim_state": {i: {name: tensor}}, "meta": JSON string}.
    Everything that is not a tensor (step, params, training arguments, the optimizer's
    param_groups with their float lr/betas/eps) goes into the JSON string, because torch 1.13's
    weights_only=True loader cannot read pickled Python floats; this way the checkpoint loads
    with weights_only=True (resume, tools/convert_checkpoint.py) on torch 1.13 and later."""
    osd = opt.state_dict()
    meta = {"step": step, "params": p, "train_args": vars(args), "optim_param_groups": osd["param_groups"]}
    save_atomic({"model": model.state_dict(), "optim_state": osd["state"], "meta": json.dumps(meta)}, path)


def load_checkpoint(path):
    ck = torch.load(path, map_location="cpu", weights_only=True)
    ck["meta"] = json.loads(ck["meta"])
    return ck


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def pick_device(name):
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


# =================================================================================== commands
def cmd_train(args):
    torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    os.makedirs(args.work, exist_ok=True)
    ckpt_path = os.path.join(args.work, "ckpt.pt")
    tok = load_tokenizer(args.tokenizer)
    p = dict(PRESETS[args.preset])
    for k in ARCH_ARGS:
        if getattr(args, k, None) is not None:
            p[k] = getattr(args, k)
    if args.moe_norm_topk_prob is not None:
        p["moe_norm_topk_prob"] = args.moe_norm_topk_prob == "true"
    if p.get("n_experts", 0) > 0:
        for k in MOE_KEYS:
            p.setdefault(k, {"shared_expert_hidden_dim": 0, "moe_norm_topk_prob": False}.get(k))
            if p[k] is None:
                raise SystemExit(f"--n-experts needs --{k.replace('_', '-')}")
    if args.n_self_layers is None:
        p["n_self_layers"] = p["n_layers"] // 2
    p["vocab_size"] = tok.get_vocab_size()
    resume = os.path.exists(ckpt_path)
    if resume:
        ck = load_checkpoint(ckpt_path)
        if ck["meta"]["params"] != p:
            raise SystemExit(f"{ckpt_path} was trained with other params: {ck['meta']['params']} vs {p}")
        saved = ck["meta"]["train_args"]
        for k in ("seed", "batch", "seq_len", "steps", "lr", "warmup", "min_lr_frac", "weight_decay", "aux_loss_coef"):
            if saved.get(k, 0.01 if k == "aux_loss_coef" else None) != getattr(args, k):
                raise SystemExit(f"{ckpt_path}: resuming needs --{k.replace('_', '-')} {saved[k]}")

    torch.manual_seed(args.seed)
    model = YOCO(p)
    model.init_weights()
    model.to(device)
    decay = [w for n, w in model.named_parameters() if w.dim() >= 2]
    no_decay = [w for n, w in model.named_parameters() if w.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    step = 0
    if resume:
        model.load_state_dict(ck["model"])
        opt.load_state_dict({"state": ck["optim_state"], "param_groups": ck["meta"]["optim_param_groups"]})
        step = ck["meta"]["step"]
        print(f"resumed from {ckpt_path} at step {step}", flush=True)
        del ck
    with open(os.path.join(args.work, "params.json"), "w") as f:
        json.dump(p, f, indent=2)

    train_ids = token_stream(args.data, tok, "train")
    val_ids = token_stream(args.data, tok, "val")
    batches = Batches(train_ids, args.seq_len, args.batch, args.seed)
    val_w = eval_windows(val_ids, args.seq_len)
    print(f"params {count_params(model):,} | train tokens {len(train_ids):,} val tokens {len(val_ids):,} | "
          f"device {device} threads {torch.get_num_threads()} | {args.steps} steps of "
          f"{args.batch}x{args.seq_len} = {args.steps * args.batch * args.seq_len / len(train_ids):.2f} epochs",
          flush=True)
    log = open(os.path.join(args.work, "train_log.jsonl"), "a")

    def save():
        save_checkpoint(ckpt_path, model, opt, step, p, args)

    t0, tok_done, loss_acc, aux_acc, n_acc = time.time(), 0, 0.0, 0.0, 0
    model.train()
    stop = args.steps if args.stop_after is None else min(args.steps, step + args.stop_after)
    while step < stop:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        x, y = batches.get(step)
        x, y = x.to(device), y.to(device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=args.amp == "bf16"):
            logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), y.reshape(-1))
        aux = model.moe_aux_loss()
        total = loss if aux is None else loss + args.aux_loss_coef * aux
        opt.zero_grad(set_to_none=True)
        total.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        step += 1
        tok_done += x.numel()
        loss_acc += loss.item()
        aux_acc += 0.0 if aux is None else aux.item()
        n_acc += 1
        if step % args.log_every == 0 or step == args.steps:
            dt = time.time() - t0
            rec = {"step": step, "loss": loss_acc / n_acc, "lr": lr_at(step - 1, args), "gnorm": float(gnorm),
                   "tok_s": tok_done / dt, "epoch": batches.epochs(step), "elapsed_s": dt}
            if aux is not None:  # the balance term (1 = uniform) and the busiest expert's share x E
                rec["aux"], rec["max_load"] = aux_acc / n_acc, model.expert_load()
            print(json.dumps(rec), flush=True)
            log.write(json.dumps(rec) + "\n")
            log.flush()
            loss_acc, aux_acc, n_acc = 0.0, 0.0, 0
        if step % args.eval_every == 0 or step == args.steps:
            ppl, _, _ = perplexity(score_windows(model, val_w, device))
            model.train()
            rec = {"step": step, "val_ppl": ppl, "val_window": args.seq_len}
            print(json.dumps(rec), flush=True)
            log.write(json.dumps(rec) + "\n")
            log.flush()
        if step % args.ckpt_every == 0 or step == stop:
            save()
    print(f"{'done' if step == args.steps else 'stopped'}: {step} of {args.steps} steps, checkpoint {ckpt_path}",
          flush=True)
    return 0


def write_eval(model_dir, data_dir, window, threads, n_tokens_sample=None):
    torch.set_num_threads(threads)
    model, p = load_model_dir(model_dir, dtype=torch.float64)
    tok = load_tokenizer(model_dir)
    val_ids = token_stream(data_dir, tok, "val")
    wins = eval_windows(val_ids, window)
    scores = score_windows(model, wins, "cpu")
    ppl, tot, cnt = perplexity(scores)
    ev = {
        "protocol": ("held-out books (val.txt: " + ", ".join(held_out_books(data_dir)) + "), each book "
                     "encoded on its own + <|endoftext|>, concatenated into one sequence, cut into "
                     f"consecutive windows of {window} tokens (last one shorter); each window scored "
                     "independently from its first token (not predicted); perplexity = "
                     "exp(-sum log-prob / predicted tokens); float64 from the exported weights"),
        "window": window,
        "n_tokens": len(val_ids),
        "n_windows": len(wins),
        "n_predicted": cnt,
        "sum_logprob": tot,
        "perplexity": ppl,
        "windows": [{"index": i, "sum_logprob": s, "count": c, "tokens": w}
                    for i, (w, (s, c)) in enumerate(zip(wins, scores))],
    }
    with open(os.path.join(model_dir, "eval.json"), "w") as f:
        json.dump(ev, f)
        f.write("\n")
    print(f"{model_dir}: validation perplexity {ppl:.4f} over {cnt} predicted tokens "
          f"({len(wins)} windows of <= {window}); wrote eval.json", flush=True)
    return ev


def held_out_books(data_dir):
    try:
        with open(os.path.join(data_dir, "books.json")) as f:
            return [b["book"] for b in json.load(f) if b["split"] == "val"]
    except OSError:
        return ["?"]


def cmd_export(args):
    ckpt = os.path.join(args.work, "ckpt.pt")
    params = os.path.join(args.work, "params.json")
    ck_args = load_checkpoint(ckpt)["meta"]["train_args"]
    tokdir = args.tokenizer or ck_args["tokenizer"]
    data = args.data or ck_args["data"]
    export_checkpoint(ckpt, params, args.out, args.dtype, tokdir)
    write_eval(args.out, data, args.window, args.threads)
    return 0


def cmd_eval(args):
    write_eval(args.model, args.data, args.window, args.threads)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--data", required=True)
    t.add_argument("--tokenizer", required=True)
    t.add_argument("--work", required=True, help="checkpoint + log directory (resumes from ckpt.pt)")
    t.add_argument("--preset", choices=sorted(PRESETS), default="yoco")
    for k in ARCH_ARGS:
        t.add_argument("--" + k.replace("_", "-"), dest=k, type=int)
    t.add_argument("--moe-norm-topk-prob", choices=("true", "false"),
                   help="divide the chosen experts' weights by their sum (default: the preset's, false)")
    t.add_argument("--aux-loss-coef", type=float, default=0.01,
                   help="weight of the MoE load-balancing loss E * sum_e f_e P_e (ignored when dense)")
    t.add_argument("--steps", type=int, default=3000)
    t.add_argument("--batch", type=int, default=16)
    t.add_argument("--seq-len", type=int, default=256)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--warmup", type=int, default=100)
    t.add_argument("--min-lr-frac", type=float, default=0.1)
    t.add_argument("--weight-decay", type=float, default=0.1)
    t.add_argument("--clip", type=float, default=1.0)
    t.add_argument("--seed", type=int, default=1234)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda")
    t.add_argument("--amp", choices=("bf16", "none"), default="bf16",
                   help="bf16 autocast for the matrix products (fp32 master weights, loss, norms, "
                        "gate log-decays); on this CPU (AVX512-BF16 via oneDNN) ~3-5x faster than fp32")
    t.add_argument("--log-every", type=int, default=10)
    t.add_argument("--eval-every", type=int, default=500)
    t.add_argument("--ckpt-every", type=int, default=100)
    t.add_argument("--stop-after", type=int, help="checkpoint and stop after this many more steps "
                   "(the schedule still follows --steps; run again to resume)")
    e = sub.add_parser("export")
    e.add_argument("--work", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--dtype", choices=("f32", "f16", "bf16"), default="bf16")
    e.add_argument("--tokenizer", help="default: the one the run was trained with")
    e.add_argument("--data", help="default: the one the run was trained with")
    e.add_argument("--window", type=int, default=256)
    e.add_argument("--threads", type=int, default=2)
    v = sub.add_parser("eval")
    v.add_argument("--model", required=True)
    v.add_argument("--data", required=True)
    v.add_argument("--window", type=int, default=256)
    v.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    return {"train": cmd_train, "export": cmd_export, "eval": cmd_eval}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
