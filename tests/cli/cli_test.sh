#!/usr/bin/env bash
# yoco-cli end to end: random model, info, score and generate (JSON), and bad input that must
# fail with exit code 2 and a message naming the flag or field.
set -euo pipefail
CLI=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$CLI" make-random-model --preset tiny-swa --out "$dir/m" --seed 7 >/dev/null
"$CLI" info --model "$dir/m" | grep -q '"sliding_window":16' || fail "info does not show the config"

score=$("$CLI" score --model "$dir/m" --tokens 5,6,7,8,9 --json)
n=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(len(d["token_logprobs"]))' "$score")
[[ "$n" == 4 ]] || fail "score --json should give 4 token_logprobs, got $n"

a=$("$CLI" generate --model "$dir/m" --tokens 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20 --max-tokens 12 --json)
b=$("$CLI" generate --model "$dir/m" --tokens 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20 --max-tokens 12 --json --chunk-tokens 3)
ta=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokens"])' "$a")
tb=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokens"])' "$b")
[[ "$ta" == "$tb" ]] || fail "greedy generation depends on the prefill chunk size: $ta vs $tb"
python3 -c 'import json,sys; assert len(json.loads(sys.argv[1])["tokens"]) == 12' "$a" || fail "expected 12 tokens"

s1=$("$CLI" generate --model "$dir/m" --tokens 1,2,3 --max-tokens 8 --temperature 0.9 --top-p 0.9 --seed 3 --json)
s2=$("$CLI" generate --model "$dir/m" --tokens 1,2,3 --max-tokens 8 --temperature 0.9 --top-p 0.9 --seed 3 --json)
[[ "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokens"])' "$s1")" == \
   "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokens"])' "$s2")" ]] || fail "seeded sampling not reproducible"

expect_error() {  # expect_error NEEDLE ARGS...
  local needle=$1; shift
  set +e
  out=$("$CLI" "$@" 2>&1)
  rc=$?
  set -e
  [[ $rc == 2 ]] || fail "'$*' exited $rc, expected 2 ($out)"
  [[ "$out" == *"$needle"* ]] || fail "'$*' error does not name '$needle': $out"
}
expect_error "prompt[1]" generate --model "$dir/m" --tokens 1,256 --max-tokens 2
expect_error "--temperature" generate --model "$dir/m" --tokens 1 --temperature -1
expect_error "--top_p" generate --model "$dir/m" --tokens 1 --top-p 0
expect_error "--max-tokens" generate --model "$dir/m" --tokens 1 --max-tokens 0
expect_error "--tokens" generate --model "$dir/m" --tokens 1,x
expect_error "unknown flag --bogus" generate --model "$dir/m" --tokens 1 --bogus 3
expect_error "--preset" make-random-model --preset nope --out "$dir/x"
expect_error "scoring needs at least 2 tokens" score --model "$dir/m" --tokens 1
expect_error "--name" make-key
expect_error "keys[0].name" make-key --name "a b"
expect_error "--max-context" make-key --name a --max-context -1

# make-key: a fresh key (line 1) and its entry (line 2): SHA-256(salt bytes || key), limits as given.
mk=$("$CLI" make-key --name team-a --max-concurrent 4 --tokens-per-minute 1000 --admin)
mk2=$("$CLI" make-key --name team-a)
python3 - "$mk" "$mk2" <<'PY' || fail "make-key output"
import hashlib, json, sys
key, entry = sys.argv[1].split("\n")
e = json.loads(entry)
assert key.startswith("yoco_") and len(key) == 69, key
assert e["name"] == "team-a" and e["admin"] is True and e["max_concurrent"] == 4, e
assert e["tokens_per_minute"] == 1000 and e["max_context"] == 0, e
assert hashlib.sha256(bytes.fromhex(e["salt"]) + key.encode()).hexdigest() == e["sha256"], e
assert key not in entry
assert sys.argv[2].split("\n")[0] != key, "keys must be random"
PY
set +e
"$CLI" info --model "$dir/missing" >/dev/null 2>&1
[[ $? != 0 ]] || fail "loading a missing model should fail"
set -e
echo "cli_test: all checks passed"
