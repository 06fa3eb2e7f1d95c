"""tools/convert_checkpoint.py on mixture-of-experts checkpoints (docs/design.md §2.1, §2.2).

1. A Qwen-MoE-style state dict (mlp.gate, mlp.experts.{e}.{gate,up,down}_proj,
   mlp.shared_expert.*, Hugging Face config names) converts to our names, and the converted FFN,
   run by the float64 reference (yoco_ref.py), equals the MoE FFN computed here in torch from the
   original names with Qwen's own formula (silu(gate_proj x) * up_proj x): the fc1/gate swap is
   checked by meaning, not by a second copy of the renaming.
2. The same checkpoint in our names converts to the same tensors.
3. Errors name what is wrong: a missing expert tensor, an expert of the wrong shape, Qwen2-MoE's
   shared-expert gate, k > E, MoE keys on a dense model.

Run: /usr/bin/python3 tests/reference/convert_moe_test.py (ctest convert_moe_test, label model).
"""
import json
import math
import os
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import convert_checkpoint as cc  # noqa: E402
import yoco_ref  # noqa: E402

DIM, E, K, HE, HS, V = 32, 6, 2, 16, 24, 41
PARAMS_HF = dict(dim=DIM, n_layers=4, n_self_heads=4, n_attn_heads=4, n_attn_kv_heads=2, vocab_size=V,
                 sliding_window=8, num_experts=E, num_experts_per_tok=K, moe_intermediate_size=HE,
                 shared_expert_intermediate_size=HS, norm_topk_prob=True)


