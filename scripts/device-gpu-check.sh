#!/usr/bin/env bash
# Device check for the GPU path of hardware challenges (docs/gpu-challenge.md), for a
# machine with an NVIDIA GPU. Run from the repository root:
#
#     OUT=/some/dir bash scripts/device-gpu-check.sh
#
# Steps (each under `timeout`, each allowed to fail; the whole run stays within
# TOTAL_BUDGET_S, 225 s by default):
#   1. nvidia-smi -L, driver version and memory; the host's CPU and memory
#   2. the Python packages (numpy, cupy, nvidia-ml-py) and CUDA runtime version
#   3. the worker's NVML reading path (gpum_worker.gpu: NvmlBackend, discover, read_sample,
#      as the agent calls them), one sample of every GPU -> $OUT/nvml.json
#   4. bench/gpu_challenge.py with CuPy at n=8192 and n=16384 (one round each, golden
#      roots and the all-8 worst case), the standard challenge (n=8192, 64 rounds), and
#      numpy at n=1024; every run opens rows for a fresh nonce and the CPU verifier
#      recomputes them: the bit-exactness check of the GPU result on this hardware
#   5. the memory challenge: 64 GiB (or 80 % of the GPU's memory when smaller)
#   6. podman/docker: a CUDA container when a runtime and a local CUDA image exist
# Results (four files, within what a lent machine sends back): $OUT/challenge.json (every
# bench run's JSON line), $OUT/nvml.json, $OUT/summary.txt and $OUT/steps.log (every step's
# log, one after the other). Exit status 0 when every step passed, 1 otherwise.
set -u

OUT=${OUT:-/tmp/gpum-device-check}
mkdir -p "$OUT"
TOTAL_BUDGET_S=${TOTAL_BUDGET_S:-225}
START=$(date +%s)
REPO=$(pwd)
if [ -n "${PY:-}" ]; then :
elif [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3
elif [ -x "$REPO/.venv/bin/python" ]; then PY=$REPO/.venv/bin/python
else PY=$(command -v python3); fi
export PYTHONPATH="$REPO/clients/py:$REPO/worker${PYTHONPATH:+:$PYTHONPATH}"
export OUT PY

SUMMARY="$OUT/summary.txt"
LOGS=$(mktemp -d)
export LOGS
: > "$SUMMARY"
FAILED=0

# step NAME LIMIT_S COMMAND...: run under timeout within the overall budget, log to
# $LOGS/NAME.log (gathered into $OUT/steps.log at the end), print the log's tail, record the outcome.
step() {
    local name=$1 limit=$2
    shift 2
    local now left rc t0 t1
    now=$(date +%s)
    left=$(( TOTAL_BUDGET_S - (now - START) - 5 ))
    if [ "$left" -lt 5 ]; then
        echo "== $name: SKIPPED (out of the ${TOTAL_BUDGET_S}s budget)"
        printf '%-22s %-8s %s\n' "$name" "SKIPPED" "out of time" >> "$SUMMARY"
        FAILED=1
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (limit ${limit}s): $*"
    t0=$(date +%s.%N)
    timeout -k 5 "$limit" bash -c '"$@"' "$name" "$@" > "$LOGS/$name.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    tail -n 25 "$LOGS/$name.log"
    local secs
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    local status=ok
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status=TIMEOUT; FAILED=1
    elif [ "$rc" -ne 0 ]; then status="rc=$rc"; FAILED=1; fi
    printf '%-22s %-8s %6ss\n' "$name" "$status" "$secs" >> "$SUMMARY"
    return 0
}

gpu_info() {
    local rc=0
    nvidia-smi -L || rc=1
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit \
        --format=csv,noheader || rc=1
    echo "host: $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
    grep -m1 -o 'sha_ni' /proc/cpuinfo | sed 's/^/cpu flag: /' || echo "cpu flag: no sha_ni"
    free -g | head -2
    return "$rc"
}

packages() {
    "$PY" - <<'EOF'
import platform
print("python", platform.python_version())
for name in ("numpy", "cupy", "pynvml"):
    try:
        m = __import__(name)
        print(name, getattr(m, "__version__", "?"))
    except Exception as e:  # noqa: BLE001
        print(name, "MISSING:", type(e).__name__, e)
try:
    import cupy
    rt = cupy.cuda.runtime
    print("cuda runtime", rt.runtimeGetVersion(), "driver", rt.driverGetVersion(),
          "devices", rt.getDeviceCount())
except Exception as e:  # noqa: BLE001
    print("cupy/CUDA not usable:", type(e).__name__, e)
EOF
}

nvml_samples() {
    "$PY" - <<'EOF'
import dataclasses, json, os, sys, time
from gpum_worker.errors import NvmlUnavailable
from gpum_worker.gpu import NvmlBackend, discover, read_sample

b = NvmlBackend()
try:
    b.init()
except NvmlUnavailable as e:
    print("NVML unavailable:", e)
    json.dump({"error": str(e)}, open(os.path.join(os.environ["OUT"], "nvml.json"), "w"))
    sys.exit(1)
try:
    gpus = discover(b)
    out = {"driver": b.driver_version(), "gpus": [dataclasses.asdict(g) for g in gpus],
           "samples": []}
    for g in gpus:
        s = dataclasses.asdict(read_sample(b, g, time.time()))
        s["unsupported"] = sorted(s["unsupported"])
        out["samples"].append(s)
finally:
    b.shutdown()
json.dump(out, open(os.path.join(os.environ["OUT"], "nvml.json"), "w"), indent=2)
for s in out["samples"]:
    print(f"GPU {s['index']} {s['uuid']}: ok={s['ok']} util={s['util_gpu_pct']}% "
          f"mem={s['mem_used_mib']}/{s['mem_total_mib']} MiB temp={s['temp_c']}C "
          f"power={s['power_mw']}mW unsupported={s['unsupported']} errors={s['errors']}")
sys.exit(0 if out["samples"] and all(s["ok"] for s in out["samples"]) else 1)
EOF
}

containers() {
    local rt found=0
    for rt in podman docker; do
        command -v "$rt" >/dev/null 2>&1 || continue
        found=1
        echo "$rt: $(command -v "$rt")"
        local image
        image=$("$rt" images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null \
                | grep -i -m1 cuda || true)
        if [ -z "$image" ]; then
            echo "$rt: no local CUDA image (and no network to pull one): container check not run"
            continue
        fi
        if [ "$rt" = podman ]; then
            timeout 60 podman run --rm --device nvidia.com/gpu=all "$image" nvidia-smi -L
        else
            timeout 60 docker run --rm --gpus all "$image" nvidia-smi -L
        fi
        return $?
    done
    [ "$found" -eq 0 ] && echo "no container runtime (podman, docker): container check not run"
    return 0
}

export -f gpu_info packages nvml_samples containers

MEM_MIB=65536
total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 \
            2>/dev/null | head -1 | tr -dc 0-9)
