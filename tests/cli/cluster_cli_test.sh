#!/usr/bin/env bash
# yoco-cli against a running yoco.v1 server (the router, with or without prefill workers): generate with
# text and token prompts (streamed and --json), score, tokenize/detokenize, info, bad requests
# that must fail with INVALID_ARGUMENT, and a small open-loop bench with no errors.
# Usage: cluster_cli_test.sh HOST:PORT path/to/yoco-cli [DOCUMENTS]
# DOCUMENTS (1 by default): the cluster has prefill workers, so it caches documents; 0 (colocated):
# a trace naming a document fails with FAILED_PRECONDITION instead.
set -euo pipefail
ROUTER=$1
CLI=$2
DOCUMENTS=${3:-1}
fail() { echo "FAIL: $*" >&2; exit 1; }
py() { python3 -c "$@"; }
cli() { "$CLI" "$1" --router "$ROUTER" "${@:2}"; }

info=$(cli info)
vocab=$(py 'import json,sys; print(json.loads(sys.argv[1])["vocab_size"])' "$info")
(( vocab > 0 )) || fail "info: vocab_size $vocab"

# Greedy generation from text: --json fields, and the streamed text is the same text.
out=$(cli generate --prompt "In the beginning God created" --max-tokens 12 --temperature 0 --ignore-eos --json)
py '
import json, sys
d = json.loads(sys.argv[1])
for k in ("token_ids", "text", "finish_reason", "usage", "timings", "logprobs"):
    assert k in d, "missing " + k
assert len(d["token_ids"]) == 12, d["token_ids"]
assert d["finish_reason"] == "length", d["finish_reason"]
assert d["usage"]["completion_tokens"] == 12 and d["usage"]["prompt_tokens"] > 0, d["usage"]
assert d["timings"]["total_seconds"] > 0, d["timings"]
assert d["text"].strip(), "empty text"
' "$out" || fail "generate --json: $out"
gen_text=$(py 'import json,sys; print(json.loads(sys.argv[1])["text"])' "$out")
streamed=$(cli generate --prompt "In the beginning God created" --max-tokens 12 --temperature 0 --ignore-eos 2>/dev/null)
[[ "$streamed" == "$gen_text" ]] || fail "streamed text '$streamed' != --json text '$gen_text'"
ids=$(py 'import json,sys; print(",".join(map(str, json.loads(sys.argv[1])["token_ids"])))' "$out")
[[ "$(cli detokenize --tokens "$ids")" == "$gen_text" ]] || fail "detokenize(token_ids) != text"

# Token prompt; a stop token id ends generation with finish_reason stop.
out=$(cli generate --tokens 1,2,3,4 --max-tokens 6 --temperature 0 --ignore-eos --json)
first=$(py 'import json,sys; d=json.loads(sys.argv[1]); assert len(d["token_ids"]) == 6; print(d["token_ids"][0])' "$out") \
  || fail "generate --tokens: $out"
out=$(cli generate --tokens 1,2,3,4 --max-tokens 6 --temperature 0 --ignore-eos --stop-token-ids "$first" --json)
py 'import json,sys; d=json.loads(sys.argv[1]); assert d["finish_reason"] == "stop", d' "$out" \
  || fail "--stop-token-ids $first: $out"
# Seeded sampling is reproducible.
a=$(cli generate --tokens 1,2,3 --max-tokens 8 --temperature 0.9 --top-p 0.9 --seed 3 --ignore-eos --json)
b=$(cli generate --tokens 1,2,3 --max-tokens 8 --temperature 0.9 --top-p 0.9 --seed 3 --ignore-eos --json)
[[ "$(py 'import json,sys; print(json.loads(sys.argv[1])["token_ids"])' "$a")" == \
   "$(py 'import json,sys; print(json.loads(sys.argv[1])["token_ids"])' "$b")" ]] || fail "seeded sampling not reproducible"

# Score: n - 1 logprobs, all <= 0, for both text and tokens.
text="And God said, Let there be light: and there was light."
score=$(cli score --text "$text" --json)
py '
import json, sys
d = json.loads(sys.argv[1])
assert len(d["token_logprobs"]) == len(d["token_ids"]) - 1 > 0, d
assert all(x <= 0 for x in d["token_logprobs"]), d
assert d["perplexity"] > 1, d
' "$score" || fail "score --text: $score"
score=$(cli score --tokens 5,6,7,8 --json)
py 'import json,sys; d=json.loads(sys.argv[1]); assert d["token_ids"] == [5,6,7,8] and len(d["token_logprobs"]) == 3, d' \
  "$score" || fail "score --tokens: $score"

