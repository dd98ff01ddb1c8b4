#!/usr/bin/env python3
"""A hardware challenge end to end on one backend, against a numpy baseline in the same run.

Runs ``gpum_worker.challenge_compute.run_challenge`` on ``--backend`` (``numpy`` on the CPU,
or ``cupy`` on GPU ``--gpu``), then what a validator does: a fresh nonce, the worker opens
the rows and memory chunks it names, and ``gpu_market.challenge_verdict.judge`` checks them
on the CPU (Merkle paths, rows recomputed from the seed: for a GPU result this is the
bit-exactness check on that hardware) and against the bounds of the device's model when
the bounds table has one. ``--golden`` also computes the pinned golden challenge of the
tests and compares its roots; ``--worst-case`` multiplies two n x n matrices of 8s, whose
every entry must be exactly 64 n.

The baseline is numpy float32 on this machine's CPU at ``--baseline-n`` (n^3 work grows
fast, so it runs smaller when n is large); the ratio compares TFLOP/s, i.e. work scaled by
flops, and the JSON says so.

Prints a few readable lines, then as its LAST line one JSON object (seconds, TFLOP/s, MiB).
Exit status 0 when every check passed, 1 when one failed, 2 when the backend is unusable.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for sub in ("clients/py", "worker"):  # runnable from a checkout without installing
    if str(ROOT / sub) not in sys.path:
        sys.path.insert(0, str(ROOT / sub))

from gpu_market.challenge import (
    Challenge,
    ChallengeError,
    verify_chunks,
    verify_rows,
)
from gpu_market.challenge_verdict import UnknownGpuModel, judge, load_bounds
from gpum_worker.challenge_compute import (
    CupyBackend,
    NumpyBackend,
    run_challenge,
)

GOLDEN = Challenge(seed=bytes(32), n=256, rounds=2, rows_to_open=4, memory_mib=3,
                   chunks_to_open=2, issued_at=1_700_000_000)
GOLDEN_ROOTS = ("bb374b2d2054a4ead9f2d7a77aa78b842e004db399f81bf9fd358b0a7a256bdb",
                "d86a60e322b6f522b5c045117ef07a84f57660f0f44d210c9de84ce9bee4a31c")


def nvml_info(gpu: int) -> dict[str, Any]:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - reported, never fatal
        return {"nvml_error": f"{type(e).__name__}: {e}"}
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(gpu)
        name = pynvml.nvmlDeviceGetName(h)
        driver = pynvml.nvmlSystemGetDriverVersion()
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        return {"nvml_name": name.decode() if isinstance(name, bytes) else name,
                "driver": driver.decode() if isinstance(driver, bytes) else driver,
                "nvml_mem_total_mib": int(mem.total) // 2**20}
    except Exception as e:  # noqa: BLE001
        return {"nvml_error": f"{type(e).__name__}: {e}"}
    finally:
        pynvml.nvmlShutdown()


def numpy_baseline(n: int) -> dict[str, Any]:
    ch = Challenge(seed=os.urandom(32), n=n, issued_at=0)
    NumpyBackend().multiply(Challenge(seed=bytes(32), n=256, issued_at=0), 0)  # warm BLAS
    _, _, matmul_s, _ = NumpyBackend().multiply(ch, 0)
    return {"backend": "numpy", "n": n, "rounds": 1, "matmul_s": matmul_s,
            "tflops": ch.flop / matmul_s / 1e12,
            "note": (f"numpy float32 on the CPU at n={n}; the ratio compares TFLOP/s, "
                     "i.e. the baseline's work scaled by flops to the challenge's")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=("numpy", "cupy"), default="numpy")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--rows", type=int, default=16, help="rows the verifier opens")
    ap.add_argument("--memory-mib", type=int, default=0)
    ap.add_argument("--chunks", type=int, default=16, help="memory chunks the verifier opens")
    ap.add_argument("--baseline-n", type=int, default=0,
                    help="numpy baseline size (default min(n, 2048); 0 = default)")
    ap.add_argument("--golden", action="store_true", help="compare the golden roots too")
    ap.add_argument("--worst-case", action="store_true", help="all-8 matrices at n")
    args = ap.parse_args()

    out: dict[str, Any] = {"bench": "gpu_challenge", "backend": args.backend, "n": args.n,
                           "rounds": args.rounds, "gpu": args.gpu, "host": platform.node(),
                           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    try:
        ch = Challenge(seed=os.urandom(32), n=args.n, rounds=args.rounds,
                       rows_to_open=min(args.rows, 64), memory_mib=args.memory_mib,
                       chunks_to_open=min(args.chunks, args.memory_mib), issued_at=int(time.time()))
    except ChallengeError as e:
        print(f"bad arguments: {e}", file=sys.stderr)
        return 2
    out["flop"] = ch.flop
    try:
        backend = CupyBackend() if args.backend == "cupy" else NumpyBackend()
        if args.backend == "cupy":
            backend.prepare(args.gpu)
            out.update(nvml_info(args.gpu))
        out["device"] = backend.device_name(args.gpu)
    except Exception as e:  # noqa: BLE001 - any failure to start is reported, not raised
        out["error"] = f"{type(e).__name__}: {e}"
        print(f"backend {args.backend} unusable: {e}")
        print(json.dumps(out))
        return 2

    checks: dict[str, bool] = {}
    try:
        t0 = time.perf_counter()
        run = run_challenge(ch, backend, args.gpu)
        answer_elapsed = time.perf_counter() - t0
        nonce = os.urandom(32)
        t0 = time.perf_counter()
        openings = run.open(nonce)
        open_elapsed = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - e.g. a CUDA error outside the backend's list
        out["error"] = f"{type(e).__name__}: {e}"
        checks["computed"] = False
        print(f"challenge failed on the device: {e}")
        print(json.dumps({**out, "checks": checks, "ok": False}))
        return 1
    tm = run.answer.timings
    out.update({"generate_s": tm.generate_s, "matmul_s": tm.matmul_s,
                "transfer_s": tm.transfer_s, "commit_s": tm.commit_s,
                "answer_elapsed_s": answer_elapsed, "open_elapsed_s": open_elapsed,
                "tflops": ch.flop / tm.matmul_s / 1e12 if tm.matmul_s else None})
    if run.answer.memory is not None:
        out["memory"] = {"mib": ch.memory_mib, "fill_s": run.answer.memory.fill_s,
                         "commit_s": run.answer.memory.commit_s,
                         "answer_s": openings.memory_answer_s, "chunks_opened": ch.chunks_to_open}

    table = load_bounds()
    try:
        gpu = table.for_model(out["device"])
    except UnknownGpuModel:
        gpu = None
    t0 = time.perf_counter()
    if gpu is not None:
        v = judge(ch, run.answer, openings, nonce=nonce, table=table, gpu=gpu,
                  answer_elapsed_s=answer_elapsed, open_elapsed_s=open_elapsed)
        out["verdict"] = {"model": gpu.model, "ok": v.ok, "failures": [vars(f) for f in v.failures],
                          "max_response_s": v.max_response_s,
                          "max_matmul_s": table.max_matmul_s(ch, gpu),
                          "min_matmul_s": table.min_matmul_s(ch, gpu)}
        correct = not set(v.codes) & {"bad_proof", "wrong_row", "wrong_chunk", "wrong_indices",
                                      "malformed", "no_memory_answer", "wrong_challenge"}
        checks["timing_within_bounds"] = not set(v.codes) & {"too_slow", "implausible_timing"}
        if gpu.peak_tflops and tm.matmul_s:
            out["efficiency_vs_peak"] = ch.flop / tm.matmul_s / 1e12 / gpu.peak_tflops
    else:
        out["verdict"] = {"model": None, "note": f"no bounds row for {out['device']!r}"}
        try:
            verify_rows(ch, run.answer.root, openings.rows)
            if run.answer.memory is not None:
                verify_chunks(ch, run.answer.memory.root, openings.chunks)
            correct = True
        except ChallengeError as e:
            out["verdict"]["failure"] = str(e)
            correct = False
    out["verify_s"] = time.perf_counter() - t0
    out["verify_rows"] = len(openings.rows)
    checks["rows_and_chunks_verified_on_cpu"] = correct

    if args.golden:
        g = run_challenge(GOLDEN, backend, args.gpu)
        checks["golden_roots"] = (g.answer.root.hex(), g.answer.memory.root.hex()) == GOLDEN_ROOTS
        g.release()
    if args.worst_case:
        checks["worst_case_exact"] = backend.worst_case_exact(args.n, args.gpu)

    base = numpy_baseline(args.baseline_n or min(args.n, 2048))
    out["baseline"] = base
    out["ratio_vs_numpy"] = out["tflops"] / base["tflops"] if out.get("tflops") else None
    if args.backend == "cupy":
        out["measured_row"] = {"date": out["date"][:10], "device": out["device"],
                               "driver": out.get("driver"), "n": ch.n, "rounds": ch.rounds,
                               "matmul_s": tm.matmul_s, "tflops": out["tflops"],
                               "by": "bench/gpu_challenge.py"}
    out["checks"] = checks
    out["ok"] = all(checks.values())
    print(f"{out['device']}: n={ch.n} rounds={ch.rounds} matmul {tm.matmul_s:.4f}s "
          f"({out['tflops'] or 0:.1f} TFLOP/s, {out['ratio_vs_numpy'] or 0:.1f}x numpy), "
          f"commit {tm.commit_s:.3f}s, verify {out['verify_s']:.2f}s; checks {checks}")
    print(json.dumps(out))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
