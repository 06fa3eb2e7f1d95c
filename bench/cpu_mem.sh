#!/usr/bin/env bash
# The memory-side limits of the CPU engine in one command (bench/README.md, "Decode at memory
# speed, threads, transfer at memcpy speed"): read bandwidth and the 1-vs-2-thread compute test
# (membw), decode at batch 1..64 on mid-gret / mid-swa (engine_bench), the checksum alone, the KV
# transfer over shm against memcpy and ucx_perftest (staged and in place), and the transfer's share of TTFT at 4K-token prompts.
# Writes JSON into bench/results/cpu_mem/ and prints the tables of bench/README.md.
#   bench/cpu_mem.sh [all|membw|decode|transfer|perftest|serve|table]...   (default: all)
# Needs: cmake --build build --target membw engine_bench transfer_bench (serve: also the cluster
# binaries, as bench/serve_bench.sh). Environment: YOCO_BUILD_DIR (default build), THREADS (1 2).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${YOCO_BUILD_DIR:-build}
OUT=bench/results/cpu_mem
THREADS=${THREADS:-"1 2"}
mkdir -p "$OUT"
steps=${*:-all}
want() { [[ " $steps " == *" all "* || " $steps " == *" $1 "* ]]; }
# OpenMP threads sleep when idle: on a shared machine spinning threads distort everything.
# Decode runs as users run it, with OpenMP's own default (spin briefly, then sleep) unless
# OMP_WAIT_POLICY was set by the caller: sleeping between a step's ~100 parallel products
# costs 10-30% of a step (bench/README.md, decode at memory speed).
decode_env=(env -u OMP_WAIT_POLICY)
[[ -n "${OMP_WAIT_POLICY:-}" ]] && decode_env=(env "OMP_WAIT_POLICY=$OMP_WAIT_POLICY")
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
load() { cut -d' ' -f1-3 /proc/loadavg; }

if want membw; then
  echo "== membw (load $(load))" >&2
  "${decode_env[@]}" "$BUILD"/bench/membw --gib 2 --reps 5 --threads 1,2 --preset mid-gret --batches 1,2,4,8,16,32,64 \
    >"$OUT/membw.json"
fi

if want decode; then
  for preset in mid-gret mid-swa; do
    "$BUILD"/bench/engine_bench --preset "$preset" --write-model "/tmp/yoco-bench-$preset" >/dev/null
    for t in $THREADS; do
      for dtype in fp32 bf16; do
        suffix=$([[ $dtype == fp32 ]] || echo "-$dtype")
        echo "== engine_bench $preset decode $dtype, threads $t (load $(load))" >&2
        "${decode_env[@]}" "$BUILD"/bench/engine_bench --model "/tmp/yoco-bench-$preset" --threads "$t" \
          --prefill-lens 64 --repeats 1 --decode-batches 1,2,4,8,16,32,64 --decode-context 512 --decode-steps 32 \
          --dtype "$dtype" --json \
          >"$OUT/decode-$preset-t$t$suffix.json"
      done
    done
  done
fi

if want transfer; then
  echo "== transfer_bench shm pull, row checksums on / off (load $(load))" >&2
  "$BUILD"/bench/transfer_bench --transports shm --paths pull --min-bytes 262144 --reps 5 --json \
    >"$OUT/transfer-crc.json"
  "$BUILD"/bench/transfer_bench --transports shm --paths pull --min-bytes 262144 --reps 5 --no-row-crc --json \
    >"$OUT/transfer-nocrc.json"
  # The caller's rows read in place (put_rows_in_place): no staging copy, with and without checksums.
  "$BUILD"/bench/transfer_bench --transports shm --paths pull --min-bytes 262144 --reps 5 --in-place --json \
    >"$OUT/transfer-inplace.json"
  "$BUILD"/bench/transfer_bench --transports shm --paths pull --min-bytes 262144 --reps 5 --in-place --no-row-crc \
    --json >"$OUT/transfer-inplace-nocrc.json"
fi

if want perftest && command -v ucx_perftest >/dev/null; then
  # UCX's own numbers on memory it allocates itself: put (posix/sysv mapping) and active messages
  # (what our pull path rides on); cma alone for the rendezvous read.
  : >"$OUT/perftest.txt"
  port=13420
  for tls in "posix,sysv,cma,self,tcp" "cma,self,tcp"; do
    for test in ucp_put_bw ucp_am_bw; do
      for size in 1048576 16777216; do
        port=$((port + 1))
        UCX_TLS=$tls ucx_perftest -p $port >/dev/null 2>&1 &
        server=$!
        sleep 0.5
        line=$(UCX_TLS=$tls timeout 60 ucx_perftest 127.0.0.1 -p $port -t $test -s $size -n $((268435456 / size)) \
          2>/dev/null | awk '/^Final:/ {print $2, $6, $7}' || true)
        wait $server 2>/dev/null || true
        # Final: iterations, average bandwidth MB/s, overall MB/s.
        echo "$tls $test $size ${line}" | tee -a "$OUT/perftest.txt" >&2
      done
    done
  done
fi

if want serve; then
  echo "== serve: 4K-token prompts, transfer share of TTFT (load $(load))" >&2
  # 4000-token prompts (the bundled model holds 4096 positions: prompt + 8 generated), K/V over
  # shared memory (the one-host case) and over tcp.
  rm -f "$OUT/serve.jsonl"
  for tls in "posix,sysv,cma,self,tcp" tcp; do
    SERVE_UCX_TLS=$tls SERVE_BENCH_JSON="$OUT/serve.jsonl.tmp" bench/serve_bench.sh 8 4000 8 0.5 >&2
    python3 -c 'import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l); j["ucx_tls"] = sys.argv[2]; print(json.dumps(j))' "$OUT/serve.jsonl.tmp" "$tls" >>"$OUT/serve.jsonl"
    rm -f "$OUT/serve.jsonl.tmp"
  done
