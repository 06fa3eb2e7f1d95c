#!/usr/bin/env python3
"""Self-checks of the training model and the converter (small, a few seconds on one core).

    python3 tools/train/test_train_model.py

1. The PyTorch training model (train_yoco.YOCO) with random weights, exported through
   tools/convert_checkpoint.py, equals the independent float64 reference
   tests/reference/yoco_ref.py on every position's log-probs, for gRet, SWA, YOCO-U loops, NoPE,
   GQA ratios 1 and 2, tied and untied embeddings.
2. The MoE FFN (train_yoco.MoEFFN) equals its plain per-token definition (moe_ffn_plain) in
   float64 with and without a shared expert, with moe_norm_topk_prob, and on exact ties (which go
   to the lower expert index); an MoE model exports with exactly the tensor names and shapes of
   docs/design.md §2.1 and the MoE keys in params.json, and reloads to the same log-probs.
3. The bundled models/kjv-yoco-moe (when present) has exactly those names and shapes, reloads
   strictly into the training model and scores its first eval.json windows as eval.json says.
4. The converter strips wrapper prefixes, drops non-model buffers, drops a tied
   output_projection, rejects a wrong shape / a missing tensor, and refuses a pickle that would
   construct an arbitrary object (weights_only=True) without executing it.
"""
import json
import os
import pickle
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import convert_checkpoint as cc  # noqa: E402
import train_yoco as ty  # noqa: E402
import yoco_ref  # noqa: E402

BASE = dict(dim=32, n_layers=4, hidden_dim=48, n_self_heads=2, n_attn_heads=4, n_attn_kv_heads=2,
            vocab_size=61, rope_theta=10000.0, norm_eps=1e-5, sliding_window=None, n_loops=1,
            cross_decoder_rope=True, n_self_layers=2, gate_logit_normalizer=16.0, max_seq_len=128,
            tie_embeddings=True, arch="yoco")
CONFIGS = {
    "gret-gqa2-tied": {},
    "gret-mha-untied": dict(n_attn_kv_heads=4, tie_embeddings=False),
    "gret-3self-1cross": dict(n_layers=4, n_self_layers=3),
    "swa-T3-nope": dict(sliding_window=5, n_loops=3, cross_decoder_rope=False),
    "swa-T2-rope-untied": dict(sliding_window=3, n_loops=2, tie_embeddings=False, n_attn_kv_heads=1),
}


def check_against_reference(tmp):
    worst = 0.0
    for name, over in CONFIGS.items():
        p = dict(BASE, **over)
        torch.manual_seed(7)
        m = ty.YOCO(p)
        m.init_weights(std=0.2)  # large weights so that every path matters
        with torch.no_grad():  # and gates far from their init
            for n, w in m.named_parameters():
                if n.endswith("gt_proj.weight") or w.dim() == 1:
                    w.add_(torch.randn_like(w) * 0.5)
        sd_path = os.path.join(tmp, f"{name}.pt")
        torch.save({"model": {"module." + k: v for k, v in m.state_dict().items()}, "step": 3}, sd_path)
        with open(os.path.join(tmp, f"{name}.json"), "w") as f:
            json.dump(p, f)
        out = os.path.join(tmp, name)
        cc.convert(sd_path, os.path.join(tmp, f"{name}.json"), out, dtype="f32")
        ref = yoco_ref.Model.load(out)
        tokens = [int(t) for t in np.random.default_rng(3).integers(0, p["vocab_size"], 19)]
        ref_lp, _ = yoco_ref.forward(ref, tokens)
        m64, _ = ty.load_model_dir(out, dtype=torch.float64)
        with torch.no_grad():
            lp = torch.log_softmax(m64(torch.tensor([tokens])), -1)[0].numpy()
        d = float(np.max(np.abs(lp - ref_lp)))
        # float32 training model vs reference too
        with torch.no_grad():
            lp32 = torch.log_softmax(m(torch.tensor([tokens])).double(), -1)[0].numpy()
        d32 = float(np.max(np.abs(lp32 - ref_lp)))
        print(f"  {name}: max |logprob diff| float64 {d:.2e}, float32 {d32:.2e}")
        assert d < 1e-9, name
        assert d32 < 1e-3, name
        # score_windows agrees with the reference's sums
        s, c = ty.score_windows(m64, [tokens], "cpu")[0]
        ref_sum = float(sum(ref_lp[i - 1, tokens[i]] for i in range(1, len(tokens))))
        assert c == len(tokens) - 1 and abs(s - ref_sum) < 1e-9, (s, ref_sum)
        worst = max(worst, d)
    return worst


MOE_CONFIGS = {
    "top2-shared": dict(n_experts=6, n_experts_per_token=2, expert_hidden_dim=8, shared_expert_hidden_dim=12),
    "top3-norm": dict(n_experts=5, n_experts_per_token=3, expert_hidden_dim=8, shared_expert_hidden_dim=0,
                      moe_norm_topk_prob=True),
    "top1-of-1": dict(n_experts=1, n_experts_per_token=1, expert_hidden_dim=8, shared_expert_hidden_dim=4),
}


