#!/usr/bin/env bash
# One GPU, the pipelines a GPU machine has not run yet: train, kmeans, matmul, pca and fft.
#
# For each: `cli.py run NAME --gpus 0 --json` at a moderate size (does it verify?; fft also
# as a round trip, rfft2 then irfft2 of the half spectrum it wrote), then
# `cli.py bench NAME --gpus 0` at the size its performance target names, against the pipeline's
# one-GPU CuPy baseline. Each step under a timeout, all under one budget; a step that no longer
# fits is skipped, not cut.
#
#   bash tools/gpu-check-pipelines.sh                     # on the GPU machine, from the root
#   DEVICE=--cpu SCALE=small bash tools/gpu-check-pipelines.sh   # the same steps on CPU, small
#   REPEAT=1 WARMUP=0 ...                                 # benches measured once, no warm-up
#
# The GPU machine lacks dask, distributed, dask-cuda and bokeh: their wheels come in .whl/ (see
# the GPU kit's fetch-wheels.sh) and are installed into $SITE unless that holds them already.
# What comes back under $OUT: summary.txt (read it first), runs.log, bench.log, results.json.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
BUDGET=${BUDGET:-400}
DEVICE=${DEVICE:---gpus 0}
SCALE=${SCALE:-full}
REPEAT=${REPEAT:-2}
WARMUP=${WARMUP:-1}
SITE=${SITE:-/tmp/site}
JSON_DIR=$(mktemp -d)
START=$SECONDS
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

note() { echo "[$((SECONDS - START))s] $*" | tee -a "$SUMMARY"; }

# attempt NAME LOG LIMIT COMMAND: run COMMAND for at most LIMIT seconds if the budget still
# holds all of them, else skip it (a step cut short says nothing); note its exit code
attempt() {
  local name=$1 log=$2 limit=$3 command=$4 began=$SECONDS rc
  local remaining=$((BUDGET - (SECONDS - START)))
  if [ "$limit" -gt "$remaining" ]; then
    note "SKIP $name (needs ${limit}s, ${remaining}s left)"
    return
  fi
  echo "===== $name: $command" >> "$OUT/$log"
  timeout -k 10 "$limit" bash -c "$command" >> "$OUT/$log" 2>&1
  rc=$?
  note "$name rc=$rc $((SECONDS - began))s$([ "$rc" -ge 124 ] && echo ' (timed out)')"
}

if [ "$DEVICE" != "--cpu" ]; then
  if ! PYTHONPATH=$SITE python3 -c "import dask_cuda, distributed" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl \
      >> "$OUT/runs.log" 2>&1 || note "PROBLEM: the wheels in .whl/ did not install"
    # The project is not installed: its pipelines register through an entry point.
    mkdir -p "$SITE/daskgpu-0.1.0.dist-info"
    printf 'Metadata-Version: 2.1\nName: daskgpu\nVersion: 0.1.0\n' \
      > "$SITE/daskgpu-0.1.0.dist-info/METADATA"
    printf '[daskgpu.pipelines]\nbuiltin = pipelines\n' \
      > "$SITE/daskgpu-0.1.0.dist-info/entry_points.txt"
  fi
  export PYTHONPATH=$SITE:$PWD
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv \
    >> "$OUT/runs.log" 2>&1
fi
PYTHON=${PYTHON:-python3}

# name | run options (moderate size) | bench options (the target's size)
if [ "$SCALE" = small ]; then
  CASES="train-pipeline|--samples 20000 --features 64 --steps 3|--samples 20000 --features 64 --steps 3
kmeans-pipeline|--samples 50000 --features 8 --clusters 4|--samples 50000 --features 8 --clusters 4
matmul-pipeline|--size 512|--size 1024
pca-pipeline|--samples 50000 --features 32|--samples 100000 --features 32
fft-pipeline|--size 512|--size 1024 --dtype complex64"
else
  CASES="train-pipeline|--samples 1000000 --steps 5|--samples 10000000 --steps 5
kmeans-pipeline|--samples 10000000|--samples 100000000
matmul-pipeline|--size 8192|--size 32768 --dtype float32
pca-pipeline|--samples 10000000 --dtype float32|--samples 100000000 --dtype float32
fft-pipeline|--size 8192 --dtype complex64|--size 32768 --dtype complex64"
fi

while IFS='|' read -r name run_options bench_options; do
  attempt "run $name" runs.log 90 \
    "$PYTHON cli.py run $name $run_options $DEVICE --no-dashboard --json > $JSON_DIR/run-$name.json; rc=\$?; tail -c 1200 $JSON_DIR/run-$name.json; exit \$rc"
done <<< "$CASES"
# fft-pipeline round trip on the device: rfft2 of an input written to .npy, then irfft2 of the
# half spectrum it wrote (complex --input, --inverse --real)
if [ "$SCALE" = small ]; then HALF_SIZE=256; else HALF_SIZE=8192; fi
attempt "run fft-pipeline irfft2" runs.log 90 \
  "$PYTHON -c 'import numpy; numpy.save(\"$JSON_DIR/x.npy\", numpy.random.default_rng(1).standard_normal(($HALF_SIZE, $HALF_SIZE)))' && $PYTHON cli.py run fft-pipeline --input $JSON_DIR/x.npy --real --output $JSON_DIR/half.npy $DEVICE --no-dashboard --quiet && $PYTHON cli.py run fft-pipeline --input $JSON_DIR/half.npy --real --inverse $DEVICE --no-dashboard --json > $JSON_DIR/run-fft-irfft2.json; rc=\$?; rm -f $JSON_DIR/x.npy $JSON_DIR/half.npy; tail -c 1200 $JSON_DIR/run-fft-irfft2.json; exit \$rc"
