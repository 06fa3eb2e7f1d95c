"""Independent float64 reference of the YOCO model (docs/design.md §2), written from the formulas,
and of the Transformer baseline of section 2.6 (arch "transformer").

This is the test oracle for the C++ engine. It favours the obvious form over the fast one:
attention is the O(n^2) masked form, gated retention exists in its parallel, recurrent and
chunkwise forms (which must agree), and a token-by-token decoder rebuilds the inference state
of section 2.5 so that "prefill + decode = full forward" is checked here too.

Only numpy is needed. Everything is computed in float64 from the (F32/F16/BF16) checkpoint.
"""

import json
import math
import os
import struct

import numpy as np

# ----------------------------------------------------------------------------------------------
# Checkpoint loading (2.1)
# ----------------------------------------------------------------------------------------------

_NP_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "F64": np.dtype("<f8")}


def load_safetensors(path):
    """Parse a .safetensors file by hand: u64 LE header length, JSON header, raw data."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (hlen,) = struct.unpack("<Q", blob[:8])
    if 8 + hlen > len(blob):
        raise ValueError(f"{path}: header length {hlen} past end of file")
    header = json.loads(blob[8 : 8 + hlen].decode("utf-8"))
    data = blob[8 + hlen :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape = info["dtype"], tuple(info["shape"])
        begin, end = info["data_offsets"]
        if not (0 <= begin <= end <= len(data)):
            raise ValueError(f"{path}: {name}: data_offsets {begin},{end} out of range")
        raw = data[begin:end]
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if dtype == "BF16":
            if len(raw) != 2 * count:
                raise ValueError(f"{path}: {name}: {len(raw)} bytes for {count} bf16 values")
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        elif dtype in _NP_DTYPES:
            dt = _NP_DTYPES[dtype]
            if len(raw) != dt.itemsize * count:
                raise ValueError(f"{path}: {name}: {len(raw)} bytes for {count} {dtype} values")
            arr = np.frombuffer(raw, dtype=dt)
        else:
            raise ValueError(f"{path}: {name}: unsupported dtype {dtype}")
        out[name] = arr.astype(np.float64).reshape(shape)
    return out


def load_weights(model_dir):
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return load_safetensors(single)
    index = os.path.join(model_dir, "model.safetensors.index.json")
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    weights = {}
    for shard in sorted(set(weight_map.values())):
        weights.update(load_safetensors(os.path.join(model_dir, shard)))
    return weights


class Config:
    """params.json with the defaults of docs/design.md §2.1."""

    def __init__(self, params, has_output_projection):
        p = dict(params)
        self.arch = p.get("arch", "yoco")
        assert self.arch in ("yoco", "transformer"), self.arch
        self.dim = int(p["dim"])
        self.n_layers = int(p["n_layers"])
        self.hidden_dim = int(p.get("hidden_dim") or 0)  # unused by an MoE
        self.n_attn_heads = int(p["n_attn_heads"])
        self.n_attn_kv_heads = int(p.get("n_attn_kv_heads") or self.n_attn_heads)
        self.vocab_size = int(p["vocab_size"])
        self.rope_theta = float(p.get("rope_theta", 10000.0))
        self.norm_eps = float(p.get("norm_eps", 1e-5))
        self.max_seq_len = p.get("max_seq_len")
        # Mixture of experts (2.2): n_experts = 0 is a dense FFN everywhere.
        self.n_experts = int(p.get("n_experts") or 0)
        self.n_experts_per_token = int(p.get("n_experts_per_token") or 0)
        self.expert_hidden_dim = int(p.get("expert_hidden_dim") or 0)
        self.shared_expert_hidden_dim = int(p.get("shared_expert_hidden_dim") or 0)
        self.moe_norm_topk_prob = bool(p.get("moe_norm_topk_prob") or False)
        if self.n_experts:
            assert 1 <= self.n_experts_per_token <= self.n_experts and self.expert_hidden_dim > 0
        tie = p.get("tie_embeddings")
        self.tie_embeddings = (not has_output_projection) if tie is None else bool(tie)
        assert self.dim % self.n_attn_heads == 0 and self.n_attn_heads % self.n_attn_kv_heads == 0
        self.hd_c = self.dim // self.n_attn_heads  # attention head dim (cross-decoder / transformer)
        if self.arch == "transformer":
            # 2.6: every layer attends over its own KV cache; no self-decoder keys apply.
            self.sliding_window = None
            self.n_loops = 1
            self.n_self_layers = 0
            self.n_cross_layers = 0
            return
        self.n_self_heads = int(p["n_self_heads"])
        sw = p.get("sliding_window")
        self.sliding_window = None if sw is None else int(sw)
        self.n_loops = int(p.get("n_loops", 1))
        self.cross_decoder_rope = bool(p.get("cross_decoder_rope", True))
        self.n_self_layers = int(p.get("n_self_layers", self.n_layers // 2))
        self.gate_logit_normalizer = float(p.get("gate_logit_normalizer", 16))
        self.n_cross_layers = self.n_layers - self.n_self_layers
        assert self.dim % self.n_self_heads == 0
        self.hd = self.dim // self.n_self_heads  # self-decoder head dim

    @property
    def is_transformer(self):
        return self.arch == "transformer"

    @property
    def is_gret(self):
        return not self.is_transformer and self.sliding_window is None


class Model:
    def __init__(self, params, weights):
        self.cfg = Config(params, "output_projection.weight" in weights)
        self.w = weights
        if self.cfg.tie_embeddings:
            self.w_out = weights["embed_tokens.weight"]
        else:
            self.w_out = weights["output_projection.weight"]

    @classmethod
    def load(cls, model_dir):
        with open(os.path.join(model_dir, "params.json")) as f:
            params = json.load(f)
        return cls(params, load_weights(model_dir))


# ----------------------------------------------------------------------------------------------
# Building blocks (2.2)
# ----------------------------------------------------------------------------------------------


def linear(x, w):
    """y = x . W^T with W in PyTorch [out, in] layout."""
    return x @ w.T


def rmsnorm(x, w, eps):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def logsigmoid(x):
    # log(1 / (1 + e^-x)) = -log1p(e^-x), written stably for both signs.
    return np.where(x >= 0, -np.log1p(np.exp(-np.abs(x))), x - np.log1p(np.exp(-np.abs(x))))


def log_softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def rope(x, positions, theta):
    """Interleaved-pair RoPE on x [n, n_heads, d]; pair j = (2j, 2j+1), f_j = theta^(-j/(d/2-1))."""
    d = x.shape[-1]
    half = d // 2
    assert d % 2 == 0 and half >= 2, "RoPE needs an even head dim >= 4"
    j = np.arange(half, dtype=np.float64)
    freqs = theta ** (-j / (half - 1))
    ang = np.asarray(positions, dtype=np.float64)[:, None] * freqs[None, :]  # [n, half]
    cos = np.cos(ang)[:, None, :]
    sin = np.sin(ang)[:, None, :]
    x0 = x[..., 0::2]
    x1 = x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def swiglu_act(x, prefix, w):
    """silu(fc1 x) * (gate x): fc1 is the activated branch; prefix ends in "ffn." or an expert's "."."""
    return silu(linear(x, w[prefix + "fc1.weight"])) * linear(x, w[prefix + "gate.weight"])


