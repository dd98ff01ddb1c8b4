"""The end-to-end tests' world: a fresh market on a running local chain, and waiting on it.

``create_market`` makes, on the chain at ``url``, an admin and the named parties (each
airdropped SOL, its keypair written to ``<workdir>/<name>.json``), a stake mint and a payment
mint of 6 decimals whose authority is the admin, the stake and payment balances asked for, the
admin's treasury account and a market with the given parameters (index 0 of its fresh admin, so
markets of one chain never meet). ``tests/conftest.py`` hands it to the tests through the
``market_factory`` fixture, which closes the clients it made.

``Network`` is the base of each module's world (its processes and client); ``CliNetwork``
the base of a world the tests drive through the ``gpum`` CLI, and ``WorkerNetwork`` of one
with a provider whose real worker runs podman: ``worker_network`` starts that world
(``start_worker_network``: provider, validator node, worker), ``register_provider``,
``start_validator`` and ``start_worker`` its parts.
``start_validator_node`` starts a module's one validator node; ``podman_setup``
and ``remove_containers`` prepare and clean up the container runtime of modules that run
workloads; ``reaper_pid`` and ``stop_reapers`` find and stop the reapers workers start
detached (``worker_network`` stops them with the world); ``release_mounts`` unmounts what a
killed worker left mounted under a work directory (``worker_network`` calls it last), so no
test leaves a mount behind for pytest's removal of old temporary directories to trip on. ``wait_until``
polls a condition with a deadline, checking that the processes a test relies on still run,
and says what the test waited for, and their logs, when it gives up.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest
from gpu_market import pda, tokens
from gpu_market.client import GpuMarketClient
from gpu_market.demo import CONTAINERS_CONF
from gpu_market.errors import AccountNotFound
from gpu_market.processes import Processes, free_port, tool, wait_http, write_keypair
from gpum_worker.localimage import build_busybox_image
from solders.keypair import Keypair
from solders.pubkey import Pubkey

DECIMALS = 6
SOL = 10 * 10**9
"""Lamports airdropped to every party: fees and rent for everything a test does."""


@dataclass
class Market:
    """A market and its parties: ``kps[name]`` the keypair, ``keys[name]`` its file."""

    url: str
    client: GpuMarketClient  # the admin pays
    kps: dict[str, Keypair]
    keys: dict[str, Path]
    stake_mint: Pubkey
    payment_mint: Pubkey
    treasury: Pubkey
    address: Pubkey

    @property
    def admin(self) -> Keypair:
        return self.kps["admin"]

    def payment_account(self, name: str) -> Pubkey:
        return tokens.ata(self.kps[name].pubkey(), self.payment_mint)


@dataclass
class Network:
    """What a module's tests share, the base of each module's world: the work directory, the
    processes started there (their logs too) and the chain's RPC URL and a client of it."""

    workdir: Path
    procs: Processes
    url: str
    client: GpuMarketClient