def check_moe(tmp):
    worst = 0.0
    for name, moe in MOE_CONFIGS.items():
        p = dict(BASE, sliding_window=5, n_loops=2, cross_decoder_rope=False, **moe)
        torch.manual_seed(11)
        m = ty.YOCO(p)
        m.init_weights(std=0.3)
        m.double()
        x = torch.randn(3, 7, p["dim"], dtype=torch.float64)
        for ffn in [mod for mod in m.modules() if isinstance(mod, ty.MoEFFN)]:
            with torch.no_grad():
                d = float((ffn(x) - ty.moe_ffn_plain(ffn, x)).abs().max())
                worst = max(worst, d)
                assert d < 1e-12, (name, d)
                # all-equal probabilities: the first k experts, each weighted 1/E (or 1/k)
                saved = ffn.router.weight.clone()
                ffn.router.weight.zero_()
                _, chosen, w = ffn.route(x.reshape(-1, p["dim"]))
                assert chosen.tolist() == [list(range(ffn.k))] * chosen.shape[0], (name, chosen[:2])
                want = 1 / ffn.k if ffn.norm_topk_prob else 1 / p["n_experts"]
                assert torch.allclose(w, torch.full_like(w, want)), name
                assert float((ffn(x) - ty.moe_ffn_plain(ffn, x)).abs().max()) < 1e-12, name
                ffn.router.weight.copy_(saved)
        # training records one load-balancing term per MoE application; moe_aux_loss() clears them
        m.train()
        m(torch.randint(0, p["vocab_size"], (2, 9)))
        aux = m.moe_aux_loss()
        assert aux is not None and float(aux) > 0 and m.moe_aux_loss() is None, name
        m.eval()
        # export: exactly the names and shapes of the spec, the MoE keys kept, same log-probs
        torch.save({"model": {k: v.float() for k, v in m.state_dict().items()}}, os.path.join(tmp, f"{name}.pt"))
        with open(os.path.join(tmp, f"{name}.json"), "w") as f:
            json.dump(p, f)
        out = os.path.join(tmp, name)
        ty.export_checkpoint(os.path.join(tmp, f"{name}.pt"), os.path.join(tmp, f"{name}.json"), out, "f32", None)
        names = {k: list(v.shape) for k, v in cc.read_safetensors(os.path.join(out, "model.safetensors")).items()}
        E, H, S, D = p["n_experts"], p["expert_hidden_dim"], p["shared_expert_hidden_dim"], p["dim"]
        for pre in [f"self_decoder.layers.{i}." for i in range(p["n_self_layers"])] + \
                   [f"cross_decoder.layers.{i}." for i in range(p["n_layers"] - p["n_self_layers"])]:
            assert names.pop(pre + "ffn.router.weight") == [E, D]
            for e in range(E):
                assert names.pop(f"{pre}ffn.experts.{e}.fc1.weight") == [H, D]
                assert names.pop(f"{pre}ffn.experts.{e}.gate.weight") == [H, D]
                assert names.pop(f"{pre}ffn.experts.{e}.fc2.weight") == [D, H]
            for b in ("fc1", "gate", "fc2"):
                shape = names.pop(f"{pre}ffn.shared.{b}.weight", None)
                assert shape == (None if not S else ([D, S] if b == "fc2" else [S, D])), (pre, b, shape)
            for b in ("fc1", "gate", "fc2"):
                assert pre + "ffn." + b + ".weight" not in names
        assert not [k for k in names if ".ffn." in k], names
        with open(os.path.join(out, "params.json")) as f:
            q = json.load(f)
        assert all(q[k] == p.get(k, False) for k in ty.MOE_KEYS), q
        m64, _ = ty.load_model_dir(out, dtype=torch.float64)
        tokens = torch.tensor([[int(t) for t in np.random.default_rng(5).integers(0, p["vocab_size"], 15)]])
        with torch.no_grad():
            d = float((m64(tokens) - m.float().double()(tokens)).abs().max())
        assert d < 1e-9, (name, d)
        print(f"  {name}: MoE FFN vs plain {worst:.1e}; export names, shapes and reload OK")
    bad = dict(BASE, n_experts=2, n_experts_per_token=3, expert_hidden_dim=8)
    with open(os.path.join(tmp, "bad.json"), "w") as f:
        json.dump(bad, f)
    expect_error(lambda: ty.export_checkpoint(os.path.join(tmp, "top2-shared.pt"), os.path.join(tmp, "bad.json"),
                                              os.path.join(tmp, "bad"), "f32", None), "k > E")
    bad = dict(BASE, sliding_window=5, n_loops=2, cross_decoder_rope=False, **MOE_CONFIGS["top2-shared"])
    with open(os.path.join(tmp, "bad.json"), "w") as f:
        json.dump(bad, f)
    sd = torch.load(os.path.join(tmp, "top2-shared.pt"))["model"]
    del sd["cross_decoder.layers.1.ffn.experts.5.gate.weight"]
    torch.save({"model": sd}, os.path.join(tmp, "bad.pt"))
    expect_error(lambda: ty.export_checkpoint(os.path.join(tmp, "bad.pt"), os.path.join(tmp, "bad.json"),
                                              os.path.join(tmp, "bad"), "f32", None), "missing expert tensor")
    return worst