def moe_route(x, prefix, w, cfg):
    """2.2, mixture of experts: p = softmax(router x) over all E experts; the k largest p, ties to
    the lower expert index (a stable sort); their weights p, divided by their sum when
    moe_norm_topk_prob. Returns (logits [n, E], p [n, E], chosen [n, k], weights [n, k])."""
    logits = linear(x, w[prefix + "ffn.router.weight"])
    p = softmax(logits)
    chosen = np.argsort(-p, axis=-1, kind="stable")[:, : cfg.n_experts_per_token]
    weights = np.take_along_axis(p, chosen, axis=-1)
    if cfg.moe_norm_topk_prob:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    return logits, p, chosen, weights


def moe_routed(x, prefix, w, chosen, weights):
    """sum over each row's chosen experts e of weight_e * SwiGLU_e(x)."""
    out = np.zeros_like(x)
    for r in range(x.shape[0]):
        for e, wt in zip(chosen[r], weights[r]):
            q = prefix + f"ffn.experts.{int(e)}."
            out[r] += wt * linear(swiglu_act(x[r : r + 1], q, w), w[q + "fc2.weight"])[0]
    return out


def ffn_apply(h, x, prefix, model, trace=None, at=""):
    """h + FFN(x) for the FFN at `prefix` (dense, or the MoE of 2.2), recording its intermediates."""
    cfg, w = model.cfg, model.w
    if not cfg.n_experts:
        act = swiglu_act(x, prefix + "ffn.", w)
        record(trace, at + "ffn_act", act)
        return h + linear(act, w[prefix + "ffn.fc2.weight"])
    logits, p, chosen, weights = moe_route(x, prefix, w, cfg)
    record(trace, at + "router_logits", logits)
    record(trace, at + "router_probs", p)
    record(trace, at + "experts", chosen.astype(np.float64))
    record(trace, at + "expert_weights", weights)
    if cfg.shared_expert_hidden_dim:
        act = swiglu_act(x, prefix + "ffn.shared.", w)
        record(trace, at + "shared_act", act)
        h = h + linear(act, w[prefix + "ffn.shared.fc2.weight"])
        record(trace, at + "h_shared", h)
    return h + moe_routed(x, prefix, w, chosen, weights)


