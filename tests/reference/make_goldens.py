"""Writes tests/reference/goldens/<name>/{params.json, model.safetensors, golden.json,
intermediates.safetensors}.

Deterministic: every config has its own seeded generator. Weights are written as F32 and the
golden values are computed in float64 from the weights read back from the written file, so the
engine sees exactly the weights the oracle used.

Run: /usr/bin/python3 tests/reference/make_goldens.py
"""

import json
import math
import os
import shutil
import struct
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import yoco_ref  # noqa: E402

GOLDEN_DIR = os.path.join(HERE, "goldens")

CONFIGS = [
    dict(name="gret_tied", seed=101, n_tokens=23, tied=True, params=dict(
        dim=32, n_layers=4, hidden_dim=64, n_self_heads=4, n_attn_heads=4, n_attn_kv_heads=4,
        vocab_size=61, sliding_window=None)),
    dict(name="gret_gqa3_untied", seed=202, n_tokens=31, tied=False, params=dict(
        dim=48, n_layers=4, hidden_dim=96, n_self_heads=2, n_attn_heads=6, n_attn_kv_heads=2,
        vocab_size=50, rope_theta=500000.0, norm_eps=1e-6, sliding_window=None)),
    dict(name="swa_w8", seed=303, n_tokens=29, tied=False, params=dict(
        dim=32, n_layers=4, hidden_dim=80, n_self_heads=4, n_attn_heads=4, n_attn_kv_heads=2,
        vocab_size=53, sliding_window=8)),
    dict(name="yocou_swa_t3_nope", seed=404, n_tokens=21, tied=True, params=dict(
        dim=32, n_layers=4, hidden_dim=64, n_self_heads=2, n_attn_heads=4, n_attn_kv_heads=1,
        vocab_size=47, sliding_window=6, n_loops=3, cross_decoder_rope=False)),
    dict(name="yocou_gret_t3", seed=505, n_tokens=19, tied=False, params=dict(
        dim=32, n_layers=4, hidden_dim=64, n_self_heads=4, n_attn_heads=4, n_attn_kv_heads=4,
        vocab_size=47, sliding_window=None, n_loops=3, cross_decoder_rope=True,
        gate_logit_normalizer=8)),
    dict(name="gret_selflayers3", seed=606, n_tokens=17, tied=False, params=dict(
        dim=32, n_layers=5, n_self_layers=3, hidden_dim=64, n_self_heads=2, n_attn_heads=4,
        n_attn_kv_heads=4, vocab_size=41, sliding_window=None)),
    # Mixtures of experts (docs/design.md §2.2): gRet with a shared expert and plain softmax
    # weights; YOCO-U's shape (SWA, loops, NoPE) with renormalised top-k and no shared expert;
    # SWA with k = 1, a shared expert and renormalisation (every weight is then 1).
    dict(name="moe_gret_shared", seed=909, n_tokens=23, tied=False, params=dict(
        dim=32, n_layers=4, n_self_heads=4, n_attn_heads=4, n_attn_kv_heads=2, vocab_size=53,
        sliding_window=None, n_experts=8, n_experts_per_token=2, expert_hidden_dim=16,
        shared_expert_hidden_dim=24)),
    dict(name="moe_yocou_swa_t3_nope", seed=1090, n_tokens=21, tied=True, params=dict(
        dim=32, n_layers=4, hidden_dim=64, n_self_heads=2, n_attn_heads=4, n_attn_kv_heads=1,
        vocab_size=47, sliding_window=6, n_loops=3, cross_decoder_rope=False, n_experts=6,
        n_experts_per_token=3, expert_hidden_dim=16, moe_norm_topk_prob=True)),
    dict(name="moe_swa_k1_shared_norm", seed=1010, n_tokens=19, tied=False, params=dict(
        dim=32, n_layers=4, n_self_heads=4, n_attn_heads=4, n_attn_kv_heads=4, vocab_size=41,
        sliding_window=8, n_experts=4, n_experts_per_token=1, expert_hidden_dim=24,
        shared_expert_hidden_dim=16, moe_norm_topk_prob=True)),
    dict(name="transformer_gqa3", seed=707, n_tokens=27, tied=False, params=dict(
        arch="transformer", dim=48, n_layers=3, hidden_dim=96, n_attn_heads=6, n_attn_kv_heads=2,
        vocab_size=50, rope_theta=500000.0)),
]


