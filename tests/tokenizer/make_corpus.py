#!/usr/bin/env python3
"""Deterministic mixed-script corpus for the tokenizer tests (Python standard library only).

Writes, into --out:
  corpus.jsonl        one {"text": ...} per document, valid UTF-8: English, code, CJK, Arabic,
                      Hindi, Cyrillic, Greek, Thai, emoji (ZWJ sequences, flags, skin tones,
                      variation selectors), whitespace runs (spaces, tabs, \\n, \\r\\n, NBSP,
                      U+3000, U+2028, \\v, \\f, U+0085, and U+180E, which is not one), long digit runs, punctuation, special
                      token text ("<|endoftext|>", near misses), non-special added tokens, and
                      text that NFC changes (decomposed accents, Hangul jamo, combining marks out
                      of canonical order, singletons, CJK compatibility ideographs, Arabic harakat).
  corpus_bytes.jsonl  one {"hex": ...} per document that is NOT valid UTF-8 (stray
                      continuation bytes, truncated sequences, overlongs, surrogates, F5..FF):
                      only our tokenizer can take these (Python str cannot hold them).
The valid part is at least --min-bytes (default 1.1 MB) of UTF-8.
"""
import argparse
import json
import os
import random

WORDS = (
    "the of and to in is was he for it with as his on be at by had are but from or have an they which "
    "one you were her all she there would their we him been has when who will more no if out so said "
    "what up its about into than them can only other new some could time these two may then do first "
    "any my now such like our over man me even most made after also did many before must through back "
    "years where much your way well down should because each just those people how too little state "
    "good very make world still own see men work long get here between both life being under never day "
    "same another know while last might us great old year off come since against go came right used take "
    "tokenizer byte-level merges vocabulary prefill decode retention cache transformer gradient kernel "
    "Hello World Python CUDA GPU YOCO JSON HTTP naïve café résumé coöperate façade Zürich São Paulo "
    "iPhone McDonald O'Neill x86_64 e-mail self-decoder cross-decoder state-of-the-art"
).split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL", "'D", "’s",
                "'\u017f", "'\u212a", "'\uff33"]  # long s and Kelvin sign (case-fold to s, k), fullwidth S
PUNCT = [".", ",", ";", ":", "!", "?", "...", "!!", "?!", "—", "–", "-", "(", ")", "[", "]", "\"", "'",
         "«", "»", "“", "”", "‘", "’", "…", "·", "•", "§", "¶", "†", "©", "®", "™", "°", "±", "×", "÷",
         "€", "£", "¥", "$", "%", "&", "@", "#", "*", "/", "\\", "|", "~", "^", "`", "<", ">", "=", "+"]

CJK = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴"
HIRAGANA = "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんがぎぐげござじずぜぞだぢづでどばびぶべぼぱぴぷぺぽゃゅょっー"
KATAKANA = "アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワヲンガギグゲゴザジズゼゾダヂヅデドバビブベボパピプペポャュョッー"
HANGUL_WORDS = ["안녕하세요", "감사합니다", "토크나이저", "한국어", "문장", "테스트", "데이터", "모델", "서버", "캐시",
                "사랑", "학교", "컴퓨터", "프로그램", "사람", "시간", "오늘", "내일", "세계", "정말"]
ARABIC_WORDS = ["مرحبا", "بالعالم", "اللغة", "العربية", "نموذج", "الترميز", "السلام", "عليكم", "كتاب", "مدرسة",
                "الحاسوب", "بيانات", "شكرا", "جميل", "الْعَرَبِيَّةُ", "مُحَمَّد", "٠١٢٣٤٥٦٧٨٩", "ﷺ", "ـــ"]
HINDI_WORDS = ["नमस्ते", "दुनिया", "हिन्दी", "भाषा", "मॉडल", "टोकनाइज़र", "क्षत्रिय", "प्रत्येक", "विद्यालय", "धन्यवाद",
               "संस्कृत", "श्री", "ज्ञान", "०१२३४५६७८९", "कृपया"]