if [ -n "$total_mib" ] && [ $(( total_mib * 80 / 100 )) -lt "$MEM_MIB" ]; then
    MEM_MIB=$(( total_mib * 80 / 100 ))
fi

BENCH=("$PY" bench/gpu_challenge.py)
step gpu_info 20 gpu_info
step packages 40 packages
step nvml 30 nvml_samples
step cupy_n8192 45 "${BENCH[@]}" --backend cupy --n 8192 --golden --worst-case
step cupy_n16384 60 "${BENCH[@]}" --backend cupy --n 16384 --worst-case
step cupy_standard 45 "${BENCH[@]}" --backend cupy --n 8192 --rounds 64
step numpy_n1024 25 "${BENCH[@]}" --backend numpy --n 1024 --golden --worst-case
step cupy_memory 70 "${BENCH[@]}" --backend cupy --n 1024 --memory-mib "$MEM_MIB" --chunks 64
step containers 20 containers

"$PY" - <<'EOF' > "$OUT/challenge.json"
import json, os
runs = {}
for name in ("cupy_n8192", "cupy_n16384", "cupy_standard", "numpy_n1024", "cupy_memory"):
    path = os.path.join(os.environ["LOGS"], name + ".log")
    last = None
    if os.path.exists(path):
        for line in open(path, errors="replace"):
            if line.startswith("{"):
                last = line
    try:
        runs[name] = json.loads(last) if last else {"error": "no JSON line (see the log)"}
    except ValueError:
        runs[name] = {"error": "unparseable JSON line"}
print(json.dumps({"runs": runs}, indent=2))
EOF

{
    echo
    "$PY" - <<'EOF'
import json, os
runs = json.load(open(os.path.join(os.environ["OUT"], "challenge.json")))["runs"]
for name, r in runs.items():
    if "error" in r:
        print(f"{name}: ERROR {r['error']}")
        continue
    mem = r.get("memory")
    extra = (f" memory {mem['mib']} MiB fill {mem['fill_s']:.3f}s commit {mem['commit_s']:.1f}s"
             if mem else "")
    print(f"{name}: {r.get('device')} n={r['n']} rounds={r['rounds']} "
          f"matmul {r['matmul_s']:.4f}s {r.get('tflops') or 0:.1f} TFLOP/s "
          f"({r.get('ratio_vs_numpy') or 0:.0f}x numpy n={r['baseline']['n']}), "
          f"commit {r['commit_s']:.2f}s, verify {r['verify_s']:.2f}s,{extra} "
          f"checks {r.get('checks')}")
EOF
    echo "total $(( $(date +%s) - START ))s; budget ${TOTAL_BUDGET_S}s; python $PY"
} >> "$SUMMARY" 2>&1

for f in "$LOGS"/*.log; do echo "======== $(basename "$f" .log)"; cat "$f"; done > "$OUT/steps.log"
echo
echo "================ summary ================"
cat "$SUMMARY"
exit "$FAILED"
