#!/usr/bin/env python3
"""Reference data for tests/unit/tokenizer_test.cc, made with the real libraries.

  make_reference.py --out DIR [--python VENV/bin/python3]   (VENV: CMake's YOCO_VENV)

1. writes the corpus (make_corpus.py) into DIR;
2. trains a small byte-level BPE with Hugging Face `tokenizers` (vocab 2000, special tokens
   <|endoftext|>, <|im_start|>, <|im_end|>, non-special added token <think>) and writes
   two tokenizer.json variants:
     DIR/hf/        Llama-3-style: Sequence[Split(regex, Isolated), ByteLevel(use_regex=false)],
                    merges as ["a", "b"] pairs
     DIR/hf_gpt2/   GPT-2-style: ByteLevel(add_prefix_space=true, use_regex=true), merges as
                    "a b" strings, ignore_merges=true, <|im_end|> with lstrip/rstrip, <think>
                    single_word
   and a third, trained on its own with Qwen2's layout (the one Qwen2/2.5/3's tokenizer.json
   has):
     DIR/hf_qwen/   NFC normalizer, Sequence[Split(Qwen's regex, Isolated, invert false),
                    ByteLevel(add_prefix_space=false, use_regex=false)], ByteLevel decoder; added
                    tokens special (<|endoftext|>, <|im_start|>, <|im_end|>) and not:
                    <tool_call>, </tool_call> (normalized false, as Qwen's) and <cafe + U+0301>
                    (normalized true: matched as its NFC, "<café>", in the normalized text)
3. derives a tiktoken rank table from the same merges (DIR/tiktoken/yoco.tiktoken) with
   cl100k_base's pattern, special tokens after a one-id hole (as cl100k has);
4. encodes every corpus document with `tokenizers` and `tiktoken`, with special tokens as
   plain text and as specials, into DIR/<variant>/expected.jsonl (one JSON line per document:
   {"plain": ids, "special": ids[, "decoded": text][, "decoded_plain": text]}, the decoded texts
   only where the library's decode of those ids differs from the document).

Runs under --python when that interpreter exists (the virtualenv scripts/setup.sh makes).
Without `tokenizers`/`tiktoken` it writes DIR/SKIPPED (the C++ test then skips and says why),
except under CI=true, where that is an error. Skips the work when DIR is up to date.
"""
import argparse
import base64
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))  # the source tree
# Llama-3's split pattern (Oniguruma syntax as tokenizers reads it).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2/2.5/3's split pattern (their tokenizer.json's, Oniguruma syntax).
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# cl100k_base's pattern as tiktoken ships it (possessive quantifiers, fancy-regex syntax).
CL100K_PATTERN = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"
                  r"|\s++$|\s*[\r\n]|\s+(?!\S)|\s")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 2000


def reexec_under(python):
    # Compared by path, not realpath: a virtualenv's python is a symlink to the base interpreter.
    if python and os.path.exists(python) and os.path.abspath(python) != os.path.abspath(sys.executable) \
            and not os.environ.get("YOCO_TOKENIZER_REEXEC"):
        env = dict(os.environ, YOCO_TOKENIZER_REEXEC="1")
        os.execve(python, [python, os.path.abspath(__file__)] + sys.argv[1:], env)


def venv_hint(python):
    """How to make the virtualenv CMake's YOCO_VENV names (the --python given is VENV/bin/python3)."""
    setup = os.path.join(SOURCE_DIR, "scripts", "setup.sh")
    if not python:
        return f"Run {setup} (it makes build/.venv with tokenizers and tiktoken)."
    venv = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    missing = "" if os.path.exists(python) else f"The virtualenv {venv} (CMake's YOCO_VENV) is missing. "
    return f"{missing}Create it with: {setup} --venv {venv}"


def stamp(out):
    import tokenizers
    import tiktoken
    h = hashlib.sha256()
    for name in ("make_reference.py", "make_corpus.py"):
        with open(os.path.join(HERE, name), "rb") as f:
            h.update(f.read())
    h.update(f"tokenizers={tokenizers.__version__} tiktoken={tiktoken.__version__}".encode())
    return h.hexdigest()


def train(texts):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers, Regex
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens(["<think>"])
    return json.loads(tok.to_str())


def train_qwen(texts):
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers, Regex
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                    AddedToken("</tool_call>", special=False, normalized=False),
                    AddedToken("<cafe\u0301>", special=False, normalized=True)])
    spec = json.loads(tok.to_str())
    assert spec["normalizer"] == {"type": "NFC"}, spec["normalizer"]
    return spec


def gpt2_variant(spec):
    spec = json.loads(json.dumps(spec))
    spec["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    spec["model"]["ignore_merges"] = True
    spec["model"]["merges"] = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in spec["model"]["merges"]]
    for t in spec["added_tokens"]:
        if t["content"] == "<|im_end|>":
            t["lstrip"] = True
            t["rstrip"] = True
        if t["content"] == "<think>":
            t["single_word"] = True
    return spec


def byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def tiktoken_ranks(spec):
    dec = byte_decoder()
    ranks = {bytes([b]): b for b in range(256)}
    for m in spec["model"]["merges"]:
        left, right = m if not isinstance(m, str) else m.split(" ")
        token = bytes(dec[c] for c in left) + bytes(dec[c] for c in right)
        if token not in ranks:
            ranks[token] = len(ranks)
    hole = len(ranks)  # one unused id before the special tokens, as cl100k_base has
    specials = {s: hole + 1 + i for i, s in enumerate(SPECIALS)}
    return ranks, specials


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)


def encode_hf(tok_dir, texts):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    with open(os.path.join(tok_dir, "expected.jsonl"), "w", encoding="utf-8") as f:
        for text in texts:
            tok.encode_special_tokens = True
            plain = tok.encode(text, add_special_tokens=False).ids
            tok.encode_special_tokens = False
            special = tok.encode(text, add_special_tokens=False).ids
            row = {"plain": plain, "special": special}
            decoded = tok.decode(special, skip_special_tokens=False)
            if decoded != text:
                row["decoded"] = decoded
            decoded = tok.decode(plain, skip_special_tokens=False)
            if decoded != text:  # add_prefix_space adds a space: not a round trip
                row["decoded_plain"] = decoded
            f.write(json.dumps(row) + "\n")


def encode_tiktoken(tok_dir, texts, ranks, specials):
    import tiktoken
    enc = tiktoken.Encoding(name="yoco_test", pat_str=CL100K_PATTERN, mergeable_ranks=ranks, special_tokens=specials)
    with open(os.path.join(tok_dir, "expected.jsonl"), "w", encoding="utf-8") as f:
        for text in texts:
            special = enc.encode(text, allowed_special="all")
            row = {"plain": enc.encode_ordinary(text), "special": special}
            decoded = enc.decode(special)
            if decoded != text:
                row["decoded"] = decoded
            f.write(json.dumps(row) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--python", help="interpreter with tokenizers + tiktoken (used when it exists)")
    args = ap.parse_args()
    reexec_under(args.python)
    os.makedirs(args.out, exist_ok=True)
    skipped = os.path.join(args.out, "SKIPPED")
    try:
        import tokenizers  # noqa: F401
        import tiktoken  # noqa: F401
    except ImportError as e:
        msg = f"python packages missing under {sys.executable}: {e}. " + venv_hint(args.python)
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            print("make_reference.py: " + msg, file=sys.stderr)
            return 1
        with open(skipped, "w") as f:
            f.write(msg + "\n")
        print("make_reference.py: SKIPPED: " + msg)
        return 0
    if os.path.exists(skipped):
        os.remove(skipped)
    digest = stamp(args.out)
    stamp_path = os.path.join(args.out, "STAMP")
    if os.path.exists(stamp_path) and open(stamp_path).read().strip() == digest:
        print("make_reference.py: reference data up to date in " + args.out)
        return 0
    if os.path.exists(stamp_path):
        os.remove(stamp_path)

    subprocess.run([sys.executable, os.path.join(HERE, "make_corpus.py"), "--out", args.out], check=True)
    with open(os.path.join(args.out, "corpus.jsonl"), encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]

    spec = train(texts)
    config = {"bos_token": "<|endoftext|>", "eos_token": {"content": "<|endoftext|>"}, "add_bos_token": False}
    for name, variant in (("hf", spec), ("hf_gpt2", gpt2_variant(spec))):
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        write_json(os.path.join(d, "tokenizer.json"), variant)
        write_json(os.path.join(d, "tokenizer_config.json"), config)
        encode_hf(d, texts)

    # The Qwen2-style tokenizer needs text that NFC changes, or its comparison proves nothing.
    import unicodedata
    changed = sum(unicodedata.normalize("NFC", t) != t for t in texts)
    if changed < len(texts) // 5:
        print(f"make_reference.py: only {changed} documents change under NFC", file=sys.stderr)
        return 1
    d = os.path.join(args.out, "hf_qwen")
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "tokenizer.json"), train_qwen(texts))
    write_json(os.path.join(d, "tokenizer_config.json"), config)
    encode_hf(d, texts)

    ranks, specials = tiktoken_ranks(spec)
    d = os.path.join(args.out, "tiktoken")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "yoco.tiktoken"), "w") as f:
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(base64.b64encode(token).decode() + " " + str(rank) + "\n")
    write_json(os.path.join(d, "tokenizer_config.json"),
               {"tiktoken_pattern": CL100K_PATTERN, "special_tokens": specials,
                "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"})
    encode_tiktoken(d, texts, ranks, specials)

    with open(stamp_path, "w") as f:
        f.write(digest + "\n")
    print(f"make_reference.py: wrote {len(texts)} documents ({changed} changed by NFC) x 4 tokenizers to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
