"""``gpum provider init`` end to end: a machine with the packages installed (and simulated GPUs)
from nothing to a verified offer in ``gpum offers verified=true``, on the local chain, with two
real validator nodes running the challenger (a small challenge, as in
``test_e2e_hardware``) and the market's ``hardware_quorum`` of 2, so the verdict reaches the
chain only once both agreed.

Each ``init`` runs the real CLI as a process and starts the real worker itself (systemd does
not run here: its units are written to a folder of the test); the test stops the workers it
made ``init`` start. Also: an init stopped after the registration (``--until register``) and
one killed with SIGKILL as soon as its provider is on chain, each run again: one provider,
exactly the minimum stake; too little stake and an unreachable endpoint: nothing on chain;
a machine without NVML (or, on a GPU machine, its GPUs found); auto-pricing following the
median of the other offers within its bounds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from gpu_market import pda
from gpu_market.processes import Processes, free_port, tool, wait_http
from harness import Market, stop_reapers, wait_until
from solders.keypair import Keypair
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

TOKEN = 10**6
MIN_STAKE_PER_GPU = 50 * TOKEN
OWNERS = ("owner", "stopped", "killed", "poor", "unreachable", "nvml", "auto", "rival_a",
          "rival_b", "rival_c", "early")
VALIDATORS = ("validator_a", "validator_b")
CHALLENGE_FLAGS = (
    "--challenges", "--challenge-n", "512", "--challenge-rounds", "2", "--challenge-rows", "4",
    "--challenge-memory-fraction", "0.5", "--challenge-max-memory-mib", "4",
    "--challenge-deadline", "20s", "--challenge-pass", "1s", "--challenge-interval", "1h",
    "--challenge-retry", "2s")


@dataclass
class World:
    m: Market
    procs: Processes
    workdir: Path
    validator_urls: list[str] = field(default_factory=list)

    def run_init(self, who: str, *args: str, ok: bool = True, timeout: float = 400,
                 port: int | None = None) -> tuple[subprocess.CompletedProcess[str], Path]:
        """``gpum provider init`` as ``who`` (its folder ``<workdir>/<who>``), JSON output."""
        folder = self.workdir / who
        r = subprocess.run(self.init_argv(who, *args, port=port), capture_output=True,
                           text=True, timeout=timeout, check=False)
        if ok and r.returncode != 0:
            raise AssertionError(f"init as {who} failed ({r.returncode}):\n{r.stderr}\n"
                                 f"worker log: {self.worker_log(who)}")
        return r, folder

    def init_argv(self, who: str, *args: str, port: int | None = None) -> list[str]:
        folder = self.workdir / who
        endpoint = [] if any(a.startswith("--endpoint") for a in args) else [
            "--endpoint", f"127.0.0.1:{port or free_port()}"]
        return [tool("gpum"), "--url", self.m.url, "--keypair", str(self.m.keys[who]),
                "--output", "json", "provider", "init", "--market", str(self.m.address),
                "--data-dir", str(folder), "--systemd-dir", str(folder / "units"),
                *endpoint, *args]

    def worker_log(self, who: str) -> str:
        path = self.workdir / who / "worker.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def provider(self, who: str) -> Pubkey:
        return pda.provider_pda(self.m.address, self.m.kps[who].pubkey())

    def view(self, who: str) -> Any:
        return self.m.client.fetch_provider(self.provider(who))

    def gpum_json(self, who: str, *args: str) -> Any:
        r = subprocess.run([tool("gpum"), "--url", self.m.url, "--keypair", str(self.m.keys[who]),
                            "--output", "json", *args], capture_output=True, text=True,
                           timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])


def stop_worker_of(folder: Path) -> None:
    """Stops the worker ``init`` started for ``folder`` (its pid file) and its reaper."""
    try:
        pid = int(json.loads((folder / "worker.pid").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        pid = 0
    if pid:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.1)
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    stop_reapers(folder)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory,
          market_factory: Callable[..., Market]) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("provider-init")
    stakes = {o: 1_000 * TOKEN for o in OWNERS}
    stakes.update(poor=60 * TOKEN, **{v: 1_000 * TOKEN for v in VALIDATORS})
    m = market_factory(workdir, [*OWNERS, *VALIDATORS], {
        "window_seconds": 2, "max_missed_windows": 2, "min_stake_per_gpu": MIN_STAKE_PER_GPU,
        "validator_min_bond": 100, "unbonding_seconds": 0, "hardware_quorum": 2},
        stake=stakes)
    procs = Processes(workdir)
    w = World(m, procs, workdir)
    try:
        for v in VALIDATORS:
            port = free_port()
            m.client.register_validator(m.kps[v], m.address, 500, f"http://127.0.0.1:{port}")
            procs.start(v, [tool("gpum-validator"), "run", "--url", m.url, "--keypair",
                            str(m.keys[v]), "--market", str(m.address), "--listen",
                            f"127.0.0.1:{port}", "--db", str(workdir / f"{v}.sqlite"),
                            *CHALLENGE_FLAGS])
            wait_http(f"http://127.0.0.1:{port}/health", timeout=60)
            w.validator_urls.append(f"http://127.0.0.1:{port}")
        yield w
    finally:
        for folder in workdir.iterdir():
            if folder.is_dir():
                stop_worker_of(folder)
        procs.stop_all()


def steps(r: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {s["step"]: s for s in json.loads(r.stdout.strip().splitlines()[-1])["steps"]}


def test_init_takes_a_machine_to_a_verified_offer_and_a_second_run_changes_nothing(
        world: World) -> None:
    t0 = time.monotonic()
    r, folder = world.run_init("owner", "--simulate", "2:simulated", "--region", "eu-west")
    init_s = time.monotonic() - t0
    address = str(world.provider("owner"))
    listed = wait_until("the provider listed in `gpum offers verified=true`", lambda: [
        o for o in world.gpum_json("owner", "offers", "--market", str(world.m.address),
                                   "verified=true")
        if o["provider"] == address], 60, check=world.procs.check_alive)
    total_s = time.monotonic() - t0
    print(f"\ngpum provider init (2 simulated GPUs, 2 validators, hardware_quorum 2): "
          f"init {init_s:.1f} s, listed and verified in `gpum offers` after {total_s:.1f} s")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    done = steps(r)
    assert list(done) == ["gpus", "benchmark", "price", "worker_config", "service", "endpoint",
                          "register", "stake", "verified"]
    assert all(s["status"] == "done" for s in done.values()), done
    print("steps: " + ", ".join(f"{k} {v['seconds']:.1f} s" for k, v in done.items()))
    assert done["gpus"]["outcome"]["model"] == "simulated"
    assert done["gpus"]["outcome"]["known"] is True and len(done["gpus"]["outcome"]["uuids"]) == 2
    assert done["benchmark"]["outcome"]["passed"] is True, done["benchmark"]
    assert done["benchmark"]["outcome"]["backend"] == "numpy"
    assert done["price"]["outcome"]["source"] == "default"  # no other offer of the model
    assert done["register"]["outcome"]["action"] == "registered"
    assert done["stake"]["outcome"]["added"] == 2 * MIN_STAKE_PER_GPU
    assert out["offer"]["provider"] == address and out["offer"]["verified"] is True
    assert listed[0]["gpus_total"] == 2 and listed[0]["online"] is True

    view = world.view("owner")
    assert (view.spec.gpu_model, view.spec.gpu_count, view.spec.region) == \
        ("simulated", 2, "eu-west")
    assert view.price_per_gpu_second == 500  # 1.8 per GPU-hour, 6 decimals
    assert view.stake == 2 * MIN_STAKE_PER_GPU and view.hardware.verified
    assert view.hardware.attesters == 2 and view.endpoint.startswith("http://127.0.0.1:")
    units = {p.name: p.read_text() for p in (folder / "units").iterdir()}
    assert sorted(units) == ["gpum-worker-reaper.service", "gpum-worker.service"]
    assert "--simulate --gpus 2" in units["gpum-worker.service"]
    assert f"reaper --config {folder / 'worker.toml'}" in units["gpum-worker-reaper.service"]
    state = json.loads((folder / "init-state.json").read_text())
    assert state["provider"] == address and state["steps"]["stake"]["status"] == "done"

    # Again: every step finds its work done; nothing is sent.
    port = int(view.endpoint.rsplit(":", 1)[1])
    r2, _ = world.run_init("owner", "--simulate", "2:simulated", "--region", "eu-west",
                           port=port)
    again = steps(r2)
    assert again["register"]["outcome"]["action"] == "unchanged"
    assert again["stake"]["outcome"]["added"] == 0
    assert "signature" not in again["stake"]["outcome"]
    assert again["service"]["outcome"]["pid"] == done["service"]["outcome"]["pid"]
    assert world.view("owner").stake == 2 * MIN_STAKE_PER_GPU


def test_an_init_stopped_after_register_continues_and_stakes_exactly_the_minimum(
        world: World) -> None:
    port = free_port()
    args = ("--simulate", "1:simulated", "--wait-verified", "0")
    r, _ = world.run_init("stopped", *args, "--until", "register", port=port)
    first = steps(r)
    assert list(first)[-1] == "register" and first["register"]["outcome"]["action"] == "registered"
    assert json.loads(r.stdout.strip().splitlines()[-1])["stopped_after"] == "register"
    assert world.view("stopped").stake == 0
    r2, _ = world.run_init("stopped", *args, port=port)
    second = steps(r2)
    assert second["register"]["outcome"]["action"] == "unchanged"
    assert second["stake"]["outcome"]["added"] == MIN_STAKE_PER_GPU
    assert second["verified"]["status"] == "skipped"
    assert world.view("stopped").stake == MIN_STAKE_PER_GPU


def test_an_init_killed_once_registered_is_run_again_without_a_second_registration_or_stake(
        world: World) -> None:
    port = free_port()
    args = ("--simulate", "2:simulated", "--wait-verified", "0")
    proc = subprocess.Popen(world.init_argv("killed", *args, port=port),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until("the provider registered", lambda: world.view("killed") is not None
                   or proc.poll() is not None, 120)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert world.view("killed") is not None, "init ended before registering"
    r, _ = world.run_init("killed", *args, port=port)
    done = steps(r)
    assert done["register"]["outcome"]["action"] == "unchanged"
    assert done["stake"]["outcome"]["staked_before"] + done["stake"]["outcome"]["added"] \
        == 2 * MIN_STAKE_PER_GPU
    assert world.view("killed").stake == 2 * MIN_STAKE_PER_GPU
    r, _ = world.run_init("killed", *args, port=port)
    assert steps(r)["stake"]["outcome"]["added"] == 0
    assert world.view("killed").stake == 2 * MIN_STAKE_PER_GPU


def test_too_little_stake_registers_nothing_and_says_how_much_is_needed(world: World) -> None:
    r, folder = world.run_init("poor", "--simulate", "2:simulated", ok=False)
    assert r.returncode == 1
    assert "needs 100 stake tokens (the market's min_stake_per_gpu 50 x 2); 0 are staked" \
        in r.stderr and "holds 60: add 40 there" in r.stderr, r.stderr
    assert "nothing was registered" in r.stderr
    assert world.view("poor") is None
    state = json.loads((folder / "init-state.json").read_text())
    assert state["steps"]["register"]["status"] == "failed"
    assert state["steps"]["endpoint"]["status"] == "done"


def test_an_unreachable_endpoint_publishes_nothing(world: World) -> None:
    dead, listen = free_port(), free_port()
    r, _ = world.run_init("unreachable", "--simulate", "1:simulated",
                               "--endpoint", f"127.0.0.1:{dead}",
                               "--listen", f"127.0.0.1:{listen}", "--endpoint-timeout", "5",
                               ok=False)
    assert r.returncode == 1
    assert f"the worker does not answer at http://127.0.0.1:{dead}/v1/health" in r.stderr
    assert "nothing was published on chain" in r.stderr, r.stderr
    assert world.view("unreachable") is None
    wait_http(f"http://127.0.0.1:{listen}/v1/health", timeout=30)  # the worker itself runs


def test_a_machine_without_nvml_is_told_what_to_install(world: World) -> None:
    """The machine's real NVML: without a driver the error says what to install or
    --simulate; on a GPU machine the GPUs are found."""
    from gpum_worker.errors import NvmlUnavailable
    from gpum_worker.gpu import NvmlBackend

    try:
        NvmlBackend().init()
        has_nvml = True
    except NvmlUnavailable:
        has_nvml = False
    r, _ = world.run_init("nvml", "--until", "gpus", ok=has_nvml)
    if has_nvml:
        assert steps(r)["gpus"]["outcome"]["backend"] == "nvml"
    else:
        assert r.returncode == 1
        assert "error: gpus: no GPU can be read here" in r.stderr
        assert "--simulate N:MODEL" in r.stderr and "driver" in r.stderr, r.stderr


def test_auto_pricing_follows_the_median_within_the_bounds(world: World) -> None:
    client, kps = world.m.client, world.m.kps
    for name, per_second in (("rival_a", 600), ("rival_b", 1000), ("rival_c", 2000)):
        client.register_provider(kps[name], Keypair().pubkey(), {
            "gpu_model": "NVIDIA GeForce RTX 4090", "gpu_count": 1, "vram_mib": 24564,
            "region": ""},
            per_second, world.m.address)
    # Simulated GPUs declared as RTX 4090s (the NVML name of the rivals' model is the same
    # row of the bounds table): the CPU would fail their challenge, which the benchmark says.
    # The median of the model's offers (1000 base units per second = 3.6 per GPU-hour) is
    # above --max-price 2.7 (750 per second): init registers the highest price allowed.
    r, folder = world.run_init("auto", "--simulate", "1:RTX 4090", "--auto-price",
                               "--min-price", "0.72", "--max-price", "2.7",
                               "--wait-verified", "0")
    bench = steps(r)["benchmark"]["outcome"]
    assert bench["passed"] is False and "would fail a validator's challenge as a RTX 4090" \
        in bench["warning"] and "too_slow" in bench["warning"], bench
    assert "warning: this machine would fail" in r.stderr
    price = steps(r)["price"]["outcome"]
    assert (price["source"], price["median"], price["offers"], price["clamped"]) == \
        ("median", 1000, 3, True)
    assert world.view("auto").price_per_gpu_second == 750
    units = {p.name for p in (folder / "units").iterdir()}
    assert {"gpum-provider-reprice.service", "gpum-provider-reprice.timer"} <= units
    market = str(world.m.address)

    def reprice() -> dict[str, Any]:
        return world.gpum_json("auto", "provider", "reprice", "--market", market,
                               "--data-dir", str(folder))

    d = reprice()
    assert (d["update"], d["target"], d["signature"]) == (False, 750, None)  # at the bound
    client.update_provider(kps["rival_b"], world.provider("rival_b"), 500)
    client.update_provider(kps["rival_c"], world.provider("rival_c"), 560)
    d = reprice()  # median 560: inside the bounds, 25 % below: followed
    assert (d["update"], d["target"], d["median"]) == (True, 560, 560) and d["signature"]
    assert world.view("auto").price_per_gpu_second == 560
    client.update_provider(kps["rival_c"], world.provider("rival_c"), 580)
    d = reprice()  # median 580: 3.6 % away, within the 5 % threshold: no transaction
    assert (d["update"], d["target"], d["signature"]) == (False, 580, None)
    assert world.view("auto").price_per_gpu_second == 560
    for name in ("rival_a", "rival_b", "rival_c"):
        client.update_provider(kps[name], world.provider(name), 10)
    d = reprice()  # median 10: below --min-price 0.72 (200 per second): the lowest allowed
    assert (d["update"], d["target"]) == (True, 200)
    assert world.view("auto").price_per_gpu_second == 200


def test_a_provider_registered_before_its_worker_answered_is_updated_and_verified(
        world: World) -> None:
    """Registered by hand without an endpoint, the provider was judged "no endpoint" by the
    validators; ``init`` publishes the endpoint (no second registration) and the validators
    challenge it again at once, so it ends verified."""
    import httpx

    spec = {"gpu_model": "simulated", "gpu_count": 1, "vram_mib": 81_559, "region": ""}
    worker_key = world.workdir / "early-worker-key.json"
    subprocess.run([tool("gpum-worker"), "keygen", "--out", str(worker_key)], check=True,
                   capture_output=True)
    from gpum_worker.keys import load_worker_key

    key = Pubkey.from_bytes(load_worker_key(worker_key).pubkey)
    world.m.client.register_provider(world.m.kps["early"], key, spec, 500, world.m.address)
    address = world.provider("early")

    def judged_without_endpoint() -> bool:
        for url in world.validator_urls:
            r = httpx.get(f"{url}/v1/providers/{address}/hardware", timeout=5)
            if r.status_code != 200 or not r.json().get("no_endpoint"):
                return False
        return True

    wait_until("both validators judged it without an endpoint", judged_without_endpoint, 120,
               check=world.procs.check_alive)
    r, _ = world.run_init("early", "--simulate", "1:simulated", "--worker-key", str(worker_key))
    done = steps(r)
    assert done["register"]["outcome"] == {"action": "updated", "changed": ["endpoint"],
                                           "signature": done["register"]["outcome"]["signature"],
                                           "provider": str(address)}
    assert done["verified"]["status"] == "done"
    view = world.view("early")
    assert view.hardware.verified and view.endpoint and view.stake == MIN_STAKE_PER_GPU
