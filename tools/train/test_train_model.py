#!/usr/bin/env python3
"""Self-checks of the training model and the converter (small, a few seconds on one core).

    python3 tools/train/test_train_model.py

1. The PyTorch training model (train_yoco.YOCO) with random weights, exported through
   tools/convert_checkpoint.py, equals the independent float64 reference
   tests/reference/yoco_ref.py on every position's log-probs, for gRet, SWA, YOCO-U loops, NoPE,
   GQA ratios 1 and 2, tied and untied embeddings.
2. The converter strips wrapper prefixes, drops non-model buffers, drops a tied
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
        print("converter:")
        check_converter(tmp)
    print(f"OK (worst float64 difference {worst:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
