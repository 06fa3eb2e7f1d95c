#!/usr/bin/env python3
"""Writes the GGUF (LLaMA architecture, random weights) of one of our Transformer checkpoints'
sizes, for llama.cpp's llama-bench (bench/README.md, "Peers: llama.cpp on the same Transformer").

  write_gguf.py MODEL_DIR OUT.gguf --dtype f32|bf16

MODEL_DIR is a model written by `engine_bench --preset P --transformer --write-model DIR`: its
params.json gives every size (dim, layers, FFN, heads, KV heads, vocab, RoPE theta, norm eps) and
its safetensors header whether the output head is tied to the embedding, so both engines hold
exactly the same matrices. The values are random (speed does not depend on them); the vocabulary
is placeholder pieces with the 256 byte tokens llama.cpp's SentencePiece loader requires.
Uses the `gguf` package (installed by bench/peers/peers.sh from the pinned llama.cpp sources).
"""
import argparse
import json
import struct
import sys
from pathlib import Path

import gguf
import numpy as np


def checkpoint_tensor_names(model_dir: Path) -> set:
    names = set()
    for f in sorted(model_dir.glob("*.safetensors")):
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            names.update(k for k in json.loads(fh.read(n)) if k != "__metadata__")
    return names


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    p = json.loads((a.model_dir / "params.json").read_text())
    if p.get("arch") != "transformer":
        sys.exit(f"{a.model_dir}: arch {p.get('arch')!r}, expected a Transformer (engine_bench --transformer)")
    dim, layers, hidden = p["dim"], p["n_layers"], p["hidden_dim"]
    heads, kv_heads, vocab = p["n_attn_heads"], p["n_attn_kv_heads"], p["vocab_size"]
    head_dim = dim // heads
    names = checkpoint_tensor_names(a.model_dir)
    tied = p.get("tie_embeddings", not any(n.startswith("output") for n in names))

    w = gguf.GGUFWriter(str(a.out), "llama")
    w.add_name(f"yoco-peer-{a.model_dir.name}")
    w.add_context_length(int(p.get("max_seq_len", 8192)))
    w.add_embedding_length(dim)
    w.add_block_count(layers)
    w.add_feed_forward_length(hidden)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(p.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(p.get("norm_eps", 1e-6)))
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if a.dtype == "f32" else gguf.LlamaFileType.MOSTLY_BF16)

    # SentencePiece-style vocabulary: <unk> <s> </s>, the 256 byte pieces, then placeholders.
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    tokens += [f"t{i}".encode() for i in range(len(tokens), vocab)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    types += [gguf.TokenType.NORMAL] * (vocab - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens[:vocab])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types(types[:vocab])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    rng = np.random.default_rng(a.seed)

    def matrix(rows: int, cols: int):
        x = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)
        if a.dtype == "f32":
            return x, None
        return gguf.quants.quantize(x, gguf.GGMLQuantizationType.BF16), gguf.GGMLQuantizationType.BF16

    def add(name: str, t):
        data, raw = t
        w.add_tensor(name, data, raw_dtype=raw)

    def norm(n: int):
        return np.ones(n, dtype=np.float32), None

    add("token_embd.weight", matrix(vocab, dim))
    for i in range(layers):
        add(f"blk.{i}.attn_norm.weight", norm(dim))
        add(f"blk.{i}.attn_q.weight", matrix(heads * head_dim, dim))
        add(f"blk.{i}.attn_k.weight", matrix(kv_heads * head_dim, dim))
        add(f"blk.{i}.attn_v.weight", matrix(kv_heads * head_dim, dim))
        add(f"blk.{i}.attn_output.weight", matrix(dim, heads * head_dim))
        add(f"blk.{i}.ffn_norm.weight", norm(dim))
        add(f"blk.{i}.ffn_gate.weight", matrix(hidden, dim))
        add(f"blk.{i}.ffn_up.weight", matrix(hidden, dim))
        add(f"blk.{i}.ffn_down.weight", matrix(dim, hidden))
    add("output_norm.weight", norm(dim))
    if not tied:
        add("output.weight", matrix(vocab, dim))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{a.out}: llama, dim {dim}, {layers} layers, FFN {hidden}, heads {heads}/{kv_heads}, vocab {vocab}, "
          f"{'tied' if tied else 'untied'} output, {a.dtype}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
