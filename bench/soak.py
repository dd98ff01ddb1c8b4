#!/usr/bin/env python3
"""Soak: managed jobs on the local chain while a seeded schedule kills and brings back
workers, validators and controllers; then every figure of money and proof is read back.

Starts its own ``gpum-localnet`` (``$GPUM_LOCALNET_BIN``); a market with 2 s windows and
``max_missed_windows`` 6 (a downtime report after 12 s of silence); ``--providers`` providers
(4 simulated GPUs each, real workers running podman with the busybox-static image built
locally), ``--validators`` validator nodes (every job's committee: 3 of them, quorum 2) and
``--jobs`` managed jobs (``gpum run --managed``, job i starting on provider i, each controller
a process of its own; ``--missed-windows 3``, at most 10 restarts). For ``--seconds`` seconds
the schedule (:func:`fault_schedule`, from ``--seed``) injects, one per group (workers,
validators, controllers) at a time:

* ``kill_worker``: SIGKILL to the process group of the worker running a managed job's current
  attempt (the job drawn by the seed; its containers and reaper live on), restarted after
  2..20 s (under 3 windows the job stays, over it the controller migrates);
* ``pause_worker``: SIGSTOP to such a worker's process, SIGCONT after 2..12 s. The process
  alone, not its group: every provider of the soak shares one podman, and a podman command
  of the worker frozen while it holds podman's lock freezes every other provider's podman
  calls too, hence their proofs (a fault no real provider shares with another);
* ``kill_validator``: SIGKILL to a validator node, restarted after 2..15 s on its database;
* ``kill_controller``: SIGKILL to a managed job's controller, restarted after 2..12 s with
  ``gpum job watch --managed NAME``.

Then everything is brought back, ``gpum job stop`` stops each managed job (every attempt
finished or cancelled, its grace waited out, closed) and the figures are read:

* faults injected (by kind); migrations (successor attempts that ran), by reason;
* seconds proven (per attempt job, the highest ``approved_total`` of an accepted proof in
  any committee member's store), seconds paid (each closed job's tombstone), tokens paid,
  refunded and deposited (the controllers' receipts, read from chain at the close);
* honest slashes, which must be 0: a validator slashed at all (it never equivocates), a
  provider slashed for equivocation (it never signs two windows), or a provider slashed for
  downtime with no fault of its worker in the ``(max_missed_windows + 2)`` windows plus 30 s
  before the slash (its worker was up and proving); slashes are polled every 2 s from the
  Provider and Validator accounts;
* double or lost payments, which must be 0: a job paid more seconds than any member proved;
  a receipt whose ``deposited - refunded != paid``; the user's token balance change not the
  sum of the receipts; a provider owner's balance change not the sum of its receipts; the
  fee vault and treasury change not the validators' and treasury's shares; the mint supply
  change not what was burned; an attempt left unclosed.

Prints one line per fault, then as its LAST line one JSON object:
{"seconds", "seed", "providers", "validators", "jobs", "faults_injected": {kind: n, "total"},
 "migrations", "migration_reasons": {reason: n}, "phases_at_end", "attempts", "seconds_proven", "seconds_paid",
 "paid_over_proven", "paid", "refunded", "deposited", "slashes": {...}, "honest_slashes",
 "double_or_lost_payments", "problems": [...], "wall_s"}
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from failover import rows  # bench/ is on sys.path: the script's folder

IMAGE = "localhost/gpum-busybox:1"
WINDOW = 2
MAX_MISSED = 6
PARAMS = {"window_seconds": WINDOW, "max_missed_windows": MAX_MISSED, "min_stake_per_gpu": 100,
          "validator_min_bond": 100, "unbonding_seconds": 0}  # fmt: skip
HONEST_WINDOW_S = (MAX_MISSED + 2) * WINDOW + 30
"""A downtime slash with no fault of that worker this long before it is an honest slash."""
WORKLOAD = 'trap "exit 0" TERM; while true; do echo tick; sleep 1 & wait $!; done'
KINDS = ("kill_worker", "pause_worker", "kill_validator", "kill_controller")
WEIGHTS = (4, 2, 3, 3)
DOWN_S = {"kill_worker": (2.0, 20.0), "pause_worker": (2.0, 12.0),
          "kill_validator": (2.0, 15.0), "kill_controller": (2.0, 12.0)}  # fmt: skip
GROUP = {"kill_worker": "worker", "pause_worker": "worker", "kill_validator": "validator",
         "kill_controller": "controller"}  # fmt: skip


@dataclass(frozen=True)
class Fault:
    at: float
    """Seconds after the soak began."""
    kind: str
    target: int
    """Index among the workers, validators or controllers."""
    down_s: float
    job: int | None = None
    """A worker fault's managed job: it hits the worker running that job's current attempt
    (``target`` when none runs)."""


def fault_schedule(seed: int, seconds: float, sizes: dict[str, int], *, mean_gap: float = 7.0,
                   quiet_end: float = 8.0) -> list[Fault]:  # fmt: skip
    """The faults of a soak of ``seconds`` (pure: the same ``seed`` gives the same list):
    gaps drawn from an exponential of mean ``mean_gap`` seconds, kinds by ``WEIGHTS``, at
    most one target of each group (worker, validator, controller) down at a time, none
    starting in the last ``quiet_end`` seconds; each lasts at most until the end. A worker
    fault names a managed job (``sizes["job"]`` of them) whose worker it hits."""
    rng = random.Random(seed)
    free_at = dict.fromkeys(GROUP.values(), 0.0)
    out: list[Fault] = []
    t = rng.uniform(2.0, mean_gap)
    while t < seconds - quiet_end:
        kind = rng.choices(KINDS, WEIGHTS)[0]
        group = GROUP[kind]
        target = rng.randrange(sizes[group])
        down = min(rng.uniform(*DOWN_S[kind]), seconds - t)
        job = rng.randrange(sizes["job"]) if group == "worker" else None
        if free_at[group] <= t:
            out.append(Fault(round(t, 2), kind, target, round(down, 2), job))
            free_at[group] = t + down + 1.0
        t += rng.expovariate(1.0 / mean_gap)
    return out


@dataclass
class Service:
    """A process the soak kills and starts again: ``argv()`` gives its command line (each
    start logs to ``<name>.<n>.log``); ``down`` its fault intervals (wall time)."""

    name: str
    argv: Any
    procs: Any
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None
    starts: int = 0
    down: list[list[float]] = field(default_factory=list)

    def start(self) -> None:
        self.starts += 1
        self.proc = self.procs.start(f"{self.name}.{self.starts}", self.argv(self.starts),
                                     env=self.env)  # fmt: skip

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def pause(self, sig: int) -> None:
        """``sig`` to the process alone, not its group (see ``pause_worker``)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def fault(self, kind: str) -> None:
        self.down.append([time.time(), float("inf")])
        if kind == "pause_worker":
            self.pause(signal.SIGSTOP)
        else:
            self.signal(signal.SIGKILL)
            if self.proc is not None:
                self.proc.wait(timeout=30)

    def restore(self, kind: str) -> None:
        if kind == "pause_worker":
            self.pause(signal.SIGCONT)
        else:
            self.start()
        self.down[-1][1] = time.time()

    def faulty_between(self, a: float, b: float) -> bool:
        return any(s <= b and e >= a for s, e in self.down)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=150.0, help="soak length (default 150)")
    ap.add_argument("--seed", type=int, default=1, help="fault schedule seed (default 1)")
    ap.add_argument("--providers", type=int, default=3)
    ap.add_argument("--validators", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    opts = ap.parse_args()
    if opts.providers < 2 or opts.validators < 3 or opts.jobs < 1:
        ap.error("at least 2 providers, 3 validators and 1 job")
    t_begin = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    os.environ["GPUM_DATA_DIR"] = str(workdir / "data")

    from gpu_market import pda, tokens
    from gpu_market.demo_migration import release_mounts
    from gpu_market.processes import Processes, free_port, start_localnet, tool, wait_http
    from harness import CliNetwork, create_market, podman_setup, register_provider, stop_reapers
    from solders.pubkey import Pubkey

    procs = Processes(workdir)
    services: list[Service] = []
    providers: list[Any] = []
    podman_env: dict[str, str] = {}
    folders = [workdir]
    try:
        chain = start_localnet(procs)
        np_, nv, nj = opts.providers, opts.validators, opts.jobs
        owners = [f"owner_p{i + 1}" for i in range(np_)]
        wkeys = [f"worker_p{i + 1}" for i in range(np_)]
        vals = [f"validator{i + 1}" for i in range(nv)]
        m = create_market(chain.url, workdir, [*owners, *wkeys, *vals, "user"], PARAMS,
                          stake={n: 10**10 for n in (*owners, *vals)},
                          payment={"user": 10_000 * 10**6})  # fmt: skip
        podman_env = podman_setup(workdir, IMAGE)
        net = CliNetwork(workdir, procs, m.url, m.client, m.keys, m.kps, m.address)
        market = str(m.address)
        workers: list[Service] = []
        for i in range(np_):
            folder = workdir / f"p{i + 1}"
            folder.mkdir()
            folders.append(folder)
            (folder / "containers.conf").write_text((workdir / "containers.conf").read_text())
            port = free_port()
            p = register_provider(net, owners[i], m.kps[wkeys[i]].pubkey(), gpus=4,
                                  price=f"{1.8 + 0.9 * i:.1f}", endpoint=f"http://127.0.0.1:{port}")  # fmt: skip
            providers.append(p)

            def worker_argv(n: int, folder: Path = folder, key: str = wkeys[i], p: Pubkey = p,
                            port: int = port) -> list[str]:  # fmt: skip
                return [tool("gpum-worker"), "run", "--simulate", "--gpus", "4", "--seed", "1",
                        "--key", str(m.keys[key]), "--db", str(folder / "outbox.sqlite"),
                        "--window-seconds", str(WINDOW), "--poll-seconds", "1", "--rpc-url",
                        m.url, "--program-id", str(m.client.program_id), "--market", market,
                        "--provider", str(p), "--api-listen", f"127.0.0.1:{port}", "--runtime",
                        "podman", "--containers-conf", str(folder / "containers.conf"),
                        "--publish-host", "127.0.0.1"]  # fmt: skip

            w = Service(f"worker_p{i + 1}", worker_argv, procs)
            w.start()
            workers.append(w)
            services.append(w)
            w.health = f"http://127.0.0.1:{port}/v1/health"  # type: ignore[attr-defined]
        validators: list[Service] = []
        for v in vals:
            port = free_port()
            net.gpum(v, "validator", "register", "--market", market, "--endpoint",
                     f"http://127.0.0.1:{port}", "--bond", "500")  # fmt: skip

            def validator_argv(n: int, v: str = v, port: int = port) -> list[str]:
                return [tool("gpum-validator"), "run", "--url", m.url, "--keypair",
                        str(m.keys[v]), "--market", market, "--listen", f"127.0.0.1:{port}",
                        "--db", str(workdir / f"{v}.sqlite"), "--settle-every", "2"]  # fmt: skip

            s = Service(v, validator_argv, procs)
            s.start()
            validators.append(s)
            services.append(s)
            s.health = f"http://127.0.0.1:{port}/health"  # type: ignore[attr-defined]
        for s in (*workers, *validators):
            wait_http(s.health, timeout=90)  # type: ignore[attr-defined]
        names = [f"soak{j + 1}" for j in range(nj)]
        controllers: list[Service] = []
        for j, name in enumerate(names):
            def controller_argv(n: int, name: str = name, j: int = j) -> list[str]:
                if n == 1:
                    return net.argv("user", "run", "--market", market, "--managed", "--name",
                                    name, "--provider", str(providers[j % np_]), "--gpu",
                                    "h100:1", "--hours", "0.1", "--image", IMAGE, "--cmd",
                                    '["/bin/sh", "-c"]', "--arg", WORKLOAD, "--missed-windows",
                                    "3", "--start-timeout", "45s", "--max-restarts", "10",
                                    "--timeout", "120", output="json")  # fmt: skip
                return net.argv("user", "job", "watch", "--managed", name, output="json")

            c = Service(f"controller_{name}", controller_argv, procs, env=net.env())
            controllers.append(c)
            services.append(c)

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
        for c in controllers:
            c.start()
        mdb = workdir / "data" / "managed.sqlite"

        def phases() -> dict[str, str]:
            return dict(rows(mdb, "SELECT name, phase FROM managed_jobs"))

        deadline = time.monotonic() + 180
        while any(phases().get(n) != "running" for n in names):
            if time.monotonic() > deadline:
                raise SystemExit(f"managed jobs not running after 180 s: {phases()}")
            time.sleep(0.5)
        print(f"world: {np_} providers, {nv} validators, {nj} managed jobs running; soaking "
              f"{opts.seconds:g}s, seed {opts.seed}", flush=True)  # fmt: skip

        # -- the soak ----------------------------------------------------------------------
        groups = {"worker": workers, "validator": validators, "controller": controllers}
        schedule = fault_schedule(opts.seed, opts.seconds,
                                  {**{k: len(v) for k, v in groups.items()}, "job": nj})
        index_of = {str(p): i for i, p in enumerate(providers)}

        def target(f: Fault) -> Service:
            if f.job is None:
                return groups[GROUP[f.kind]][f.target]
            current = rows(mdb, "SELECT a.provider FROM attempts a JOIN managed_jobs m ON "
                                "m.id = a.managed_id WHERE m.name = ? AND a.state = 'running'",
                           names[f.job])  # fmt: skip
            return workers[index_of[current[0][0]]] if current else workers[f.target]

        vaddrs = [pda.validator_pda(m.address, m.kps[v].pubkey()) for v in vals]
        seen = {"providers": {str(p): (0, 0) for p in providers}, "validators": [0] * nv}
        slashes: list[dict[str, Any]] = []

        def watch_slashes() -> None:
            for i, p in enumerate(providers):
                view = m.client.fetch_provider(p)
                if view is None:
                    continue
                count, eq = view.reputation.slashes, view.last_equivocation_slash_at
                old_count, old_eq = seen["providers"][str(p)]
                if count > old_count:
                    slashes.append({"who": f"P{i + 1}", "at": view.last_slash_at,
                                    "kind": "equivocation" if eq != old_eq else "downtime"})  # fmt: skip
                    seen["providers"][str(p)] = (count, eq)
            for i, a in enumerate(vaddrs):
                view = m.client.fetch_validator(a)
                if view is not None and view.slashes > seen["validators"][i]:
                    slashes.append({"who": vals[i], "at": m.client.chain_time(),
                                    "kind": "validator"})  # fmt: skip
                    seen["validators"][i] = view.slashes

        start = time.monotonic()
        active: list[tuple[float, Fault, Service]] = []
        todo = list(schedule)
        last_watch = 0.0
        injected: Counter[str] = Counter()
        while (elapsed := time.monotonic() - start) < opts.seconds:
            while todo and todo[0].at <= elapsed:
                f = todo.pop(0)
                svc = target(f)
                if any(a[2] is svc for a in active):
                    continue  # already down (a pause and a kill of one worker never overlap)
                svc.fault(f.kind)
                injected[f.kind] += 1
                active.append((f.at + f.down_s, f, svc))
                why = "" if f.job is None else f" (running {names[f.job]})"
                print(f"{elapsed:6.1f}s {f.kind} {svc.name}{why} for {f.down_s:.1f}s", flush=True)
            for a in [a for a in active if a[0] <= elapsed]:
                a[2].restore(a[1].kind)
                active.remove(a)
            if elapsed - last_watch >= 2:
                last_watch = elapsed
                watch_slashes()
            time.sleep(0.2)
        for _, f, svc in active:
            svc.restore(f.kind)
        at_end = phases()
        print(f"soak over after {opts.seconds:g}s ({at_end}); stopping the managed jobs",
              flush=True)  # fmt: skip

        # -- stop everything that runs: every attempt closed --------------------------------
        for s in (*workers, *validators):
            wait_http(s.health, timeout=90)  # type: ignore[attr-defined]
        stops = [subprocess.Popen(net.argv("user", "job", "stop", n, "--timeout", "4m",
                                           output="json"), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=net.env())
                 for n in names]
        stopped = []
        for n, p in zip(names, stops):
            out, err = p.communicate(timeout=400)
            lines = out.strip().splitlines()
            stopped.append(json.loads(lines[-1]) if p.returncode == 0 and lines else
                           {"managed": n, "error": err.strip()[-500:]})  # fmt: skip
        for c in controllers:
            if c.proc is not None:
                try:
                    c.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    c.signal(signal.SIGKILL)
        watch_slashes()
        after = money()

        # -- figures -----------------------------------------------------------------------
        problems: list[str] = []
        atts = rows(mdb, "SELECT m.name, a.idx, a.job, a.provider, a.state, a.end_kind, "
                         "a.end_reason, a.started_at, a.receipt FROM attempts a JOIN managed_jobs "
                         "m ON m.id = a.managed_id ORDER BY m.name, a.idx")  # fmt: skip
        receipts = []
        proven_total = paid_seconds_total = 0
        per_owner = Counter()
        idx_of = {str(p): i for i, p in enumerate(providers)}
        reasons: Counter[str] = Counter()
        migrations = 0
        for name, idx, job, provider, state, end_kind, end_reason, started_at, receipt in atts:
            if idx > 0 and started_at:
                migrations += 1
            if end_kind in ("failure", "exit", "user_migrate") and end_reason:
                reasons[end_reason.split(" (")[0].split(":")[0][:60]] += 1
            if state == "abandoned":
                continue
            if state != "closed" or not receipt:
                problems.append(f"{name}#{idx} job {job} is {state}, not closed")
                continue
            r = json.loads(receipt)
            receipts.append(r)
            key = bytes(Pubkey.from_string(job))
            proven = max((rows(workdir / f"{v}.sqlite", "SELECT MAX(approved_total) FROM proofs "
                                                          "WHERE job = ? AND decision = 'accepted'",
                               key)[0][0] or 0 for v in vals), default=0)  # fmt: skip
            tomb = m.client.fetch_closed_job(Pubkey.from_string(job))
            paid_s = tomb.paid_seconds if tomb is not None else 0
            proven_total += proven
            paid_seconds_total += paid_s
            per_owner[idx_of[provider]] += r["paid_provider"]
            if paid_s > proven:
                problems.append(f"{name}#{idx} job {job}: paid {paid_s} s, proven {proven} s")
            if r["deposited"] - r["refunded"] != r["paid"]:
                problems.append(f"{name}#{idx} job {job}: receipt {r} does not add up")
        paid = sum(r["paid"] for r in receipts)
        checks = {
            "the user's balance change": (before["user"] - after["user"], paid),
            "the fee vault and treasury change": (after["fees"] - before["fees"],
                                                  sum(r["paid_validators"] + r["paid_treasury"]
                                                      for r in receipts)),
            "the mint supply change": (before["supply"] - after["supply"],
                                       sum(r["burned"] for r in receipts)),
        }  # fmt: skip
        for i in range(np_):
            checks[f"P{i + 1}'s owner balance change"] = (after["owners"][i] - before["owners"][i],
                                                          per_owner[i])  # fmt: skip
        for what, (chain_says, receipts_say) in checks.items():
            if chain_says != receipts_say:
                problems.append(f"{what} is {chain_says}, the receipts say {receipts_say}")
        honest = []
        for s in slashes:
            if s["kind"] != "downtime":
                honest.append(s)
                continue
            w = workers[int(s["who"][1:]) - 1]
            if not w.faulty_between(s["at"] - HONEST_WINDOW_S, s["at"]):
                honest.append(s)
        for s in stopped:
            if s.get("phase") != "done":
                problems.append(f"gpum job stop {s.get('managed')}: {s}")
        result = {
            "seconds": opts.seconds, "seed": opts.seed, "providers": np_, "validators": nv,
            "jobs": nj, "faults_injected": {**{k: injected[k] for k in KINDS},
                                            "total": sum(injected.values())},
            "migrations": migrations, "migration_reasons": dict(reasons),
            "phases_at_end": at_end,
            "attempts": len(atts), "seconds_proven": proven_total,
            "seconds_paid": paid_seconds_total,
            "paid_over_proven": round(paid_seconds_total / proven_total, 3) if proven_total else None,
            "paid": paid, "refunded": sum(r["refunded"] for r in receipts),
            "deposited": sum(r["deposited"] for r in receipts),
            "slashes": dict(Counter(s["kind"] for s in slashes)),
            "honest_slashes": len(honest), "honest_slash_list": honest,
            "double_or_lost_payments": len(problems), "problems": problems,
            "wall_s": round(time.monotonic() - t_begin, 1),
        }  # fmt: skip
        print(json.dumps(result), flush=True)
        return 0 if not honest and not problems else 1
    finally:
        for svc in services:
            svc.pause(signal.SIGCONT)  # a paused process cannot stop
        procs.stop_all()
        for folder in folders:
            stop_reapers(folder)
        release_mounts(workdir)  # checkpoint volumes of killed workers
        if podman_env:
            _remove_provider_containers(providers, podman_env)


def _remove_provider_containers(providers: list[Any], podman_env: dict[str, str]) -> None:
    """Removes the containers of the soak's providers (their workers remove them; a soak
    stopped half-way may not)."""
    for p in providers:
        cmd = f"podman ps -aq --filter label=gpum.provider={p} | xargs -r podman rm -f"
        subprocess.run(["sh", "-c", cmd], capture_output=True, timeout=120, check=False,
                       env={**os.environ, **podman_env})  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