def make_weights(params, tied, rng):
    """Random weights: matrices ~ N(0,1)/sqrt(in), embeddings ~ N(0,1)/sqrt(dim),
    norm weights 1 + 0.1 N(0,1), gt_proj ~ 2 N(0,1)/sqrt(dim)."""
    cfg = yoco_ref.Config(params, has_output_projection=not tied)
    dim, hid = cfg.dim, cfg.hidden_dim
    kvw = cfg.n_attn_kv_heads * cfg.hd_c
    w = {}

    def mat(name, out_f, in_f):
        w[name] = rng.standard_normal((out_f, in_f)) / math.sqrt(in_f)

    def norm(name):
        w[name] = 1.0 + 0.1 * rng.standard_normal(dim)

    def swiglu(prefix, hidden):
        mat(prefix + "fc1.weight", hidden, dim)
        mat(prefix + "gate.weight", hidden, dim)
        mat(prefix + "fc2.weight", dim, hidden)

    def ffn(prefix):
        if not cfg.n_experts:
            swiglu(prefix + "ffn.", hid)
            return
        # The router ~ 3 N(0,1)/sqrt(dim): peaked enough that the choice of experts matters.
        w[prefix + "ffn.router.weight"] = (
            rng.standard_normal((cfg.n_experts, dim)) * 3.0 / math.sqrt(dim))
        for e in range(cfg.n_experts):
            swiglu(prefix + f"ffn.experts.{e}.", cfg.expert_hidden_dim)
        if cfg.shared_expert_hidden_dim:
            swiglu(prefix + "ffn.shared.", cfg.shared_expert_hidden_dim)

    w["embed_tokens.weight"] = rng.standard_normal((cfg.vocab_size, dim)) / math.sqrt(dim)
    if cfg.is_transformer:  # docs/design.md §2.6
        for i in range(cfg.n_layers):
            p = f"layers.{i}."
            norm(p + "mixer_layer_norm.weight")
            norm(p + "final_layer_norm.weight")
            mat(p + "mixer.q_proj.weight", dim, dim)
            mat(p + "mixer.k_proj.weight", kvw, dim)
            mat(p + "mixer.v_proj.weight", kvw, dim)
            mat(p + "mixer.out_proj.weight", dim, dim)
            ffn(p)
        norm("layer_norm.weight")
        if not tied:
            mat("output_projection.weight", cfg.vocab_size, dim)
        return w
    for i in range(cfg.n_self_layers):
        p = f"self_decoder.layers.{i}."
        norm(p + "mixer_layer_norm.weight")
        norm(p + "final_layer_norm.weight")
        for proj in ("q", "k", "v", "out"):
            mat(p + f"mixer.{proj}_proj.weight", dim, dim)
        if cfg.is_gret:
            mat(p + "mixer.g_proj.weight", dim, dim)
            w[p + "mixer.gt_proj.weight"] = (
                rng.standard_normal((cfg.n_self_heads, dim)) * 2.0 / math.sqrt(dim))
        ffn(p)
    norm("cross_decoder.kv_layer_norm.weight")
    mat("cross_decoder.k_proj.weight", kvw, dim)
    mat("cross_decoder.v_proj.weight", kvw, dim)
    for i in range(cfg.n_cross_layers):
        p = f"cross_decoder.layers.{i}."
        norm(p + "mixer_layer_norm.weight")
        norm(p + "final_layer_norm.weight")
        mat(p + "mixer.q_proj.weight", dim, dim)
        mat(p + "mixer.out_proj.weight", dim, dim)
        ffn(p)
    norm("layer_norm.weight")
    if not tied:
        mat("output_projection.weight", cfg.vocab_size, dim)
    return w


