#!/usr/bin/env python3
"""Failover of a managed job on the local chain: a provider's machine dies mid-job and the
job resumes on another provider from its newest checkpoint, against a cold start measured in
the same run.

Starts its own ``gpum-localnet`` (``$GPUM_LOCALNET_BIN``) and SeaweedFS's S3 server
(``$GPUM_WEED_BIN``, ``tests/s3server.py``); a market with 2 s windows and
``max_missed_windows`` 6 (the committee reports downtime after 12 s, later than the
controller's 3 windows); ``--providers`` providers with real workers running podman (P1 the
cheapest; the busybox-static image is built locally first, so it is present everywhere) and one
validator node, the committee. Then:

1. ``gpum run --managed`` on P1 (its controller a process of its own, as a user runs it): a
   container that counts one step a second, writing each count to ``/checkpoint/n``
   atomically (a temporary file renamed over it) before printing it; P1's worker syncs
   ``/checkpoint`` to the store every ``--interval`` seconds;
2. ``--kill-after`` seconds after the container started, P1's machine dies: its worker and
   reaper get SIGKILL, then its container (whose output is read after it was killed) is
   killed and removed;
3. the controller decides (no window accepted by the committee for 3 windows), finishes the
   old job and starts the successor, whose worker restores the newest checkpoint;
4. ``--run-after`` seconds after the successor runs, ``gpum job stop`` closes both attempts;
5. the baseline, ``--runs`` times: the same workload (same image, command and checkpoint
   settings, a fresh store prefix) as a plain ``gpum run`` on P2: from the command's start to
   its container running. Each is stopped (``gpum job stop``) after.

Times: the decision is when the controller's database shows attempt 0 stopping (polled every
0.2 s), the container running is podman's ``State.StartedAt``. Windows are counted on chain
time from the newest window the validator accepted for the old job to the decision event's
time. Work lost is the container's own count: the last count the first container printed
minus the count its successor resumed at. Money is read from chain: token balances of the
user, each provider's owner, the fee vault and the treasury, and the payment mint's supply,
before the managed job and after its attempts closed; seconds paid from each closed job's
tombstone (``paid_seconds``), seconds proven from the validator's store (the newest accepted
proof's ``approved_total``).

Prints one line per step, then as its LAST line one JSON object:
{"windows_last_proof_to_decision": W, "kill_to_decision_s": s, "decision_to_running_s": s,
 "cold_start_s": median, "cold_start_runs_s": [...], "decision_to_running_vs_cold_start": r,
 "target_decision_to_running_s": 30, "lost_seconds": N, "checkpoint_interval_s": I,
 "kill_after_last_checkpoint_s": s, "providers": {"P1": {"paid_seconds", "proven_seconds",
 "paid", "owner_received"}, "P2": {...}}, "money": {"user_spent", "paid", "deposited",
 "refunded", "to_providers", "fees", "burned", "conserved"}, "decision": text}
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

IMAGE = "localhost/gpum-busybox:1"
WINDOW = 2
PARAMS = {"window_seconds": WINDOW, "max_missed_windows": 6, "min_stake_per_gpu": 100,
          "validator_min_bond": 100, "unbonding_seconds": 0}  # fmt: skip
NAME = "failover"


def rows(db: Path, sql: str, *args: Any) -> list[tuple]:
    """Rows of a query on an SQLite file another process writes (read-only, WAL)."""
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute(sql, args).fetchall()
    except sqlite3.OperationalError:
        return []  # a table not created yet
    finally:
        con.close()


def _started_at(job: str, podman_env: dict[str, str]) -> float | None:
    """Unix time podman started the running container of ``job``, None before it runs."""
    env = {**os.environ, **podman_env}
    ids = subprocess.run(["podman", "ps", "-q", "--filter", f"label=gpum.job={job}", "--filter",
                          "status=running"], check=False, capture_output=True, text=True, timeout=60,
                         env=env).stdout.split()  # fmt: skip
    if not ids:
        return None
    out = subprocess.run(["podman", "inspect", "--format", "{{.State.StartedAt.UnixNano}}",
                          ids[0]], check=False, capture_output=True, text=True, timeout=60, env=env).stdout  # fmt: skip
    return int(out.strip()) / 1e9 if out.strip().isdigit() else None


def _wait(what: str, fn: Any, timeout: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout:.0f}s")
        time.sleep(interval)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--providers", type=int, default=2, help="providers, 2 or more (default 2)")
    ap.add_argument("--interval", type=int, default=10, help="checkpoint interval, s (10..)")
    ap.add_argument("--kill-after", type=float, default=25.0,
                    help="seconds after the first container started (default 25)")
    ap.add_argument("--run-after", type=float, default=6.0,
                    help="seconds the successor runs before the stop (default 6)")
    ap.add_argument("--runs", type=int, default=3, help="baseline cold starts (default 3)")
    opts = ap.parse_args()
    if opts.providers < 2:
        ap.error("--providers must be 2 or more")
    workdir = Path(tempfile.mkdtemp(prefix="failover-"))
    os.environ["GPUM_DATA_DIR"] = str(workdir / "data")  # job history and managed state here

    from gpu_market import pda, tokens
    from gpu_market.demo_migration import (
        COUNTER_SCRIPT,
        kill_machine,
        last_count,
        release_mounts,
        resumed_at,
    )
    from gpu_market.processes import Processes, free_port, start_localnet
    from harness import (
        CliNetwork,
        create_market,
        podman_setup,
        register_provider,
        remove_containers,
        start_validator,
        start_worker,
        stop_reapers,
    )
    from s3server import start_s3_server
    from solders.pubkey import Pubkey

    procs = Processes(workdir)
    s3 = None
    folders = [workdir]
    podman_env: dict[str, str] = {}
    jobs: list[str] = []
    started: list[subprocess.Popen] = []
    try:
        chain = start_localnet(procs)
        s3 = start_s3_server(workdir / "s3")
        os.environ.update({"AWS_ACCESS_KEY_ID": s3.access_key_id,
                           "AWS_SECRET_ACCESS_KEY": s3.secret_access_key})  # fmt: skip
        n = opts.providers
        owners = [f"owner_p{i + 1}" for i in range(n)]
        wkeys = [f"worker_p{i + 1}" for i in range(n)]
        m = create_market(chain.url, workdir, [*owners, *wkeys, "user", "validator"], PARAMS,
                          stake={**{o: 10**10 for o in owners}, "validator": 10**10},
                          payment={"user": 1_000 * 10**6})  # fmt: skip
        podman_env = podman_setup(workdir, IMAGE)
        net = CliNetwork(workdir, procs, m.url, m.client, m.keys, m.kps, m.address)
        providers, workers, nets = [], [], []
        for i in range(n):
            folder = workdir if i == 0 else workdir / f"p{i + 1}"
            if i:
                folder.mkdir()
                shutil.copy(workdir / "containers.conf", folder / "containers.conf")
                folders.append(folder)
            pnet = replace(net, workdir=folder)
            port = free_port()
            p = register_provider(net, owners[i], m.kps[wkeys[i]].pubkey(), gpus=4,
                                  price=f"{1.8 * (i + 1):.1f}", endpoint=f"http://127.0.0.1:{port}")  # fmt: skip
            providers.append(p)
            nets.append(pnet)
            workers.append(start_worker(pnet, p, port, name=f"worker_p{i + 1}", key=wkeys[i],
                                        gpus=4, window=WINDOW))  # fmt: skip
        start_validator(net, free_port())
        print(f"world: {n} providers, 1 validator, windows of {WINDOW}s, S3 at {s3.endpoint}",
              flush=True)  # fmt: skip
        store = s3.store_url(prefix=NAME)
        ckpt = ["--checkpoint-endpoint", s3.endpoint, "--checkpoint-interval",
                f"{opts.interval}s", "--checkpoint-max-size", "16MiB"]  # fmt: skip
        workload = ["--gpu", "h100:1", "--hours", "0.05", "--image", IMAGE, "--cmd",
                    '["/bin/sh", "-c"]', "--arg", COUNTER_SCRIPT, "--timeout", "120"]  # fmt: skip

        # -- money before ----------------------------------------------------------------
        mint = m.payment_mint
        fee_vault = pda.fee_vault_pda(m.address)
        owner_accts = [tokens.ata(m.kps[o].pubkey(), mint) for o in owners]

        def money() -> dict[str, Any]:
            return {"user": net.balance("user"),
                    "owners": [net.token_balance(a) for a in owner_accts],
                    "fees": net.token_balance(fee_vault) + net.token_balance(m.treasury),
                    "supply": m.client.mint_supply(mint)}  # fmt: skip

        before = money()

        # -- 1. the managed job on P1 ------------------------------------------------------
        log = workdir / "controller.log"
        with open(log, "ab") as out:
            controller = subprocess.Popen(
                net.argv("user", "run", "--market", str(m.address), "--managed", "--name", NAME,
                         "--provider", str(providers[0]), "--missed-windows", "3",
                         "--start-timeout", "60s", *workload, "--checkpoint-store", store, *ckpt,
                         output="json"),
                stdout=out, stderr=subprocess.STDOUT, env=net.env(), start_new_session=True)  # fmt: skip
        started.append(controller)
        mdb = workdir / "data" / "managed.sqlite"

        def attempts() -> list[tuple]:
            return rows(mdb, "SELECT idx, job, provider, state, end_kind, end_reason FROM "
                              "attempts ORDER BY idx")  # fmt: skip

        def check_controller() -> None:
            if controller.poll() is not None:
                raise SystemExit(f"the controller exited ({controller.returncode}):\n"
                                 f"{log.read_text()[-3000:]}")  # fmt: skip

        def running(idx: int) -> Any:
            check_controller()
            atts = attempts()
            return len(atts) > idx and atts[idx][3] == "running" and atts[idx]

        first = _wait("the first attempt running", lambda: running(0), 120)
        job0 = first[1]
        jobs.append(job0)
        t_first = _wait("the first container running", lambda: _started_at(job0, podman_env), 60)
        print(f"managed job on P1 (job {job0}) running; killing P1 {opts.kill_after:g}s after "
              "its container started", flush=True)  # fmt: skip
        time.sleep(max(0.0, t_first + opts.kill_after - time.time()))

        # -- 2. P1's machine dies -----------------------------------------------------------
        from gpu_market.checkpoint import CheckpointStore, Credentials
        from gpu_market.checkpoint_spec import CheckpointConfig

        cstore = CheckpointStore(CheckpointConfig(store=store, endpoint=s3.endpoint),
                                 Credentials(s3.access_key_id, s3.secret_access_key))  # fmt: skip
        latest = cstore.latest()
        cstore.close()
        t_kill = time.time()
        chain_kill = m.client.chain_time()
        printed = kill_machine(workers[0], workdir / "outbox.sqlite", job0, podman_env)
        last = last_count(printed)
        print(f"P1 killed at count {last}; newest checkpoint "
              f"{'none' if latest is None else f'#{latest.seq} at {latest.created_at}'}",
              flush=True)  # fmt: skip

        # -- 3. the decision and the successor --------------------------------------------
        def decided() -> Any:
            check_controller()
            atts = attempts()
            return atts and atts[0][4] is not None and time.time()

        t_decision = _wait("the failure decision", decided, 120)
        atts = _wait("the successor planned", lambda: len(attempts()) > 1 and attempts(), 120)
        job1, p_to = atts[1][1], atts[1][2]
        jobs.append(job1)
        t_running = _wait("the successor's container running",
                          lambda: _started_at(job1, podman_env), 120)  # fmt: skip
        _wait("the controller seeing it run", lambda: running(1), 60)
        events = rows(mdb, "SELECT at, level, text FROM events ORDER BY id")
        decision = next((at, text) for at, level, text in events
                        if level == "decision" and "stopping it and migrating" in text)  # fmt: skip
        vdb = workdir / "validator.sqlite"
        last_end = rows(vdb, "SELECT MAX(window_end) FROM proofs WHERE job = ? AND decision = "
                              "'accepted'", bytes(Pubkey.from_string(job0)))[0][0] or 0  # fmt: skip
        print(f"decision {t_decision - t_kill:.2f}s after the kill: {decision[1]}", flush=True)
        print(f"successor's container running on {p_to} {t_running - t_decision:.2f}s after "
              "the decision", flush=True)  # fmt: skip

        def successor_logs() -> Any:
            r = net.run_gpum("user", "job", "logs", NAME, ok=False, output="text")
            n0 = resumed_at(r.stdout.splitlines()) if r.returncode == 0 else None
            return n0 is not None and (n0,)

        start = _wait("the successor's first line", successor_logs, 60)[0]
        time.sleep(opts.run_after)

        # -- 4. stop: every attempt closed ------------------------------------------------
        stopped = net.gpum_json("user", "job", "stop", NAME, timeout=240)
        controller.wait(timeout=60)
        after = money()
        if stopped.get("phase") != "done":
            raise SystemExit(f"gpum job stop {NAME}: {stopped}")
        receipts = {job: json.loads(text) for job, text in
                    rows(mdb, "SELECT job, receipt FROM attempts ORDER BY idx") if text}  # fmt: skip
        idx_of = {str(p): i for i, p in enumerate(providers)}
        owner_received = [after["owners"][i] - before["owners"][i] for i in range(n)]
        per: dict[str, Any] = {}
        for a in stopped["attempts"]:
            job, rc = a["job"], receipts[a["job"]]
            key = bytes(Pubkey.from_string(job))
            proven = rows(vdb, "SELECT MAX(approved_total) FROM proofs WHERE job = ? AND "
                                "decision = 'accepted'", key)[0][0]  # fmt: skip
            i = idx_of[a["provider"]]
            per[f"P{i + 1}"] = {
                "provider": a["provider"], "job": job,
                "paid_seconds": m.client.fetch_closed_job(Pubkey.from_string(job)).paid_seconds,
                "proven_seconds": proven or 0, "paid_provider": rc["paid_provider"],
                "owner_received": owner_received[i], "receipt": rc}  # fmt: skip
        rcs = [p["receipt"] for p in per.values()]
        paid = sum(r["paid"] for r in rcs)
        deposited = sum(r["deposited"] for r in rcs)
        refunded = sum(r["refunded"] for r in rcs)
        to_providers = sum(r["paid_provider"] for r in rcs)
        fees = sum(r["paid_validators"] + r["paid_treasury"] for r in rcs)
        burned = sum(r["burned"] for r in rcs)
        user_spent = before["user"] - after["user"]
        conserved = (user_spent == paid == deposited - refunded == to_providers + fees + burned
                     and sum(owner_received) == to_providers
                     and after["fees"] - before["fees"] == fees
                     and before["supply"] - after["supply"] == burned
                     and all(p["owner_received"] == p["paid_provider"] for p in per.values()))  # fmt: skip

        # -- 5. baseline: the same workload as a plain `gpum run`, cold ---------------------
        cold: list[float] = []
        stops: list[subprocess.Popen] = []
        for i in range(opts.runs):
            t0 = time.time()
            out = net.gpum_json("user", "run", "--market", str(m.address), "--provider",
                                str(providers[1]), *workload, "--checkpoint-store",
                                s3.store_url(prefix=f"baseline-{i}"), *ckpt, timeout=180)  # fmt: skip
            jobs.append(out["job"])
            t_up = _wait("the baseline container running",
                         lambda j=out["job"]: _started_at(j, podman_env), 60)  # fmt: skip
            cold.append(t_up - t0)
            print(f"baseline {i + 1}: gpum run -> container running {cold[-1]:.2f}s", flush=True)
            p = subprocess.Popen(net.argv("user", "job", "stop", out["job"], output="json"),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env=net.env(), start_new_session=True)  # fmt: skip
            stops.append(p)
            started.append(p)
        for p in stops:
            p.wait(timeout=240)

        d2r = t_running - t_decision
        result = {
            "windows_last_proof_to_decision": round((decision[0] - last_end) / WINDOW, 2),
            "kill_to_decision_s": round(t_decision - t_kill, 2),
            "last_proof_to_kill_s": chain_kill - last_end,
            "decision_to_running_s": round(d2r, 2),
            "cold_start_s": round(statistics.median(cold), 2),
            "cold_start_runs_s": [round(x, 2) for x in cold],
            "decision_to_running_vs_cold_start": round(d2r / statistics.median(cold), 2),
            "target_decision_to_running_s": 30,
            "lost_seconds": None if last is None else last - start,
            "resumed_at": start, "last_count": last,
            "checkpoint_interval_s": opts.interval,
            "kill_after_last_checkpoint_s": None if latest is None
            else round(t_kill - latest.created_at, 2),
            "providers": {k: {f: v[f] for f in ("provider", "paid_seconds", "proven_seconds",
                                                "paid_provider", "owner_received")}
                          for k, v in per.items()},
            "money": {"user_spent": user_spent, "paid": paid, "deposited": deposited,
                      "refunded": refunded, "to_providers": to_providers, "fees": fees,
                      "burned": burned, "conserved": conserved},
            "decision": decision[1],
        }  # fmt: skip
        print(json.dumps(result), flush=True)
        return 0
    finally:
        for p in started:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        procs.stop_all()
        for folder in folders:
            stop_reapers(folder)
        release_mounts(workdir)  # checkpoint volumes of killed workers
        if podman_env:
            remove_containers([Pubkey.from_string(j) for j in jobs], podman_env)
        if s3 is not None:
            s3.stop()


if __name__ == "__main__":
    raise SystemExit(main())