fi

# ---- tables -----------------------------------------------------------------------------------
python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
m = load("membw.json")
if m:
    read = {r["threads"]: r["read_gb_s"] for r in m["read"]}
    fma = {r["threads"]: r["fma_gflops"] for r in m["fma"]}
    print("| threads | read GB/s | FMA GFLOP/s |\n|---:|---:|---:|")
    for t in sorted(read):
        print(f"| {t} | {read[t]:.1f} | {fma[t]:.0f} |")
    print(f"\nphysical cores in the affinity mask: {m['physical_cores']} of {m['affinity_cpus']} CPUs; "
          f"FMA 2 threads / 1 thread = {fma.get(2, 0) / fma[1]:.2f}; memcpy (1 thread) {m['memcpy_1thread_gb_s']:.1f} GB/s\n")
    c = m["crc32c"]
    print("| CRC32C | warm GB/s | cold GB/s |\n|---|---:|---:|")
    print(f"| one stream (before) | {c.get('one_stream_warm_gb_s', 0):.1f} | {c.get('one_stream_cold_gb_s', 0):.1f} |")
    print(f"| 3 streams (now) | {c['crc32c_warm_gb_s']:.1f} | {c['crc32c_cold_gb_s']:.1f} |")
    print(f"| 3 streams, 2 KiB rows | {c['crc32c_2k_rows_warm_gb_s']:.1f} | |\n")
    g = m["decode_gemm"]
    bw = read[max(read)]
    print(f"decode-step products alone, {m['preset']}, {g['threads']} threads, "
          f"{g['weight_bytes_per_step'] / 1e6:.0f} MB of weights per step; roof = bytes / read bandwidth "
          f"({bw:.1f} GB/s) = {g['weight_bytes_per_step'] / bw / 1e6:.1f} ms")
    print("| batch | OpenBLAS ms/step (before) | ms/step (now) | weights GB/s | % of read bw | tok/s |\n"
          "|---:|---:|---:|---:|---:|---:|")
    for r in g["rows"]:
        before = f"{r['openblas_ms_per_step']:.1f}" if "openblas_ms_per_step" in r else "-"
        print(f"| {r['batch']} | {before} | {r['ms_per_step']:.1f} | {r['weight_gb_s']:.1f} | "
              f"{100 * r['weight_gb_s'] / bw:.0f}% | {r['tokens_per_s']:.1f} |")
    print()
for preset, dtype in [(p, d) for p in ("mid-gret", "mid-swa") for d in ("fp32", "bf16")]:
    rows = []
    suffix = "" if dtype == "fp32" else "-" + dtype
    for t in (1, 2):
        d = load(f"decode-{preset}-t{t}{suffix}.json")
        if d: rows.append((t, d))
    if not rows: continue
    bytes_step = rows[0][1]["decode_weight_bytes_per_step"]
    print(f"engine_bench {preset} decode {dtype} (context 512), {bytes_step / 1e6:.0f} MB of weights per step; "
          "cpu = process CPU ms per step / threads (load-independent); roof/cpu = the roof at that thread count / cpu")
    hdr = "| batch |" + "".join(f" t{t} ms/step | t{t} cpu | t{t} roof/cpu | t{t} tok/s |" for t, _ in rows)
    print(hdr + "\n|---:|" + "---:|---:|---:|---:|" * len(rows))
    batches = [r["batch"] for r in rows[0][1]["decode"]]
    for i, b in enumerate(batches):
        line = f"| {b} |"
        for t, d in rows:
            r = d["decode"][i]
            roof = bytes_step / (read.get(t, 0) * 1e9) * 1e3 if m else float("nan")
            cpu = r.get("cpu_ms_per_step", float("nan")) / t
            line += f" {r['ms_per_step']:.1f} | {cpu:.1f} | {roof / cpu:.2f} | {r['tokens_per_s']:.1f} |"
        print(line)
    print()
tc, tn = load("transfer-crc.json"), load("transfer-nocrc.json")
ti, tin = load("transfer-inplace.json"), load("transfer-inplace-nocrc.json")
if tc:
    def gb(t, i):
        return t["rows"][i].get("shm pull", float("nan")) if t else float("nan")
    print("| message | memcpy GB/s | shm pull, CRC on | % of memcpy | CRC off | in place, CRC on | % of memcpy | "
          "in place, CRC off |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    for i, r in enumerate(tc["rows"]):
        s, mc = r["bytes"], r["memcpy_gb_s"]
        name = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"
        print(f"| {name} | {mc:.2f} | {gb(tc, i):.2f} | {100 * gb(tc, i) / mc:.0f}% | {gb(tn, i):.2f} | "
              f"{gb(ti, i):.2f} | {100 * gb(ti, i) / mc:.0f}% | {gb(tin, i):.2f} |")
    print()
p = os.path.join(out, "serve.jsonl")
if os.path.exists(p):
    print("| setup | UCX_TLS | prompt | TTFT p50 ms | transfer share of TTFT |\n|---|---|---:|---:|---:|")
    for line in open(p):
        j = json.loads(line)
        r = j["result"]
        print(f"| {j['setup']} | {j.get('ucx_tls', 'tcp')} | {r['config']['prompt_tokens']} | {r['ttft_ms']['p50']:.0f} | "
              f"{100 * r.get('transfer_share_of_ttft', 0):.2f}% |")
EOF
