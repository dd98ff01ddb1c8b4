"""The demo's migration step (``make demo``): a managed job outlives its provider's machine.

With the demo's chain, market and validators, and what :func:`prepare` adds before the demo's
first job (a second provider, P2, with its own worker; an S3-compatible checkpoint store on
127.0.0.1: SeaweedFS's ``weed server -s3``, ``$GPUM_WEED_BIN``), :func:`run_migration`:

1. ``gpum run --managed`` on P1 (the controller is a process of the demo, as a user runs it);
   its container counts seconds in its checkpoint directory (:data:`COUNTER_SCRIPT`), which
   P1's worker syncs to the store every :data:`CHECKPOINT_INTERVAL_S` seconds;
2. once the store holds a checkpoint, P1's machine dies (:func:`kill_machine`): its worker and
   reaper are killed (SIGKILL) and its container killed and removed;
3. the controller decides the attempt failed: the committee reported P1's downtime and the
   job failed on chain (the demo market allows 2 missed windows), or no window was accepted
   for ``--missed-windows`` (3) windows, whichever comes first; it stops the old job and
   starts the successor on P2, whose worker restores the newest checkpoint before the
   container starts; the container goes on counting from there;
4. ``gpum job stop`` closes every attempt with its receipt.

Work lost is measured by the container itself: it writes each count to ``/checkpoint/n``
atomically (a temporary file renamed over it), then prints it (``count N``); it prints
``resumed at N`` when it starts. ``lost_seconds`` is the last count the first container
printed (its logs, read after it was killed) minus the count its successor resumed at.

Every process it starts is one of the demo's ``Processes`` (stopped with them); its state
lives in the demo's work directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .processes import ProcessError, Processes, free_port, tool, wait_http

__all__ = ["CHECKPOINT_INTERVAL_S", "COUNTER_SCRIPT", "LocalS3", "MigrationError",
           "kill_machine", "last_count", "prepare", "reaper_pid", "release_mounts", "resumed_at",
           "run_migration", "start_local_s3", "stop_reapers", "weed_binary"]  # fmt: skip

CHECKPOINT_INTERVAL_S = 10
"""The shortest interval a checkpoint section allows."""
COUNTER_SCRIPT = ('n=$(cat /checkpoint/n 2>/dev/null || echo 0); echo "resumed at $n"; '
                  'while true; do n=$((n+1)); echo $n > /checkpoint/n.tmp; '
                  'mv /checkpoint/n.tmp /checkpoint/n; echo "count $n"; sleep 1; done')
"""A workload whose whole state is a counter in its checkpoint directory, one step a second."""
S3_START_TIMEOUT_S = 60.0
BUCKET = "gpum-demo"
S3_KEYS = ("GPUMDEMOKEY", "gpum-demo-secret-0d7c51")
"""The local store's only identity (127.0.0.1, the demo's lifetime)."""
_COUNT = re.compile(r"^count (\d+)$")
_RESUMED = re.compile(r"^resumed at (\d+)$")


class MigrationError(ProcessError):
    """The migration step could not complete; the message says which step and why."""


# ----------------------------------------------------------------------------- the store


@dataclass(frozen=True)
class LocalS3:
    """A ``weed server -s3`` on 127.0.0.1 started by :func:`start_local_s3`."""

    endpoint: str
    bucket: str
    access_key_id: str
    secret_access_key: str
    proc: subprocess.Popen

    def env(self) -> dict[str, str]:
        """The variables ``gpum run --checkpoint-store`` reads the store's keys from."""
        return {"AWS_ACCESS_KEY_ID": self.access_key_id,
                "AWS_SECRET_ACCESS_KEY": self.secret_access_key}  # fmt: skip

    def wait_ready(self, procs: Processes, timeout: float = S3_START_TIMEOUT_S) -> None:
        """Until the bucket exists and took a write; MigrationError after ``timeout``."""
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        client = boto3.session.Session(
            aws_access_key_id=self.access_key_id, aws_secret_access_key=self.secret_access_key,
            region_name="us-east-1").client("s3", endpoint_url=self.endpoint, config=Config(
                s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                connect_timeout=3, read_timeout=10))  # fmt: skip
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise MigrationError(f"weed exited with code {self.proc.returncode}: "
                                     f"{procs.tail('s3')}")  # fmt: skip
            try:
                with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
                    client.create_bucket(Bucket=self.bucket)
                client.put_object(Bucket=self.bucket, Key="ready", Body=b"ok")
                client.delete_object(Bucket=self.bucket, Key="ready")
                return
            except (BotoCoreError, ClientError) as e:
                last = e
                time.sleep(0.3)
        raise MigrationError(f"the checkpoint store did not take a write within {timeout:.0f}s "
                             f"({last}); its log:\n{procs.tail('s3')}")  # fmt: skip


