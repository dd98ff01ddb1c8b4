"""The local network demo: one GPU job paid end to end (``make demo``; ``python -m gpu_market.demo``).

Starts the local chain (``gpum-localnet``), creates the mints, the market, a staked provider
that publishes its worker's API and declares a GPU model its simulated GPUs pass a hardware
challenge as (:data:`GPU_MODEL`), three validators with public endpoints and a user's escrowed
job whose committee is those three with a quorum of 2 and whose workload is a container (a
tiny image built locally from busybox-static, run by podman with runc; ``--finish-on-exit``).
Runs a simulated worker (``gpum-worker run --simulate --api-listen ...``, which finds the
committee's endpoints on chain, receives the spec from the user's CLI, runs the container and
answers hardware challenges) and three validator nodes (``gpum-validator run``) as real
processes. As many nodes as the market's ``hardware_quorum`` (2) run the challenger with a
challenge small enough for simulated GPUs (:data:`CHALLENGE_FLAGS`): each challenges every
provider when it first sees it (the workers answer before the nodes start) and the last to
agree attests the verdict on chain. The job is created once the provider is verified (its
Provider account, as ``gpum offers`` shows it; a challenge never takes a renter's GPU time).
The nodes exchange attestations and settle 2-of-3. It waits for at least ``--settlements``
settlements to land and for the container to exit (which finishes the job: billing stops),
reads the container's logs through ``gpum job logs``, closes the job through the ``gpum``
CLI, moves the fees from the market's fee vault to its treasury (``gpum market
withdraw-fees``) and reads the summary back from the chain (token balances, mint supply and
the provider's hardware verdict, ``verified``), never computed from the inputs.

Then a managed job outlives its provider (:mod:`gpu_market.demo_migration`): a second provider
P2 with its own worker and a local S3 checkpoint store were started with the rest; ``gpum run
--managed`` starts a checkpointing counter on P1, P1's worker and container are killed, the
controller moves the job to P2, which resumes from the newest checkpoint, and ``gpum job stop``
closes both attempts. The summary's ``migration`` says from which provider to which, whether
the successor resumed from the checkpoint and how many seconds of counting were lost. The last
line printed is the summary, one JSON object.

Guarantees: every process it starts, and the reapers its workers start, is stopped when it
returns, on failure and on Ctrl-C; all state (the job history and the managed job's database
too) lives in a fresh temporary directory (``--workdir`` keeps it), and what the killed worker
left mounted there (its checkpoint volume) is unmounted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .demo_migration import prepare, release_mounts, run_migration, stop_reapers
from .net import BoundedClient, NetError
from .processes import (
    ProcessError,
    Processes,
    free_port,
    start_localnet,
    tool,
    wait_http,
    write_keypair,
)

DECIMALS = 6
UNIT = 10**DECIMALS
DEMO_IMAGE = "localhost/gpum-busybox:1"
CONTAINERS_CONF = '[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"\n'
"""podman settings that work on hybrid-cgroup hosts (crun fails there; default ulimits need
privileges the demo may not have)."""
GPU_MODEL = "Simulated H100"
"""The model both demo providers declare: a name in the bounds table's row for simulated GPUs
(``simulated``, CPU timing bounds), so their GPUs pass a hardware challenge as it."""
CHALLENGE_FLAGS = (
    "--challenges", "--challenge-n", "512", "--challenge-rounds", "2", "--challenge-rows", "4",
    "--challenge-memory-fraction", "0.5", "--challenge-max-memory-mib", "4",
    "--challenge-deadline", "20s", "--challenge-pass", "0.5", "--challenge-interval", "1h",
    "--challenge-retry", "1s")  # fmt: skip
"""The demo's challengers: 512 x 512 matrices, 2 rounds, 4 rows opened and 4 MiB of memory
per GPU (numpy on the simulated GPUs answers in milliseconds), due providers looked for twice
a second, a worker running another validator's challenge asked again a second later; random
re-challenges come about hourly, so none during the demo."""
HARDWARE_TIMEOUT_S = 60.0
"""How long the demo waits for its provider's verdict on chain."""


