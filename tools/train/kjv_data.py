"""Shared data conventions of the KJV training scripts (see prepare_data.py).

A split file (train.txt / val.txt) holds books separated by one empty line; a book is its verses,
each followed by "\n". Training and evaluation encode each book on its own and append the
<|endoftext|> token, then concatenate the books in canonical order into one token stream.
"""
import os

EOS_TOKEN = "<|endoftext|>"


def read_books(path):
    """The books of a split file, each as its text (verses joined by "\n" with a trailing "\n")."""
    with open(path, encoding="ascii") as f:
        text = f.read()
    if not text.endswith("\n") or "\n\n\n" in text:
        raise ValueError(f"{path}: not a prepare_data.py split file")
    # split("\n\n") eats the trailing "\n" of every book but the last one; restore it.
    books = [b if b.endswith("\n") else b + "\n" for b in text.split("\n\n")]
    if any(not b.strip() for b in books):
        raise ValueError(f"{path}: empty book")
    return books


def encode_books(tokenizer, books):
    """One token stream: encode(book) + [eos] for each book, in order."""
    eos = tokenizer.token_to_id(EOS_TOKEN)
    if eos is None:
        raise ValueError(f"tokenizer has no {EOS_TOKEN}")
    ids = []
    for b in books:
        ids.extend(tokenizer.encode(b).ids)
        ids.append(eos)
    return ids


def load_tokenizer(path):
    from tokenizers import Tokenizer

    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    return Tokenizer.from_file(path)
