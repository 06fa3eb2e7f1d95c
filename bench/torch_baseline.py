#!/usr/bin/python3
"""Straightforward PyTorch (CPU, float32 or bfloat16) YOCO implementation used as a benchmark baseline.

Written from docs/design.md §2 only: self-decoder (gated retention or sliding-window attention,
optionally looped n_loops times), one global KV cache, cross-decoder.  It is meant to be a fair
baseline: idiomatic batched tensor code, no deliberate slowness, no custom kernels.

  --check              prefill + greedy decode == full forward (max |d log-prob| < 1e-4), exit 1 if not
  --dtype bf16         the engine's bf16 path in PyTorch terms: every matrix held in torch.bfloat16,
                       products in bf16 (oneDNN on CPU), norms, softmax, states and decays in float32
  --prefill-lens ...   prefill throughput (self-decoder + K/V + cross-decoder for the last token only)
  --decode-batches ... batched decode throughput after prefilling --decode-context tokens per sequence

Example:
  /usr/bin/python3 bench/torch_baseline.py --model DIR --threads 2 --prefill-lens 1024,4096 \
      --decode-batches 1,4,16,32 --decode-context 512 --decode-steps 16 --json
"""
import argparse
import glob
import json
import math
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

ST_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
# torch >= 2.0 has a fused attention; 1.13 (Debian 12) does not, so fall back to matmul/softmax.
_SDPA = getattr(F, "scaled_dot_product_attention", None)


def load_safetensors(mdir):
    """Parse safetensors by hand (no pickles, no extra dependency); every tensor becomes float32.
    Reads tensor by tensor so peak memory is the model plus one tensor, not twice the file."""
    files = sorted(glob.glob(os.path.join(mdir, "*.safetensors")))
    if not files:
        raise SystemExit(f"no *.safetensors in {mdir}")
    out = {}
    for path in files:
        with open(path, "rb") as f:
            hlen = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(hlen))
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                s, e = info["data_offsets"]
                dt = ST_DTYPES.get(info["dtype"])
                if dt is None:
                    raise SystemExit(f"{name}: unsupported dtype {info['dtype']}")
                f.seek(8 + hlen + s)
                buf = bytearray(f.read(e - s))
                t = torch.frombuffer(buf, dtype=dt) if buf else torch.empty(0, dtype=dt)
                out[name] = t.reshape(info["shape"]).to(torch.float32).contiguous()
    return out


def rms(x, w, eps):
    # Statistics in fp32 (everything here is fp32 anyway); w=None is the weightless per-head norm.
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x if w is None else x * w


def rope_tables(pos, d, theta):
    """cos/sin [T, d/2] for interleaved-pair RoPE, f_j = theta^(-j/(d/2-1)).  Angles in float64
    so that long positions do not lose phase precision; the tables are tiny."""
    half = d // 2
    f = theta ** (-torch.arange(half, dtype=torch.float64) / max(half - 1, 1))
    ang = pos.to(torch.float64)[:, None] * f[None, :]
    return ang.cos().float(), ang.sin().float()


def apply_rope(x, cs):
    """x [B, T, H, d]; pairs (2j, 2j+1) are rotated by the angle of position t and frequency j."""
    cos, sin = cs[0][:, None, :], cs[1][:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).flatten(-2)


def attend(q, k, v, mask):
    """Softmax attention with scale 1/sqrt(d); mask is boolean (True = may attend) or None."""
    if _SDPA is not None:
        return _SDPA(q, k, v, attn_mask=mask)
    s = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.matmul(s.softmax(-1), v)


def causal(tq, tk=None, q0=0):
    """mask[i, j] = key j <= query position q0 + i."""
    tk = tq if tk is None else tk
    return torch.arange(tk)[None, :] <= (torch.arange(tq) + q0)[:, None]