class DemoError(RuntimeError):
    """The demo could not complete; the message says which step and why."""


def run_demo(
    workdir: Path,
    *,
    window_seconds: int = 2,
    settle_every: int = 2,
    settlements: int = 3,
    max_missed_windows: int = 2,
    gpus: int = 2,
    validators: int = 3,
    quorum: int = 2,
    workload_seconds: int = 20,
    timeout: float = 180.0,
    hardware_timeout: float = HARDWARE_TIMEOUT_S,
    say=print,
) -> dict[str, Any]:
    """Runs the whole flow in ``workdir``; returns the summary read back from the chain."""
    from solders.keypair import Keypair

    from . import pda, tokens
    from .client import GpuMarketClient
    from .offers import Offer

    procs = Processes(workdir)
    client = None
    try:
        # -- local chain --------------------------------------------------------------
        url = start_localnet(procs).url
        say(f"local chain       {url}")

        admin, owner, owner2, user = Keypair(), Keypair(), Keypair(), Keypair()
        vkeys = [Keypair() for _ in range(validators)]
        named = [("admin", admin), ("owner", owner), ("owner2", owner2), ("user", user)]
        named += [(f"validator{i}", k) for i, k in enumerate(vkeys)]
        keys = {n: write_keypair(workdir / f"{n}.json", k) for n, k in named}
        client = GpuMarketClient(url, payer=admin)
        worker_key_file = workdir / "worker-key.json"
        worker_pub = _run([tool("gpum-worker"), "keygen", "--out", str(worker_key_file)])
        worker_pub = worker_pub.strip().split()[-1]
        from solders.pubkey import Pubkey

        for kp in (admin, owner, owner2, user, *vkeys):
            client.airdrop(kp.pubkey(), 10 * 10**9)
        client.airdrop(Pubkey.from_string(worker_pub), 1 * 10**9)

        # -- mints and balances (the admin is mint authority of both demo mints) -------
        stake_mint = tokens.create_mint(client, admin, DECIMALS)
        payment_mint = tokens.create_mint(client, admin, DECIMALS)
        funded = [(owner, 10_000, 0), (owner2, 10_000, 0), (user, 0, 1_000)]
        funded += [(v, 1_000, 0) for v in vkeys]
        for kp, stake, pay in funded:
            if stake:
                acct = tokens.create_ata(client, admin, kp.pubkey(), stake_mint)
                tokens.mint_to(client, stake_mint, acct, admin, stake * UNIT)
            if pay:
                acct = tokens.create_ata(client, admin, kp.pubkey(), payment_mint)
                tokens.mint_to(client, payment_mint, acct, admin, pay * UNIT)
        say(f"mints             stake={stake_mint} payment={payment_mint}")

        gpum = [tool("gpum"), "--url", url, "--output", "json"]
        # Job names, receipts and the managed job's state stay in the work directory.
        env = {"GPUM_DATA_DIR": str(workdir / "gpum-data")}

        def cli(keypair: str, *args: str, raw: bool = False) -> Any:
            out = _run([*gpum, *args[:2], "--keypair", str(keys[keypair]), *args[2:]], env)
            return out if raw else json.loads(out.strip().splitlines()[-1])

        # -- the workload's image: built locally, no registry (podman with runc) --------
        conf = workdir / "containers.conf"
        conf.write_text(CONTAINERS_CONF)
        image = _run([tool("gpum-worker"), "local-image", "--tag", DEMO_IMAGE,
                      "--containers-conf", str(conf)]).strip().splitlines()[-1]
        say(f"image             {image} (busybox-static, podman + runc)")

        # -- market, provider, validator, job (through the CLI where users use it) -----
        market = Pubkey.from_string(cli(
            "admin", "market", "init", "--stake-mint", str(stake_mint),
            "--payment-mint", str(payment_mint), "--window-seconds", str(window_seconds),
            "--max-missed-windows", str(max_missed_windows),
            "--fee-bps", "1000", "--burn-bps", "5000", "--min-stake-per-gpu", "100",
            "--validator-min-bond", "100")["market"])
        say(f"market            {market}")
        worker_api = f"http://127.0.0.1:{free_port()}"
        cli("owner", "provider", "register", "--market", str(market), "--worker-key", worker_pub,
            "--gpu-model", GPU_MODEL, "--gpu-count", str(gpus), "--vram-mib", "81920",
            "--region", "localnet", "--price", "3.6", "--endpoint", worker_api)
        cli("owner", "provider", "stake", "--market", str(market), "1000")
        provider = pda.provider_pda(market, owner.pubkey())
        # The worker serves the workload API the provider registered and the validators'
        # hardware challenges; it answers before the validators start (they challenge a
        # provider when they first see it) and finds each job's committee endpoints on chain.
        p1_worker = procs.start("worker", [
            tool("gpum-worker"), "run", "--simulate", "--gpus", str(gpus), "--seed", "1",
            "--key", str(worker_key_file), "--db", str(workdir / "worker-outbox.sqlite"),
            "--window-seconds", str(window_seconds),
            "--poll-seconds", "1", "--rpc-url", url, "--program-id", str(client.program_id),
            "--market", str(market), "--provider", str(provider),
            "--api-listen", worker_api.removeprefix("http://"), "--runtime", "podman",
            "--containers-conf", str(conf), "--publish-host", "127.0.0.1"])
        say(f"provider          {provider} ({gpus} x {GPU_MODEL}, staked 1000, worker API "
            f"{worker_api})")
        # The validators register with the endpoints their nodes will listen on.
        vports = [free_port() for _ in vkeys]
        vurls = [f"http://127.0.0.1:{p}" for p in vports]
        for i, (v, vurl) in enumerate(zip(vkeys, vurls)):
            cli(f"validator{i}", "validator", "register", "--market", str(market),
                "--endpoint", vurl, "--bond", "500")
            say(f"validator {i}       {v.pubkey()} (bond 500, endpoint {vurl})")
        # For the migration step at the end: provider P2 and the checkpoint store.
        second = prepare(procs, workdir, client, cli, _run, market=market, owner=owner2.pubkey(),
                         owner_key="owner2", conf=conf, window_seconds=window_seconds, gpus=gpus)
        say(f"provider P2       {second.provider} (price 4.5, its own worker) and a checkpoint "
            f"store (SeaweedFS S3 at {second.s3.endpoint})")

        user_pay = tokens.ata(user.pubkey(), payment_mint)
        provider_pay = tokens.ata(owner.pubkey(), payment_mint)
        treasury = client.fetch_market(market).treasury
        fee_vault = pda.fee_vault_pda(market)
        user_before = client.token_balance(user_pay)
        supply_before = client.mint_supply(payment_mint)
        # -- validator nodes, once both workers answer; as many challenge the providers'
        #    hardware as the market's hardware_quorum asks to attest a verdict ------------
        wait_http(f"{worker_api}/v1/health", timeout=60)
        hardware_quorum = client.fetch_market(market).params.hardware_quorum
        challengers = min(validators, hardware_quorum)
        for i, vport in enumerate(vports):
            procs.start(f"validator{i}", [
                tool("gpum-validator"), "run", "--url", url,
                "--keypair", str(keys[f"validator{i}"]), "--market", str(market),
                "--listen", f"127.0.0.1:{vport}", "--db", str(workdir / f"validator{i}.sqlite"),
                "--settle-every", str(settle_every), *(CHALLENGE_FLAGS if i < challengers else ())])
        for vurl in vurls:
            wait_http(f"{vurl}/health", timeout=30)
        say(f"worker + {validators} validators running (windows of {window_seconds}s, settle "
            f"every {settle_every}, quorum {quorum}); validators {_names(range(challengers))} "
            f"challenge the providers' GPUs (hardware_quorum {hardware_quorum})")
        hardware = wait_verified(client, procs, provider, vurls[:challengers],
                                 timeout=hardware_timeout, say=say)
        say(f"hardware          provider {provider} verified on chain: {hardware.attesters} "
            f"validators attested its {hardware.gpu_count} x {hardware.gpu_model} GPUs")

        # -- the user's job: GPUs, committee and a container that finishes the job on exit --
        steps = workload_seconds
        script = (f'for i in $(seq 1 {steps}); do echo "step $i/{steps} on $(hostname): '
                  'training..."; sleep 1; done; echo "done: model saved"')
        created = cli(
            "user", "job", "create", "--market", str(market), "--provider", str(provider),
            "--gpu-count", str(gpus), "--deposit", "50", "--job-id", "1",
            "--committee", ",".join(str(v.pubkey()) for v in vkeys),
            "--quorum", str(quorum), "--image", image, "--cmd", '["/bin/sh", "-c"]',
            "--arg", script, "--finish-on-exit")
        job = Pubkey.from_string(created["job"])
        user_after_create = client.token_balance(user_pay)
        terms = client.fetch_job(job).terms
        say(f"job               {job} (deposit 50, {gpus} GPUs, {terms.window_seconds}s windows, "
            f"grace {terms.grace_seconds}s, committee of {validators}, quorum {quorum})")
        say(f"workload          {image}, {steps} s of work, finish on exit "
            f"(spec sha256 {created['workload']['workload_hash'][:16]}..., delivered to the "
            "provider's worker)")
        vdb = workdir / "validator0.sqlite"

        # -- wait for settlements (any member may lead a round) -----------------------
        vaddrs = [pda.validator_pda(market, v.pubkey()) for v in vkeys]
        deadline = time.monotonic() + timeout
        seen = -1
        while True:
            procs.check_alive()
            count = sum(client.fetch_validator(a).settlements for a in vaddrs)
            if count != seen:
                j = client.fetch_job(job)
                say(f"  settlements={count} job.last_seq={j.last_seq} "
                    f"paid_seconds={j.paid_seconds} status={j.status}")
                seen = count
            if count >= settlements:
                break
            if time.monotonic() > deadline:
                logs = "\n".join(f"validator{i} log:\n{procs.tail(f'validator{i}')}"
                                 for i in range(validators))
                raise DemoError(f"only {count} settlements after {timeout:.0f}s;\n{logs}\n"
                                f"worker log:\n{procs.tail('worker')}")
            time.sleep(0.5)

        # -- the container exits; the worker finishes the job (billing stops) -----------
        while client.fetch_job(job).status == "running":
            procs.check_alive()
            if time.monotonic() > deadline + steps:
                raise DemoError(f"the container did not end the job;\nworker log:\n"
                                f"{procs.tail('worker')}")
            time.sleep(0.5)
        status = cli("user", "job", "status", str(job))["workload"]
        logs = cli("user", "job", "logs", str(job), raw=True).splitlines()
        say(f"container exited  code {status.get('exit_code')}; {len(logs)} log lines, the last:")
        for line in logs[-3:]:
            say(f"  | {line}")
        ended_at = client.fetch_job(job).ended_at
        grace_end = ended_at + terms.grace_seconds
        say(f"job finished at   {ended_at} by the worker (finish on exit); settlement grace "
            f"until {grace_end}")
        while client.chain_time() <= grace_end:
            procs.check_alive()
            time.sleep(0.5)
        # Nobody comes back for the job: the provider's worker completes it once the grace is over.
        while (final := client.fetch_job(job)).status != "completed":
            procs.check_alive()
            if client.chain_time() > grace_end + 60:
                raise DemoError(f"the worker did not complete the job within 60 s of its grace "
                                f"end;\nworker log:\n{procs.tail('worker')}")
            time.sleep(0.5)
        gpus_in_use = client.fetch_provider(provider).gpus_in_use
        say(f"job completed     by the provider's worker; provider GPUs in use: {gpus_in_use}")
        cli("user", "job", "close", str(job))
        if client.fetch_job(job) is not None:
            raise DemoError("job account still exists after close")

        # -- settle pays the treasury share into the fee vault; anyone forwards it ----------
        waiting = client.token_balance(fee_vault)
        withdrawn = cli("admin", "market", "withdraw-fees", "--market", str(market))["withdrawn"]
        say(f"fees withdrawn    {withdrawn} from the fee vault to the treasury {treasury}")

        # -- read everything back from the chain --------------------------------------
        deposited = user_before - user_after_create
        provider_paid = client.token_balance(provider_pay)
        treasury_balance = client.token_balance(treasury)
        fee_vault_left = client.token_balance(fee_vault)
        burned = supply_before - client.mint_supply(payment_mint)
        refunded = client.token_balance(user_pay) - user_after_create
        validator_rewards = sum(client.fetch_validator(a).rewards_earned for a in vaddrs)
        offer = Offer.from_provider(client.fetch_provider(provider))
        summary = {
            "demo": "ok",
            "windows_proved": _windows_proved(vdb, bytes(job)),
            "windows_settled": final.last_seq,
            "gpus_in_use_after_complete": gpus_in_use,
            "deposited": deposited,
            "provider_paid": provider_paid,
            "treasury": treasury_balance,
            "fees_withdrawn": waiting - fee_vault_left,
            "fee_vault_left": fee_vault_left,
            "burned": burned,
            "refunded": refunded,
            "conserved": deposited
            == provider_paid + treasury_balance + fee_vault_left + burned + refunded,
            "validators": validators,
            "quorum": quorum,
            # Credited to the attesting members by settle (read from their Validator accounts);
            # unclaimed, so it is what the fee vault still holds.
            "validator_rewards": validator_rewards,
            "workload": {"runtime": status.get("runtime"), "exit_code": status.get("exit_code"),
                         "log_lines": len(logs)},
            # The provider's hardware verdict as `gpum offers` shows it (its Provider account).
            "verified": offer.verified,
        }
        say("")
        say(f"settled {final.paid_seconds} s of a {gpus}-GPU job over {final.last_seq} windows "
            f"at {final.terms.rate_per_second / UNIT:g} per second")
        for name in ("deposited", "provider_paid", "treasury", "burned", "refunded"):
            say(f"  {name:<14}{summary[name] / UNIT:>12.6f}")
        say(f"  conserved     {summary['conserved']}")

        # -- a managed job outlives its provider: P1 dies, the job resumes on P2 ----------
        say("")
        summary["migration"] = run_migration(
            procs, workdir, second, url=url, user_key=keys["user"], market=market, p1=provider,
            p1_worker=p1_worker, p1_db=workdir / "worker-outbox.sqlite", image=image, env=env,
            podman_env={"CONTAINERS_CONF": str(conf)}, timeout=timeout, say=say,
            watch=[(n, p) for n, p in procs.children if n != "worker"])
        return summary
    finally:
        if client is not None:
            client.close()
        _stop_store(procs)
        procs.stop_all()
        stop_reapers([workdir / "worker-outbox.sqlite", workdir / "p2" / "worker-outbox.sqlite"])
        release_mounts(workdir)  # the checkpoint volume P1's killed worker left mounted


