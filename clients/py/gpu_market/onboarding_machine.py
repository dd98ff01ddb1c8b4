"""Onboarding a GPU provider, the machine's side (I/O): the provider's data folder, the worker's
key and configuration, its systemd units, starting it, and probing its API at the address
users will be given (``gpum provider init``'s steps ``worker_config``, ``service`` and
``endpoint``; the rest is :mod:`gpu_market.onboarding`).

The data folder (``$GPUM_DATA_DIR/providers/<market>/<owner>``, mode 0700) holds the state file
of the run, ``worker-key.json`` (created once, never overwritten), ``worker.toml`` (the
worker's configuration, ``gpum-worker run --config``), the worker's outbox database, and
``auto-price.json`` when auto-pricing is on. Every file is written atomically and only when its
content changes.

The worker runs under systemd when systemd is the init system (units written to
``--systemd-dir`` and ``systemctl enable --now``), else as a detached process started here
(its log ``worker.log`` and ``worker.pid`` in the data folder), restarted when its
configuration changed. Guarantees: a worker already running on the data folder's database
with the same configuration is never started twice; nothing is published on chain by this
module.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .onboarding import AutoPrice, OnboardingError, atomic_write

__all__ = [
    "UNITS",
    "WorkerSetup",
    "enable_units",
    "parse_endpoint",
    "provider_data_dir",
    "read_auto_price",
    "simulated_seed",
    "systemd_running",
    "systemd_units",
    "wait_endpoint",
    "worker_config_text",
    "write_auto_price",
    "write_units",
]

UNITS = ("gpum-worker.service", "gpum-worker-reaper.service")
REPRICE_UNITS = ("gpum-provider-reprice.service", "gpum-provider-reprice.timer")
AUTO_PRICE_FILE = "auto-price.json"
SYSTEMCTL_TIMEOUT_S = 60.0


def provider_data_dir(market: Any, owner: Any) -> Path:
    """``$GPUM_DATA_DIR/providers/<market>/<owner>`` (else under ``$XDG_DATA_HOME/gpum`` or
    ``~/.local/share/gpum``)."""
    base = os.environ.get("GPUM_DATA_DIR")
    if not base:
        xdg = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
        base = os.path.join(xdg, "gpum")
    return Path(base).expanduser() / "providers" / str(market) / str(owner)


def make_data_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        raise OnboardingError(f"cannot create the provider's data folder {path} ({e.strerror}): "
                              "pass --data-dir DIR, or set GPUM_DATA_DIR") from None
    return path


# ----------------------------------------------------------------------------- endpoint


def parse_endpoint(text: str, listen: str | None = None) -> tuple[str, str]:
    """``--endpoint`` (``host:port`` or ``http(s)://host[:port]``, the address users reach the
    worker at) and ``--listen`` -> (the URL to publish, the worker's listen address; by
    default all interfaces on the endpoint's port). ValueError saying what to write."""
    raw = str(text).strip()
    url = raw if "://" in raw else f"http://{raw}"
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"--endpoint {text!r}: the port is not a number 1..65535") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query \
            or parts.fragment or parts.username:
        raise ValueError(f"--endpoint {text!r}: write HOST:PORT (e.g. 203.0.113.7:8090) or "
                         "http(s)://HOST[:PORT], the address users reach this worker at")
    if listen is None:
        if port is None:
            raise ValueError(f"--endpoint {text!r} has no port: add one, or pass --listen "
                             "HOST:PORT (where the worker listens behind your proxy)")
        listen = f"0.0.0.0:{port}"
    return url.rstrip("/"), listen