CYRILLIC_WORDS = ["Привет", "мир", "токенизатор", "данные", "модель", "Москва", "ещё", "объём", "Ёлка", "съешь"]
GREEK_WORDS = ["Καλημέρα", "κόσμε", "λόγος", "ἀλήθεια", "Ωμέγα", "φιλοσοφία", "ς", "Σίσυφος"]
THAI_WORDS = ["สวัสดี", "ภาษาไทย", "ครับ", "ขอบคุณ", "โมเดล", "กรุงเทพมหานคร"]
EMOJI = ["😀", "😂", "🥲", "🤖", "🚀", "🔥", "✨", "❤️", "❤", "👍", "👍🏽", "👍🏿", "👋🏻", "🎉", "🧠", "💾",
         "👨‍👩‍👧‍👦", "👩‍💻", "🧑🏽‍🚀", "🏳️‍🌈", "🏴‍☠️", "👁️‍🗨️", "🇺🇸", "🇯🇵", "🇩🇪", "🇧🇷", "🇮🇳", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
         "1️⃣", "#️⃣", "©️", "☕", "⌚", "♻️", "🀄", "𝕏", "𝓗𝓮𝓵𝓵𝓸", "𓀀", "🫠", "🫶🏼"]
SPACES = [" ", "  ", "   ", "    ", "        ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n",
          " \n", "\t\n", "  \n  ", "\u00a0", "\u3000", "\u2028", "\u2029", "\u2003", "\u202f", "\x0b", "\x0c",
          "\x85", "\u200b", "\u1680", "\x1c", "\x1d\x1e\x1f", "\u180e", " \u180e "]
SPECIAL_TEXT = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "<|endoftext|", "<|endof",
                "|endoftext|>", "<|endoftext|><|endoftext|>", "<|im_start|>user\n", "<think></think>",
                " <|endoftext|> ", "<|ENDOFTEXT|>", "<<|endoftext|>>", "<thinking>", "<tool_call>",
                "</tool_call>", "<tool_call", "<cafe\u0301>", "<caf\u00e9>", "<cafe>"]
# Text whose NFC differs from it: what a Qwen2-style normalizer must change, and how.
NFC_WORDS = ["cafe\u0301", "re\u0301sume\u0301", "nai\u0308ve", "Zu\u0308rich", "A\u030angstro\u0308m",
             "\u212b", "\u2126", "\u1e0b\u0323", "d\u0307\u0323", "q\u0307\u0323", "a\u0301\u0323",
             "Vie\u0323\u0302t Nam", "Tie\u0302\u0301ng Vie\u0323\u0302t", "o\u031b\u0300", "\u1ea1\u0306",
             "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165", "\uac00\u11a8",
             "\u1100\u1161", "\u1161\u11a8", "\u11a8", "\uf900\uf901", "\U0002f800", "\u0958\u0959",
             "\u0915\u093c", "\u0628\u0651\u064e", "\u0645\u064f\u0651", "\u05e9\u05c1\u05bc",
             "\u00c5", "\u0041\u030a", "\u0041\u030a\u0301", "e\u0301\u0301\u0301", "\u0301start",
             "x\u0345\u0313", "\u03b1\u0313\u0301\u0345", "\u1f00\u0301", "\u0344", "\u0340\u0341",
             "\u0374;\u037e\u0387", "\u2000\u2001", "\u2329\u232a", "\u1b05\u1b35", "\u0b47\u0b3e",
             "\u0dd9\u0dcf", "\u0e40\u0e01", "\u00e9\u0300", "\u01d5", "u\u0308\u0304", "\u1e9b\u0323",
             "\U0001d15e", "\U0001d157\U0001d165", "\U00011099\U000110ba", "\u0627\u0653", "\u0622",
             "\U0001f44d\u0301", "1\ufe0f\u20e3", "\u0300", "\u0300\u0300"]