def qwen_state_dict(seed=5):
    g = torch.Generator().manual_seed(seed)

    def mat(o, i, scale=1.0):
        return torch.randn(o, i, generator=g, dtype=torch.float64) * scale / math.sqrt(i)

    sd = {"model.embed_tokens.weight": mat(V, DIM), "model.layer_norm.weight": 1 + 0.1 * torch.randn(DIM, generator=g,
                                                                                               dtype=torch.float64)}
    sd["model.output_projection.weight"] = mat(V, DIM)

    def ffn(p):
        sd[p + "mlp.gate.weight"] = mat(E, DIM, 3.0)
        for e in range(E):
            sd[p + f"mlp.experts.{e}.gate_proj.weight"] = mat(HE, DIM)
            sd[p + f"mlp.experts.{e}.up_proj.weight"] = mat(HE, DIM)
            sd[p + f"mlp.experts.{e}.down_proj.weight"] = mat(DIM, HE)
        for n, (o, i) in (("gate_proj", (HS, DIM)), ("up_proj", (HS, DIM)), ("down_proj", (DIM, HS))):
            sd[p + f"mlp.shared_expert.{n}.weight"] = mat(o, i)

    def norms(p):
        for n in ("mixer_layer_norm", "final_layer_norm"):
            sd[p + n + ".weight"] = 1 + 0.1 * torch.randn(DIM, generator=g, dtype=torch.float64)

    for i in range(2):
        p = f"model.self_decoder.layers.{i}."
        norms(p)
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            sd[p + f"mixer.{n}.weight"] = mat(DIM, DIM)
        ffn(p)
    sd["model.cross_decoder.kv_layer_norm.weight"] = torch.ones(DIM, dtype=torch.float64)
    for n in ("k_proj", "v_proj"):
        sd[f"model.cross_decoder.{n}.weight"] = mat(DIM // 2, DIM)
    for i in range(2):
        p = f"model.cross_decoder.layers.{i}."
        norms(p)
        for n in ("q_proj", "out_proj"):
            sd[p + f"mixer.{n}.weight"] = mat(DIM, DIM)
        ffn(p)
    return {k: v.float() for k, v in sd.items()}


def qwen_moe_ffn(sd, p, x):
    """Qwen-MoE's FFN from the original names, in float64 torch."""
    w = {k: v.double() for k, v in sd.items() if k.startswith("model." + p)}
    pre = "model." + p + "mlp."
    probs = torch.softmax(x @ w[pre + "gate.weight"].T, dim=-1)
    top, idx = torch.topk(probs, K, dim=-1)
    top = top / top.sum(-1, keepdim=True)  # norm_topk_prob
    out = torch.zeros_like(x)

    def swiglu(q, v):
        return (torch.nn.functional.silu(v @ w[q + "gate_proj.weight"].T) * (v @ w[q + "up_proj.weight"].T)) \
            @ w[q + "down_proj.weight"].T

    for r in range(x.shape[0]):
        for j in range(K):
            out[r] += top[r, j] * swiglu(pre + f"experts.{int(idx[r, j])}.", x[r:r + 1])[0]
    return out + swiglu(pre + "shared_expert.", x)


def expect_error(fn, needle):
    try:
        fn()
    except cc.ConvertError as exc:
        assert needle in str(exc), f"expected {needle!r} in: {exc}"
        return
    raise AssertionError(f"no error, expected one naming {needle!r}")


def main():
    sd = qwen_state_dict()
    with tempfile.TemporaryDirectory() as tmp:
        torch.save(sd, os.path.join(tmp, "q.pt"))
        with open(os.path.join(tmp, "q.json"), "w") as f:
            json.dump(PARAMS_HF, f)
        tensors, p = cc.convert(os.path.join(tmp, "q.pt"), os.path.join(tmp, "q.json"), os.path.join(tmp, "out"), "f32")
        assert p["n_experts"] == E and p["n_experts_per_token"] == K and p["expert_hidden_dim"] == HE
        assert p["shared_expert_hidden_dim"] == HS and p["moe_norm_topk_prob"] is True and p["hidden_dim"] == 0
        assert "self_decoder.layers.1.ffn.experts.5.fc1.weight" in tensors
        assert not any("mlp." in n for n in tensors)
        model = yoco_ref.Model.load(os.path.join(tmp, "out"))
        x = np.random.default_rng(3).standard_normal((9, DIM))
        for prefix in ("self_decoder.layers.0.", "cross_decoder.layers.1."):
            ours = yoco_ref.ffn_apply(np.zeros_like(x), x, prefix, model)
            theirs = qwen_moe_ffn(sd, prefix, torch.from_numpy(x)).numpy()
            err = float(np.max(np.abs(ours - theirs)))
            print(f"{prefix}: converted FFN vs Qwen-MoE's formula, max |diff| {err:.2e}")
            assert err < 1e-5, err  # the weights went through fp32

        # 2. our own names give the same tensors
        ours_sd = {}
        inverse = {"gate_proj": "fc1", "up_proj": "gate", "down_proj": "fc2"}
        for n, t in sd.items():
            n = n.replace("model.", "", 1)
            n = n.replace("mlp.gate.weight", "ffn.router.weight").replace("mlp.shared_expert.", "ffn.shared.")
            n = n.replace("mlp.experts.", "ffn.experts.")
            for a, b in inverse.items():
                n = n.replace(a, b)
            ours_sd[n] = t
        torch.save(ours_sd, os.path.join(tmp, "o.pt"))
        t2, p2 = cc.convert(os.path.join(tmp, "o.pt"), os.path.join(tmp, "q.json"), os.path.join(tmp, "o"), "f32")
        assert p2 == p and sorted(t2) == sorted(tensors)
        assert all(torch.equal(t2[n], tensors[n]) for n in tensors)

        # 3. errors name the tensor or key
        def convert_with(state, params=PARAMS_HF):
            torch.save(state, os.path.join(tmp, "bad.pt"))
            with open(os.path.join(tmp, "bad.json"), "w") as f:
                json.dump(params, f)
            return cc.convert(os.path.join(tmp, "bad.pt"), os.path.join(tmp, "bad.json"), os.path.join(tmp, "bad"))

        missing = dict(sd)
        del missing["model.cross_decoder.layers.0.mlp.experts.3.up_proj.weight"]
        expect_error(lambda: convert_with(missing), "'cross_decoder.layers.0.ffn.experts.3.gate.weight'")
        wrong = dict(sd)
        wrong["model.self_decoder.layers.1.mlp.experts.2.down_proj.weight"] = torch.zeros(DIM, HE + 1)
        expect_error(lambda: convert_with(wrong), "self_decoder.layers.1.ffn.experts.2.fc2.weight: shape (32, 17)")
        gated = dict(sd)
        gated["model.self_decoder.layers.0.mlp.shared_expert_gate.weight"] = torch.zeros(1, DIM)
        expect_error(lambda: convert_with(gated), "mlp.shared_expert_gate.weight")
        expect_error(lambda: convert_with(sd, dict(PARAMS_HF, num_experts_per_tok=E + 1)), "n_experts_per_token")
        dense = {k: v for k, v in PARAMS_HF.items() if k != "num_experts"}
        expect_error(lambda: convert_with(sd, dict(dense, hidden_dim=64)), "n_experts_per_token is set")
    print("convert_moe_test: ok")


if __name__ == "__main__":
    main()
