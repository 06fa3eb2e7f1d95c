#!/usr/bin/env python3
"""Extract the King James Bible from Debian's bible-kjv package and split it by book.

    python3 tools/train/prepare_data.py --out /work/kjv-data [--val-from 1Jn]

Runs `bible -f 'Genesis 1:1-Revelation 22:21'` (31,102 verses, one per line, each prefixed by
its reference such as "Ge1:1 "), strips the references and writes, into --out (a work directory,
never the repository):

  train.txt   books Genesis .. (the book before --val-from); one verse per line
  val.txt     books --val-from .. Revelation (default: 1 John, 2 John, 3 John, Jude, Revelation)
  books.json  [{"book": abbreviation, "split": "train"|"val", "verses": n, "chars": n}, ...]

In both text files a book is its verses, each followed by "\n", and an empty line separates
books (so "\n\n" never occurs inside a book). The tokenizing convention used for training and
evaluation (tools/train/train_yoco.py) is: each book's text (verses joined by "\n", with a
trailing "\n") is encoded on its own and followed by the <|endoftext|> token.
"""
import argparse
import json
import os
import re
import subprocess
import sys

REF = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")
N_VERSES = 31102


def read_bible(cmd="bible"):
    out = subprocess.run([cmd, "-f", "Genesis 1:1-Revelation 22:21"], check=True,
                         stdout=subprocess.PIPE).stdout.decode("ascii")
    books = []  # [(abbrev, [verse text, ...])]
    for line in out.splitlines():
        m = REF.match(line)
        if not m:
            raise SystemExit(f"unexpected line from `bible`: {line[:80]!r}")
        book, text = m.group(1), m.group(4).strip()
        if not books or books[-1][0] != book:
            books.append((book, []))
        books[-1][1].append(" ".join(text.split()))
    n = sum(len(v) for _, v in books)
    if len(books) != 66 or n != N_VERSES:
        raise SystemExit(f"expected 66 books and {N_VERSES} verses, got {len(books)} and {n}")
    return books


def book_text(verses):
    return "".join(v + "\n" for v in verses)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="work directory for the data files")
    ap.add_argument("--val-from", default="1Jn",
                    help="first validation book, as `bible` abbreviates it (default 1Jn = 1 John)")
    ap.add_argument("--bible", default="bible", help="the bible-kjv command")
    args = ap.parse_args()

    books = read_bible(args.bible)
    names = [b for b, _ in books]
    if args.val_from not in names:
        raise SystemExit(f"--val-from {args.val_from!r} is not one of {names}")
    cut = names.index(args.val_from)
    os.makedirs(args.out, exist_ok=True)
    meta = []
    for split, part in (("train", books[:cut]), ("val", books[cut:])):
        with open(os.path.join(args.out, f"{split}.txt"), "w", encoding="ascii", newline="\n") as f:
            f.write("\n".join(book_text(v) for _, v in part))
        for b, v in part:
            meta.append({"book": b, "split": split, "verses": len(v), "chars": len(book_text(v))})
    with open(os.path.join(args.out, "books.json"), "w") as f:
        json.dump(meta, f, indent=1)
    for split in ("train", "val"):
        rows = [m for m in meta if m["split"] == split]
        print(f"{split}: {len(rows)} books ({rows[0]['book']}..{rows[-1]['book']}), "
              f"{sum(m['verses'] for m in rows)} verses, {sum(m['chars'] for m in rows)} chars")


if __name__ == "__main__":
    sys.exit(main())