CODE = [
    'def encode(self, text: str) -> list[int]:\n    """Encode text."""\n    return [self.vocab[t] for t in text.split()]\n',
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "#include <vector>\n#include \"tokenizer/tokenizer.h\"\n\nint main(int argc, char** argv) {\n  std::vector<int32_t> ids;\n  return 0;\n}\n",
    '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}, "merges": ["a b"], "added_tokens": []}\n',
    "SELECT id, name FROM users WHERE created_at >= '2024-01-01' AND score > 0.75 ORDER BY id DESC;\r\n",
    "const f = async (x) => { await fetch(`/api/v1/items/${x}?limit=100&offset=0`); };\n",
    "    if x == 0:\n        raise ValueError(f\"bad value: {x!r}\")  # comment\n    else:\n        pass\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "<html>\n  <body class=\"main\">\n    <p>Hello &amp; welcome</p>\n  </body>\n</html>\n",
    "$ cmake --build build -j2 --target yoco_tokenizer && ./build/tests/tokenizer_test --gtest_filter='*'\n",
    "x = 0x7FFFFFFF; y = 1e-5; z = 3.14159265358979; w = 1_000_000; v = -42;\n",
    "diff --git a/a.txt b/a.txt\n@@ -1,3 +1,4 @@\n-old line\n+new line\n+another\n",
    "\t\t\treturn nullptr;   \n\n\n}\n",
]


def rand_digits(rng, lo, hi):
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(lo, hi)))


def english(rng):
    out = []
    for _ in range(rng.randint(3, 30)):
        w = rng.choice(WORDS)
        if rng.random() < 0.15:
            w = w.capitalize()
        if rng.random() < 0.05:
            w = w.upper()
        out.append(w)
        if rng.random() < 0.08:
            out[-1] += rng.choice(CONTRACTIONS)
        if rng.random() < 0.12:
            out[-1] += rng.choice(PUNCT)
    return " ".join(out) + rng.choice([".", "!", "?", ".\n", "\n\n", " "])


def cjk(rng):
    kind = rng.randrange(3)
    if kind == 0:
        s = "".join(rng.choice(CJK) for _ in range(rng.randint(5, 60)))
        return s + rng.choice(["。", "，", "！", "？", "、", "「", "」", "\n"])
    if kind == 1:
        s = "".join(rng.choice(HIRAGANA + KATAKANA + CJK[:200]) for _ in range(rng.randint(5, 50)))
        return s + rng.choice(["。", "、", "！", "ー"])
    return " ".join(rng.choice(HANGUL_WORDS) for _ in range(rng.randint(2, 12))) + rng.choice([".", "?", "\n"])


def other_scripts(rng):
    pools = [ARABIC_WORDS, HINDI_WORDS, CYRILLIC_WORDS, GREEK_WORDS, THAI_WORDS]
    pool = rng.choice(pools)
    sep = "" if pool is THAI_WORDS and rng.random() < 0.5 else " "
    return sep.join(rng.choice(pool) for _ in range(rng.randint(2, 15))) + rng.choice([".", "،", "।", "؟", "\n", " "])


def emoji(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        parts.append(rng.choice(EMOJI) * rng.choice([1, 1, 1, 2, 3]))
        if rng.random() < 0.4:
            parts.append(rng.choice([" ", "", "!", " and ", "\n"]))
        if rng.random() < 0.2:
            parts.append(rng.choice(WORDS))
    return "".join(parts)


def whitespace(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        parts.append(rng.choice(SPACES) * rng.choice([1, 1, 2, 3, 7, 20]))
        parts.append(rng.choice(WORDS + ["", "", "x", "42", "。"]))
    return "".join(parts)


def numbers(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return rand_digits(rng, 1, 40)
    if kind == 1:
        return f"{rng.randint(0, 10**9):,}.{rand_digits(rng, 1, 6)}"
    if kind == 2:
        return f"{rng.randint(1900, 2100)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"
    if kind == 3:
        return "".join(rng.choice("０１２３４５６７８９") for _ in range(rng.randint(1, 10)))  # fullwidth
    if kind == 4:
        return "".join(rng.choice("٠١٢٣٤٥٦٧٨٩") for _ in range(rng.randint(1, 10))) + " " + "Ⅻ½¾²³"
    return "+1 (555) 010-" + rand_digits(rng, 4, 4) + " v" + rand_digits(rng, 1, 2) + "." + rand_digits(rng, 1, 3)


def nfc(rng):
    sep = rng.choice([" ", "", "\n", ", ", "'s "])
    return sep.join(rng.choice(NFC_WORDS + WORDS[-24:]) for _ in range(rng.randint(1, 12))) + rng.choice(["", ".", " "])


def punctuation(rng):
    return "".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 12))) + rng.choice(["", " ", "\n"])