def wait_verified(client: Any, procs: Processes, provider: Any, challengers: list[str], *,
                  timeout: float, say=print) -> Any:
    """Until ``provider``'s Provider account holds a verified hardware verdict; its
    ``HardwareVerdict``. Says each challenger's own verdict (``GET
    /v1/providers/<provider>/hardware`` of each URL in ``challengers``) as it comes. DemoError
    after ``timeout`` seconds, or at once when the chain records a failed verdict (the
    validators challenge again only at their random time)."""
    start = time.monotonic()
    said: dict[str, Any] = {}
    with BoundedClient(deadline=2.0, max_bytes=65536) as http:
        while True:
            procs.check_alive()
            # The chain first: every attester recorded its verdict before the chain shows it.
            hw = client.fetch_provider(provider).hardware
            for i, vurl in enumerate(challengers):
                if said.get(vurl) is None:
                    got = _own_verdict(http, f"{vurl}/v1/providers/{provider}/hardware")
                    said[vurl] = got
                    if got is not None:
                        say(f"  validator {i}: {'passed' if got['passed'] else 'FAILED'} "
                            f"({got['gpu_count']} x {got['gpu_model']}) after "
                            f"{time.monotonic() - start:.1f} s"
                            + ("" if got["passed"] else f": {'; '.join(got['reasons'])[:300]}"))
            if hw.verified:
                return hw
            if hw.status == "failed" or time.monotonic() - start > timeout:
                logs = "\n".join(f"validator{i} log:\n{procs.tail(f'validator{i}')}"
                                 for i in range(len(challengers)))
                why = ("the validators attested a failed verdict" if hw.status == "failed"
                       else f"no verdict on chain after {timeout:.0f} s")
                raise DemoError(f"provider {provider} not verified: {why};\n{logs}\n"
                                f"worker log:\n{procs.tail('worker')}")
            time.sleep(0.3)


