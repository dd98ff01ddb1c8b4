"""``gpum job exec`` and ``gpum job cp`` end to end: a Running job's podman container on the
local chain, reached through the provider's worker API with the user's wallet.

The world: ``gpum-localnet``, a market with 2 s windows, provider P (4 simulated GPUs; its
worker serves ``--api-listen`` with podman and P registered that API as its endpoint), one
validator node (every job's committee of one), the busybox-static image built locally.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from gpu_market.processes import tool
from harness import Market, WorkerNetwork, worker_network
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

WINDOW = 2
IMAGE = "localhost/gpum-busybox:1"


@dataclass
class World(WorkerNetwork):
    OUTPUT = ""
    KEYPAIR_AFTER = 2
    FAILED = "gpum {args} failed ({code}):\n{stderr}\nworker log:\n{log}"
    WAIT_TIMEOUT = 90


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory,
          market_factory: Callable[..., Market]) -> Iterator[World]:
    workdir: Path = tmp_path_factory.mktemp("exec")
    m = market_factory(workdir, ["owner", "user", "other", "validator", "worker"], {
        "window_seconds": WINDOW, "max_missed_windows": 2, "min_stake_per_gpu": 100,
        "validator_min_bond": 100, "unbonding_seconds": 0},
        stake=dict.fromkeys(("owner", "validator"), 10_000 * 10**6),
        payment=dict.fromkeys(("user", "other"), 1_000 * 10**6))
    with worker_network(World, workdir, m, IMAGE, window=WINDOW) as w:
        yield w


@pytest.fixture(scope="module")
def job(world: World) -> Pubkey:
    r = world.run_gpum("user", "job", "create", "--output", "json", "--market", str(world.market),
                       "--provider", str(world.provider), "--gpu-count", "1", "--deposit", "20",
                       "--committee", str(world.validator), "--quorum", "1", "--image", IMAGE,
                       "--cmd", '["/bin/sh", "-c"]',
                       "--arg", "trap 'exit 0' TERM; while true; do sleep 1; done")
    j = Pubkey.from_string(json.loads(r.stdout.strip().splitlines()[-1])["job"])
    world.jobs.append(j)

    last: list[str] = []

    def running() -> bool:
        r = world.run_gpum("user", "job", "exec", str(j), "--", "true", ok=False)
        last[:] = [r.stderr]
        return r.returncode == 0

    try:
        world.wait("the job's container accepting commands", running)
    except AssertionError as e:
        raise AssertionError(f"{e}\nlast `gpum job exec` said: {last}") from None
    return j


def test_exec_prints_output_and_exits_with_the_commands_status(world: World,
                                                               job: Pubkey) -> None:
    r = world.run_gpum("user", "job", "exec", str(job), "--", "echo", "hi")
    assert r.stdout == "hi\n" and r.returncode == 0
    r = world.run_gpum("user", "job", "exec", str(job), "--", "sh", "-c", "echo oops >&2; exit 3",
                       ok=False)
    assert r.returncode == 3 and r.stderr == "oops\n"
    # Input piped with -i.
    env = {**os.environ}
    p = subprocess.run(world.argv("user", "job", "exec", "-i", str(job), "--", "wc", "-c"),
                       input="twelve bytes", capture_output=True, text=True, timeout=60,
                       env=env, check=False)
    assert p.returncode == 0 and p.stdout.strip() == "12", p.stderr
    # Only the job's user.
    r = world.run_gpum("other", "job", "exec", str(job), "--", "id", ok=False)
    assert r.returncode == 1 and "only the job's user" in r.stderr


def test_cp_round_trip(world: World, job: Pubkey, tmp_path: Path) -> None:
    src = tmp_path / "data"
    (src / "nested").mkdir(parents=True)
    (src / "hello.txt").write_text("hello from here\n")
    (src / "nested" / "blob").write_bytes(os.urandom(100_000))
    world.run_gpum("user", "job", "exec", str(job), "--", "mkdir", "-p", "/scratch")
    world.run_gpum("user", "job", "cp", str(src), f"{job}:/scratch/x")
    r = world.run_gpum("user", "job", "exec", str(job), "--", "cat", "/scratch/x/hello.txt")
    assert r.stdout == "hello from here\n"
    world.run_gpum("user", "job", "exec", str(job), "--", "sh", "-c", "echo made there > /scratch/x/out")
    back = tmp_path / "back"
    world.run_gpum("user", "job", "cp", f"{job}:/scratch/x", str(back))
    assert (back / "hello.txt").read_text() == "hello from here\n"
    assert (back / "out").read_text() == "made there\n"
    assert (back / "nested" / "blob").read_bytes() == (src / "nested" / "blob").read_bytes()
    r = world.run_gpum("user", "job", "cp", str(src), f"{job}:/scratch/../../etc", ok=False)
    assert r.returncode == 1 and ".." in r.stderr


def test_an_interactive_shell_with_a_terminal(world: World, job: Pubkey) -> None:
    pid, fd = pty.fork()
    if pid == 0:  # the child: gpum on the pty's slave, as on a person's terminal
        os.execv(tool("gpum"), world.argv("user", "job", "exec", "-it", str(job), "--", "sh"))
    got = b""
    try:
        def read_until(needle: bytes, timeout: float = 30) -> None:
            nonlocal got
            end = time.monotonic() + timeout
            while needle not in got:
                left = end - time.monotonic()
                assert left > 0, f"no {needle!r} in {got[-500:]!r}"
                ready, _, _ = select.select([fd], [], [], left)
                if ready:
                    try:
                        data = os.read(fd, 4096)
                    except OSError:
                        data = b""
                    assert data, f"the session ended before {needle!r}: {got[-500:]!r}"
                    got += data

        read_until(b"#")  # the shell's prompt
        os.write(fd, b"echo $((6*7))\r")
        read_until(b"42\r\n")
        os.write(fd, b"exit 4\r")
        _, status = os.waitpid(pid, 0)
        pid = 0
        assert os.waitstatus_to_exitcode(status) == 4
    finally:
        if pid:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)