def check_bundled_moe():
    model_dir = os.path.join(ROOT, "models", "kjv-yoco-moe")
    if not os.path.exists(os.path.join(model_dir, "params.json")):
        print("  models/kjv-yoco-moe not present: skipped")
        return
    with open(os.path.join(model_dir, "params.json")) as f:
        p = json.load(f)
    assert p["n_experts"] > 0, p
    stored = {k: tuple(v.shape) for k, v in cc.read_safetensors(os.path.join(model_dir, "model.safetensors")).items()}
    assert stored == ty.moe_expected_shapes(p), sorted(set(stored) ^ set(ty.moe_expected_shapes(p)))[:5]
    m64, _ = ty.load_model_dir(model_dir, dtype=torch.float64)  # strict: raises on a missing/extra tensor
    with open(os.path.join(model_dir, "eval.json")) as f:
        ev = json.load(f)
    for w in ev["windows"][:2]:
        s, c = ty.score_windows(m64, [w["tokens"]], "cpu")[0]
        assert c == w["count"] and abs(s - w["sum_logprob"]) <= 1e-9 * abs(w["sum_logprob"]), (w["index"], s)
    print(f"  models/kjv-yoco-moe: {len(stored)} tensors as specified, reload scores eval.json's windows 0-1")


class Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/convert_checkpoint_pwned",))


def expect_error(fn, what):
    try:
        fn()
    except cc.ConvertError as exc:
        print(f"  refused ({what}): {str(exc)[:110]}")
        return
    raise AssertionError(f"expected an error: {what}")


def check_converter(tmp):
    p = dict(BASE)
    torch.manual_seed(1)
    m = ty.YOCO(p)
    m.init_weights()
    sd = {"model." + k: v for k, v in m.state_dict().items()}
    sd["model.self_decoder.rotary.inv_freq"] = torch.ones(4)
    sd["model.output_projection.weight"] = sd["model.embed_tokens.weight"].clone()
    torch.save(sd, os.path.join(tmp, "c.pt"))
    raw = dict(p, max_batch_size=4, model_parallel_size=1)
    del raw["tie_embeddings"], raw["n_loops"], raw["arch"]
    raw["tie_embeddings"] = True
    with open(os.path.join(tmp, "c.json"), "w") as f:
        json.dump(raw, f)
    tensors, q = cc.convert(os.path.join(tmp, "c.pt"), os.path.join(tmp, "c.json"), os.path.join(tmp, "c"), "bf16")
    assert "output_projection.weight" not in tensors and q["tie_embeddings"] is True and q["n_loops"] == 1
    back = cc.read_safetensors(os.path.join(tmp, "c", "model.safetensors"))
    assert set(back) == set(tensors) and all(back[k].dtype == torch.bfloat16 for k in back)
    assert all(torch.equal(back[k], tensors[k]) for k in back)

    bad = dict(sd)
    bad["model.cross_decoder.k_proj.weight"] = torch.zeros(3, 32)
    torch.save(bad, os.path.join(tmp, "bad.pt"))
    expect_error(lambda: cc.convert(os.path.join(tmp, "bad.pt"), os.path.join(tmp, "c.json"),
                                    os.path.join(tmp, "bad")), "wrong shape")
    bad = dict(sd)
    del bad["model.layer_norm.weight"]
    torch.save(bad, os.path.join(tmp, "bad.pt"))
    expect_error(lambda: cc.convert(os.path.join(tmp, "bad.pt"), os.path.join(tmp, "c.json"),
                                    os.path.join(tmp, "bad")), "missing tensor")
    expect_error(lambda: cc.convert(os.path.join(tmp, "c.pt"), os.path.join(tmp, "c.json"),
                                    os.path.join(tmp, "bad"), strict=True), "--strict with extra buffers")
    marker = "/tmp/convert_checkpoint_pwned"
    if os.path.exists(marker):
        os.remove(marker)
    with open(os.path.join(tmp, "evil.pt"), "wb") as f:
        pickle.dump({"model": sd, "x": Evil()}, f)
    expect_error(lambda: cc.convert(os.path.join(tmp, "evil.pt"), os.path.join(tmp, "c.json"),
                                    os.path.join(tmp, "bad")), "pickle with a callable")
    assert not os.path.exists(marker), "the pickle was executed"


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        print("training model vs tests/reference/yoco_ref.py:")
        worst = check_against_reference(tmp)
        print("MoE FFN:")
        check_moe(tmp)
        check_bundled_moe()
        print("converter:")
        check_converter(tmp)
    print(f"OK (worst float64 difference {worst:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
