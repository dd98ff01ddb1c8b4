#!/usr/bin/env python3
"""Settlement cost of one validator: transactions and fees per job-hour, and payout lag.

Starts ``gpum-localnet`` and two validator nodes, each ``gpum_validator.cli``'s own ``run``
wiring (HTTP intake, settlement loop) in a child process:

* **batched** (measured): the default policy, several jobs per v0 transaction with the
  node's address lookup table;
* **legacy** (baseline, same run): ``SettlePolicy(lookup_table=False)``, one settle per
  legacy transaction and no lookup table, on ``--baseline-jobs`` jobs of its own.

Creates ``--jobs`` running 1-GPU jobs (quorum 1, committee = the batched node) and the
baseline's jobs on a market with ``--window-seconds`` W windows, then acts as every job's
worker: at the end of each window it signs the window's proof (proof signature and receipt
digest signature by the provider's worker key, as ``gpum-worker`` does) and posts it to the job's node
(``POST /v1/proofs/batch``). After ``--windows`` windows per job it reads back what the
nodes did.

Time is scaled: a "job-hour" is 60 windows (an hour of 60 s windows), and the lag target of
5 minutes at 60 s windows is 5 windows. Figures per node:

* ``tx_per_job_hour``: every transaction the node paid for during the run (settle and
  lookup-table transactions, from ``getSignaturesForAddress`` of its authority) per 60 paid
  windows (a window is paid once a settlement covers it on chain);
* ``lamports_per_job_hour``: the fees of those transactions (the node's balance drop less the
  rent held by its lookup tables, which is a refundable deposit, reported apart) per 60 paid
  windows;
* ``payout_lag``: for each of the first ``windows - settle_every`` windows of every job (the
  later ones are not yet due when the run ends), its window_end to the moment the node
  recorded the settlement covering it as confirmed; a window never paid counts as the time to
  the end of the run. p50 / p99 in seconds and in windows.

Prints a table, then as its LAST line one JSON object:
``{"tx_per_job_hour":X,"lamports_per_job_hour":Y,"payout_lag_p99_s":Z,"jobs":N, ...}`` with the
baseline's figures and the settings as extra keys. Targets: ``tx_per_job_hour <= 4``
with ``payout_lag_p99_windows <= 5``. ``--sizes`` prints how many settlements fit one
transaction per layout and quorum (no chain needed) and exits.

Run it from the repository root with the venv's python and ``GPUM_LOCALNET_BIN`` set.
"""

from __future__ import annotations

import argparse
import base64
import heapq
import json
import math
import os
import queue
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOUR_WINDOWS = 60
LAG_TARGET_WINDOWS = 5
TX_TARGET = 4
PRICE = 1  # payment base units per GPU-second
BOND = 10_000
TABLES_META = "settle_lookup_tables"
POSTERS = 8
"""Threads posting proofs to the nodes at once."""
POST_BATCH = 16
"""Proofs per ``/v1/proofs/batch`` request."""


# ----------------------------------------------------------------------------- sizes