# Tokenize / detokenize round trip.
ids=$(cli tokenize --text "$text")
[[ "$ids" =~ ^[0-9]+(,[0-9]+)*$ ]] || fail "tokenize printed '$ids'"
[[ "$(cli detokenize --tokens "$ids")" == "$text" ]] || fail "detokenize(tokenize(x)) != x"

expect_error() {  # expect_error NEEDLE ARGS...: nonzero exit and NEEDLE on stderr
  local needle=$1; shift
  local err rc
  set +e
  err=$(cli "$@" 2>&1 >/dev/null)
  rc=$?
  set -e
  (( rc != 0 )) || fail "'$*' succeeded, expected $needle"
  [[ "$err" == *"$needle"* ]] || fail "'$*' stderr does not say '$needle': $err"
}
expect_error "INVALID_ARGUMENT" generate --tokens "1,$((vocab + 999999))" --max-tokens 2
expect_error "INVALID_ARGUMENT" generate --tokens 1,2 --max-tokens 0
expect_error "INVALID_ARGUMENT" generate --tokens 1,2 --temperature -1
expect_error "INVALID_ARGUMENT" score --tokens "1,$((vocab + 5))"

# A small open-loop bench: every request completes; --requests-out writes each one's timeline.
timelines=$(mktemp)
trap 'rm -f "$timelines"' EXIT
bench=$(cli bench --requests 8 --rate 20 --prompt-tokens 16 --max-tokens 8 --seed 1 --json --requests-out "$timelines")
py '
import json, sys
d = json.loads(sys.argv[1])
assert d["completed"] == 8 and d["errors"] == {}, d
assert d["output_tokens"] == 64, d
assert d["ttft_ms"]["p50"] > 0 and d["e2e_ms"]["p99"] >= d["e2e_ms"]["p50"], d
rows = [json.loads(line) for line in open(sys.argv[2])]
assert [r["index"] for r in rows] == list(range(8)), rows
for r in rows:
    assert r["status"] == "OK" and r["prompt_tokens"] == 16 and r["output_tokens"] == 8, r
    assert sum(k for _, k in r["deltas"]) == 8, r
    times = [t for t, _ in r["deltas"]]
    assert times == sorted(times) and times[0] > 0 and r["sent"] >= 0, r
assert max(r["sent"] for r in rows) > 0, rows  # Poisson arrivals, not all at once
' "$bench" "$timelines" || fail "bench: $bench"

# A trace replayed (bench/request_trace.h, the SLA planner's format): lengths, arrivals and a shared
# document (cached first, then named by each request that uses it) as the file says.
trace=$(mktemp)
trap 'rm -f "$trace" "$timelines"' EXIT
printf 'TIMESTAMP,ContextTokens,GeneratedTokens,DocumentId,DocumentTokens\n0,12,3,,\n0.05,40,5,d1,32\n0.1,36,2,d1,32\n0.2,20,4,,\n' >"$trace"
if [[ $DOCUMENTS == 0 ]]; then
  expect_error "FAILED_PRECONDITION" bench --trace "$trace" --seed 2
  printf 'TIMESTAMP,ContextTokens,GeneratedTokens\n0,12,3\n0.05,40,5\n0.1,36,2\n0.2,20,4\n' >"$trace"
fi
bench=$(cli bench --trace "$trace" --seed 2 --json)
py '
import json, sys
d = json.loads(sys.argv[1])
assert d["completed"] == 4 and d["errors"] == {}, d
assert d["output_tokens"] == 3 + 5 + 2 + 4, d
assert d["wall_seconds"] >= 0.2, d
' "$bench" || fail "bench --trace: $bench"
printf 'TIMESTAMP,ContextTokens,GeneratedTokens\n0,12,3\n1,1x,3\n' >"$trace"
expect_error "$trace:3: ContextTokens: not a whole number" bench --trace "$trace"
printf 'TIMESTAMP,GeneratedTokens\n0,3\n' >"$trace"
expect_error "$trace:1: ContextTokens: missing column" bench --trace "$trace"
expect_error "--rate: not with --trace" bench --trace "$trace" --rate 3
echo "cluster_cli_test: all checks passed ($gen_text)"