def _stop_store(procs: Processes, grace_s: float = 2.0) -> None:
    """Stops the checkpoint store (process ``s3``) before the rest: SIGTERM, SIGKILL after
    ``grace_s``. Once its filer and volume server stopped, weed's master and S3 gateway go on
    retrying their subscriptions for many seconds (the 10 s ``stop_all`` allows) before they
    exit; the demo is done with the store by then."""
    for name, proc in procs.children:
        if name != "s3" or proc.poll() is not None:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _own_verdict(http: BoundedClient, url: str) -> dict[str, Any] | None:
    """A validator's latest verdict on a provider (its JSON), None when it has none yet or
    does not answer."""
    try:
        r = http.request("GET", url)
    except NetError:
        return None
    doc = r.json_object() if r.status == 200 else None
    return doc if doc is not None and isinstance(doc.get("passed"), bool) else None


def _names(indexes: Any) -> str:
    """``0``, ``0 and 1``, ``0, 1 and 2``."""
    words = [str(i) for i in indexes]
    return " and ".join(words) if len(words) < 3 else ", ".join(words[:-1]) + " and " + words[-1]


def _windows_proved(db: Path, job: bytes) -> int:
    """Windows of ``job`` the validator accepted (its durable store, read-only)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = con.execute(
            "SELECT COUNT(*) FROM proofs WHERE job = ? AND decision = 'accepted'", (job,)
        ).fetchone()
    finally:
        con.close()
    return int(row[0])


def _run(argv: list[str], env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                          env=None if env is None else {**os.environ, **env})
    if proc.returncode != 0:
        raise DemoError(f"`{' '.join(argv[:4])} ...` failed: {proc.stderr.strip() or proc.stdout}")
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpu_market.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--window-seconds", type=int, default=2)
    ap.add_argument("--settle-every", type=int, default=2)
    ap.add_argument("--settlements", type=int, default=3)
    ap.add_argument("--max-missed-windows", type=int, default=2,
                    help="of the demo market; the grace after finish is this + 2 windows")
    ap.add_argument("--workdir", type=Path, default=None, help="keep state and logs here")
    args = ap.parse_args(argv)

    def interrupted(signum, frame):  # clean up, then exit
        raise KeyboardInterrupt

    # Explicit handlers: a process started in the background may inherit SIGINT as ignored.
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    tmp = None
    if args.workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="gpum-demo-")
        workdir = Path(tmp.name)
    else:
        workdir = args.workdir
        workdir.mkdir(parents=True, exist_ok=True)
    try:
        summary = run_demo(workdir, window_seconds=args.window_seconds,
                           settle_every=args.settle_every, settlements=args.settlements,
                           max_missed_windows=args.max_missed_windows)
    except KeyboardInterrupt:
        print("demo interrupted; every process it started was stopped", file=sys.stderr)
        return 130
    except (DemoError, ProcessError) as e:
        print(f"demo failed: {e}", file=sys.stderr)
        print(json.dumps({"demo": "failed", "error": str(e).splitlines()[0]}))
        return 1
    finally:
        if tmp is not None:
            tmp.cleanup()
    print(json.dumps(summary))
    ok = summary["conserved"] and summary["verified"]
    return 0 if ok and summary["migration"]["resumed_from_checkpoint"] else 1


if __name__ == "__main__":
    sys.exit(main())