def wait_endpoint(url: str, worker_key: str, timeout: float, *,
                  problem: Callable[[], str] = lambda: "",
                  probe: Callable[[str, str], str] | None = None,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> tuple[str, float]:
    """Probe ``GET {url}/v1/health`` (3 s each) until it answers as the worker ``worker_key``
    or ``timeout`` seconds passed: ("", seconds waited) or (why it did not, seconds).
    ``problem()`` names a reason to stop early (the worker process exited)."""
    from solders.pubkey import Pubkey

    from .net import BoundedClient
    from .offers import probe_worker

    start = clock()
    why = "not probed"
    with BoundedClient() as http:
        check = probe or (lambda u, k: probe_worker(http, u, Pubkey.from_string(k)))
        while True:
            why = check(url, worker_key)
            if not why:
                return "", clock() - start
            dead = problem()
            if dead:
                return f"{why}; {dead}", clock() - start
            if clock() - start >= timeout:
                return why, clock() - start
            sleep(min(0.5, max(0.0, timeout - (clock() - start))))


# ----------------------------------------------------------------------------- worker


def simulated_seed(worker_key: bytes) -> int:
    """The simulation seed of a worker: from its key, so simulated GPU UUIDs are the same
    across restarts and differ between providers (validators fail shared UUIDs)."""
    return int.from_bytes(hashlib.sha256(b"gpum-sim-seed" + bytes(worker_key)).digest()[:4],
                          "big")


@dataclass(frozen=True)
class WorkerSetup:
    """The worker of this provider: where its files are and how it runs. ``simulate``: the
    number of simulated GPUs and the seed (None: NVML)."""

    data_dir: Path
    key_file: Path
    rpc_url: str
    program_id: str
    market: str
    provider: str
    listen: str
    simulate: tuple[int, int] | None = None
    runtime: str = "auto"
    containers_conf: Path | None = None
    reaper: bool = True

    @property
    def config_file(self) -> Path:
        return self.data_dir / "worker.toml"

    @property
    def db(self) -> Path:
        return self.data_dir / "outbox.sqlite"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "worker.log"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "worker.pid"

    def argv(self, worker_bin: str) -> list[str]:
        """``gpum-worker run`` for this setup (simulated GPUs are flags, not configuration)."""
        sim = ([] if self.simulate is None else
               ["--simulate", "--gpus", str(self.simulate[0]), "--seed", str(self.simulate[1])])
        return [worker_bin, "run", "--config", str(self.config_file), *sim]


def _toml(value: str) -> str:
    return json.dumps(str(value))  # a TOML basic string: JSON's escapes are TOML's


def worker_config_text(s: WorkerSetup) -> str:
    """``worker.toml`` for ``s``, checked by the worker's own configuration parser."""
    lines = ["# Written by `gpum provider init`, which rewrites it; see worker/README.md.",
             f"key_file = {_toml(s.key_file)}", f"db = {_toml(s.db)}",
             "[chain]", f"rpc_url = {_toml(s.rpc_url)}", f"program_id = {_toml(s.program_id)}",
             f"market = {_toml(s.market)}", f"provider = {_toml(s.provider)}",
             "[api]", f"listen = {_toml(s.listen)}",
             "[workload]", f"runtime = {_toml(s.runtime)}",
             f"reaper = {'true' if s.reaper else 'false'}"]
    if s.containers_conf is not None:
        lines.append(f"containers_conf = {_toml(s.containers_conf)}")
    text = "\n".join(lines) + "\n"
    try:
        import tomllib
        from gpum_worker.config import resolve
        from gpum_worker.errors import ConfigError
    except ImportError as e:
        from .onboarding import worker_missing

        raise worker_missing(e) from None
    try:
        resolve(tomllib.loads(text), {}, {})
    except ConfigError as e:
        raise OnboardingError(f"the worker configuration would be refused: {e}") from None
    return text


def ensure_worker_key(path: Path) -> tuple[bytes, bool]:
    """The worker key at ``path`` (its public key), created when missing; (pubkey, created)."""
    try:
        from gpum_worker.errors import KeyFileError
        from gpum_worker.keys import generate_key_file, load_worker_key
    except ImportError as e:
        from .onboarding import worker_missing

        raise worker_missing(e) from None
    try:
        if path.exists():
            return load_worker_key(path).pubkey, False
        return generate_key_file(path).pubkey, True
    except KeyFileError as e:
        raise OnboardingError(f"worker key {path}: {e}") from None


# ----------------------------------------------------------------------------- systemd


def systemd_running() -> bool:
    """Whether systemd is this machine's init system (``sd_booted``: /run/systemd/system)."""
    return Path("/run/systemd/system").is_dir()


def _exec(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(str(a)) for a in argv)


def systemd_units(s: WorkerSetup, worker_bin: str, *, user: str | None = None,
                  reprice: Sequence[str] | None = None,
                  reprice_every_s: int = 600) -> dict[str, str]:
    """The units: the worker, its reaper (a service of its own, so it outlives the worker:
    worker/README.md), and with ``reprice`` (``gpum ... provider reprice`` argv) the
    auto-pricing service and its timer."""
    user = user or getpass.getuser()
    install = "[Install]\nWantedBy=multi-user.target\n"
    head = "[Unit]\nDescription={}\nAfter=network-online.target\nWants=network-online.target\n"
    service = "[Service]\nUser={}\nExecStart={}\nRestart=always\nRestartSec=5\n"
    units = {
        UNITS[0]: head.format(f"gpu-market worker of provider {s.provider}")
        + service.format(user, _exec(s.argv(worker_bin))) + install,
        UNITS[1]: head.format("gpu-market reaper: stops containers of ended jobs while the "
                              "worker is down")
        + service.format(user, _exec([worker_bin, "reaper", "--config", str(s.config_file)]))
        + "# no PartOf=/BindsTo=gpum-worker.service: it must outlive the worker\n" + install,
    }
    if reprice is not None:
        units[REPRICE_UNITS[0]] = (head.format("gpu-market auto-pricing: follow the market's "
                                               "median price within your bounds")
                                   + f"[Service]\nType=oneshot\nUser={user}\n"
                                   f"ExecStart={_exec(reprice)}\n")
        units[REPRICE_UNITS[1]] = ("[Unit]\nDescription=gpu-market auto-pricing, every "
                                   f"{reprice_every_s} s\n[Timer]\nOnBootSec=120\n"
                                   f"OnUnitActiveSec={reprice_every_s}\n"
                                   "[Install]\nWantedBy=timers.target\n")
    return units


def write_units(folder: Path, units: dict[str, str]) -> list[str]:
    """Write each unit file into ``folder`` (mode 0644); the names of those that changed."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OnboardingError(f"cannot create {folder} ({e.strerror}): run as root, or pass "
                              "--systemd-dir DIR or --no-systemd") from None
    changed = []
    for name, text in units.items():
        try:
            if atomic_write(folder / name, text, 0o644):
                changed.append(name)
        except OnboardingError as e:
            raise OnboardingError(f"{e}: run as root, or pass --systemd-dir DIR or "
                                  "--no-systemd") from None
    return changed


def enable_commands(units: Sequence[str], restart: bool) -> list[list[str]]:
    """The systemctl commands that start ``units`` now and at boot (a changed configuration
    restarts the services)."""
    cmds = [["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", *units]]
    services = [u for u in units if u.endswith(".service") and "reprice" not in u]
    if restart and services:
        cmds.append(["systemctl", "restart", *services])
    return cmds


def enable_units(units: Sequence[str], restart: bool, *,
                 run: Callable[..., Any] = subprocess.run) -> None:
    for cmd in enable_commands(units, restart):
        try:
            r = run(cmd, capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT_S,
                    check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise OnboardingError(f"`{_exec(cmd)}` failed: {e}") from None
        if r.returncode != 0:
            raise OnboardingError(f"`{_exec(cmd)}` failed ({r.returncode}): "
                                  f"{' '.join((r.stderr or r.stdout).split())[:300]}")


# ----------------------------------------------------------------------------- process


def _alive(pid: int, config: Path) -> bool:
    """Whether ``pid`` is a live ``gpum-worker`` process of ``config``."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(a.endswith(b"gpum-worker") for a in cmdline[:2]) and \
        str(config).encode() in cmdline


def started_worker(s: WorkerSetup) -> dict[str, Any] | None:
    """The worker this module started for ``s`` and that still runs (its pid file), or None."""
    try:
        rec = json.loads(s.pid_file.read_text())
        pid = int(rec["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return rec if _alive(pid, s.config_file) else None


def worker_on_db(s: WorkerSetup) -> bool:
    """Whether any worker runs on this setup's database (it holds the worker lock)."""
    from gpum_worker.reaper import ReaperPaths, worker_running

    return worker_running(ReaperPaths.of(s.db).worker_lock)


def stop_worker(pid: int, config: Path, timeout: float = 15.0) -> None:
    """SIGTERM the worker ``pid`` (this module started it), SIGKILL after ``timeout``."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _alive(pid, config):
                return
            time.sleep(0.1)


def start_worker(s: WorkerSetup, worker_bin: str, config_sha256: str) -> int:
    """Start the worker detached (its own session; it outlives this command), output appended
    to ``worker.log``; its pid."""
    argv = s.argv(worker_bin)
    script = '"$@" >>"$0" 2>&1 </dev/null & echo $!'
    try:
        r = subprocess.run(["sh", "-c", script, str(s.log_file), *argv], capture_output=True,
                           text=True, timeout=30, check=False, start_new_session=True)
        pid = int(r.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        raise OnboardingError(f"cannot start `{_exec(argv)}`: {e}") from None
    deadline = time.monotonic() + 10
    while not _alive(pid, s.config_file):  # the shell's child until it execs the worker
        if time.monotonic() > deadline or not Path(f"/proc/{pid}").exists():
            raise OnboardingError(f"`{_exec(argv)}` did not start: {log_tail(s.log_file)}")
        time.sleep(0.02)
    atomic_write(s.pid_file, json.dumps({"pid": pid, "config_sha256": config_sha256,
                                         "argv": argv}) + "\n")
    return pid


def log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.splitlines()[-lines:])


# ----------------------------------------------------------------------------- auto-pricing


def write_auto_price(data_dir: Path, auto: AutoPrice) -> Path:
    path = data_dir / AUTO_PRICE_FILE
    atomic_write(path, json.dumps(auto.to_json(), sort_keys=True) + "\n")
    return path


def read_auto_price(data_dir: Path) -> AutoPrice:
    path = data_dir / AUTO_PRICE_FILE
    try:
        d = json.loads(path.read_text())
    except FileNotFoundError:
        raise OnboardingError(f"no auto-pricing configured in {data_dir}: run `gpum provider "
                              "init --auto-price --min-price X --max-price Y` first") from None
    except (OSError, ValueError) as e:
        raise OnboardingError(f"cannot read {path}: {e}") from None
    if not isinstance(d, dict):
        raise OnboardingError(f"{path} is not an auto-pricing file")
    return AutoPrice.from_json(d)