def split_heads(x, n_heads):
    n, width = x.shape
    return x.reshape(n, n_heads, width // n_heads)


def record(trace, name, x):
    """Named intermediates (docs/design.md §2.9): trace[name] = x as [rows, values per row]."""
    if trace is not None:
        x = np.asarray(x)
        trace[name] = x.reshape(x.shape[0], -1).copy()


# ----------------------------------------------------------------------------------------------
# Gated retention, three equivalent forms (2.3). Single head:
#   q, k [n, d] (k already scaled by d^-1/2), v [n, d], a [n] log-decays, S0 [d, d] initial state.
#   Returns (o [n, d] before the per-head norm, S_n [d, d]).
# ----------------------------------------------------------------------------------------------


def gret_parallel(q, k, v, a, S0=None):
    """o_t = sum_{s<=t} exp(sum_{r=s+1..t} a_r) (q_t.k_s) v_s  +  exp(sum_{r=0..t} a_r) q_t S0."""
    n, d = q.shape
    S0 = np.zeros((d, d)) if S0 is None else S0
    D = np.zeros((n, n))
    for t in range(n):
        for s in range(t + 1):
            D[t, s] = math.exp(float(np.sum(a[s + 1 : t + 1])))
    o = ((q @ k.T) * D) @ v
    decay_from_start = np.array([math.exp(float(np.sum(a[: t + 1]))) for t in range(n)])
    o = o + decay_from_start[:, None] * (q @ S0)
    S = math.exp(float(np.sum(a))) * S0
    for s in range(n):
        S = S + math.exp(float(np.sum(a[s + 1 :]))) * np.outer(k[s], v[s])
    return o, S


def gret_recurrent(q, k, v, a, S0=None):
    """S_t = exp(a_t) S_{t-1} + k_t^T v_t ; o_t = q_t S_t."""
    n, d = q.shape
    S = np.zeros((d, d)) if S0 is None else S0.copy()
    o = np.zeros((n, d))
    for t in range(n):
        S = math.exp(a[t]) * S + np.outer(k[t], v[t])
        o[t] = q[t] @ S
    return o, S


def gret_chunkwise(q, k, v, a, chunk, S0=None):
    """Chunks of `chunk` tokens (last one may be short); b = in-chunk inclusive cumsum of a.
    inner (q k^T * exp(b_i - b_j)[j<=i]) v ; cross (q * exp(b_i)) S_prev ;
    S_next = exp(b_last) S_prev + sum_j k_j^T (v_j exp(b_last - b_j))."""
    n, d = q.shape
    S = np.zeros((d, d)) if S0 is None else S0.copy()
    o = np.zeros((n, d))
    for c0 in range(0, n, chunk):
        c1 = min(c0 + chunk, n)
        qc, kc, vc = q[c0:c1], k[c0:c1], v[c0:c1]
        b = np.cumsum(a[c0:c1])
        m = c1 - c0
        mask = np.tril(np.ones((m, m), dtype=bool))
        decay = np.where(mask, np.exp(np.where(mask, b[:, None] - b[None, :], 0.0)), 0.0)
        inner = ((qc @ kc.T) * decay) @ vc
        cross = (qc * np.exp(b)[:, None]) @ S
        o[c0:c1] = inner + cross
        S = math.exp(b[-1]) * S + kc.T @ (vc * np.exp(b[-1] - b)[:, None])
    return o, S


def gret_heads(q, k, v, a, form="parallel", chunk=4, S0=None):
    """Multi-head wrapper: q, k, v [n, H, d], a [n, H], S0 [H, d, d] or None."""
    n, H, d = q.shape
    outs, states = [], []
    for h in range(H):
        s0 = None if S0 is None else S0[h]
        if form == "parallel":
            o, S = gret_parallel(q[:, h], k[:, h], v[:, h], a[:, h], s0)
        elif form == "recurrent":
            o, S = gret_recurrent(q[:, h], k[:, h], v[:, h], a[:, h], s0)
        elif form == "chunkwise":
            o, S = gret_chunkwise(q[:, h], k[:, h], v[:, h], a[:, h], chunk, s0)
        else:
            raise ValueError(form)
        outs.append(o)
        states.append(S)
    return np.stack(outs, axis=1), np.stack(states, axis=0)


# ----------------------------------------------------------------------------------------------
# Full forward over a token list
# ----------------------------------------------------------------------------------------------


def causal_attention(q, k, v, scale, allowed):
    """q [n, Hq, d], k/v [m, Hkv, d]; allowed [n, m] bool; query head i uses kv head i // group."""
    n, Hq, d = q.shape
    Hkv = k.shape[1]
    group = Hq // Hkv
    out = np.zeros((n, Hq, v.shape[-1]))
    for h in range(Hq):
        kh = k[:, h // group]
        vh = v[:, h // group]
        scores = (q[:, h] @ kh.T) * scale
        scores = np.where(allowed, scores, -np.inf)
        out[:, h] = softmax(scores) @ vh
    return out


def self_mixer_full(model, layer, x, positions, form="parallel", chunk=4, trace=None, at=""):
    """One self-decoder mixer over a whole sequence. Returns (output [n, dim], state).
    With `trace`, records its intermediates under the prefix `at` (e.g. "self.0.1.")."""
    cfg, w = model.cfg, model.w
    p = f"self_decoder.layers.{layer}.mixer."
    H, hd = cfg.n_self_heads, cfg.hd
    q = rope(split_heads(linear(x, w[p + "q_proj.weight"]), H), positions, cfg.rope_theta)
    k = rope(split_heads(linear(x, w[p + "k_proj.weight"]), H), positions, cfg.rope_theta)
    v = split_heads(linear(x, w[p + "v_proj.weight"]), H)
    n = x.shape[0]
    record(trace, at + "q", q)
    record(trace, at + "k", k)
    record(trace, at + "v", v)
    if cfg.is_gret:
        g = linear(x, w[p + "g_proj.weight"])
        gt = linear(x, w[p + "gt_proj.weight"])  # [n, H]
        record(trace, at + "gate_logits", gt)
        a = logsigmoid(gt) / cfg.gate_logit_normalizer
        k = k * hd ** -0.5
        o, S = gret_heads(q, k, v, a, form=form, chunk=chunk)
        record(trace, at + "retention", o)
        o = rmsnorm(o, None, cfg.norm_eps).reshape(n, cfg.dim)
        o = silu(g) * o
        record(trace, at + "mixer_out", o)
        return linear(o, w[p + "out_proj.weight"]), {"S": S}
    W = cfg.sliding_window
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    allowed = (j <= i) & (j > i - W)
    o = causal_attention(q, k, v, 1.0 / math.sqrt(hd), allowed).reshape(n, cfg.dim)
    record(trace, at + "attention", o)
    keep = min(n, W - 1)
    state = {
        "k": k.reshape(n, cfg.dim)[n - keep :].copy(),
        "v": v.reshape(n, cfg.dim)[n - keep :].copy(),
    }
    return linear(o, w[p + "out_proj.weight"]), state


def global_kv(model, h_self, positions, trace=None):
    cfg, w = model.cfg, model.w
    z = rmsnorm(h_self, w["cross_decoder.kv_layer_norm.weight"], cfg.norm_eps)
    K = split_heads(linear(z, w["cross_decoder.k_proj.weight"]), cfg.n_attn_kv_heads)
    V = split_heads(linear(z, w["cross_decoder.v_proj.weight"]), cfg.n_attn_kv_heads)
    if cfg.cross_decoder_rope:
        K = rope(K, positions, cfg.rope_theta)
    record(trace, "kv.norm", z)
    record(trace, "kv.k", K)
    record(trace, "kv.v", V)
    return K, V


def ffn_block(model, h, prefix, trace=None, at=""):
    """h + FFN(RMSNorm_final(h)) (the second half of a block, 2.2), recording the FFN's
    intermediates and the residual before and after it."""
    record(trace, at + "h_mixer", h)
    x = rmsnorm(h, model.w[prefix + "final_layer_norm.weight"], model.cfg.norm_eps)
    record(trace, at + "ffn_norm", x)
    h = ffn_apply(h, x, prefix, model, trace, at)
    record(trace, at + "h_out", h)
    return h


def cross_block(model, layer, h, K, V, q_positions, allowed, trace=None):
    cfg, w = model.cfg, model.w
    p = f"cross_decoder.layers.{layer}."
    at = f"cross.{layer}."
    x = rmsnorm(h, w[p + "mixer_layer_norm.weight"], cfg.norm_eps)
    record(trace, at + "mixer_norm", x)
    q = split_heads(linear(x, w[p + "mixer.q_proj.weight"]), cfg.n_attn_heads)
    if cfg.cross_decoder_rope:
        q = rope(q, q_positions, cfg.rope_theta)
    record(trace, at + "q", q)
    o = causal_attention(q, K, V, 1.0 / math.sqrt(cfg.hd_c), allowed).reshape(h.shape[0], cfg.dim)
    record(trace, at + "attention", o)
    h = h + linear(o, w[p + "mixer.out_proj.weight"])
    return ffn_block(model, h, p, trace, at)


def logprobs_from_hidden(model, h, trace=None):
    x = rmsnorm(h, model.w["layer_norm.weight"], model.cfg.norm_eps)
    logits = linear(x, model.w_out)
    record(trace, "head.norm", x)
    record(trace, "head.logits", logits)
    return log_softmax(logits)


def transformer_block(model, layer, h, state, positions, allowed, trace=None):
    """One layer of the 2.6 baseline over rows h at `positions`: q, k, v projections (GQA),
    RoPE on q and k, the new k/v rows appended to this layer's cache, attention, out_proj, FFN."""
    cfg, w = model.cfg, model.w
    p = f"layers.{layer}."
    at = f"layer.{layer}."
    x = rmsnorm(h, w[p + "mixer_layer_norm.weight"], cfg.norm_eps)
    q = rope(split_heads(linear(x, w[p + "mixer.q_proj.weight"]), cfg.n_attn_heads), positions, cfg.rope_theta)
    k = rope(split_heads(linear(x, w[p + "mixer.k_proj.weight"]), cfg.n_attn_kv_heads), positions, cfg.rope_theta)
    v = split_heads(linear(x, w[p + "mixer.v_proj.weight"]), cfg.n_attn_kv_heads)
    n = h.shape[0]
    for name, value in (("mixer_norm", x), ("q", q), ("k", k), ("v", v)):
        record(trace, at + name, value)
    state["layer_k"][layer] = np.concatenate([state["layer_k"][layer], k.reshape(n, -1)])
    state["layer_v"][layer] = np.concatenate([state["layer_v"][layer], v.reshape(n, -1)])
    K = split_heads(state["layer_k"][layer], cfg.n_attn_kv_heads)
    V = split_heads(state["layer_v"][layer], cfg.n_attn_kv_heads)
    o = causal_attention(q, K, V, 1.0 / math.sqrt(cfg.hd_c), allowed).reshape(n, cfg.dim)
    record(trace, at + "attention", o)
    h = h + linear(o, w[p + "mixer.out_proj.weight"])
    return ffn_block(model, h, p, trace, at)


def transformer_forward(model, tokens, state=None, trace=None):
    """The baseline over `tokens` from `state` (empty when None). Returns (logprobs, state) with
    state {"position": n, "layer_k": [n_layers x [n, Hkv*hd_c]] (post-RoPE), "layer_v": ...}.
    With `trace` (a dict), records the named intermediates of these rows."""
    cfg, w = model.cfg, model.w
    state = empty_state(model) if state is None else {
        "position": state["position"], "layer_k": list(state["layer_k"]), "layer_v": list(state["layer_v"])}
    pos0, n = state["position"], len(tokens)
    positions = np.arange(pos0, pos0 + n)
    h = math.sqrt(cfg.dim) * w["embed_tokens.weight"][np.asarray(list(tokens))]
    record(trace, "embed", h)
    # query at pos0 + i sees keys 0 .. pos0 + i
    allowed = np.arange(pos0 + n)[None, :] <= positions[:, None]
    for layer in range(cfg.n_layers):
        h = transformer_block(model, layer, h, state, positions, allowed, trace)
    state["position"] = pos0 + n
    return logprobs_from_hidden(model, h, trace), state


def forward(model, tokens, form="parallel", chunk=4, trace=None):
    """Full forward. Returns (logprobs [n, vocab], state) where state follows docs/design.md §2.5:
    {"position": n, "global_k": [n, Hkv*hd_c] (post-RoPE), "global_v": [n, Hkv*hd_c],
     "self": [ {"loop", "layer", "S": [H, hd, hd]} or {"loop", "layer", "k": [rows, dim], "v": ...} ]}
    with "self" ordered loop-major. A transformer's state is transformer_forward's.
    With `trace` (a dict), records every named intermediate (docs/design.md §2.9) as [n, values]."""
    if model.cfg.is_transformer:
        return transformer_forward(model, tokens, trace=trace)
    cfg, w = model.cfg, model.w
    tokens = list(tokens)
    n = len(tokens)
    positions = np.arange(n)
    h = math.sqrt(cfg.dim) * w["embed_tokens.weight"][np.asarray(tokens)]
    record(trace, "embed", h)
    self_states = []
    for loop in range(cfg.n_loops):
        for layer in range(cfg.n_self_layers):
            p = f"self_decoder.layers.{layer}."
            at = f"self.{loop}.{layer}."
            x = rmsnorm(h, w[p + "mixer_layer_norm.weight"], cfg.norm_eps)
            record(trace, at + "mixer_norm", x)
            out, st = self_mixer_full(model, layer, x, positions, form, chunk, trace, at)
            h = h + out
            h = ffn_block(model, h, p, trace, at)
            self_states.append(dict(loop=loop, layer=layer, **st))
    K, V = global_kv(model, h, positions, trace)
    allowed = np.tril(np.ones((n, n), dtype=bool))
    for layer in range(cfg.n_cross_layers):
        h = cross_block(model, layer, h, K, V, positions, allowed, trace)
    state = {
        "position": n,
        "global_k": K.reshape(n, -1),
        "global_v": V.reshape(n, -1),
        "self": self_states,
    }
    return logprobs_from_hidden(model, h, trace), state


# ----------------------------------------------------------------------------------------------
# Token-by-token inference from the state of 2.5 (decode side). Used to check that the state
# defined above is complete: stepping through tokens must reproduce the full forward.
# ----------------------------------------------------------------------------------------------


def empty_state(model):
    cfg = model.cfg
    kvw = cfg.n_attn_kv_heads * cfg.hd_c
    if cfg.is_transformer:
        return {"position": 0, "layer_k": [np.zeros((0, kvw))] * cfg.n_layers,
                "layer_v": [np.zeros((0, kvw))] * cfg.n_layers}
    selfs = []
    for loop in range(cfg.n_loops):
        for layer in range(cfg.n_self_layers):
            if cfg.is_gret:
                st = {"S": np.zeros((cfg.n_self_heads, cfg.hd, cfg.hd))}
            else:
                st = {"k": np.zeros((0, cfg.dim)), "v": np.zeros((0, cfg.dim))}
            selfs.append(dict(loop=loop, layer=layer, **st))
    return {"position": 0, "global_k": np.zeros((0, kvw)), "global_v": np.zeros((0, kvw)),
            "self": selfs}


def step(model, state, token):
    """Consume one token at position state["position"]; returns (logprobs [vocab], new state)."""
    if model.cfg.is_transformer:
        lp, new_state = transformer_forward(model, [token], state)
        return lp[0], new_state
    cfg, w = model.cfg, model.w
    pos = state["position"]
    posv = np.array([pos])
    H, hd = cfg.n_self_heads, cfg.hd
    h = math.sqrt(cfg.dim) * w["embed_tokens.weight"][[token]]  # [1, dim]
    new_selfs = []
    for st in state["self"]:
        layer = st["layer"]
        p = f"self_decoder.layers.{layer}."
        m = p + "mixer."
        x = rmsnorm(h, w[p + "mixer_layer_norm.weight"], cfg.norm_eps)
        q = rope(split_heads(linear(x, w[m + "q_proj.weight"]), H), posv, cfg.rope_theta)
        k = rope(split_heads(linear(x, w[m + "k_proj.weight"]), H), posv, cfg.rope_theta)
        v = split_heads(linear(x, w[m + "v_proj.weight"]), H)
        if cfg.is_gret:
            g = linear(x, w[m + "g_proj.weight"])
            a = logsigmoid(linear(x, w[m + "gt_proj.weight"]))[0] / cfg.gate_logit_normalizer
            k = k * hd ** -0.5
            S = np.stack([math.exp(a[i]) * st["S"][i] + np.outer(k[0, i], v[0, i]) for i in range(H)])
            o = np.stack([q[0, i] @ S[i] for i in range(H)])[None]  # [1, H, hd]
            o = rmsnorm(o, None, cfg.norm_eps).reshape(1, cfg.dim)
            o = silu(g) * o
            new_st = {"S": S}
        else:
            W = cfg.sliding_window
            keys = np.concatenate([st["k"], k.reshape(1, cfg.dim)])  # at most W rows
            vals = np.concatenate([st["v"], v.reshape(1, cfg.dim)])
            assert keys.shape[0] <= W
            allowed = np.ones((1, keys.shape[0]), dtype=bool)
            o = causal_attention(q, split_heads(keys, H), split_heads(vals, H),
                                 1.0 / math.sqrt(hd), allowed).reshape(1, cfg.dim)
            keep = W - 1
            new_st = {"k": keys[keys.shape[0] - min(keep, keys.shape[0]):],
                      "v": vals[vals.shape[0] - min(keep, vals.shape[0]):]}
        h = h + linear(o, w[m + "out_proj.weight"])
        h = ffn_block(model, h, p)
        new_selfs.append(dict(loop=st["loop"], layer=layer, **new_st))
    K1, V1 = global_kv(model, h, posv)
    Kall = np.concatenate([state["global_k"], K1.reshape(1, -1)])
    Vall = np.concatenate([state["global_v"], V1.reshape(1, -1)])
    Kh = split_heads(Kall, cfg.n_attn_kv_heads)
    Vh = split_heads(Vall, cfg.n_attn_kv_heads)
    allowed = np.ones((1, pos + 1), dtype=bool)
    for layer in range(cfg.n_cross_layers):
        h = cross_block(model, layer, h, Kh, Vh, posv, allowed)
    new_state = {"position": pos + 1, "global_k": Kall, "global_v": Vall, "self": new_selfs}
    return logprobs_from_hidden(model, h)[0], new_state


# ----------------------------------------------------------------------------------------------
# Self-tests
# ----------------------------------------------------------------------------------------------


def _max_abs(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) if np.size(a) else 0.0


def selftest_gret(tol=1e-10, seed=1234, verbose=True):
    """parallel = recurrent = chunkwise (several C, lengths that are and are not multiples of C,
    with and without an initial state). Returns the worst difference seen."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    cases = 0
    for n in (1, 2, 5, 7, 8, 16, 23, 33):
        for d in (4, 8, 16):
            q = rng.standard_normal((n, d))
            k = rng.standard_normal((n, d)) * d ** -0.5
            v = rng.standard_normal((n, d))
            a = logsigmoid(rng.standard_normal(n) * 3.0) / 16.0
            for S0 in (None, rng.standard_normal((d, d))):
                op, Sp = gret_parallel(q, k, v, a, S0)
                orr, Sr = gret_recurrent(q, k, v, a, S0)
                diffs = [_max_abs(op, orr), _max_abs(Sp, Sr)]
                for C in (1, 2, 3, 4, 8, 64):
                    oc, Sc = gret_chunkwise(q, k, v, a, C, S0)
                    diffs += [_max_abs(op, oc), _max_abs(Sp, Sc)]
                    cases += 1
                # resuming: first part then rest from its state = whole thing
                cut = n // 2
                o1, S1 = gret_chunkwise(q[:cut], k[:cut], v[:cut], a[:cut], 3, S0)
                o2, S2 = gret_chunkwise(q[cut:], k[cut:], v[cut:], a[cut:], 4, S1)
                diffs += [_max_abs(op, np.concatenate([o1, o2])), _max_abs(Sp, S2)]
                worst = max(worst, max(diffs))
    if verbose:
        print(f"gRet forms self-test: {cases} chunkwise cases, max |diff| = {worst:.3e} (tol {tol:g})")
    if not worst <= tol:
        raise AssertionError(f"gRet forms disagree: {worst:g} > {tol:g}")
    return worst


def compare_states(s1, s2):
    if "layer_k" in s1:  # transformer
        assert s1["position"] == s2["position"] and len(s1["layer_k"]) == len(s2["layer_k"])
        return max(_max_abs(a, b) for key in ("layer_k", "layer_v") for a, b in zip(s1[key], s2[key]))
    worst = max(_max_abs(s1["global_k"], s2["global_k"]), _max_abs(s1["global_v"], s2["global_v"]))
    assert s1["position"] == s2["position"]
    assert len(s1["self"]) == len(s2["self"])
    for a, b in zip(s1["self"], s2["self"]):
        assert (a["loop"], a["layer"]) == (b["loop"], b["layer"])
        for key in ("S", "k", "v"):
            if key in a:
                assert np.shape(a[key]) == np.shape(b[key]), (key, np.shape(a[key]), np.shape(b[key]))
                worst = max(worst, _max_abs(a[key], b[key]))
    return worst


def selftest_model(model, tokens, tol=1e-10, verbose=True, name=""):
    """full forward (parallel gRet) = full forward (recurrent, chunkwise C=1,3,4,16)
    = token-by-token stepping from the 2.5 state, for log-probs at every position and the state."""
    ref_lp, ref_state = forward(model, tokens, form="parallel")
    worst = 0.0
    forms = [("recurrent", 0)] + [("chunkwise", c) for c in (1, 3, 4, 16)] if model.cfg.is_gret else []
    for form, c in forms:
        lp, st = forward(model, tokens, form=form, chunk=c or 1)
        worst = max(worst, _max_abs(lp, ref_lp), compare_states(st, ref_state))
    state = empty_state(model)
    for i, t in enumerate(tokens):
        lp, state = step(model, state, t)
        worst = max(worst, _max_abs(lp, ref_lp[i]))
        # the state after a prefix must equal the full forward's state on that prefix
        if i + 1 in (1, len(tokens) // 2):
            _, pst = forward(model, tokens[: i + 1])
            worst = max(worst, compare_states(state, pst))
    worst = max(worst, compare_states(state, ref_state))
    if model.cfg.is_transformer:  # chunked = one shot: a prefix, then the rest from its state
        cut = len(tokens) // 3
        lp1, st1 = transformer_forward(model, tokens[:cut])
        lp2, st2 = transformer_forward(model, tokens[cut:], st1)
        worst = max(worst, _max_abs(np.concatenate([lp1, lp2]), ref_lp), compare_states(st2, ref_state))
    # the log-probs are a distribution
    worst = max(worst, float(np.max(np.abs(np.exp(ref_lp).sum(-1) - 1.0))))
    if verbose:
        print(f"model self-test {name}: forms/step/prefix agree, max |diff| = {worst:.3e} (tol {tol:g})")
    if not worst <= tol:
        raise AssertionError(f"model self-test {name} failed: {worst:g} > {tol:g}")
    return worst


if __name__ == "__main__":
    import sys

    selftest_gret()
    if len(sys.argv) > 2:
        mdl = Model.load(sys.argv[1])
        toks = [int(t) for t in sys.argv[2].split(",")]
        lp, _ = forward(mdl, toks)
        selftest_model(mdl, toks, name=sys.argv[1])
        print(json.dumps(lp[-1].tolist()))