# The k-means pass alone (kmeans_pass, then k-means||'s kmeans_counts_cost with 1 + 10k
# candidates) on float32 points at the target's size: its GB/s against the H200's 4.8 TB/s
if [ "$SCALE" = small ]; then PASS_SIZE=20000; else PASS_SIZE=100000000; fi
PASS_SCRIPT=$(mktemp --suffix=.py)
cat > "$PASS_SCRIPT" <<'EOF_PASS'
import json, sys, time
import numpy as np
from daskgpu.kernels.kmeans import kmeans_counts_cost, kmeans_pass
target, device, n, d, k = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
PEAK = 4.8e12  # the H200's memory bandwidth, bytes/s
rng = np.random.default_rng(0)
centroids, candidates = rng.standard_normal((k, d)), rng.standard_normal((1 + 10 * k, d))
if device == "gpu":
    import cupy
    x = cupy.random.default_rng(0).standard_normal((n, d), dtype=cupy.float32)
    def seconds(f, c):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(); f(x, c); end.record(); end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / 1e3
    head = x[:1_000_000].get()
else:
    x = rng.standard_normal((n, d), dtype=np.float32)
    def seconds(f, c):
        began = time.perf_counter(); f(x, c); return time.perf_counter() - began
    head = x[:1_000_000]
doc, lines = {"points": n, "features": d, "bytes_per_pass": n * d * 4}, []
for name, f, c in (("pass", kmeans_pass, centroids), ("counts_cost", kmeans_counts_cost, candidates)):
    first = [np.asarray(a.get() if hasattr(a, "get") else a) for a in f(x[:len(head)], c)]
    twin = f(head, c)  # the CPU twin on the same points: counts within rounding ties
    counts, want = first[-2], twin[-2]
    agrees = int(counts.sum()) == len(head) and int(abs(counts - want).sum()) <= len(head) // 1000
    s = float(np.median([seconds(f, c) for _ in range(5)]))
    gbs = n * d * 4 / s / 1e9
    doc[name] = {"median_s": s, "gb_per_s": gbs, "of_peak": gbs * 1e9 / PEAK, "agrees": agrees}
    share = f"{100 * gbs * 1e9 / PEAK:.1f}% of the H200's 4.8 TB/s" if device == "gpu" else "CPU twin"
    lines.append(f"kmeans {name} {n}x{d} float32 k={len(c)}: {s * 1e3:.2f} ms, {gbs:.1f} GB/s "
                 f"({share}), agrees with the CPU twin: {agrees}")
doc["line"] = "; ".join(lines)
print(doc["line"])
with open(target, "w") as out:
    json.dump(doc, out)
sys.exit(0 if all(doc[name]["agrees"] for name in ("pass", "counts_cost")) else 1)
EOF_PASS
if [ "$DEVICE" = "--cpu" ]; then PASS_DEVICE=cpu; else PASS_DEVICE=gpu; fi
attempt "kmeans pass" runs.log 90 \
  "$PYTHON - $JSON_DIR/pass-kmeans.json $PASS_DEVICE $PASS_SIZE 32 16 < $PASS_SCRIPT"
rm -f "$PASS_SCRIPT"
while IFS='|' read -r name run_options bench_options; do
  attempt "bench $name" bench.log 100 \
    "$PYTHON cli.py bench $name $bench_options $DEVICE --repeat $REPEAT --warmup $WARMUP --quiet --json $JSON_DIR/bench-$name.json"
done <<< "$CASES"

$PYTHON - "$JSON_DIR" "$OUT/results.json" "$SUMMARY" <<'EOF'
import json, os, sys
source, target, summary = sys.argv[1:4]
results = {}
for name in sorted(os.listdir(source)):
    with open(os.path.join(source, name)) as f:
        text = f.read().strip()
    try:
        results[name] = json.loads(text)
    except ValueError:
        results[name] = {"unparsed": text[-2000:]}
with open(target, "w") as f:
    json.dump(results, f, indent=1, default=str)
lines = []
for name, doc in results.items():
    if name.startswith("pass-") and "line" in doc:
        lines.append(doc["line"])
    elif name.startswith("run-") and "verified" in doc:
        t = doc.get("timings", {})
        lines.append(f"{name}: verified={doc['verified']} compute_s={t.get('compute_s')}")
    elif name.startswith("bench-") and doc.get("measurements"):
        m = doc["measurements"][0]
        lines.append(f"{name}: backend={doc.get('backend')} median_s={m.get('median_s')} "
                     f"baseline_s={m.get('baseline_s')} ratio={m.get('ratio')} "
                     f"verified={m.get('verified')}")
    else:
        lines.append(f"{name}: no result (see runs.log / bench.log)")
with open(summary, "a") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
note "done; every JSON document in results.json"
