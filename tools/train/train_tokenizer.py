#!/usr/bin/env python3
"""Train the byte-level BPE tokenizer on the KJV training split.

    python3 tools/train/train_tokenizer.py --data /work/kjv-data --out /work/kjv-data/tokenizer \
        [--vocab-size 4096] [--style gpt2|qwen]

--style gpt2 (the default; kjv-yoco, kjv-yoco-u): ByteLevel pre-tokenizer (GPT-2 regex, no prefix
space) and decoder. --style qwen (kjv-yoco-moe): Qwen2's layout: NFC normalizer, Split with Qwen's
regex (Isolated) then ByteLevel(use_regex=false), ByteLevel decoder. Both: BPE over the 256 byte
symbols, one special token <|endoftext|> (id 0) used as both BOS and EOS. Trained only on
train.txt (the held-out books never influence it), one book per training "sequence", the same
text the model sees. Deterministic: single-threaded (RAYON_NUM_THREADS=1 is set before the
tokenizers package loads). Writes tokenizer.json and tokenizer_config.json.
"""
import argparse
import json
import os
import sys

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kjv_data import EOS_TOKEN, read_books  # noqa: E402

# Qwen2/2.5/3's split pattern, as their tokenizer.json spells it (Oniguruma syntax).
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="directory written by prepare_data.py")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--style", choices=("gpt2", "qwen"), default="gpt2")
    args = ap.parse_args()

    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    books = read_books(os.path.join(args.data, "train.txt"))
    tok = Tokenizer(models.BPE())
    if args.style == "qwen":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab_size,
        min_frequency=2,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(books, trainer=trainer, length=len(books))
    if tok.get_vocab_size() != args.vocab_size:
        print(f"note: vocabulary is {tok.get_vocab_size()} (asked {args.vocab_size})")
    os.makedirs(args.out, exist_ok=True)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": EOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
    }
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    sample = "In the beginning God created the heaven and the earth.\n"
    enc = tok.encode(sample)
    assert tok.decode(enc.ids) == sample, "byte-level round trip failed"
    print(f"vocab {tok.get_vocab_size()}, eos id {tok.token_to_id(EOS_TOKEN)}; "
          f"{sample!r} -> {len(enc.ids)} tokens {enc.tokens}")


if __name__ == "__main__":
    sys.exit(main())
