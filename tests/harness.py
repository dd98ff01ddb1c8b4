"""The end-to-end tests' world: a fresh market on a running local chain, and waiting on it.

``create_market`` makes, on the chain at ``url``, an admin and the named parties (each
airdropped SOL, its keypair written to ``<workdir>/<name>.json``), a stake mint and a payment
mint of 6 decimals whose authority is the admin, the stake and payment balances asked for, the
admin's treasury account and a market with the given parameters (index 0 of its fresh admin, so
markets of one chain never meet). ``tests/conftest.py`` hands it to the tests through the
``market_factory`` fixture, which closes the clients it made.

``Network`` is the base of each module's world (its processes and client);
``start_validator_node`` starts a module's one validator node; ``podman_setup``
and ``remove_containers`` prepare and clean up the container runtime of modules that run
workloads. ``wait_until``
polls a condition with a deadline, checking that the processes a test relies on still run,
and says what the test waited for, and their logs, when it gives up.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_market import pda, tokens
from gpu_market.client import GpuMarketClient
from gpu_market.demo import CONTAINERS_CONF
from gpu_market.processes import Processes, tool, wait_http, write_keypair
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


def remove_containers(jobs: Iterable[Pubkey], podman_env: Mapping[str, str]) -> None:
    """Removes the containers of ``jobs`` (the worker removes its containers; a failed test
    may not)."""
    for job in jobs:
        cmd = f"podman ps -aq --filter label=gpum.job={job} | xargs -r podman rm -f"
        subprocess.run(["sh", "-c", cmd], capture_output=True, timeout=120, check=False,
                       env={**os.environ, **podman_env})
