#!/usr/bin/env python3
"""Baselines for our CUDA prefill kernels on the same shapes as bench/cuda_ops_bench.cc.

  gated retention (docs/design.md §2.3)  vs  fla-core's chunked simple-GLA kernels (Triton):
      fla.ops.simple_gla.chunk_simple_gla and fused_chunk_simple_gla
  sliding-window attention    vs  torch.nn.functional.scaled_dot_product_attention with a boolean
                                  band mask, and flex_attention with a sliding-window block mask

Usage (on a GPU; bench/gpu/device_check.sh fla installs the carried fla-core wheel first):
  python3 bench/gpu/fla_compare.py run [--heads 24 --head-dim 128 --chunk 64 --window 512]
        [--ret-lens 4096,16384,65536,262144] [--swa-lens 4096,16384,65536] [--reps 10]
        [--flush-l2] [--out FILE]
  python3 bench/gpu/fla_compare.py selftest [--fla-naive PATH/fla/ops/simple_gla/naive.py]
        (CPU, float64: the references against their second forms, the FLOP counts against
        cuda_ops_bench's loops, and, given the path, fla's own naive chunk/recurrent forms
        against our gRet reference through the same mapping the GPU run uses)

Output of `run`: one JSON line per (op, impl, shape) with ms and TFLOP/s, the FLOPs counted exactly
as cuda_ops_bench counts them for our kernels (so the lines join with its JSON lines;
bench/gpu/compare_fla.py makes the table), plus one JSON line per semantics check.

The gRet mapping (docs/design.md §2.3; ours, per head, S_0 = the carried state):
    a_t = logsigmoid(gt_t) / 16,  k'_t = k_t · hd^-1/2,  S_t = exp(a_t) S_{t-1} + k'_tᵀ v_t,
    o_t = q_t · S_t                        (decay applied before adding the current token;
                                            the current token is included; no normalisation:
                                            the per-head RMSNorm is a separate op, in ours too)
  fla simple GLA: H_t = exp(g_t) H_{t-1} + k_tᵀ v_t, o_t = scale · q_t · H_t.
  So g = logsigmoid(gt) / 16 (per token, per head), scale = hd^-1/2 with k unscaled, and
  H = S / scale (initial_state = S_0 / scale; our state = final_state · scale).
Before any timing, `run` checks that mapping on a small random input (T not a multiple of the
chunk, a non-zero initial state) against a float64 recurrence written from docs/design.md §2.3, and that the
result is far from the two nearby wrong mappings (decay after the current token; current token
excluded); likewise SDPA's and flex's band against a float64 softmax over i - W < j <= i (and not
over one key more). A failed check prints FAIL, skips that implementation's timings and exits
non-zero; one that raises (not supported on this device or version) prints SKIP and is left out.

Timing, as cuda_ops_bench's time_ms: 3 warm-ups, then `reps` runs each bracketed by CUDA events,
the median. cuda_ops_bench flushes no L2 between runs and neither does this by default
(--flush-l2 zeroes a buffer of twice the L2 before each timed run, outside the events); every
working set here is >= 4 x 4K x 3072 x 2 B = 100 MB, twice an H100's 50 MB L2.

Inputs are drawn like cuda_ops_bench's: q, k, v uniform in [-1, 1), gate logits in [-2, 6), the
carried state in [-0.1, 0.1). Ours reads fp32 q/k/v and writes fp32 (bf16 only inside the tensor
core products); the fla rows are given in bf16 (its usual use) and in fp32 (the same bytes as
ours; Triton then uses tf32 products). The gate (logsigmoid / 16) is inside the timed region for
fla as it is inside our kernel.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

GATE_LOGIT_NORMALIZER = 16.0  # docs/design.md §2.1 gate_logit_normalizer default (tau)


# ----------------------------------------------------------------------------------------------
# FLOP counts: exactly cuda_ops_bench's.


def retention_flops(n, heads, head_dim, chunk=64):
    """cuda_ops_bench: n · H · (4·C·hd + 4·hd²)."""
    return float(n) * heads * (4.0 * chunk * head_dim + 4.0 * head_dim * head_dim)


def swa_pairs(n, window):
    """Σ_{i<n} min(i + 1, W): the (query, key) pairs inside the causal window."""
    if n <= window:
        return n * (n + 1) / 2.0
    return window * (window + 1) / 2.0 + float(n - window) * window


def swa_flops(n, heads, head_dim, window):
    """cuda_ops_bench: 4 · hd · H · Σ keys seen."""
    return 4.0 * head_dim * heads * swa_pairs(n, window)


# ----------------------------------------------------------------------------------------------
# float64 references written from docs/design.md §2.3. Tensors are one sequence: q, k, v [T, H, D],
# gate logits [T, H], state [H, D, D] (row = key dim, col = value dim, ours: k already scaled).


def gret_reference(q, k, v, gt, s0=None, normalizer=GATE_LOGIT_NORMALIZER, variant="spec"):
    """The recurrence. variant "spec" is docs/design.md §2.3; "decay_after" (S_t = e^a (S_{t-1} + kᵀv)) and
    "exclusive" (o_t = q_t·(e^a S_{t-1}), the current token left out) are the wrong mappings
    the check must be able to tell apart."""
    q, k, v, gt = (x.detach().to("cpu", torch.float64) for x in (q, k, v, gt))
    T, H, D = q.shape
    a = F.logsigmoid(gt) / normalizer
    k = k * D ** -0.5
    S = torch.zeros(H, D, v.shape[-1], dtype=torch.float64) if s0 is None else s0.detach().to("cpu", torch.float64).clone()
    o = torch.empty(T, H, v.shape[-1], dtype=torch.float64)
    for t in range(T):
        decay = a[t].exp()[:, None, None]
        kv = k[t][:, :, None] * v[t][:, None, :]
        if variant == "spec":
            S = decay * S + kv
            o[t] = torch.einsum("hd,hde->he", q[t], S)
        elif variant == "decay_after":
            S = decay * (S + kv)
            o[t] = torch.einsum("hd,hde->he", q[t], S)
        elif variant == "exclusive":
            o[t] = torch.einsum("hd,hde->he", q[t], decay * S)
            S = decay * S + kv
        else:
            raise ValueError(variant)
    return o, S


def gret_parallel(q, k, v, gt, s0=None, normalizer=GATE_LOGIT_NORMALIZER):
    """docs/design.md §2.3's parallel form: o_t = Σ_{s≤t} exp(Σ_{r=s+1..t} a_r)(q_t·k'_s) v_s
    + exp(Σ_{r≤t} a_r) q_t S_0 (float64, for the self-test)."""
    q, k, v, gt = (x.detach().to("cpu", torch.float64) for x in (q, k, v, gt))
    T, H, D = q.shape
    a = F.logsigmoid(gt) / normalizer  # [T, H]
    b = a.cumsum(0)  # b_t = Σ_{r≤t} a_r
    k = k * D ** -0.5
    scores = torch.einsum("thd,shd->hts", q, k)  # [H, T, S]
    bh = b.transpose(0, 1)  # [H, T]
    decay = (bh[:, :, None] - bh[:, None, :])  # Σ_{r=s+1..t} a_r = b_t - b_s
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    w = torch.where(causal, decay.exp() * scores, torch.zeros((), dtype=torch.float64))
    o = torch.einsum("hts,she->the", w, v)
    if s0 is not None:
        s0 = s0.detach().to("cpu", torch.float64)
        o = o + torch.einsum("th,thd,hde->the", b.exp(), q, s0)
    S = torch.zeros(H, D, v.shape[-1], dtype=torch.float64) if s0 is None else s0 * b[-1].exp()[:, None, None]
    S = S + torch.einsum("sh,shd,she->hde", (b[-1][None, :] - b).exp(), k, v)
    return o, S


def swa_reference(q, k, v, window, scale=None):
    """docs/design.md §2.3 SWA in float64: query i attends keys i − W < j ≤ i, softmax scale 1/sqrt(hd).
    q, k, v: [T, H, D] (n_kv = n_q)."""
    q, k, v = (x.detach().to("cpu", torch.float64) for x in (q, k, v))
    T, H, D = q.shape
    scale = D ** -0.5 if scale is None else scale
    s = torch.einsum("thd,shd->hts", q, k) * scale
    allowed = band_mask(T, window, "cpu")
    s = s.masked_fill(~allowed, float("-inf"))
    return torch.einsum("hts,she->the", torch.softmax(s, dim=-1), v)


def swa_reference_loop(q, k, v, window):
    """The same, one query at a time over an explicit key slice (self-test)."""
    q, k, v = (x.detach().to("cpu", torch.float64) for x in (q, k, v))
    T, H, D = q.shape
    o = torch.empty_like(v)
    for i in range(T):
        lo = max(0, i - window + 1)
        s = torch.einsum("hd,shd->hs", q[i], k[lo:i + 1]) * D ** -0.5
        o[i] = torch.einsum("hs,she->he", torch.softmax(s, dim=-1), v[lo:i + 1])
    return o


def band_mask(T, window, device):
    """Boolean [T, T], True where key j takes part for query i: i − W < j ≤ i (one T² byte
    tensor, no T² integer intermediate: 4 GiB at 64K)."""
    m = torch.ones(T, T, dtype=torch.bool, device=device)
    m.triu_(-(window - 1))  # j ≥ i − W + 1
    m.tril_()  # j ≤ i
    return m


def rel_err(x, ref):
    """max |x − ref| / max |ref| (float64)."""
    x = x.detach().to("cpu", torch.float64)
    return float((x - ref).abs().max() / ref.abs().max().clamp_min(1e-300))


# ----------------------------------------------------------------------------------------------
# Adapters: our gRet through fla's simple-GLA signature (q, k, v [B, T, H, D], g [B, T, H]).


def fla_gret(fn, q, k, v, gt, s0, normalizer=GATE_LOGIT_NORMALIZER):
    """Our gRet (state convention: k scaled) through an fla simple-GLA function `fn`
    (chunk_simple_gla, fused_chunk_simple_gla, or fla's naive forms). q, k, v: [B, T, H, D];
    gt: [B, T, H]; s0: [B, H, D, D] or None. Returns (o, our final state)."""
    D = q.shape[-1]
    scale = D ** -0.5
    g = F.logsigmoid(gt.float()) / normalizer
    h0 = None if s0 is None else (s0.float() / scale)
    o, ht = fn(q, k, v, g=g, scale=scale, initial_state=h0, output_final_state=True)
    return o, ht * scale


def check_gret(name, fn, dtype, device, tol, T=300, H=3, D=128, seed=1, out=print):
    """Our mapping through `fn` against the float64 recurrence of docs/design.md §2.3: output and final state,
    at the bench's gate distribution and at a strong-decay one where the wrong mappings are far."""
    ok = True
    gen = torch.Generator().manual_seed(seed)
    for gate_lo, gate_hi, discriminate in ((-2.0, 6.0, False), (-10.0, 0.0, True)):
        q = (torch.rand(1, T, H, D, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)
        k = (torch.rand(1, T, H, D, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)
        v = (torch.rand(1, T, H, D, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)
        gt = (torch.rand(1, T, H, generator=gen, dtype=torch.float64) * (gate_hi - gate_lo) + gate_lo).float()
        s0 = (torch.rand(1, H, D, D, generator=gen, dtype=torch.float64) * 0.2 - 0.1).float()
        # The reference sees exactly the values the kernel sees (after rounding to `dtype`).
        o_ref, s_ref = gret_reference(q[0], k[0], v[0], gt[0], s0[0])
        qd, kd, vd, gd, sd = (x.to(device) for x in (q, k, v, gt, s0))
        o, s = fla_gret(fn, qd, kd, vd, gd, sd)
        if device != "cpu":
            torch.cuda.synchronize()
        e_o, e_s = rel_err(o[0], o_ref), rel_err(s[0], s_ref)
        rec = {"check": "gret_mapping", "impl": name, "dtype": str(dtype).replace("torch.", ""), "T": T, "heads": H,
               "head_dim": D, "gate_logits": [gate_lo, gate_hi], "out_rel_err": e_o, "state_rel_err": e_s, "tol": tol}
        good = e_o <= tol and e_s <= tol
        if discriminate:
            wrong = {}
            for variant in ("decay_after", "exclusive"):
                o_w, _ = gret_reference(q[0], k[0], v[0], gt[0], s0[0], variant=variant)
                wrong[variant] = rel_err(o[0], o_w)
            rec["wrong_mapping_rel_err"] = wrong
            # The right mapping must be much closer than either wrong one.
            good = good and all(e_o * 4 < w for w in wrong.values())
        rec["ok"] = good
        out(json.dumps(rec))
        ok = ok and good
    return ok


def check_swa(name, attn, dtype, device, tol, T=700, H=3, D=128, windows=(16, 512), seed=2, out=print):
    """attn(q, k, v, window) with q, k, v [1, H, T, D] -> [1, H, T, D], against the float64
    band softmax; at the small window also against the band one key wider (must be far)."""
    ok = True
    gen = torch.Generator().manual_seed(seed)
    for W in windows:
        q, k, v = ((torch.rand(T, H, D, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype) for _ in range(3))
        ref = swa_reference(q, k, v, W)
        o = attn(*(x.transpose(0, 1).unsqueeze(0).contiguous().to(device) for x in (q, k, v)), W)
        o = o[0].transpose(0, 1)
        e = rel_err(o, ref)
        rec = {"check": "swa_band", "impl": name, "dtype": str(dtype).replace("torch.", ""), "T": T, "heads": H,
               "head_dim": D, "window": W, "out_rel_err": e, "tol": tol}
        good = e <= tol
        if W <= 64:
            e_wide = rel_err(o, swa_reference(q, k, v, W + 1))
            rec["one_key_wider_rel_err"] = e_wide
            good = good and e * 4 < e_wide
        rec["ok"] = good
        out(json.dumps(rec))
        ok = ok and good
    return ok


# ----------------------------------------------------------------------------------------------
# GPU timing.


def time_ms(fn, reps, flush=None):
    """cuda_ops_bench's time_ms: 3 warm-ups, then the median of `reps` event-bracketed runs."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in ev:
        if flush is not None:
            flush()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) for s, e in ev)
    return t[reps // 2]


def sdpa_band(q, k, v, window, mask=None):
    if mask is None:
        mask = band_mask(q.shape[-2], window, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=q.shape[-1] ** -0.5)


class Flex:
    """flex_attention (compiled) with a sliding-window block mask."""

    def __init__(self):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        self.create_block_mask = create_block_mask
        self.flex = torch.compile(flex_attention)
        self.masks = {}

    def block_mask(self, T, window, device):
        key = (T, window)
        if key not in self.masks:
            def sliding(b, h, q_idx, kv_idx):
                # i − W < j ≤ i, written without a T² integer difference.
                return (q_idx >= kv_idx) & (q_idx < kv_idx + window)

            self.masks = {key: self.create_block_mask(sliding, None, None, T, T, device=device)}
        return self.masks[key]

    def __call__(self, q, k, v, window):
        bm = self.block_mask(q.shape[-2], window, q.device)
        return self.flex(q, k, v, block_mask=bm, scale=q.shape[-1] ** -0.5)


def run(args):
    dev = args.device
    emit_file = open(args.out, "a") if args.out else None

    def emit(line):
        print(line, flush=True)
        if emit_file:
            emit_file.write(line + "\n")
            emit_file.flush()

    failed = []
    props = torch.cuda.get_device_properties(0)
    env = {"env": "fla_compare", "device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__}
    try:
        import triton
        env["triton"] = triton.__version__
    except Exception as e:  # noqa: BLE001
        env["triton"] = "missing: %s" % e
    fla_fns = {}
    try:
        import fla
        from fla.ops.simple_gla import chunk_simple_gla, fused_chunk_simple_gla

        env["fla"] = getattr(fla, "__version__", "?")
        fla_fns = {"fla.chunk_simple_gla": chunk_simple_gla, "fla.fused_chunk_simple_gla": fused_chunk_simple_gla}
    except Exception as e:  # noqa: BLE001
        env["fla"] = "missing: %s" % e
        failed.append("fla import")
    emit(json.dumps(env))
    H, D, C, W = args.heads, args.head_dim, args.chunk, args.window
    flush = None
    if args.flush_l2:
        l2 = getattr(props, "L2_cache_size", 50 << 20)
        scratch = torch.empty(2 * l2, dtype=torch.uint8, device=dev)
        flush = scratch.zero_
    dtypes = {"bf16": torch.bfloat16, "f32": torch.float32}
    tols = {"bf16": 3e-2, "f32": 1e-2}

    # --- semantics first ---
    ret_ok = {}
    for name, fn in fla_fns.items():
        for dn in args.fla_dtypes.split(","):
            try:
                ret_ok[(name, dn)] = check_gret(name, fn, dtypes[dn], dev, tols[dn], D=D, out=emit)
            except Exception as e:  # noqa: BLE001  (does not run here: skipped, not a wrong mapping)
                emit(json.dumps({"check": "gret_mapping", "impl": name, "dtype": dn, "ok": False, "error": repr(e)[:400]}))
                emit("SKIP: %s (%s) raised; its timings are skipped" % (name, dn))
                ret_ok[(name, dn)] = None
            if ret_ok[(name, dn)] is False:
                failed.append("gret mapping %s %s" % (name, dn))
                emit("FAIL: %s (%s) does not compute docs/design.md §2.3's gated retention through the mapping; "
                     "its timings are skipped" % (name, dn))
    swa_impls = {"torch.sdpa_bool_band": lambda q, k, v, w: sdpa_band(q, k, v, w)}
    if not args.no_flex:
        try:
            swa_impls["torch.flex_attention"] = Flex()
        except Exception as e:  # noqa: BLE001
            emit(json.dumps({"check": "swa_band", "impl": "torch.flex_attention", "ok": False, "error": repr(e)[:400]}))
            emit("SKIP: torch.flex_attention is not available")
    swa_ok = {}
    for name, fn in list(swa_impls.items()):
        try:
            ok = check_swa(name, fn, torch.float32, dev, 1e-2, out=emit) and check_swa(
                name, fn, torch.bfloat16, dev, 3e-2, windows=(512,), out=emit)
        except Exception as e:  # noqa: BLE001
            emit(json.dumps({"check": "swa_band", "impl": name, "ok": False, "error": repr(e)[:400]}))
            emit("SKIP: %s raised; its timings are skipped" % name)
            ok = None
        swa_ok[name] = ok
        if ok is False:
            failed.append("swa band %s" % name)
            emit("FAIL: %s does not compute docs/design.md §2.3's sliding window; its timings are skipped" % name)

    # --- gated retention timings ---
    for n in (int(x) for x in args.ret_lens.split(",") if x):
        flops = retention_flops(n, H, D, C)
        for dn in args.fla_dtypes.split(","):
            dt = dtypes[dn]
            gen = torch.Generator(device=dev).manual_seed(n)
            try:
                q, k, v = ((torch.rand(1, n, H, D, device=dev, generator=gen) * 2 - 1).to(dt) for _ in range(3))
                gt = torch.rand(1, n, H, device=dev, generator=gen) * 8 - 2
                h0 = (torch.rand(1, H, D, D, device=dev, generator=gen) * 0.2 - 0.1) / D ** -0.5
            except torch.cuda.OutOfMemoryError as e:
                emit(json.dumps({"op": "retention_prefill", "impl": "fla (inputs)", "dtype": dn, "batch": 1, "n": n,
                                 "heads": H, "head_dim": D, "error": repr(e)[:300]}))
                continue
            for name, fn in fla_fns.items():
                if not ret_ok.get((name, dn)):
                    continue
                rec = {"op": "retention_prefill", "impl": name, "dtype": dn, "batch": 1, "n": n, "heads": H,
                       "head_dim": D, "chunk": C}
                try:
                    def step(fn=fn):
                        g = F.logsigmoid(gt) / GATE_LOGIT_NORMALIZER
                        return fn(q, k, v, g=g, scale=D ** -0.5, initial_state=h0, output_final_state=True)

                    t0 = time.time()
                    ms = time_ms(step, args.reps, flush)
                    rec.update(ms=round(ms, 4), tflops=round(flops / (ms * 1e-3) / 1e12, 3),
                               wall_s=round(time.time() - t0, 1))
                except Exception as e:  # noqa: BLE001
                    rec["error"] = repr(e)[:300]
                emit(json.dumps(rec))
            del q, k, v, gt, h0
            torch.cuda.empty_cache()

    # --- SWA timings (bf16: what SDPA and flex are used with) ---
    for n in (int(x) for x in args.swa_lens.split(",") if x):
        flops = swa_flops(n, H, D, W)
        gen = torch.Generator(device=dev).manual_seed(n + 1)
        q, k, v = ((torch.rand(1, H, n, D, device=dev, generator=gen) * 2 - 1).to(torch.bfloat16) for _ in range(3))
        for name, fn in swa_impls.items():
            if not swa_ok.get(name):
                continue
            rec = {"op": "swa_prefill", "impl": name, "dtype": "bf16", "batch": 1, "n": n, "heads": H, "kv_heads": H,
                   "head_dim": D, "window": W}
            try:
                t0 = time.time()
                if name == "torch.sdpa_bool_band":
                    mask = band_mask(n, W, dev)  # built once, outside the timed runs
                    rec["note"] = "dense: computes all T^2 scores; FLOPs counted as in the window"
                    ms = time_ms(lambda: sdpa_band(q, k, v, W, mask), max(3, args.reps if n <= 16384 else args.reps // 2), flush)
                    del mask
                else:
                    fn.block_mask(n, W, dev)
                    ms = time_ms(lambda: fn(q, k, v, W), args.reps, flush)
                rec.update(ms=round(ms, 4), tflops=round(flops / (ms * 1e-3) / 1e12, 3), wall_s=round(time.time() - t0, 1))
            except Exception as e:  # noqa: BLE001
                rec["error"] = repr(e)[:300]
            emit(json.dumps(rec))
            torch.cuda.empty_cache()
        del q, k, v
        torch.cuda.empty_cache()

    if failed:
        emit("FAIL: " + "; ".join(failed))
        return 1
    return 0


# ----------------------------------------------------------------------------------------------
# CPU self-test.


def load_module(path, name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def selftest(args):
    ok = True

    def report(what, err, tol):
        nonlocal ok
        good = err <= tol
        ok = ok and good
        print("%-62s %.3e  %s" % (what, err, "ok" if good else "FAIL (tol %.0e)" % tol))

    # FLOP counts against cuda_ops_bench's loops.
    for n, W in ((1, 512), (511, 512), (512, 512), (513, 512), (4096, 512), (65536, 512), (100, 7)):
        loop = sum(min(i + 1, W) for i in range(n))
        report("swa pairs n=%d W=%d vs the loop" % (n, W), abs(swa_pairs(n, W) - loop), 0)
    report("retention FLOPs n=4096, 24 x 128, C=64", abs(retention_flops(4096, 24, 128, 64) - 4096 * 24 * (4 * 64 * 128 + 4 * 128 * 128)), 0)

    gen = torch.Generator().manual_seed(0)
    T, H, D = 150, 2, 16
    for lo, hi in ((-2.0, 6.0), (-10.0, 0.0)):
        q, k, v = (torch.rand(T, H, D, generator=gen, dtype=torch.float64) * 2 - 1 for _ in range(3))
        gt = torch.rand(T, H, generator=gen, dtype=torch.float64) * (hi - lo) + lo
        s0 = torch.rand(H, D, D, generator=gen, dtype=torch.float64) * 0.2 - 0.1
        o_r, s_r = gret_reference(q, k, v, gt, s0)
        o_p, s_p = gret_parallel(q, k, v, gt, s0)
        report("gRet recurrence vs parallel form, gates [%g, %g): out" % (lo, hi), rel_err(o_p, o_r), 1e-12)
        report("gRet recurrence vs parallel form, gates [%g, %g): state" % (lo, hi), rel_err(s_p, s_r), 1e-12)
        o_r0, s_r0 = gret_reference(q, k, v, gt)
        o_p0, s_p0 = gret_parallel(q, k, v, gt)
        report("gRet recurrence vs parallel form, zero state", max(rel_err(o_p0, o_r0), rel_err(s_p0, s_r0)), 1e-12)
        # Two calls resume like one (the state convention carries over).
        o1, s1 = gret_reference(q[:70], k[:70], v[:70], gt[:70], s0)
        o2, s2 = gret_reference(q[70:], k[70:], v[70:], gt[70:], s1)
        report("gRet 70 + 80 tokens vs 150 in one call", max(rel_err(torch.cat([o1, o2]), o_r), rel_err(s2, s_r)), 1e-12)
        for variant in ("decay_after", "exclusive"):
            o_w, _ = gret_reference(q, k, v, gt, s0, variant=variant)
            print("%-62s %.3e  (wrong mapping: must be large)" % ("gRet %s vs spec, gates [%g, %g)" % (variant, lo, hi), rel_err(o_w, o_r)))

    for W in (1, 5, 16, 40, 200):
        q, k, v = (torch.rand(90, 2, 8, generator=gen, dtype=torch.float64) * 2 - 1 for _ in range(3))
        report("SWA band softmax vs per-query loop, W=%d" % W, rel_err(swa_reference(q, k, v, W), swa_reference_loop(q, k, v, W)), 1e-12)
    m = band_mask(9, 3, "cpu")
    want = torch.tensor([[1 if i - 3 < j <= i else 0 for j in range(9)] for i in range(9)], dtype=torch.bool)
    report("band_mask(9, 3) vs i - W < j <= i", float((m != want).sum()), 0)

    if args.fla_naive:
        # fla's own float references (pure torch) through the mapping: what its kernels compute.
        naive = load_module(args.fla_naive, "fla_simple_gla_naive")
        T, H, D = 200, 2, 32  # T not a multiple of 64, non-zero initial state
        for lo, hi in ((-2.0, 6.0), (-10.0, 0.0)):
            q, k, v = (torch.rand(1, T, H, D, generator=gen, dtype=torch.float64) * 2 - 1 for _ in range(3))
            gt = torch.rand(1, T, H, generator=gen, dtype=torch.float64) * (hi - lo) + lo
            s0 = torch.rand(1, H, D, D, generator=gen, dtype=torch.float64) * 0.2 - 0.1
            o_ref, s_ref = gret_reference(q[0], k[0], v[0], gt[0], s0[0])

            def chunk(q, k, v, g, scale, initial_state, output_final_state):
                return naive.naive_chunk_simple_gla(q, k, v, g, initial_state=initial_state,
                                                    output_final_state=output_final_state, scale=scale)

            def recurrent(q, k, v, g, scale, initial_state, output_final_state):
                return naive.naive_recurrent_simple_gla(q, k, v, g, scale=scale, initial_state=initial_state,
                                                        output_final_state=output_final_state)

            for name, fn in (("naive_chunk_simple_gla", chunk), ("naive_recurrent_simple_gla", recurrent)):
                o, s = fla_gret(fn, q, k, v, gt, s0)
                report("fla %s via the mapping, gates [%g, %g): out" % (name, lo, hi), rel_err(o[0], o_ref), 1e-5)
                report("fla %s via the mapping, gates [%g, %g): state" % (name, lo, hi), rel_err(s[0], s_ref), 1e-5)
                for variant in ("decay_after", "exclusive"):
                    o_w, _ = gret_reference(q[0], k[0], v[0], gt[0], s0[0], variant=variant)
                    e_w = rel_err(o[0], o_w)
                    if lo < -5:
                        good = e_w > 0.05
                        ok = ok and good
                        print("%-62s %.3e  %s" % ("fla %s vs the wrong %s" % (name, variant), e_w,
                                                  "ok (far)" if good else "FAIL (must be > 0.05)"))
        # check_gret itself, driven by the naive chunk form on the CPU (as run() drives the kernels):
        # it must pass the right mapping and reject wrong ones.
        ok = check_gret("naive_chunk_simple_gla (cpu)", chunk, torch.float32, "cpu", 1e-5, T=130, H=2, D=32) and ok

        def no_normalizer(q, k, v, g, scale, initial_state, output_final_state):  # g without the / 16
            return chunk(q, k, v, g * GATE_LOGIT_NORMALIZER, scale, initial_state, output_final_state)

        def unscaled(q, k, v, g, scale, initial_state, output_final_state):  # scale left at 1
            return chunk(q, k, v, g, 1.0, initial_state, output_final_state)

        for name, fn in (("no gate normaliser", no_normalizer), ("scale 1", unscaled)):
            rejected = not check_gret("wrong mapping: " + name, fn, torch.float32, "cpu", 1e-5, T=130, H=2, D=32,
                                      out=lambda line: None)
            ok = ok and rejected
            print("%-62s %s" % ("check_gret rejects a wrong mapping (%s)" % name, "ok" if rejected else "FAIL"))
    print("selftest: %s" % ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="GPU: semantics checks, then timings (JSON lines)")
    r.add_argument("--heads", type=int, default=24, help="yoco-3b: 24 self heads")
    r.add_argument("--head-dim", type=int, default=128, help="yoco-3b: 3072 / 24")
    r.add_argument("--chunk", type=int, default=64, help="cuda_ops_bench's C (FLOP count; fla uses 64)")
    r.add_argument("--window", type=int, default=512, help="cuda_ops_bench's SWA window for a gRet preset")
    r.add_argument("--ret-lens", default="4096,16384,65536,262144", help="cuda_ops_bench's retention n")
    r.add_argument("--swa-lens", default="4096,16384,65536", help="cuda_ops_bench's swa n")
    r.add_argument("--fla-dtypes", default="bf16,f32")
    r.add_argument("--reps", type=int, default=10, help="cuda_ops_bench: min(--reps 20, 10) for these ops")
    r.add_argument("--flush-l2", action="store_true")
    r.add_argument("--no-flex", action="store_true")
    r.add_argument("--out", help="also append the lines to this file")
    r.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # tests of the script's logic only
    s = sub.add_parser("selftest", help="CPU: references, FLOP counts, fla's naive forms via the mapping")
    s.add_argument("--fla-naive", help="path to fla/ops/simple_gla/naive.py (from the wheel)")
    args = p.parse_args()
    if args.cmd == "run":
        if args.device == "cuda" and not torch.cuda.is_available():
            print("fla_compare: no CUDA device", file=sys.stderr)
            return 1
        return run(args)
    return selftest(args)


if __name__ == "__main__":
    sys.exit(main())