class YOCO:
    def __init__(self, mdir, dtype=torch.float32):
        p = json.load(open(os.path.join(mdir, "params.json")))
        self.dim, self.n_layers = p["dim"], p["n_layers"]
        self.hs, self.hq, self.hkv = p["n_self_heads"], p["n_attn_heads"], p["n_attn_kv_heads"]
        self.vocab = p["vocab_size"]
        self.theta = float(p.get("rope_theta", 10000.0))
        self.eps = float(p.get("norm_eps", 1e-5))
        self.window = p.get("sliding_window")  # None -> gated retention
        self.loops = int(p.get("n_loops", 1))
        self.cross_rope = bool(p.get("cross_decoder_rope", True))
        self.ls = int(p.get("n_self_layers", self.n_layers // 2))
        self.lc = self.n_layers - self.ls
        self.gln = float(p.get("gate_logit_normalizer", 16))
        self.hd, self.hdc = self.dim // self.hs, self.dim // self.hq
        self.group = self.hq // self.hkv
        self.chunk, self.swa_block = 64, 256  # gRet chunk size; SWA query block size
        self.W = load_safetensors(mdir)
        if "output_projection.weight" not in self.W or p.get("tie_embeddings") is True:
            self.W["output_projection.weight"] = self.W["embed_tokens.weight"]
        self._validate()
        self.dtype = dtype
        if dtype != torch.float32:  # matrices only: the 1-D norm weights stay float32
            self.W = {n: (t.to(dtype) if t.dim() == 2 else t) for n, t in self.W.items()}

    def _validate(self):
        names = ["embed_tokens.weight", "layer_norm.weight", "cross_decoder.kv_layer_norm.weight",
                 "cross_decoder.k_proj.weight", "cross_decoder.v_proj.weight"]
        mix = ["q", "k", "v", "out"] + ([] if self.window else ["g", "gt"])
        blk = ["mixer_layer_norm", "final_layer_norm", "ffn.fc1", "ffn.gate", "ffn.fc2"]
        for i in range(self.ls):
            names += [f"self_decoder.layers.{i}.{n}.weight" for n in blk]
            names += [f"self_decoder.layers.{i}.mixer.{n}_proj.weight" for n in mix]
        for i in range(self.lc):
            names += [f"cross_decoder.layers.{i}.{n}.weight" for n in blk]
            names += [f"cross_decoder.layers.{i}.mixer.{n}_proj.weight" for n in ("q", "out")]
        missing = [n for n in names if n not in self.W]
        if missing:
            raise SystemExit(f"checkpoint is missing {len(missing)} tensors, e.g. {missing[:3]}")

    def lin(self, x, name):
        w = self.W[name]
        return F.linear(x, w) if w.dtype == torch.float32 else F.linear(x.to(w.dtype), w).float()

    def ffn(self, x, pre):
        # SwiGLU with the YOCO naming: fc1 is the activated branch, gate the linear one.
        return self.lin(F.silu(self.lin(x, pre + "ffn.fc1.weight")) * self.lin(x, pre + "ffn.gate.weight"),
                        pre + "ffn.fc2.weight")

    def embed(self, tokens):
        return F.embedding(tokens, self.W["embed_tokens.weight"]).float() * math.sqrt(self.dim)

    # ---------------------------------------------------------------- self-decoder
    def self_layer(self, i, h, cs, mode, st, pos):
        """mode: 'full' (reference forms, no state), 'prefill' (returns state), 'step' (T=1)."""
        pre = f"self_decoder.layers.{i}."
        x = rms(h, self.W[pre + "mixer_layer_norm.weight"], self.eps)
        mixer = self.swa if self.window else self.gret
        o, st = mixer(x, pre + "mixer.", cs, mode, st, pos)
        h = h + o
        return h + self.ffn(rms(h, self.W[pre + "final_layer_norm.weight"], self.eps), pre), st

    def qkv(self, x, pre, cs, H, hd):
        B, T, _ = x.shape
        q = apply_rope(self.lin(x, pre + "q_proj.weight").view(B, T, H, hd), cs)
        k = apply_rope(self.lin(x, pre + "k_proj.weight").view(B, T, H, hd), cs)
        v = self.lin(x, pre + "v_proj.weight").view(B, T, H, hd)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, T, hd]

    def gret(self, x, pre, cs, mode, st, pos):
        B, T, _ = x.shape
        q, k, v = self.qkv(x, pre, cs, self.hs, self.hd)
        k = k * self.hd ** -0.5  # after RoPE; it matters for the shipped state S
        a = (F.logsigmoid(self.lin(x, pre + "gt_proj.weight")) / self.gln).transpose(1, 2)  # [B,H,T]
        if mode == "step":  # recurrence: S = exp(a) S + k^T v, o = q S
            S = a.exp()[..., None] * st[0] + torch.matmul(k.transpose(-1, -2), v)
            o, st = torch.matmul(q, S), (S,)
        elif mode == "full":  # parallel form: o_t = sum_{s<=t} exp(b_t - b_s) (q_t . k_s) v_s
            b = a.cumsum(-1)
            d = (b[..., :, None] - b[..., None, :]).masked_fill(~causal(T), float("-inf")).exp()
            o, st = torch.matmul(torch.matmul(q, k.transpose(-1, -2)) * d, v), None
        else:
            o, S = self.chunkwise(q, k, v, a)
            st = (S,)
        o = rms(o, None, self.eps).transpose(1, 2).reshape(B, T, self.dim)
        o = F.silu(self.lin(x, pre + "g_proj.weight")) * o
        return self.lin(o, pre + "out_proj.weight"), st

    def chunkwise(self, q, k, v, a):
        """Chunkwise retention.  The intra-chunk part is batched over all chunks at once; only
        the hd x hd state recurrence across chunks is a Python loop.  Zero-padding the tail is
        exact: padded k = v = 0 add nothing, and a = 0 there means no extra decay."""
        B, H, T, hd = q.shape
        C = self.chunk
        n = -(-T // C)
        pad = n * C - T
        if pad:
            q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
            a = F.pad(a, (0, pad))
        q, k, v = (t.reshape(B, H, n, C, hd) for t in (q, k, v))
        b = a.reshape(B, H, n, C).cumsum(-1)  # in-chunk cumulative log-decay, fp32
        # -inf before exp (not a 0/1 multiply): exp(b_i - b_j) for j > i can overflow to inf.
        d = (b[..., :, None] - b[..., None, :]).masked_fill(~causal(C), float("-inf")).exp()
        o = torch.matmul(torch.matmul(q, k.transpose(-1, -2)) * d, v)
        bC = b[..., -1:]
        qd = q * b.exp()[..., None]                      # q_i exp(b_i)
        kd = k * (bC - b).exp()[..., None]               # k_j exp(b_C - b_j)
        dC = bC.exp()[..., None]                         # [B, H, n, 1, 1]
        S = q.new_zeros(B, H, hd, hd)
        for c in range(n):
            if c:
                o[:, :, c] += torch.matmul(qd[:, :, c], S)
            S = dC[:, :, c] * S + torch.matmul(kd[:, :, c].transpose(-1, -2), v[:, :, c])
        return o.reshape(B, H, n * C, hd)[:, :, :T], S

    def swa(self, x, pre, cs, mode, st, pos):
        B, T, _ = x.shape
        W = self.window
        q, k, v = self.qkv(x, pre, cs, self.hs, self.hd)
        if mode == "step":
            # Ring of W slots, slot = position % W.  It holds the last W-1 post-RoPE k/v rows (the
            # state of docs/design.md §2.5); the current row overwrites the one that just left the window, so
            # attention reads the ring in place (softmax ignores key order) with no per-step copy.
            ck, cv = st
            ck[:, :, pos % W], cv[:, :, pos % W] = k[:, :, 0], v[:, :, 0]
            n = min(pos + 1, W)
            o = attend(q, ck[:, :, :n], cv[:, :, :n], None)
        else:
            # Query blocks against only their key range [s-W+1, e): memory O(T * W), not O(T^2).
            blk = T if mode == "full" else self.swa_block
            o = torch.empty_like(q)
            for s in range(0, T, blk):
                e, ks = min(T, s + blk), max(0, s - W + 1)
                m = causal(e - s, e - ks, s - ks)
                m &= torch.arange(ks, e)[None, :] > torch.arange(s, e)[:, None] - W
                o[:, :, s:e] = attend(q[:, :, s:e], k[:, :, ks:e], v[:, :, ks:e], m)
            st = None
            if mode == "prefill":
                ck, cv = q.new_zeros(B, self.hs, W, self.hd), q.new_zeros(B, self.hs, W, self.hd)
                m = min(T, W - 1)
                if m:
                    idx = torch.arange(T - m, T) % W
                    ck[:, :, idx], cv[:, :, idx] = k[:, :, T - m:], v[:, :, T - m:]
                st = (ck, cv)
        return self.lin(o.transpose(1, 2).reshape(B, T, self.dim), pre + "out_proj.weight"), st

    def run_self(self, h, cs, mode, states=None, pos=0):
        new = []
        for loop in range(self.loops):  # YOCO-U: same weights, same positions, own state each
            for i in range(self.ls):
                j = loop * self.ls + i
                h, st = self.self_layer(i, h, cs, mode, states[j] if states else None, pos)
                new.append(st)
        return h, new

    # ---------------------------------------------------------------- global KV + cross-decoder
    def kv(self, h, csc):
        B, T, _ = h.shape
        z = rms(h, self.W["cross_decoder.kv_layer_norm.weight"], self.eps)
        k = self.lin(z, "cross_decoder.k_proj.weight").view(B, T, self.hkv, self.hdc)
        v = self.lin(z, "cross_decoder.v_proj.weight").view(B, T, self.hkv, self.hdc)
        if self.cross_rope:
            k = apply_rope(k, csc)
        return k.transpose(1, 2), v.transpose(1, 2)  # [B, KVH, T, hdc]

    def cross(self, h, csc, K, V, mask):
        """Cross-decoder over query rows h [B, Tq, dim] against the global K/V [B, KVH, Tk, hdc].
        GQA without copying K/V: the G query heads of a kv head are folded into the query rows."""
        B, Tq, _ = h.shape
        G = self.group
        if mask is not None:
            mask = mask.repeat(G, 1)  # rows are ordered (g, t)
        for i in range(self.lc):
            pre = f"cross_decoder.layers.{i}."
            x = rms(h, self.W[pre + "mixer_layer_norm.weight"], self.eps)
            q = self.lin(x, pre + "mixer.q_proj.weight").view(B, Tq, self.hq, self.hdc)
            if self.cross_rope:
                q = apply_rope(q, csc)
            q = q.transpose(1, 2).reshape(B, self.hkv, G * Tq, self.hdc)
            o = attend(q, K, V, mask).view(B, self.hq, Tq, self.hdc).transpose(1, 2)
            h = h + self.lin(o.reshape(B, Tq, self.dim), pre + "mixer.out_proj.weight")
            h = h + self.ffn(rms(h, self.W[pre + "final_layer_norm.weight"], self.eps), pre)
        return self.lin(rms(h, self.W["layer_norm.weight"], self.eps), "output_projection.weight")

    def tables(self, pos):
        return rope_tables(pos, self.hd, self.theta), rope_tables(pos, self.hdc, self.theta)

    # ---------------------------------------------------------------- public entry points
    def forward_full(self, tokens):
        """Log-probs at every position, using the reference forms (parallel gRet, dense SWA)."""
        T = tokens.shape[1]
        cs, csc = self.tables(torch.arange(T))
        h, _ = self.run_self(self.embed(tokens), cs, "full")
        K, V = self.kv(h, csc)
        return self.cross(h, csc, K, V, causal(T)).log_softmax(-1)

    def prefill(self, tokens, extra=0):
        """Early exit: self-decoder + global K/V for all prompt tokens, the cross-decoder only for
        the last one.  Returns its logits [B, vocab] and the decode state (K/V buffer with `extra`
        spare rows so decode appends without reallocating)."""
        B, T = tokens.shape
        cs, csc = self.tables(torch.arange(T))
        h, states = self.run_self(self.embed(tokens), cs, "prefill")
        K, V = self.kv(h, csc)
        Kb, Vb = K.new_empty(B, self.hkv, T + extra, self.hdc), V.new_empty(B, self.hkv, T + extra, self.hdc)
        Kb[:, :, :T], Vb[:, :, :T] = K, V
        last = (csc[0][-1:], csc[1][-1:])
        logits = self.cross(h[:, -1:], last, K, V, None)[:, 0]
        return logits, {"layers": states, "K": Kb, "V": Vb, "n": T}

    def step(self, tok, st):
        """One decode step for B sequences (all at the same position st['n'])."""
        n = st["n"]
        cs, csc = self.tables(torch.tensor([n]))
        h, st["layers"] = self.run_self(self.embed(tok[:, None]), cs, "step", st["layers"], n)
        k, v = self.kv(h, csc)
        if n >= st["K"].shape[2]:  # out of spare rows: grow geometrically
            for key in ("K", "V"):
                st[key] = torch.cat([st[key], torch.empty_like(st[key][:, :, :max(n, 16)])], 2)
        st["K"][:, :, n], st["V"][:, :, n] = k[:, :, 0], v[:, :, 0]
        st["n"] = n + 1
        return self.cross(h, csc, st["K"][:, :, :n + 1], st["V"][:, :, :n + 1], None)[:, 0]


def cat_states(sts):
    """Stack per-group prefill states along the batch dimension for one batched decode."""
    layers = [tuple(torch.cat([s["layers"][j][m] for s in sts]) for m in range(len(sts[0]["layers"][j])))
              for j in range(len(sts[0]["layers"]))]
    return {"layers": layers, "K": torch.cat([s["K"] for s in sts]),
            "V": torch.cat([s["V"] for s in sts]), "n": sts[0]["n"]}


def run_check(m, prompt_len=100, steps=8, B=2):
    """prefill + greedy decode must reproduce the full forward's log-probs.  Run twice: default
    chunk/block sizes, and small ones (so chunk boundaries, SWA blocks and K/V buffer growth are
    all exercised even on a 100-token prompt)."""
    g = torch.Generator().manual_seed(1234)
    prompt = torch.randint(m.vocab, (B, prompt_len), generator=g)
    ok = True
    for chunk, blk, extra in ((64, 256, steps), (16, 24, 0)):
        m.chunk, m.swa_block = chunk, blk
        logits, st = m.prefill(prompt, extra)
        outs, seq = [logits], prompt
        for _ in range(steps):
            tok = outs[-1].argmax(-1)
            seq = torch.cat([seq, tok[:, None]], 1)
            outs.append(m.step(tok, st))
        dec = torch.stack(outs, 1).log_softmax(-1)
        ref = m.forward_full(seq)[:, prompt_len - 1:]
        diff = (dec - ref).abs().max().item()
        good = diff < 1e-4 and bool((dec.argmax(-1) == ref.argmax(-1)).all())
        ok &= good
        print(f"check: prompt={prompt_len} batch={B} steps={steps} chunk={chunk} swa_block={blk} "
              f"max|dlogp|={diff:.3e} {'OK' if good else 'MISMATCH'}", file=sys.stderr)
    m.chunk, m.swa_block = 64, 256
    return ok


def bench(m, args):
    res = {"impl": "torch", "threads": args.threads, "torch_version": torch.__version__, "dtype": args.dtype,
           "prefill": [], "decode": []}
    g = torch.Generator().manual_seed(0)
    for n in [int(x) for x in args.prefill_lens.split(",") if x]:
        toks = torch.randint(m.vocab, (1, n), generator=g)
        if n <= 4096:
            m.prefill(toks)  # warm-up (allocator, thread pool)
        reps = 3 if n <= 4096 else 2 if n <= 16384 else 1
        best, spent = float("inf"), 0.0
        for _ in range(reps):
            t0 = time.perf_counter()
            m.prefill(toks)
            dt = time.perf_counter() - t0
            best, spent = min(best, dt), spent + dt
            if spent > args.time_cap:  # long prompts: one run is enough
                break
        res["prefill"].append({"tokens": n, "seconds": best, "tokens_per_s": n / best})
        log(args, f"prefill {n}: {best:.3f} s, {n / best:.1f} tok/s")
    for B in [int(x) for x in args.decode_batches.split(",") if x]:
        ctx = torch.randint(m.vocab, (B, args.decode_context), generator=g)
        # Context prefill is not timed; done in groups to bound activation memory.
        parts = [m.prefill(ctx[i:i + 8], args.decode_steps + 2) for i in range(0, B, 8)]
        logits, st = torch.cat([p[0] for p in parts]), cat_states([p[1] for p in parts])
        logits = m.step(logits.argmax(-1), st)  # warm-up step
        t0 = time.perf_counter()
        for _ in range(args.decode_steps):
            logits = m.step(logits.argmax(-1), st)
        dt = time.perf_counter() - t0
        res["decode"].append({"batch": B, "context": args.decode_context, "steps": args.decode_steps,
                              "seconds": dt, "tokens_per_s": B * args.decode_steps / dt})
        log(args, f"decode B={B}: {dt:.3f} s, {B * args.decode_steps / dt:.1f} tok/s")
        del parts, st
    res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return res


def log(args, msg):
    if args.verbose:
        print(msg, file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="directory with params.json + model.safetensors")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--check", action="store_true", help="run the correctness self-check")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="weights and products (default fp32)")
    ap.add_argument("--prefill-lens", help="comma list (default 1024,4096; empty string: none)")
    ap.add_argument("--decode-batches", help="comma list (default 1,4,16,32; empty string: none)")
    ap.add_argument("--decode-context", type=int, default=512)
    ap.add_argument("--decode-steps", type=int, default=16)
    ap.add_argument("--time-cap", type=float, default=30.0, help="stop repeating a prefill after this many s")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ap.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with torch.inference_mode():
        m = YOCO(args.model, torch.bfloat16 if args.dtype == "bf16" else torch.float32)
        if args.check:
            ok = run_check(m)
            print("check:", "PASS" if ok else "FAIL", file=sys.stderr)
            if not ok:
                sys.exit(1)
            if args.prefill_lens is None and args.decode_batches is None:
                return  # --check alone: no benchmark
        args.prefill_lens = "1024,4096" if args.prefill_lens is None else args.prefill_lens
        args.decode_batches = "1,4,16,32" if args.decode_batches is None else args.decode_batches
        res = bench(m, args)
    if args.json:
        print(json.dumps(res))
        return
    print(f"torch {res['torch_version']}, {res['threads']} threads, peak RSS {res['peak_rss_mb']:.0f} MB")
    print(f"{'prefill tokens':>15} {'seconds':>10} {'tok/s':>10}")
    for r in res["prefill"]:
        print(f"{r['tokens']:>15} {r['seconds']:>10.3f} {r['tokens_per_s']:>10.1f}")
    print(f"{'decode batch':>15} {'context':>8} {'steps':>6} {'seconds':>10} {'tok/s':>10}")
    for r in res["decode"]:
        print(f"{r['batch']:>15} {r['context']:>8} {r['steps']:>6} {r['seconds']:>10.3f} {r['tokens_per_s']:>10.1f}")


if __name__ == "__main__":
    main()