@dataclass
class CliNetwork(Network):
    """A world whose tests drive the ``gpum`` CLI: the market's parties (``kps[name]`` the
    keypair, ``keys[name]`` its file) and the market. What differs between modules is said by
    the class attributes of their subclass."""

    keys: dict[str, Path]
    kps: dict[str, Keypair]
    market: Pubkey

    ENV: ClassVar[tuple[tuple[str, str], ...]] = (("GPUM_WORKLOADS_DIR", "saved-specs"),)
    """(variable, folder under ``workdir``): the environment added to every ``gpum`` run."""
    OUTPUT: ClassVar[str] = "json"
    """``--output`` of every ``gpum`` run unless it says otherwise ("": none)."""
    KEYPAIR_AFTER: ClassVar[int | None] = None
    """``--keypair`` goes after this many of the arguments (None: after all of them)."""
    GPUM_TIMEOUT: ClassVar[float] = 120
    FAILED: ClassVar[str] = "gpum {args} failed:\n{stderr}\nworker log:\n{log}"
    """The message of a failed ``gpum`` run (``{args}``, ``{code}``, ``{stderr}``, ``{log}``:
    the worker log's tail)."""
    WAIT_TIMEOUT: ClassVar[float] = 60

    @property
    def validator(self) -> Pubkey:
        return self.kps["validator"].pubkey()

    def env(self) -> dict[str, str]:
        return {**os.environ, **{k: str(self.workdir / v) for k, v in self.ENV}}

    def argv(self, who: str, *args: str, output: str | None = None) -> list[str]:
        out = self.OUTPUT if output is None else output
        at = len(args) if self.KEYPAIR_AFTER is None else self.KEYPAIR_AFTER
        return [tool("gpum"), "--url", self.url, *(["--output", out] if out else []), *args[:at],
                "--keypair", str(self.keys[who]), *args[at:]]  # fmt: skip

    def run_gpum(self, who: str, *args: str, ok: bool = True, output: str | None = None,
                 timeout: float | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """``gpum ARGS`` as ``who``; AssertionError (``FAILED``) if it fails and ``ok``."""
        r = subprocess.run(self.argv(who, *args, output=output), capture_output=True, text=True,
                           timeout=self.GPUM_TIMEOUT if timeout is None else timeout,
                           env=self.env(), check=False)  # fmt: skip
        if ok and r.returncode != 0:
            log = self.procs.tail("worker", 30) if "{log}" in self.FAILED else ""
            raise AssertionError(self.FAILED.format(args=" ".join(args), code=r.returncode,
                                                    stderr=r.stderr, log=log))  # fmt: skip
        return r

    def gpum(self, who: str, *args: str, ok: bool = True, output: str | None = None,
             timeout: float | None = None) -> tuple[int, str, str]:  # fmt: skip
        r = self.run_gpum(who, *args, ok=ok, output=output, timeout=timeout)
        return r.returncode, r.stdout, r.stderr

    def gpum_json(self, who: str, *args: str, timeout: float | None = None) -> dict[str, Any]:
        """The last line of ``gpum --output json ARGS``'s output."""
        r = self.run_gpum(who, *args, output="json", timeout=timeout)
        return json.loads(r.stdout.strip().splitlines()[-1])

    def token_balance(self, account: Pubkey) -> int:
        try:
            return self.client.token_balance(account)
        except AccountNotFound:
            return 0

    def balance(self, who: str) -> int:
        """``who``'s payment-token balance."""
        mint = self.client.fetch_market(self.market).payment_mint
        return self.token_balance(tokens.ata(self.kps[who].pubkey(), mint))

    def wait(self, what: str, fn: Callable[[], Any], timeout: float | None = None) -> Any:
        return wait_until(what, fn, self.WAIT_TIMEOUT if timeout is None else timeout,
                          check=self.procs.check_alive,
                          diag=lambda: self.procs.tail("worker", 40))  # fmt: skip


@dataclass
class WorkerNetwork(CliNetwork):
    """A ``CliNetwork`` with provider ``provider`` whose worker (``worker``, process "worker")
    serves its API on 127.0.0.1:``worker_port`` and runs podman (``podman_env``); ``jobs``
    the jobs whose containers are removed after the module."""

    provider: Pubkey = field(kw_only=True)
    worker_port: int = field(kw_only=True)
    podman_env: dict[str, str] = field(kw_only=True)
    jobs: list[Pubkey] = field(default_factory=list, kw_only=True)
    worker: subprocess.Popen | None = field(default=None, kw_only=True)


W = TypeVar("W", bound=WorkerNetwork)


def register_provider(net: CliNetwork, owner: str, worker_key: Pubkey, *, gpus: int,
                      price: str = "3.6", endpoint: str | None = None) -> Pubkey:  # fmt: skip
    """Registers ``owner``'s provider of ``gpus`` simulated H100s (``--endpoint`` where given)
    and stakes 1000 for it; returns its address."""
    market = str(net.market)
    net.gpum(owner, "provider", "register", "--market", market, "--worker-key", str(worker_key),
             "--gpu-model", "Simulated H100", "--gpu-count", str(gpus), "--vram-mib", "81920",
             "--price", price, *(["--endpoint", endpoint] if endpoint else []))  # fmt: skip
    net.gpum(owner, "provider", "stake", "--market", market, "1000")
    return pda.provider_pda(net.market, net.kps[owner].pubkey())


def start_validator(net: CliNetwork, port: int) -> None:
    """Registers party "validator" (bond 500) with its endpoint on 127.0.0.1:``port`` and
    starts its node there (``--settle-every 2``, database ``validator.sqlite``)."""
    net.gpum("validator", "validator", "register", "--market", str(net.market), "--endpoint",
             f"http://127.0.0.1:{port}", "--bond", "500")  # fmt: skip
    start_validator_node(net.procs, net.url, net.keys["validator"], net.market, port,
                         net.workdir / "validator.sqlite", "--settle-every", "2")  # fmt: skip


def start_worker(net: CliNetwork, provider: Pubkey, port: int, *, name: str = "worker",
                 key: str = "worker", gpus: int = 4, window: int = 2, poll_seconds: float = 1,
                 publish_host: bool = True, reaper: bool = True,
                 reaper_poll_seconds: float | None = None) -> subprocess.Popen:  # fmt: skip
    """Starts ``gpum-worker run --simulate`` of ``provider`` (process ``name``, keypair of party
    ``key``, database ``outbox.sqlite``) with podman and its API on 127.0.0.1:``port``; returns
    once it answers ``/v1/health``. It starts its reaper unless ``reaper`` is off or one runs
    (``stop_reapers``)."""
    p = net.procs.start(name, [
        tool("gpum-worker"), "run", "--simulate", "--gpus", str(gpus), "--seed", "1",
        "--key", str(net.keys[key]), "--db", str(net.workdir / "outbox.sqlite"),
        "--window-seconds", str(window), "--poll-seconds", str(poll_seconds),
        "--rpc-url", net.url, "--program-id", str(net.client.program_id),
        "--market", str(net.market), "--provider", str(provider),
        "--api-listen", f"127.0.0.1:{port}", "--runtime", "podman",
        "--containers-conf", str(net.workdir / "containers.conf"),
        *(["--publish-host", "127.0.0.1"] if publish_host else []),
        *([] if reaper else ["--no-reaper"]),
        *(["--reaper-poll-seconds", str(reaper_poll_seconds)] if reaper_poll_seconds else [])])
    wait_http(f"http://127.0.0.1:{port}/v1/health", timeout=60)
    return p


def start_worker_network(cls: type[W], workdir: Path, m: Market, procs: Processes,
                         jobs: list[Pubkey], image: str, *, owner: str = "owner", gpus: int = 4,
                         window: int = 2, price: str = "3.6",
                         reaper_poll_seconds: float | None = None, **fields: Any) -> W:  # fmt: skip
    """The world of a ``WorkerNetwork`` subclass ``cls`` (its own ``fields`` given): podman
    with ``image`` built, ``owner``'s provider (party "worker" its worker key, ``gpus`` GPUs at
    ``price``, its worker's API its endpoint) staked, the validator node, and the worker."""
    worker_port, vport = free_port(), free_port()
    net = cls(workdir, procs, m.url, m.client, m.keys, m.kps, m.address,
              provider=pda.provider_pda(m.address, m.kps[owner].pubkey()),
              worker_port=worker_port, podman_env=podman_setup(workdir, image), jobs=jobs,
              **fields)  # fmt: skip
    register_provider(net, owner, m.kps["worker"].pubkey(), gpus=gpus, price=price,
                      endpoint=f"http://127.0.0.1:{worker_port}")  # fmt: skip
    start_validator(net, vport)
    net.worker = start_worker(net, net.provider, worker_port, gpus=gpus, window=window,
                              reaper_poll_seconds=reaper_poll_seconds)
    return net


@contextmanager
def worker_network(cls: type[W], workdir: Path, m: Market, image: str,
                   **kw: Any) -> Iterator[W]:  # fmt: skip
    """``start_worker_network`` for a module's fixture: its processes stopped and its jobs'
    containers removed after."""
    procs = Processes(workdir)
    net = None
    try:
        net = start_worker_network(cls, workdir, m, procs, [], image, **kw)
        yield net
    finally:
        procs.stop_all()
        stop_reapers(workdir)
        if net is not None:
            remove_containers(net.jobs, net.podman_env)
        release_mounts(workdir)


def create_market(url: str, workdir: Path, names: Iterable[str], params: Mapping[str, Any], *,
                  stake: Mapping[str, int] | None = None,
                  payment: Mapping[str, int] | None = None) -> Market:
    """A new market on the chain at ``url``; ``stake`` and ``payment`` map party names to the
    base units minted to their associated token accounts of each mint."""
    kps = {n: Keypair() for n in ("admin", *names)}
    keys = {n: write_keypair(workdir / f"{n}.json", k) for n, k in kps.items()}
    admin = kps["admin"]
    client = GpuMarketClient(url, payer=admin)
    try:
        for kp in kps.values():
            client.airdrop(kp.pubkey(), SOL)
        stake_mint = tokens.create_mint(client, admin, DECIMALS)
        payment_mint = tokens.create_mint(client, admin, DECIMALS)
        for mint, amounts in ((stake_mint, stake or {}), (payment_mint, payment or {})):
            for name, amount in amounts.items():
                acct = tokens.create_ata(client, admin, kps[name].pubkey(), mint)
                tokens.mint_to(client, mint, acct, admin, amount)
        treasury = tokens.create_ata(client, admin, admin.pubkey(), payment_mint)
        client.initialize_market(admin, 0, stake_mint, payment_mint, treasury, dict(params))
    except BaseException:
        client.close()
        raise
    return Market(url, client, kps, keys, stake_mint, payment_mint, treasury,
                  pda.market_pda(admin.pubkey(), 0))


def wait_until(what: str, fn: Callable[[], Any], timeout: float, *,
               check: Callable[[], None] = lambda: None, diag: Callable[[], str] = lambda: "",
               interval: float = 0.5) -> Any:
    """``fn()``'s first truthy value, polled every ``interval`` seconds after ``check()`` (which
    raises when a process the test needs has exited); AssertionError naming ``what`` and
    ``diag()`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        check()
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s\n{diag()}")
        time.sleep(interval)


def start_validator_node(procs: Processes, url: str, keypair: Path, market: Pubkey, port: int,
                         db: Path, *flags: str) -> None:
    """Starts ``gpum-validator run`` (log ``validator.log``) serving ``market`` on
    127.0.0.1:``port`` with its database ``db`` and ``flags``; returns once it answers
    ``/health``."""
    procs.start("validator", [
        tool("gpum-validator"), "run", "--url", url, "--keypair", str(keypair),
        "--market", str(market), "--listen", f"127.0.0.1:{port}", "--db", str(db), *flags])
    wait_http(f"http://127.0.0.1:{port}/health", timeout=60)


def podman_setup(workdir: Path, image: str) -> dict[str, str]:
    """Writes the demo's podman settings to ``<workdir>/containers.conf`` (the worker's
    ``--containers-conf``), builds the local busybox-static image ``image`` with them and
    returns the environment that points podman at them."""
    (workdir / "containers.conf").write_text(CONTAINERS_CONF)
    podman_env = {"CONTAINERS_CONF": str(workdir / "containers.conf")}
    build_busybox_image(image, extra_env=podman_env)
    return podman_env


def reaper_pid(workdir: Path, db: str = "outbox") -> int | None:
    """The pid of the reaper of the worker database ``<workdir>/<db>.sqlite`` (it holds
    ``<db>.reaper.lock``, its pid inside), or None when none runs."""
    try:
        fd = os.open(workdir / f"{db}.reaper.lock", os.O_RDONLY)
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


def stop_reapers(workdir: Path, sig: int = signal.SIGTERM) -> None:
    """Stops the reaper of every worker database in ``workdir`` (workers start them detached,
    so stopping the workers leaves them running): ``sig``, then SIGKILL after 10 s."""
    pids = [p for p in (reaper_pid(workdir, f.name.removesuffix(".reaper.lock"))
                        for f in workdir.glob("*.reaper.lock")) if p]  # fmt: skip
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + 10
    for f in workdir.glob("*.reaper.lock"):
        db = f.name.removesuffix(".reaper.lock")
        while reaper_pid(workdir, db) and time.monotonic() < deadline:
            time.sleep(0.1)
        pid = reaper_pid(workdir, db)
        if pid:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def remove_containers(jobs: Iterable[Pubkey], podman_env: Mapping[str, str]) -> None:
    """Removes the containers of ``jobs`` (the worker removes its containers; a failed test
    may not)."""
    for job in jobs:
        cmd = f"podman ps -aq --filter label=gpum.job={job} | xargs -r podman rm -f"
        subprocess.run(["sh", "-c", cmd], capture_output=True, timeout=120, check=False,
                       env={**os.environ, **podman_env})


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def release_mounts(workdir: Path) -> list[str]:
    """Unmounts every filesystem mounted under ``workdir`` (the loop-mounted checkpoint and
    /scratch volumes of a worker killed before it released them), deepest first and lazily
    (``umount -l``: gone at once, freed when a leftover container lets go), and detaches
    every loop device whose image is under ``workdir`` (``losetup -d``: a device still in use
    is freed when its last user ends). Returns the mount points found."""
    root = str(Path(workdir).resolve()).rstrip("/") + "/"
    points = []
    with suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 4 and _unescape(fields[4]).startswith(root):
                points.append(_unescape(fields[4]))
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=60, check=False)
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        with suppress(OSError):
            if backing.read_text().strip().removesuffix(" (deleted)").startswith(root):
                subprocess.run(["losetup", "-d", f"/dev/{backing.parent.parent.name}"],
                               capture_output=True, timeout=60, check=False)
    return points


def chromium(what: str) -> str:
    """Debian's ``chromium``; fails the test saying how to install it (``what``: what the test
    renders with it)."""
    path = shutil.which("chromium")
    if path is None:
        pytest.fail(f"{what} in a real browser: install Debian's `chromium` package (apt-get "
                    "install -y chromium)", pytrace=False)
    return path