def sizes() -> list[dict[str, Any]]:
    """Settlements per transaction (worst case: nothing shared but the market) per layout and
    quorum, for today's Ed25519 layout (one 40-byte message: the 32-byte receipt digest the
    worker signs || approved_seconds) and, as the before-figure, the layout that signs the whole
    receipt message instead of its digest (one 181-byte message: the 173-byte receipt message the worker signed ||
    approved_seconds), computed with the same sizing code."""
    from gpu_market.codec import default_codec
    from gpu_market.constants import PACKET_DATA_SIZE
    from gpu_market.receipt import RECEIPT_MESSAGE_LEN
    from gpu_market.settle import (
        _shared_message_instruction,
        _worst_case_items,
        max_settle_items_per_tx,
        max_settle_items_per_v0_tx,
        settle_instructions,
        settle_table_addresses,
        transaction_size,
        v0_transaction_size,
    )
    from solders.address_lookup_table_account import AddressLookupTableAccount
    from solders.pubkey import Pubkey

    codec = default_codec()

    def full_message_fit(quorum: int, table: str | None) -> int:
        authority, n, ixs, addrs = Pubkey.new_unique(), 0, [], []
        full = RECEIPT_MESSAGE_LEN + 8
        for item, accts in _worst_case_items(quorum):
            _, settle = settle_instructions(codec, authority, item, accts)
            entries = [(bytes(item.worker_key), bytes(64), RECEIPT_MESSAGE_LEN)]
            entries += [(bytes(a.authority), bytes(64), full) for a in item.attestations]
            candidate = ixs + [_shared_message_instruction(entries, bytes(full)), settle]
            shared, own = settle_table_addresses(item, accts)
            more = addrs + list(shared) + (list(own) if table == "all" else [])
            if table is None:
                size = transaction_size(candidate, authority)
            else:
                size = v0_transaction_size(candidate, authority, [AddressLookupTableAccount(
                    Pubkey.new_unique(), list(dict.fromkeys(more)))])
            if size > PACKET_DATA_SIZE:
                return n
            ixs, addrs, n = candidate, more, n + 1
        raise AssertionError("unreachable")

    out = []
    for q in (1, 2, 3):
        out.append({
            "quorum": q,
            "legacy": max_settle_items_per_tx(codec, q),
            "v0_table_all": max_settle_items_per_v0_tx(codec, q),
            "v0_table_shared": max_settle_items_per_v0_tx(codec, q, own_accounts_in_table=False),
            "legacy_full_msg": full_message_fit(q, None),
            "v0_table_all_full_msg": full_message_fit(q, "all"),
            "v0_table_shared_full_msg": full_message_fit(q, "shared"),
        })
    return out


def print_sizes() -> None:
    rows = sizes()
    cols = list(rows[0])
    print("settlements per transaction (1232-byte packet, worst case)")
    print("  ".join(f"{c:>22}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:>22}" for c in cols))
    every = 5
    print(f"\ntx per job-hour at one settlement every {every} windows "
          f"({HOUR_WINDOWS // every} per job-hour), quorum 1:")
    for c in cols[1:]:
        print(f"  {c:>22}: {HOUR_WINDOWS / every / rows[0][c]:.1f}")


# ----------------------------------------------------------------------------- validator child


def validator_main(argv: list[str]) -> None:
    """``settle_cost.py _validator``: one node with ``gpum-validator run``'s wiring and the
    given settle policy (``--legacy`` turns the lookup-table batching off)."""
    ap = argparse.ArgumentParser(prog="settle_cost.py _validator")
    ap.add_argument("--url", required=True)
    ap.add_argument("--keypair", required=True, type=Path)
    ap.add_argument("--market", required=True)
    ap.add_argument("--listen", required=True)
    ap.add_argument("--db", required=True, type=Path)
    ap.add_argument("--settle-every", type=int, required=True)
    ap.add_argument("--settle-interval", type=float, required=True)
    ap.add_argument("--legacy", action="store_true")
    a = ap.parse_args(argv)
    from gpum_validator.cli import _run, setup_logging
    from gpum_validator.config import SettlePolicy

    setup_logging("info")
    policy = SettlePolicy(settle_every_windows=a.settle_every, lookup_table=not a.legacy)
    policy.validate()
    # The feeder stands for every job's worker but is one source (127.0.0.1): the per-source
    # budget of job reads is lifted, it is not what this measures.
    _run(a.url, a.keypair, a.market, None, a.listen, False, a.db, policy, a.settle_interval, None,
         job_reads_per_source=1e9)


# ----------------------------------------------------------------------------- the run


@dataclass
class Node:
    name: str
    keypair: Any
    port: int
    db: Path
    jobs: list[Any] = field(default_factory=list)
    balance_start: int = 0
    last_sig_before: str | None = None


@dataclass
class JobPlan:
    address: Any
    provider: int
    node: Node
    started_at: int = 0
    seq: int = 0
    prev: bytes = bytes(32)


def _signatures_since(client: Any, address: Any, until: str | None) -> list[Any]:
    """Every transaction signature of ``address`` newer than ``until`` (newest first)."""
    from solders.signature import Signature

    out: list[Any] = []
    before = None
    stop = Signature.from_string(until) if until else None
    while True:
        resp = client.rpc.get_signatures_for_address(address, before=before, until=stop, limit=1000)
        page = list(resp.value)
        out += page
        if len(page) < 1000:
            return out
        before = page[-1].signature


