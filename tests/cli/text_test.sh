#!/usr/bin/env bash
# yoco-cli with text on the bundled model: tokenize/detokenize round trip, a greedy generation
# whose JSON text equals the detokenized ids, score --text, and the streamed output.
set -euo pipefail
CLI=$1
MODEL=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
py() { python3 -c "$@"; }

text="And God said, Let there be light: and there was light."
ids=$("$CLI" tokenize --model "$MODEL" --text "$text")
[[ -n "$ids" ]] || fail "tokenize printed nothing"
back=$("$CLI" detokenize --model "$MODEL" --tokens "$ids")
[[ "$back" == "$text" ]] || fail "detokenize(tokenize(x)) != x: '$back'"

out=$("$CLI" generate --model "$MODEL" --prompt "In the beginning God created" --max-tokens 24 --json)
toks=$(py 'import json,sys; print(",".join(map(str, json.loads(sys.argv[1])["tokens"])))' "$out")
gen_text=$(py 'import json,sys; print(json.loads(sys.argv[1])["text"])' "$out")
[[ "$("$CLI" detokenize --model "$MODEL" --tokens "$toks")" == "$gen_text" ]] || fail "JSON text is not the detokenized ids"
# The bundled model was trained on the KJV: a greedy continuation reads like it.
words=$(py 'import sys; t=sys.argv[1].lower(); print(sum(w in t for w in ["the","and","of","lord","god","he","unto"]))' "$gen_text")
(( words >= 2 )) || fail "continuation does not look like KJV English: $gen_text"

streamed=$("$CLI" generate --model "$MODEL" --prompt "In the beginning God created" --max-tokens 24)
[[ "$streamed" == "In the beginning God created$gen_text"* ]] || fail "streamed text differs: $streamed"

score=$("$CLI" score --model "$MODEL" --text "$text" --json)
n=$(py 'import json,sys; d=json.loads(sys.argv[1]); print(len(d["token_logprobs"]) + 1 == d["tokens"])' "$score")
[[ "$n" == True ]] || fail "score --text: token_logprobs should have tokens - 1 entries"
echo "text_test: all checks passed ($gen_text)"