def special(rng):
    return rng.choice(SPECIAL_TEXT) + rng.choice(["", " ", "\n", "Hello", "x"])


GENRES = [(english, 30), (lambda r: r.choice(CODE), 12), (cjk, 10), (other_scripts, 10), (emoji, 6),
          (whitespace, 8), (numbers, 8), (punctuation, 5), (special, 4), (nfc, 6)]


def document(rng):
    target = rng.choice([80, 200, 400, 800, 1500, 3000])
    parts, size = [], 0
    weights = [w for _, w in GENRES]
    while size < target:
        gen = rng.choices([g for g, _ in GENRES], weights)[0]
        s = gen(rng)
        if rng.random() < 0.3:
            s += rng.choice(SPACES)
        parts.append(s)
        size += len(s.encode("utf-8"))
    return "".join(parts)


def long_documents(rng):
    """A few documents that stress long pieces (heap merge, regex backtracking)."""
    return [
        " " * 5000 + "end",
        "\n" * 3000 + "x" + "\t" * 2000,
        rand_digits(rng, 5000, 5000),
        "a" * 8000,
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6000)),
        "".join(rng.choice(CJK) for _ in range(3000)),
        "!" * 3000 + "?" * 100,
        "👍🏽" * 500,
        "ab " * 2000 + "   \n  ",
        "".join(rng.choice(HINDI_WORDS) for _ in range(400)),
        "e" + "\u0301\u0323" * 1500,  # one long run of combining marks for NFC to reorder
        "\u1100\u1161\u11a8" * 1000,
    ]


INVALID_BYTES = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xed\xbf\xbf",
                 b"\xf5\x80\x80\x80", b"\xff", b"\xfe", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xf0\x9f\x98",
                 b"\xc3", b"\xf0\x9f", b"\x80\x80\x80\x80", b"\xe2\x28\xa1", b"\xf8\x88\x80\x80\x80"]


def invalid_document(rng, base):
    data = bytearray(base.encode("utf-8"))
    for _ in range(rng.randint(1, 6)):
        pos = rng.randint(0, len(data))
        bad = rng.choice(INVALID_BYTES) if rng.random() < 0.7 else bytes([rng.randint(0x80, 0xFF)])
        data[pos:pos] = bad
    if rng.random() < 0.3:  # cut inside a character at the end
        tail = "é😀中".encode("utf-8")
        data += tail[: rng.choice([1, 3, 4, 5, 7])]
    return bytes(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20240501)
    ap.add_argument("--min-bytes", type=int, default=1_100_000)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    docs = long_documents(rng)
    total = sum(len(d.encode("utf-8")) for d in docs)
    while total < args.min_bytes:
        d = document(rng)
        docs.append(d)
        total += len(d.encode("utf-8"))
    with open(os.path.join(args.out, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    with open(os.path.join(args.out, "corpus_bytes.jsonl"), "w", encoding="utf-8") as f:
        for i in range(300):
            b = invalid_document(rng, document(rng) if i % 3 else rng.choice(docs[10:])[:500])
            f.write(json.dumps({"hex": b.hex()}) + "\n")
    print(f"corpus: {len(docs)} documents, {total} bytes of UTF-8; 300 invalid-UTF-8 documents")


if __name__ == "__main__":
    main()
