#!/usr/bin/env python3
"""Convert a reference YOCO training checkpoint (a PyTorch state dict + params.json) to the
model-directory layout of docs/design.md §2.1: model.safetensors + a normalised params.json (+ tokenizer).

    python3 tools/convert_checkpoint.py --checkpoint ckpt.pt --params params.json --out DIR \
        [--dtype keep|f32|f16|bf16] [--tokenizer TOKDIR] [--state-key model] [--strict]

Safety: the checkpoint is read with torch.load(..., weights_only=True), which only rebuilds
tensors and plain containers (dict, list, str, int, float, ...); a pickle that names any other
class or function is refused, never executed. There is no fallback to a full unpickle: a
checkpoint that carries, say, an argparse.Namespace must have its state dict extracted first
(by whoever trusts it) with torch.save(ckpt["model"], "state_dict.pt"). Note that torch 1.13's
(Debian 12) weights_only loader cannot read pickled Python floats either (newer torch can), so
on it a checkpoint that also carries optimizer hyper-parameters needs the same treatment;
tools/train/train_yoco.py keeps its non-tensor metadata in a JSON string for that reason.

What it accepts:
  * the file holds the state dict itself, or a dict with the state dict under --state-key or one
    of "model", "state_dict", "model_state_dict", "module" (searched in that order, nested ok);
  * names may carry wrapper prefixes: "module." (DDP), "model.", "decoder." (fairseq),
    "_orig_mod." (torch.compile); they are stripped, repeatedly, from the front of each name;
  * params.json holds the reference's argument-class keys (dim, n_layers, hidden_dim,
    n_self_heads, n_attn_heads, n_attn_kv_heads, vocab_size, rope_theta, norm_eps,
    sliding_window, max_seq_len, ...) and optionally our extensions (n_loops, cross_decoder_rope,
    n_self_layers, gate_logit_normalizer, tie_embeddings, arch, and a mixture of experts' n_experts,
    n_experts_per_token, expert_hidden_dim, shared_expert_hidden_dim, moe_norm_topk_prob, also
    under their Hugging Face names num_experts, num_experts_per_tok, moe_intermediate_size,
    shared_expert_intermediate_size, norm_topk_prob). Keys of neither kind (max_batch_size,
    model_parallel_size, ...) are dropped with a note;
  * FFN tensors in our names (docs/design.md §2.1) or in the common Llama/Qwen-MoE layout, renamed
    under any layer prefix P: P mlp.{gate,up,down}_proj -> P ffn.{fc1,gate,fc2} (Llama's gate_proj
    is the activated branch, our fc1: docs/design.md §2.2), P mlp.gate -> P ffn.router,
    P mlp.experts.{e}.{gate,up,down}_proj -> P ffn.experts.{e}.{fc1,gate,fc2},
    P mlp.shared_expert.{gate,up,down}_proj -> P ffn.shared.{fc1,gate,fc2}. Qwen2-MoE's sigmoid
    gate on the shared expert (mlp.shared_expert_gate) is not part of our MoE and is refused.
What it checks: every tensor docs/design.md §2.1 requires for this configuration is present with exactly
the shape params.json implies, and finite. Tensors that are not part of the model (rotary
tables, masks, running statistics, optimizer leftovers) are dropped with a note listing them;
with --strict any such tensor is an error. With tied embeddings an output_projection.weight
equal to embed_tokens.weight is dropped; a different one is an error.
Output: DIR/model.safetensors (tensors sorted by name, written by hand: no extra dependency),
DIR/params.json with every key explicit, and tokenizer.json / tokenizer_config.json copied
from --tokenizer when given.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import torch

PREFIXES = ("module.", "model.", "decoder.", "_orig_mod.")
STATE_KEYS = ("model", "state_dict", "model_state_dict", "module")
ST_DTYPE = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
ST_TORCH = {v: k for k, v in ST_DTYPE.items()}
OUT_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

REFERENCE_KEYS = ("dim", "n_layers", "hidden_dim", "n_self_heads", "n_attn_heads", "n_attn_kv_heads",
                  "vocab_size", "rope_theta", "norm_eps", "sliding_window", "max_seq_len")
MOE_KEYS = ("n_experts", "n_experts_per_token", "expert_hidden_dim", "shared_expert_hidden_dim",
            "moe_norm_topk_prob")
EXTENSION_KEYS = ("n_loops", "cross_decoder_rope", "n_self_layers", "gate_logit_normalizer",
                  "tie_embeddings", "arch") + MOE_KEYS
# Hugging Face config names of the MoE keys (Qwen2-MoE, Qwen3-MoE, OLMoE).
HF_MOE_KEYS = {"num_experts": "n_experts", "num_experts_per_tok": "n_experts_per_token",
               "moe_intermediate_size": "expert_hidden_dim",
               "shared_expert_intermediate_size": "shared_expert_hidden_dim",
               "norm_topk_prob": "moe_norm_topk_prob"}
# Llama-style SwiGLU names -> ours (docs/design.md §2.2: their gate_proj is the activated branch).
LLAMA_FFN = {"gate_proj": "fc1", "up_proj": "gate", "down_proj": "fc2"}


class ConvertError(Exception):
    pass


def note(msg):
    print(f"convert_checkpoint: {msg}", file=sys.stderr)


# ------------------------------------------------------------------------------------ params
def normalise_params(raw, has_output_projection):
    """params.json with every docs/design.md §2.1 key explicit (defaults filled in) and unknown keys dropped."""
    raw = dict(raw)
    for hf, ours in HF_MOE_KEYS.items():
        if hf in raw:
            if ours in raw and raw[ours] != raw[hf]:
                raise ConvertError(f"params.json: {hf} ({raw[hf]!r}) and {ours} ({raw[ours]!r}) disagree")
            raw[ours] = raw.pop(hf)
    unknown = sorted(k for k in raw if k not in REFERENCE_KEYS + EXTENSION_KEYS)
    if unknown:
        note(f"params.json: dropping keys that are not model parameters: {unknown}")
    moe = bool(raw.get("n_experts"))
    for k in ("dim", "n_layers", "hidden_dim", "n_attn_heads", "vocab_size"):
        if k not in raw and not (moe and k == "hidden_dim"):  # an MoE has no dense FFN
            raise ConvertError(f"params.json: missing required key {k!r}")
    arch = raw.get("arch") or "yoco"
    if arch not in ("yoco", "transformer"):
        raise ConvertError(f"params.json: arch must be 'yoco' or 'transformer', got {arch!r}")

    def integer(k, v):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ConvertError(f"params.json: {k} must be a positive integer, got {v!r}")
        return v

    p = {"arch": arch}
    for k in ("dim", "n_layers", "n_attn_heads", "vocab_size"):
        p[k] = integer(k, raw[k])
    p["hidden_dim"] = 0 if moe and not raw.get("hidden_dim") else integer("hidden_dim", raw["hidden_dim"])
    if moe:
        p["n_experts"] = integer("n_experts", raw["n_experts"])
        p["n_experts_per_token"] = integer("n_experts_per_token", raw.get("n_experts_per_token"))
        if p["n_experts_per_token"] > p["n_experts"]:
            raise ConvertError(f"params.json: n_experts_per_token ({p['n_experts_per_token']}) must be <= "
                               f"n_experts ({p['n_experts']})")
        p["expert_hidden_dim"] = integer("expert_hidden_dim", raw.get("expert_hidden_dim"))
        shared = raw.get("shared_expert_hidden_dim") or 0
        p["shared_expert_hidden_dim"] = 0 if shared == 0 else integer("shared_expert_hidden_dim", shared)
        norm = raw.get("moe_norm_topk_prob", False)
        if not isinstance(norm, bool):
            raise ConvertError("params.json: moe_norm_topk_prob must be true or false")
        p["moe_norm_topk_prob"] = norm
    else:
        for k in MOE_KEYS:
            if raw.get(k):
                raise ConvertError(f"params.json: {k} is set but n_experts is not (a dense model)")
    p["n_attn_kv_heads"] = integer("n_attn_kv_heads", raw.get("n_attn_kv_heads", p["n_attn_heads"]))
    p["rope_theta"] = float(raw.get("rope_theta", 10000.0))
    p["norm_eps"] = float(raw.get("norm_eps", 1e-5))
    if raw.get("max_seq_len") is not None:
        p["max_seq_len"] = integer("max_seq_len", raw["max_seq_len"])
    if p["dim"] % p["n_attn_heads"] or p["n_attn_heads"] % p["n_attn_kv_heads"]:
        raise ConvertError("params.json: need dim % n_attn_heads == 0 and n_attn_heads % n_attn_kv_heads == 0")
    if arch == "yoco":
        p["n_self_heads"] = integer("n_self_heads", raw.get("n_self_heads", p["n_attn_heads"]))
        if p["dim"] % p["n_self_heads"]:
            raise ConvertError("params.json: dim must be divisible by n_self_heads")
        sw = raw.get("sliding_window")
        p["sliding_window"] = None if sw is None else integer("sliding_window", sw)
        p["n_loops"] = integer("n_loops", raw.get("n_loops", 1))
        crope = raw.get("cross_decoder_rope", True)
        if not isinstance(crope, bool):
            raise ConvertError("params.json: cross_decoder_rope must be true or false")
        p["cross_decoder_rope"] = crope
        p["n_self_layers"] = integer("n_self_layers", raw.get("n_self_layers", p["n_layers"] // 2))
        if p["n_self_layers"] >= p["n_layers"]:
            raise ConvertError("params.json: n_self_layers must be < n_layers")
        p["gate_logit_normalizer"] = float(raw.get("gate_logit_normalizer", 16))
    tie = raw.get("tie_embeddings")
    p["tie_embeddings"] = (not has_output_projection) if tie is None else bool(tie)
    return p


def expected_shapes(p):
    """docs/design.md §2.1 (and 2.6 for arch "transformer") tensor names -> shapes."""
    dim, hid, V = p["dim"], p["hidden_dim"], p["vocab_size"]
    kvw = p["n_attn_kv_heads"] * (dim // p["n_attn_heads"])
    e = {"embed_tokens.weight": (V, dim), "layer_norm.weight": (dim,)}
    if not p["tie_embeddings"]:
        e["output_projection.weight"] = (V, dim)

    def swiglu(pre, hidden):
        e[pre + "fc1.weight"] = (hidden, dim)
        e[pre + "gate.weight"] = (hidden, dim)
        e[pre + "fc2.weight"] = (dim, hidden)

    def block(pre, mixer):
        e[pre + "mixer_layer_norm.weight"] = (dim,)
        e[pre + "final_layer_norm.weight"] = (dim,)
        if not p.get("n_experts"):
            swiglu(pre + "ffn.", hid)
        else:  # docs/design.md §2.1, mixture of experts
            e[pre + "ffn.router.weight"] = (p["n_experts"], dim)
            for x in range(p["n_experts"]):
                swiglu(pre + f"ffn.experts.{x}.", p["expert_hidden_dim"])
            if p["shared_expert_hidden_dim"]:
                swiglu(pre + "ffn.shared.", p["shared_expert_hidden_dim"])
        for n, shape in mixer.items():
            e[pre + "mixer." + n + ".weight"] = shape

    if p["arch"] == "transformer":
        for i in range(p["n_layers"]):
            block(f"layers.{i}.", {"q_proj": (dim, dim), "k_proj": (kvw, dim), "v_proj": (kvw, dim),
                                   "out_proj": (dim, dim)})
        return e
    self_mixer = {n: (dim, dim) for n in ("q_proj", "k_proj", "v_proj", "out_proj")}
    if p["sliding_window"] is None:
        self_mixer["g_proj"] = (dim, dim)
        self_mixer["gt_proj"] = (p["n_self_heads"], dim)
    for i in range(p["n_self_layers"]):
        block(f"self_decoder.layers.{i}.", self_mixer)
    e["cross_decoder.kv_layer_norm.weight"] = (dim,)
    e["cross_decoder.k_proj.weight"] = (kvw, dim)
    e["cross_decoder.v_proj.weight"] = (kvw, dim)
    for i in range(p["n_layers"] - p["n_self_layers"]):
        block(f"cross_decoder.layers.{i}.", {"q_proj": (dim, dim), "out_proj": (dim, dim)})
    return e


# ------------------------------------------------------------------------------- state dict
def load_state_dict(path, state_key=None):
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle.UnpicklingError and friends: refuse, never fall back
        hint = ""
        if "operand 71" in str(exc):  # BINFLOAT: torch < 2.0's weights_only loader has no floats
            hint = (" (this torch's weights_only loader cannot read pickled Python floats, e.g. an "
                    "optimizer's lr: save only the state dict, or use torch >= 2.0)")
        raise ConvertError(f"{path}: not loadable with weights_only=True (only tensors and plain "
                           f"containers are accepted; extract the state dict first){hint}: {exc}") from None

    def is_state_dict(d):
        return isinstance(d, dict) and d and all(isinstance(k, str) and torch.is_tensor(v) for k, v in d.items())

    keys = (state_key,) if state_key else STATE_KEYS
    for _ in range(4):
        if is_state_dict(obj):
            return obj
        if not isinstance(obj, dict):
            break
        for k in keys:
            if k in obj and isinstance(obj[k], dict):
                obj = obj[k]
                break
        else:
            # a state dict with a few non-tensor entries (e.g. "_metadata", version ints)
            tensors = {k: v for k, v in obj.items() if isinstance(k, str) and torch.is_tensor(v)}
            if len(tensors) >= 2:
                dropped = sorted(k for k in obj if k not in tensors)
                note(f"ignoring non-tensor entries of the state dict: {dropped}")
                return tensors
            break
    raise ConvertError(f"{path}: no state dict found (looked under {list(keys)})")


def strip_prefixes(sd):
    out = {}
    for name, t in sd.items():
        new = name
        while True:
            for pre in PREFIXES:
                if new.startswith(pre):
                    new = new[len(pre):]
                    break
            else:
                break
        if new in out:
            raise ConvertError(f"two tensors map to {new!r} after stripping prefixes")
        out[new] = t
    n = sum(1 for a, b in zip(sd, out) if a != b)
    if n:
        note(f"stripped wrapper prefixes from {n} tensor names")
    return out


def rename_llama_ffn(sd):
    """The Llama / Qwen-MoE FFN names under any layer prefix -> ours (see the module docstring)."""
    out, renamed = {}, 0
    for name, t in sd.items():
        new = name
        head, sep, rest = name.partition("mlp.")
        if sep and (head == "" or head.endswith(".")):
            parts = rest.split(".")
            if rest == "shared_expert_gate.weight":
                raise ConvertError(f"{name}: a sigmoid gate on the shared expert (Qwen2-MoE) is not part of "
                                   "docs/design.md §2.2's mixture of experts; this model cannot be converted")
            if rest == "gate.weight":
                new = head + "ffn.router.weight"
            elif len(parts) == 2 and parts[0] in LLAMA_FFN and parts[1] == "weight":
                new = head + f"ffn.{LLAMA_FFN[parts[0]]}.weight"
            elif len(parts) == 4 and parts[0] == "experts" and parts[1].isdigit() and parts[2] in LLAMA_FFN \
                    and parts[3] == "weight":
                new = head + f"ffn.experts.{int(parts[1])}.{LLAMA_FFN[parts[2]]}.weight"
            elif len(parts) == 3 and parts[0] == "shared_expert" and parts[1] in LLAMA_FFN and parts[2] == "weight":
                new = head + f"ffn.shared.{LLAMA_FFN[parts[1]]}.weight"
        if new in out:
            raise ConvertError(f"two tensors map to {new!r} (ours and the Llama/Qwen-MoE name)")
        renamed += new != name
        out[new] = t
    if renamed:
        note(f"renamed {renamed} Llama/Qwen-MoE FFN tensors (gate_proj -> fc1, up_proj -> gate, down_proj -> fc2, "
             "mlp.gate -> ffn.router)")
    return out


def convert_state_dict(sd, raw_params, dtype="keep", strict=False):
    """Returns (tensors by the names of docs/design.md §2.1, normalised params)."""
    sd = rename_llama_ffn(strip_prefixes(sd))
    p = normalise_params(raw_params, "output_projection.weight" in sd)
    want = expected_shapes(p)
    if p["tie_embeddings"] and "output_projection.weight" in sd:
        op, emb = sd["output_projection.weight"], sd.get("embed_tokens.weight")
        if emb is None or op.shape != emb.shape or not torch.equal(op, emb):
            raise ConvertError("tie_embeddings is true but output_projection.weight differs from embed_tokens.weight")
        note("dropping output_projection.weight (tied to embed_tokens.weight)")
        del sd["output_projection.weight"]
    missing = [n for n in want if n not in sd]  # checkpoint order: the first missing is named first
    if missing:
        raise ConvertError(f"{len(missing)} required tensors missing, the first {missing[0]!r}, e.g. {missing[:5]}")
    extra = sorted(set(sd) - set(want))
    if extra:
        if strict:
            raise ConvertError(f"{len(extra)} tensors are not part of the model: {extra[:10]}")
        note(f"dropping {len(extra)} tensors that are not model parameters: {extra}")
    out = {}
    for name, shape in want.items():
        t = sd[name]
        if tuple(t.shape) != shape:
            raise ConvertError(f"{name}: shape {tuple(t.shape)}, expected {shape} from params.json")
        if not t.is_floating_point():
            raise ConvertError(f"{name}: dtype {t.dtype} is not floating point")
        if not bool(torch.isfinite(t.float()).all()):
            raise ConvertError(f"{name}: has non-finite values")
        target = t.dtype if dtype == "keep" else OUT_DTYPES[dtype]
        if target not in ST_DTYPE:
            target = torch.float32
        out[name] = t.detach().to(target).contiguous()
    return out, p


# ------------------------------------------------------------------------------ safetensors
def write_safetensors(path, tensors, metadata=None):
    names = sorted(tensors)
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in names:
        t = tensors[name].contiguous().cpu()
        if t.dtype not in ST_DTYPE:
            raise ConvertError(f"{name}: cannot store dtype {t.dtype}")
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def read_safetensors(path):
    """name -> tensor (in the stored dtype). Plain parsing; nothing is unpickled."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen])
    data = memoryview(blob)[8 + hlen:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        dt = ST_TORCH[info["dtype"]]
        buf = bytearray(data[s:e])
        if dt == torch.bfloat16:
            t = torch.frombuffer(buf, dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(buf, dtype=dt)
        out[name] = t.reshape(info["shape"])
    return out


def convert(checkpoint, params_path, out_dir, dtype="keep", tokenizer=None, state_key=None, strict=False):
    with open(params_path) as f:
        raw = json.load(f)
    sd = load_state_dict(checkpoint, state_key)
    tensors, p = convert_state_dict(sd, raw, dtype, strict)
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(out_dir, "params.json"), "w") as f:
        json.dump(p, f, indent=2)
        f.write("\n")
    if tokenizer:
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            src = os.path.join(tokenizer, fn) if os.path.isdir(tokenizer) else None
            if src and os.path.exists(src):
                shutil.copyfile(src, os.path.join(out_dir, fn))
            elif fn == "tokenizer.json":
                raise ConvertError(f"--tokenizer {tokenizer}: no tokenizer.json there")
    n_params = sum(t.numel() for t in tensors.values())
    size = os.path.getsize(os.path.join(out_dir, "model.safetensors"))
    note(f"wrote {out_dir}: {len(tensors)} tensors, {n_params:,} parameters, "
         f"model.safetensors {size / 2**20:.2f} MiB")
    return tensors, p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="PyTorch state dict file (.pt/.pth/.bin)")
    ap.add_argument("--params", required=True, help="params.json of the checkpoint")
    ap.add_argument("--out", required=True, help="output model directory")
    ap.add_argument("--dtype", choices=("keep", "f32", "f16", "bf16"), default="keep")
    ap.add_argument("--tokenizer", help="directory with tokenizer.json (+ tokenizer_config.json) to copy")
    ap.add_argument("--state-key", help="key of the state dict inside the checkpoint dict")
    ap.add_argument("--strict", action="store_true", help="tensors that are not model parameters are an error")
    args = ap.parse_args()
    try:
        convert(args.checkpoint, args.params, args.out, args.dtype, args.tokenizer, args.state_key, args.strict)
    except ConvertError as exc:
        print(f"convert_checkpoint: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