def weed_binary() -> str:
    """``$GPUM_WEED_BIN`` (``make demo`` sets it); MigrationError saying what to run when it
    is not an executable."""
    path = os.environ.get("GPUM_WEED_BIN", "")
    if not path or not os.access(path, os.X_OK):
        raise MigrationError("the demo's checkpoint store is SeaweedFS's weed: run `make demo`, "
                             "or `make seaweedfs` and set GPUM_WEED_BIN to the path it prints")  # fmt: skip
    return path


def start_local_s3(procs: Processes, folder: Path) -> LocalS3:
    """Starts ``weed server -s3`` (process ``s3``) with its data in ``folder`` on free
    loopback ports; :meth:`LocalS3.wait_ready` waits for it."""
    binary = weed_binary()
    (folder / "data").mkdir(parents=True, exist_ok=True)
    config = folder / "s3.json"
    config.write_text(json.dumps({"identities": [{
        "name": "admin", "credentials": [{"accessKey": S3_KEYS[0], "secretKey": S3_KEYS[1]}],
        "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))  # fmt: skip
    config.chmod(0o600)
    argv = [binary, "server", f"-dir={folder / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-filer", "-s3", f"-s3.config={config}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.volumeSizeLimitMB=64", "-volume.max=8", "-volume.preStopSeconds=0",
            "-master.telemetry=false", f"-filer.localSocket={folder / 'filer.sock'}",
            f"-s3.localSocket={folder / 's3.sock'}"]  # fmt: skip
    ports = {}
    for name in ("master", "volume", "filer", "s3"):
        ports[name] = free_port()
        argv += [f"-{name}.port={ports[name]}", f"-{name}.port.grpc={free_port()}"]
    proc = procs.start("s3", argv)
    return LocalS3(f"http://127.0.0.1:{ports['s3']}", BUCKET, *S3_KEYS, proc)


# ----------------------------------------------------------------------------- the machine


def podman(args: list[str], podman_env: Mapping[str, str], timeout: float = 60,
           ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                          check=False, env={**os.environ, **podman_env})  # fmt: skip


def reaper_pid(db: Path) -> int | None:
    """The pid of the reaper of worker database ``db`` (it holds ``<stem>.reaper.lock`` and
    wrote its pid there), None when none holds it."""
    import fcntl

    try:
        fd = os.open(db.with_name(f"{db.stem}.reaper.lock"), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 32).decode().strip()
            return int(text) if text.isdigit() else None
        return None
    finally:
        os.close(fd)


def stop_reapers(dbs: list[Path], grace_s: float = 10.0) -> None:
    """Stops the reapers of worker databases ``dbs`` (workers start them detached, so stopping
    a worker leaves its reaper until it sees nothing left to reap): SIGTERM, SIGKILL after
    ``grace_s``."""
    pids = [p for p in map(reaper_pid, dbs) if p]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for db in dbs:
        while reaper_pid(db) and time.monotonic() < deadline:
            time.sleep(0.1)
        pid = reaper_pid(db)
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def kill_machine(worker: subprocess.Popen, db: Path, job: str,
                 podman_env: Mapping[str, str]) -> list[str]:  # fmt: skip
    """A provider's machine dies: its worker (its process group) and reaper get SIGKILL, then
    the container of ``job`` SIGKILL too and is removed. Returns the container's output, read
    after it was killed (so nothing it printed is missed)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(timeout=30)
    pid = reaper_pid(db)
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    ids = podman(["ps", "-aq", "--filter", f"label=gpum.job={job}"], podman_env).stdout.split()
    lines: list[str] = []
    for cid in ids:
        podman(["kill", "--signal", "KILL", cid], podman_env)
        lines += podman(["logs", cid], podman_env).stdout.splitlines()
        podman(["rm", "-f", cid], podman_env)
    return lines


def release_mounts(folder: Path) -> list[str]:
    """Unmounts every filesystem mounted under ``folder`` and returns their mount points: the
    checkpoint volumes (loop-mounted images) of a worker killed with its machine, which no
    worker releases (a real machine's reboot would). Lazily (``umount -l``), deepest first."""
    root = str(folder.resolve()).rstrip("/") + "/"
    points = []
    with contextlib.suppress(OSError), open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 1:
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
                if point.startswith(root):
                    points.append(point)
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=60, check=False)
    return points


def last_count(lines: list[str]) -> int | None:
    """The last ``count N`` the counter printed."""
    counts = [int(m.group(1)) for m in map(_COUNT.match, lines) if m]
    return counts[-1] if counts else None


def resumed_at(lines: list[str]) -> int | None:
    """The count the counter started from (``resumed at N``; 0 without a checkpoint)."""
    found = [int(m.group(1)) for m in map(_RESUMED.match, lines) if m]
    return found[-1] if found else None


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects among the lines of ``path`` (a ``gpum --output json`` log)."""
    out = []
    text = path.read_text(errors="replace") if path.exists() else ""
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            obj = json.loads(line)
            if isinstance(obj, dict):
                out.append(obj)
    return out


# ----------------------------------------------------------------------------- the step


@dataclass
class Second:
    """What :func:`prepare` started: provider P2 (its address and worker) and the store."""

    provider: Any
    worker: subprocess.Popen
    s3: LocalS3


def prepare(procs: Processes, workdir: Path, client: Any, cli: Callable[..., Any],
            run: Callable[..., str], *, market: Any, owner: Any, owner_key: str, conf: Path,
            window_seconds: int, gpus: int) -> Second:  # fmt: skip
    """Before the demo's first job: the store (started; :func:`run_migration` waits for it)
    and provider P2 of party ``owner_key`` (public key ``owner``): registered at a price
    above P1's, staked, its worker key funded with SOL for its fees and its worker started
    (``worker-p2``) in ``workdir/p2`` with a database of its own."""
    from solders.pubkey import Pubkey

    from . import pda

    s3 = start_local_s3(procs, workdir / "s3")
    folder = workdir / "p2"
    folder.mkdir(exist_ok=True)
    key = folder / "worker-key.json"
    worker_pub = run([tool("gpum-worker"), "keygen", "--out", str(key)]).strip().split()[-1]
    client.airdrop(Pubkey.from_string(worker_pub), 1 * 10**9)
    api = f"http://127.0.0.1:{free_port()}"
    cli(owner_key, "provider", "register", "--market", str(market), "--worker-key", worker_pub,
        "--gpu-model", "Simulated H100", "--gpu-count", str(gpus), "--vram-mib", "81920",
        "--region", "localnet", "--price", "4.5", "--endpoint", api)
    cli(owner_key, "provider", "stake", "--market", str(market), "1000")
    provider = pda.provider_pda(market, owner)
    worker = procs.start("worker-p2", [
        tool("gpum-worker"), "run", "--simulate", "--gpus", str(gpus), "--seed", "2",
        "--key", str(key), "--db", str(folder / "worker-outbox.sqlite"),
        "--window-seconds", str(window_seconds), "--poll-seconds", "1", "--rpc-url", client.url,
        "--program-id", str(client.program_id), "--market", str(market), "--provider", str(provider),
        "--api-listen", api.removeprefix("http://"), "--runtime", "podman",
        "--containers-conf", str(conf), "--publish-host", "127.0.0.1"])  # fmt: skip
    wait_http(f"{api}/v1/health", timeout=60)
    return Second(provider, worker, s3)


def run_migration(procs: Processes, workdir: Path, second: Second, *, url: str, user_key: Path,
                  market: Any, p1: Any, p1_worker: subprocess.Popen, p1_db: Path, image: str,
                  env: Mapping[str, str], podman_env: Mapping[str, str],
                  watch: list[tuple[str, subprocess.Popen]], timeout: float = 180,
                  say: Callable[[str], None] = print) -> dict[str, Any]:  # fmt: skip
    """The steps of the module docstring; returns the summary's ``migration`` object.
    ``env``: the variables every ``gpum`` of the demo runs with; ``watch``: ``(name,
    process)`` that must stay up meanwhile (MigrationError naming the first that exited)."""
    from .checkpoint import CheckpointStore, Credentials
    from .checkpoint_spec import CheckpointConfig

    s3 = second.s3
    s3.wait_ready(procs)
    name = "demo-migration"
    store = f"s3://{s3.bucket}/{name}"
    genv = {**env, **s3.env()}
    gpum = [tool("gpum"), "--url", url, "--output", "json"]
    log = workdir / "controller.log"
    controller = procs.start("controller", [
        *gpum, "run", "--keypair", str(user_key), "--market", str(market), "--managed",
        "--name", name, "--provider", str(p1), "--gpu", "h100:1", "--hours", "0.05",
        "--image", image, "--cmd", '["/bin/sh", "-c"]', "--arg", COUNTER_SCRIPT,
        "--missed-windows", "3", "--start-timeout", "60s", "--timeout", "120",
        "--checkpoint-store", store, "--checkpoint-endpoint", s3.endpoint,
        "--checkpoint-interval", f"{CHECKPOINT_INTERVAL_S}s", "--checkpoint-max-size", "16MiB",
    ], env=genv)  # fmt: skip
    deadline = time.monotonic() + timeout

    def wait(what: str, fn: Callable[[], Any]) -> Any:
        while True:
            for which, p in (("controller", controller), *watch):
                if p.poll() is not None:
                    raise MigrationError(f"{which} exited with code {p.returncode} while "
                                         f"waiting for {what}; its log:\n"
                                         f"{procs.tail(which, 20)}")  # fmt: skip
            got = fn()
            if got:
                return got
            if time.monotonic() > deadline:
                raise MigrationError(f"{what}: not within {timeout:.0f}s; controller log:\n"
                                     f"{procs.tail('controller', 20)}")  # fmt: skip
            time.sleep(0.5)

    first = wait("the managed job's first attempt running", lambda: next(
        (e for e in json_lines(log) if e.get("phase") == "running"), None))
    say(f"managed job       {name!r} on provider {first['provider']} (job {first['job']}); its "
        f"container counts in /checkpoint, synced to {store} every {CHECKPOINT_INTERVAL_S}s")
    checkpoints = CheckpointStore(CheckpointConfig(store=store, endpoint=s3.endpoint),
                                  Credentials(s3.access_key_id, s3.secret_access_key))  # fmt: skip
    try:
        latest = wait("a checkpoint in the store", checkpoints.latest)
    finally:
        checkpoints.close()
    time.sleep(3)  # the counter moves past the checkpoint: that is the work a crash loses
    printed = kill_machine(p1_worker, p1_db, first["job"], podman_env)
    last = last_count(printed)
    say(f"provider P1 died  its worker and container killed (SIGKILL) at count {last}; the "
        f"newest checkpoint is #{latest.seq}")

    def successor() -> Any:
        return next((e for e in json_lines(log) if e.get("event") == "decision"
                     and "attempt 1 runs on provider" in e.get("text", "")), None)

    moved = wait("the successor running", successor)
    decided = next((e["text"] for e in json_lines(log) if e.get("event") == "decision"
                    and "stopping it and migrating" in e.get("text", "")), "")
    say(f"controller        {decided}")
    say(f"controller        {moved['text']}")

    def resumed() -> int | None:
        r = subprocess.run([*gpum, "job", "logs", name, "--keypair", str(user_key)],
                           capture_output=True, text=True, timeout=60, check=False,
                           env={**os.environ, **genv})  # fmt: skip
        return resumed_at(r.stdout.splitlines()) if r.returncode == 0 else None

    start = wait("the successor's output", lambda: (n := resumed()) is not None and (n,))[0]
    if last is None:
        raise MigrationError(f"the first container printed no count; its output: {printed[-5:]}")
    r = subprocess.run([*gpum, "job", "stop", name, "--keypair", str(user_key)],
                       capture_output=True, text=True, timeout=timeout, check=False,
                       env={**os.environ, **genv})  # fmt: skip
    if r.returncode != 0:
        raise MigrationError(f"`gpum job stop {name}` failed: {r.stderr.strip()}")
    stopped = json.loads(r.stdout.strip().splitlines()[-1])
    atts = stopped.get("attempts", [])
    to = atts[1]["provider"] if len(atts) > 1 else None
    say(f"successor         resumed at count {start} on provider {to}: {last - start} s of work "
        f"lost (checkpoints every {CHECKPOINT_INTERVAL_S}s); `gpum job stop` closed "
        f"{sum(a['state'] == 'closed' for a in atts)} attempt(s)")
    return {"from": first["provider"], "to": to, "resumed_from_checkpoint": 0 < start <= last,
            "lost_seconds": last - start, "checkpoint_interval_s": CHECKPOINT_INTERVAL_S,
            "attempts_closed": sum(a["state"] == "closed" for a in atts)}  # fmt: skip