def write_safetensors(path, tensors):
    """F32 tensors, contiguous in sorted-name order, header padded with spaces to 8 bytes."""
    header = {"__metadata__": {"format": "pt"}}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        data = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * ((-len(hbytes)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for c in chunks:
            f.write(c)


def state_to_json(state):
    if "layer_k" in state:  # transformer: per-layer K/V rows
        return {"position": int(state["position"]),
                "layer_k": [k.tolist() for k in state["layer_k"]],
                "layer_v": [v.tolist() for v in state["layer_v"]]}
    out = {"position": int(state["position"]),
           "global_k": state["global_k"].tolist(),
           "global_v": state["global_v"].tolist(),
           "self": []}
    for st in state["self"]:
        e = {"loop": int(st["loop"]), "layer": int(st["layer"])}
        if "S" in st:
            e["S"] = st["S"].tolist()
        else:
            e["k"] = st["k"].tolist()
            e["v"] = st["v"].tolist()
        out["self"].append(e)
    return out


def check_routing_margin(model, trace, name, margin=5e-2):
    """An MoE golden must not sit near a tie between the k-th and the (k+1)-th expert: the fp32
    engine would then be free to choose the other one. Fails (pick another seed) if it does."""
    k, E = model.cfg.n_experts_per_token, model.cfg.n_experts
    if not E or k == E:
        return
    worst = math.inf
    for key, p in trace.items():
        if key.endswith(".router_probs"):
            s = -np.sort(-p, axis=-1)
            worst = min(worst, float(np.min((s[:, k - 1] - s[:, k]) / s[:, k - 1])))
    print(f"{name}: smallest relative gap between the k-th and (k+1)-th expert {worst:.2e}")
    if not worst > margin:
        raise AssertionError(f"{name}: a routing near-tie ({worst:g} <= {margin:g}); change the seed")


def build(conf):
    rng = np.random.default_rng(conf["seed"])
    params = dict(conf["params"])
    params["max_seq_len"] = 4096
    weights = make_weights(params, conf["tied"], rng)
    tokens = [int(t) for t in rng.integers(0, params["vocab_size"], size=conf["n_tokens"])]

    out_dir = os.path.join(GOLDEN_DIR, conf["name"])
    tmp_dir = out_dir + ".tmp"
    shutil.rmtree(tmp_dir, ignore_errors=True)
    os.makedirs(tmp_dir)
    with open(os.path.join(tmp_dir, "params.json"), "w") as f:
        json.dump(params, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(tmp_dir, "model.safetensors"), weights)

    model = yoco_ref.Model.load(tmp_dir)  # the F32-rounded weights, as the engine will see them
    assert model.cfg.tie_embeddings == conf["tied"]
    yoco_ref.selftest_model(model, tokens, name=conf["name"])
    trace = {}
    logprobs, state = yoco_ref.forward(model, tokens, trace=trace)
    check_routing_margin(model, trace, conf["name"])

    golden = {"name": conf["name"], "tokens": tokens, "logprobs": logprobs.tolist(),
              "state": state_to_json(state)}
    with open(os.path.join(tmp_dir, "golden.json"), "w") as f:
        json.dump(golden, f)
        f.write("\n")
    # Every named intermediate of the full forward (docs/design.md §2.9), [n, values] each.
    write_safetensors(os.path.join(tmp_dir, "intermediates.safetensors"), trace)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp_dir, out_dir)
    size = sum(os.path.getsize(os.path.join(out_dir, x)) for x in os.listdir(out_dir))
    print(f"wrote {out_dir} ({size / 1024:.1f} KiB)")


def main():
    yoco_ref.selftest_gret()
    for conf in CONFIGS:
        build(conf)
    total = 0
    for root, _, files in os.walk(GOLDEN_DIR):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"goldens total: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