def _p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.W = args.window_seconds
        from gpu_market.processes import Processes

        self.procs = Processes(workdir)

    # -- setup ------------------------------------------------------------------------------
    def start_chain(self) -> None:
        from gpu_market.client import GpuMarketClient
        from gpu_market.processes import start_localnet
        from solders.keypair import Keypair

        self.url = start_localnet(self.procs).url
        self.admin, self.user = Keypair(), Keypair()
        self.client = GpuMarketClient(self.url, payer=self.admin, timeout=60)

    def setup_market(self) -> None:
        from gpu_market import pda, tokens
        from gpu_market.processes import free_port
        from solders.keypair import Keypair

        a, c = self.args, self.client
        total = a.jobs + a.baseline_jobs
        n_providers = max(2, math.ceil(total / 100))
        gpus = math.ceil(total / n_providers)
        self.owners = [Keypair() for _ in range(n_providers)]
        self.workers = [Keypair() for _ in range(n_providers)]
        self.nodes = [Node("batched", Keypair(), free_port(), self.workdir / "batched.sqlite"),
                      Node("legacy", Keypair(), free_port(), self.workdir / "legacy.sqlite")]
        c.airdrop(self.admin.pubkey(), 100 * 10**9)
        c.airdrop(self.user.pubkey(), (10 + total // 50) * 10**9)
        for kp in (*self.owners, *self.workers, *(n.keypair for n in self.nodes)):
            c.airdrop(kp.pubkey(), 10 * 10**9)
        stake_mint = tokens.create_mint(c, self.admin, 6)
        self.payment_mint = tokens.create_mint(c, self.admin, 6)
        stake = 100 * gpus
        for kp in (*self.owners, *(n.keypair for n in self.nodes)):
            acct = tokens.create_ata(c, self.admin, kp.pubkey(), stake_mint)
            tokens.mint_to(c, stake_mint, acct, self.admin, stake + BOND)
        self.deposit = PRICE * self.W * (a.windows + 40) * 4
        user_pay = tokens.create_ata(c, self.admin, self.user.pubkey(), self.payment_mint)
        tokens.mint_to(c, self.payment_mint, user_pay, self.admin, self.deposit * total)
        treasury = tokens.create_ata(c, self.admin, self.admin.pubkey(), self.payment_mint)
        c.initialize_market(self.admin, 0, stake_mint, self.payment_mint, treasury, {
            "window_seconds": self.W, "fee_bps": 1000, "burn_bps": 5000,
            "min_stake_per_gpu": 100, "validator_min_bond": 100, "unbonding_seconds": 0,
            "max_missed_windows": 1000})
        self.market = pda.market_pda(self.admin.pubkey(), 0)
        self.providers = []
        for owner, worker in zip(self.owners, self.workers):
            spec = {"gpu_model": "Simulated H100", "gpu_count": gpus, "vram_mib": 81920,
                    "region": "localnet"}
            c.register_provider(owner, worker.pubkey(), spec, PRICE, self.market)
            c.stake(owner, self.market, stake)
            self.providers.append(pda.provider_pda(self.market, owner.pubkey()))
        for n in self.nodes:
            c.register_validator(n.keypair, self.market, BOND, f"http://127.0.0.1:{n.port}")

    def start_nodes(self) -> None:
        from gpu_market.processes import wait_http, write_keypair

        interval = self.args.settle_interval or self.W / 12
        for n in self.nodes:
            keyfile = write_keypair(self.workdir / f"{n.name}.json", n.keypair)
            argv = [sys.executable, str(Path(__file__).resolve()), "_validator", "--url", self.url,
                    "--keypair", str(keyfile), "--market", str(self.market),
                    "--listen", f"127.0.0.1:{n.port}", "--db", str(n.db),
                    "--settle-every", str(self.args.settle_every),
                    "--settle-interval", str(interval)]
            if n.name == "legacy":
                argv.append("--legacy")
            self.procs.start(n.name, argv)
        for n in self.nodes:
            wait_http(f"http://127.0.0.1:{n.port}/health", timeout=60)
            n.balance_start = self.client.rpc.get_balance(n.keypair.pubkey()).value
            sigs = _signatures_since(self.client, n.keypair.pubkey(), None)
            n.last_sig_before = str(sigs[0].signature) if sigs else None

    def create_jobs(self, out: queue.Queue) -> list[JobPlan]:
        """Every job, created and accepted by a few threads (each with its own client); each
        goes into ``out`` (the feeder) as soon as it runs, so its windows are delivered on
        time while the others are still being created."""
        import threading

        from gpu_market.client import GpuMarketClient

        a = self.args
        plan = [(i, self.nodes[0] if i < a.jobs else self.nodes[1])
                for i in range(a.jobs + a.baseline_jobs)]
        local: dict[int, GpuMarketClient] = {}

        def one(entry: tuple[int, Node]) -> JobPlan:
            i, node = entry
            c = local.setdefault(threading.get_ident(),
                                 GpuMarketClient(self.url, payer=self.admin, timeout=60))
            p = i % len(self.providers)
            _, job = c.create_job(self.user, self.market, self.providers[p], i + 1, 1, self.deposit,
                                  committee=[node.keypair.pubkey()], quorum=1)
            c.accept_job(self.workers[p], job)
            j = JobPlan(job, p, node, started_at=c.fetch_job(job).started_at)
            out.put(j)
            return j

        with ThreadPoolExecutor(max_workers=a.threads) as pool:
            jobs = list(pool.map(one, plan))
        for c in local.values():
            c.close()
        for j in jobs:
            j.node.jobs.append(j)
        return jobs

    # -- the worker's part ------------------------------------------------------------------
    def signed_proof(self, j: JobPlan, seq: int) -> dict[str, str]:
        from gpu_market.proof import (
            GpuWindow,
            WindowProof,
            encode_proof,
            proof_hash,
            receipt_for_proof,
            sign_proof,
        )
        from gpu_market.receipt import sign_receipt

        W = self.W
        worker = self.workers[j.provider]
        p = WindowProof(
            program_id=bytes(self.client.program_id), market=bytes(self.market),
            job=bytes(j.address), provider=bytes(self.providers[j.provider]),
            worker_key=bytes(worker.pubkey()), seq=seq,
            window_start=j.started_at + (seq - 1) * W, window_end=j.started_at + seq * W,
            sample_interval_ms=1000,
            gpus=(GpuWindow(uuid=f"GPU-{j.address}", samples=W, covered_seconds=W,
                            util_gpu_avg_bp=9000, util_gpu_max_bp=10000, temp_max_c=60,
                            ecc_uncorrected_delta=0),),
            process_list_hash=bytes(32), prev_proof_hash=j.prev, health_flags=0,
            billable_seconds=W, cumulative_seconds=seq * W)
        raw = encode_proof(p)
        j.prev = proof_hash(raw)
        seed = bytes(worker)[:32]
        return {"proof": base64.b64encode(raw).decode(),
                "proof_signature": base64.b64encode(sign_proof(seed, raw)).decode(),
                "receipt_signature": base64.b64encode(sign_receipt(seed, receipt_for_proof(p, raw))).decode(),
                "worker_key": str(worker.pubkey())}

    def feed(self, incoming: queue.Queue, total: int) -> dict[str, Any]:
        """Deliver seq 1..windows of each of ``total`` jobs (arriving on ``incoming``) at its
        window ends, in batches of up to ``POST_BATCH`` proofs posted by ``POSTERS``
        threads (the nodes verify requests in parallel); returns the answers' counts and how
        late after window_end proofs were delivered (``delivery_p99_s``: above a second or
        so this machine cannot keep up and the lag figures measure the bench, not the node)."""
        import httpx

        W, R = self.W, self.args.windows
        jobs: list[JobPlan] = []
        heap: list[tuple[float, int, int]] = []
        counts: dict[str, Any] = {}
        late: list[float] = []
        lock = threading.Lock()
        in_flight = [0]
        local = threading.local()

        def post(node: Node, chunk: list[tuple[int, int, dict[str, str]]]) -> None:
            client = getattr(local, "http", None)
            if client is None:
                client = local.http = httpx.Client(timeout=60)
            try:
                resp = client.post(f"http://127.0.0.1:{node.port}/v1/proofs/batch",
                                   json={"proofs": [body for _, _, body in chunk]})
                results = resp.json()["results"] if resp.status_code == 200 else None
                if results is not None and len(results) != len(chunk):
                    results = None
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                results = None
            at = time.time()
            with lock:
                in_flight[0] -= 1
                for n_, (i, seq, body) in enumerate(chunk):
                    r = results[n_] if results else {"retry": True}
                    if r.get("retry"):
                        counts["retried"] = counts.get("retried", 0) + 1
                        heapq.heappush(heap, (at + 0.5, i, -seq))  # resend these bytes
                        retry_bodies[(i, seq)] = body
                        continue
                    key = "accepted" if r.get("status") in ("accepted", "duplicate") else str(
                        r.get("error", "rejected"))
                    counts[key] = counts.get(key, 0) + 1
                    late.append(at - (jobs[i].started_at + seq * W))
                    if seq < R:
                        heapq.heappush(heap, (jobs[i].started_at + (seq + 1) * W, i, seq + 1))

        retry_bodies: dict[tuple[int, int], dict[str, str]] = {}
        with ThreadPoolExecutor(max_workers=POSTERS) as pool:
            while True:
                with lock:
                    while True:
                        try:
                            j = incoming.get_nowait()
                        except queue.Empty:
                            break
                        jobs.append(j)
                        heapq.heappush(heap, (j.started_at + W, len(jobs) - 1, 1))
                    if len(jobs) == total and not heap and in_flight[0] == 0:
                        break
                    now = time.time()
                    due: dict[str, list[tuple[int, int]]] = {}
                    while heap and heap[0][0] <= now:
                        _, i, seq = heapq.heappop(heap)
                        due.setdefault(jobs[i].node.name, []).append((i, seq))
                for name, entries in due.items():
                    node = next(n for n in self.nodes if n.name == name)
                    for k in range(0, len(entries), POST_BATCH):
                        chunk = []
                        for i, seq in entries[k:k + POST_BATCH]:
                            if seq < 0:  # a retry: the very same bytes
                                with lock:
                                    body = retry_bodies.pop((i, -seq))
                                chunk.append((i, -seq, body))
                            else:
                                chunk.append((i, seq, self.signed_proof(jobs[i], seq)))
                        with lock:
                            in_flight[0] += 1
                        pool.submit(post, node, chunk)
                self.procs.check_alive()
                with lock:
                    wait = heap[0][0] - time.time() if heap else 0.05
                time.sleep(max(0.0, min(0.05, wait)))
        counts["delivery_p50_s"] = round(_p(late, 0.5), 2)
        counts["delivery_p99_s"] = round(_p(late, 0.99), 2)
        return counts

    # -- measurement ------------------------------------------------------------------------
    def measure(self, node: Node, run_end: float) -> dict[str, Any]:
        from solders.pubkey import Pubkey

        W, a, c = self.W, self.args, self.client
        con = sqlite3.connect(f"file:{node.db}?mode=ro", uri=True)
        try:
            rows = con.execute("SELECT job, seq_to, status, signature, updated_at FROM intents").fetchall()
            meta = con.execute("SELECT value FROM meta WHERE key=?", (TABLES_META,)).fetchall()
        finally:
            con.close()
        confirmed: dict[bytes, list[tuple[int, float]]] = {}
        settle_sigs = set()
        for job, seq_to, status, sig, at in rows:
            if status == "confirmed":
                confirmed.setdefault(bytes(job), []).append((seq_to, at))
                if sig:
                    settle_sigs.add(sig)
        views = c._account_infos([j.address for j in node.jobs])
        paid_windows = 0
        for j, info in zip(node.jobs, views):
            view = c._decode_info(j.address, info, "Job")
            paid_windows += view.last_seq
        measured = max(1, a.windows - a.settle_every)
        lags, unpaid = [], 0
        for j in node.jobs:
            done = confirmed.get(bytes(j.address), [])
            for s in range(1, measured + 1):
                end = j.started_at + s * W
                times = [at for seq_to, at in done if seq_to >= s]
                if times:
                    lags.append(min(times) - end)
                else:
                    unpaid += 1
                    lags.append(run_end - end)
        sigs = _signatures_since(c, node.keypair.pubkey(), node.last_sig_before)
        failed = sum(1 for s in sigs if s.err is not None)
        tables = json.loads(meta[0][0])["tables"] if meta else []
        rent = sum(c.rpc.get_balance(Pubkey.from_string(t)).value for t in tables)
        balance = c.rpc.get_balance(node.keypair.pubkey()).value
        fees = node.balance_start - balance - rent
        per_hour = HOUR_WINDOWS / max(1, paid_windows)
        settled_items = sum(len(v) for v in confirmed.values())
        return {
            "jobs": len(node.jobs), "transactions": len(sigs), "failed_transactions": failed,
            "settle_transactions": len(settle_sigs),
            "table_transactions": max(0, len(sigs) - len(settle_sigs) - failed),
            "items_per_settle_tx": settled_items / max(1, len(settle_sigs)),
            "paid_windows": paid_windows, "tx_per_job_hour": len(sigs) * per_hour,
            "lamports_per_job_hour": fees * per_hour, "fees_lamports": fees,
            "table_rent_lamports": rent, "tables": len(tables),
            "lag_p50_s": _p(lags, 0.50), "lag_p99_s": _p(lags, 0.99),
            "lag_max_s": max(lags) if lags else float("nan"),
            "lag_p99_windows": _p(lags, 0.99) / W, "measured_windows": len(lags),
            "unpaid_windows": unpaid,
        }

    def stop(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
        self.procs.stop_all()


def report(args: argparse.Namespace, res: dict[str, dict[str, Any]], feed: dict[str, Any],
           timings: dict[str, float]) -> dict[str, Any]:
    W = args.window_seconds
    cols = [("jobs", "{:d}"), ("transactions", "{:d}"), ("settle_transactions", "{:d}"),
            ("table_transactions", "{:d}"), ("failed_transactions", "{:d}"),
            ("items_per_settle_tx", "{:.2f}"), ("paid_windows", "{:d}"),
            ("tx_per_job_hour", "{:.2f}"), ("lamports_per_job_hour", "{:.0f}"),
            ("table_rent_lamports", "{:d}"), ("lag_p50_s", "{:.1f}"), ("lag_p99_s", "{:.1f}"),
            ("lag_max_s", "{:.1f}"), ("lag_p99_windows", "{:.2f}"),
            ("measured_windows", "{:d}"), ("unpaid_windows", "{:d}")]
    print(f"\nsettle_cost: window {W} s (a job-hour = {HOUR_WINDOWS} windows = "
          f"{HOUR_WINDOWS * W} s here), {args.windows} windows per job, settle every "
          f"{args.settle_every} windows, settle pass every "
          f"{args.settle_interval or W / 12:.2f} s")
    print(f"setup {timings['setup']:.0f} s, run {timings['run']:.0f} s; proofs: "
          + ", ".join(f"{k} {v}" for k, v in sorted(feed.items())))
    names = list(res)
    print(f"{'':24}" + "".join(f"{n:>16}" for n in names))
    for key, fmt in cols:
        print(f"{key:24}" + "".join(f"{fmt.format(res[n][key]):>16}" for n in names))
    b, base = res["batched"], res.get("legacy")
    ok = b["tx_per_job_hour"] <= TX_TARGET and b["lag_p99_windows"] <= LAG_TARGET_WINDOWS
    print(f"target: <= {TX_TARGET} tx/job-hour with payout lag p99 <= {LAG_TARGET_WINDOWS} "
          f"windows ({LAG_TARGET_WINDOWS * W} s here): {'MET' if ok else 'NOT MET'}")
    out: dict[str, Any] = {
        "tx_per_job_hour": round(b["tx_per_job_hour"], 3),
        "lamports_per_job_hour": round(b["lamports_per_job_hour"]),
        "payout_lag_p99_s": round(b["lag_p99_s"], 2),
        "jobs": b["jobs"],
        "payout_lag_p99_windows": round(b["lag_p99_windows"], 3),
        "items_per_settle_tx": round(b["items_per_settle_tx"], 3),
        "unpaid_windows": b["unpaid_windows"],
        "table_rent_lamports": b["table_rent_lamports"],
        "window_seconds": W, "windows": args.windows, "settle_every": args.settle_every,
        "proof_delivery_p99_s": feed.get("delivery_p99_s"),
    }
    if base is not None:
        out.update({
            "baseline_jobs": base["jobs"],
            "baseline_tx_per_job_hour": round(base["tx_per_job_hour"], 3),
            "baseline_lamports_per_job_hour": round(base["lamports_per_job_hour"]),
            "baseline_payout_lag_p99_s": round(base["lag_p99_s"], 2),
            "tx_ratio_vs_baseline": round(b["tx_per_job_hour"] / base["tx_per_job_hour"], 3)
            if base["tx_per_job_hour"] else None,
        })
    return out


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_validator":
        validator_main(sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=200, help="jobs the measured node settles")
    ap.add_argument("--baseline-jobs", type=int, default=None,
                    help="jobs of the legacy baseline node (default min(50, jobs // 4); 0: none)")
    ap.add_argument("--window-seconds", type=int, default=None,
                    help="window length W (default 4 s up to 200 jobs, jobs / 50 s above)")
    ap.add_argument("--windows", type=int, default=20, help="windows fed per job")
    ap.add_argument("--settle-every", type=int, default=5, help="the nodes' --settle-every")
    ap.add_argument("--settle-interval", type=float, default=None,
                    help="seconds between settle passes (default W / 12: 5 s at 60 s windows)")
    ap.add_argument("--threads", type=int, default=4, help="threads creating jobs")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, dbs)")
    ap.add_argument("--sizes", action="store_true",
                    help="print settlements per transaction per layout and exit")
    args = ap.parse_args()
    if args.sizes:
        print_sizes()
        return 0
    if args.baseline_jobs is None:
        args.baseline_jobs = min(50, args.jobs // 4)
    if args.window_seconds is None:
        args.window_seconds = max(4, math.ceil(args.jobs / 50))
    if args.windows <= args.settle_every:
        ap.error("--windows must be more than --settle-every")
    if not os.environ.get("GPUM_LOCALNET_BIN") and not shutil.which("gpum-localnet"):
        ap.error("set GPUM_LOCALNET_BIN to the gpum-localnet binary")
    workdir = Path(tempfile.mkdtemp(prefix="settle-cost-"))
    bench = Bench(args, workdir)
    try:
        t0 = time.monotonic()
        bench.start_chain()
        bench.setup_market()
        bench.start_nodes()
        incoming: queue.Queue = queue.Queue()
        total = args.jobs + args.baseline_jobs
        fed: dict[str, Any] = {}
        feeder = threading.Thread(target=lambda: fed.update(bench.feed(incoming, total)),
                                  name="feeder", daemon=True)
        feeder.start()
        jobs = bench.create_jobs(incoming)
        t1 = time.monotonic()
        print(f"{len(jobs)} jobs running after {t1 - t0:.0f} s; feeding {args.windows} windows "
              f"of {args.window_seconds} s", file=sys.stderr)
        feeder.join()
        if not fed:
            raise RuntimeError("the feeder failed (see above)")
        feed = fed
        # the settlements the last windows triggered land within a pass or two
        time.sleep(args.window_seconds)
        run_end = time.time()
        nodes = [n for n in bench.nodes if n.jobs]
        res = {n.name: bench.measure(n, run_end) for n in nodes}
        t2 = time.monotonic()
        out = report(args, res, feed, {"setup": t1 - t0, "run": t2 - t1})
    except BaseException:
        print(f"work directory kept: {workdir}", file=sys.stderr)
        for name in ("batched", "legacy", "localnet"):
            print(f"--- {name}.log\n{bench.procs.tail(name, 20)}", file=sys.stderr)
        bench.stop()
        raise
    bench.stop()
    if args.keep:
        print(f"work directory: {workdir}", file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(out, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
