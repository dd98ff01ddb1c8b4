"""Hardware challenges end to end: the local chain, providers whose workers answer the
challenges of a validator node running its challenger, every answer judged over real HTTP.

Providers of one market (each registered with its worker's API as its endpoint):

* ``sim``: a real ``gpum-worker run --simulate`` declaring "Simulated H100" (the bounds
  table's simulated model): passes;
* ``h100``: a real simulated worker declaring an "H100 80GB HBM3": fails ``too_slow``;
* ``twin_a``, ``twin_b``: two real simulated workers of one seed, so the same GPU UUIDs:
  the one judged second fails ``uuid_shared``, naming the other;
* ``made_up_root``, ``wrong_rows``, ``late``, ``never``: the hostile workers of
  ``worker/tests/hostile_challenges.py`` (a made-up root: ``bad_proof`` and evidence kept for
  ``slash_wrong_answer``; rows that are not the product: ``wrong_row``; an answer after the
  deadline and none at all: ``no_answer``).

The validator runs ``--challenges`` with a small challenge (n = 512, two rounds, 4 MiB of
memory) and a 5 s deadline; every verdict is read at ``GET /v1/providers/<p>/hardware`` and
the dashboard's provider page data, and found on chain: the market's ``hardware_quorum`` is 1,
so the validator attests each verdict itself (``attest_hardware``), and it slashes the made-up
root with the worker's own signatures (``slash_wrong_answer``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from gpu_market import pda
from gpu_market.processes import Processes, free_port, tool, wait_http
from harness import Market, start_validator_node, wait_until
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "worker" / "tests" / "hostile_challenges.py"
REAL = {"sim": ("Simulated H100", 21), "h100": ("H100 80GB HBM3", 22),
        "twin_a": ("Simulated H100", 23), "twin_b": ("Simulated H100", 23)}
HOSTILE_MODES = ("made_up_root", "wrong_rows", "late", "never")


def test_hardware_challenges_judge_every_kind_of_answer(
        tmp_path: Path, market_factory: Callable[..., Market]) -> None:
    names = [*REAL, *HOSTILE_MODES]
    parties = ["validator"] + [f"{n}_owner" for n in names] + [f"{n}_worker" for n in names]
    m = market_factory(tmp_path, parties, {
        "window_seconds": 2, "max_missed_windows": 2, "min_stake_per_gpu": 100,
        "validator_min_bond": 100, "unbonding_seconds": 0, "hardware_quorum": 1},
        stake={p: 10_000 * 10**6 for p in parties if not p.endswith("_worker")})
    client, kps, keys = m.client, m.kps, m.keys
    procs = Processes(tmp_path)
    vport = free_port()
    client.register_validator(kps["validator"], m.address, 500, f"http://127.0.0.1:{vport}")
    (tmp_path / "worker.toml").write_text("[challenges]\nmin_interval_seconds = 0\n")
    providers: dict[str, Pubkey] = {}
    ports: dict[str, int] = {}
    try:
        for n in names:
            ports[n] = free_port()
            model = REAL[n][0] if n in REAL else "Simulated H100"
            client.register_provider(kps[f"{n}_owner"], kps[f"{n}_worker"].pubkey(),
                                     {"gpu_model": model, "gpu_count": 1, "vram_mib": 8192,
                                      "region": ""}, 1000, m.address,
                                     endpoint=f"http://127.0.0.1:{ports[n]}")
            client.stake(kps[f"{n}_owner"], m.address, 100)
            providers[n] = pda.provider_pda(m.address, kps[f"{n}_owner"].pubkey())
        common = ["--rpc-url", m.url, "--program-id", str(client.program_id),
                  "--market", str(m.address)]
        for n, (_model, seed) in REAL.items():
            procs.start(n, [
                tool("gpum-worker"), "run", "--simulate", "--gpus", "1", "--seed", str(seed),
                "--config", str(tmp_path / "worker.toml"), "--key", str(keys[f"{n}_worker"]),
                "--db", str(tmp_path / f"{n}.sqlite"), "--poll-seconds", "5", *common,
                "--provider", str(providers[n]), "--api-listen", f"127.0.0.1:{ports[n]}",
                "--no-reaper"])
        for seed, n in enumerate(HOSTILE_MODES, start=31):
            procs.start(n, [
                sys.executable, str(HOSTILE), "--mode", n, "--delay", "10",
                "--key", str(keys[f"{n}_worker"]), *common, "--provider", str(providers[n]),
                "--listen", f"127.0.0.1:{ports[n]}", "--gpus", "1", "--seed", str(seed)])
        for n in names:
            wait_http(f"http://127.0.0.1:{ports[n]}/v1/health", timeout=90)
        start_validator_node(
            procs, m.url, keys["validator"], m.address, vport, tmp_path / "validator.sqlite",
            "--challenges", "--challenge-n", "512", "--challenge-rounds", "2",
            "--challenge-rows", "4", "--challenge-memory-fraction", "0.5",
            "--challenge-max-memory-mib", "4", "--challenge-deadline", "5s",
            "--challenge-pass", "0.5", "--challenge-interval", "1h",
            "--challenge-retry", "2s", "--challenge-seed", "1")
        base = f"http://127.0.0.1:{vport}"

        def verdict(n: str) -> dict[str, Any] | None:
            r = httpx.get(f"{base}/v1/providers/{providers[n]}/hardware", timeout=5)
            return r.json() if r.status_code == 200 else None

        got = {n: wait_until(f"the hardware verdict on {n}", lambda n=n: verdict(n), 120,
                             check=procs.check_alive,
                             diag=lambda: procs.tail("validator", 40)) for n in names}
        summary = {n: (v["passed"], v["codes"]) for n, v in got.items()}
        assert summary["sim"] == (True, []), got["sim"]
        sim = got["sim"]
        assert sim["backend"] == "numpy" and sim["gpus"][0]["rows_checked"] == 4
        assert sim["gpus"][0]["chunks_checked"] == 4 and sim["challenge_params"]["n"] == 512
        assert sim["signals"]["nvml_sha256"] == "simulated"
        assert summary["h100"] == (False, ["too_slow"]), got["h100"]
        assert summary["made_up_root"][0] is False and "bad_proof" in summary["made_up_root"][1]
        assert summary["wrong_rows"] == (False, ["wrong_row"]), got["wrong_rows"]
        for n in ("late", "never"):
            assert summary[n] == (False, ["no_answer"]), got[n]
        first, second = sorted(("twin_a", "twin_b"), key=lambda n: got[n]["recorded_at"])
        assert summary[first] == (True, []), got[first]
        assert summary[second] == (False, ["uuid_shared"]), got[second]
        assert f"also claimed by provider {providers[first]}" in got[second]["reasons"][0]

        # On chain: each verdict attested by this one validator (hardware_quorum 1), the
        # made-up root slashed with the worker's own signatures.
        def on_chain(n: str) -> Any:
            return client.fetch_provider(providers[n])

        for n in names:
            hw = wait_until(f"the verdict on {n} attested on chain",
                            lambda n=n: on_chain(n).hardware.challenged_at and on_chain(n).hardware,
                            60, check=procs.check_alive,
                            diag=lambda: procs.tail("validator", 40))
            assert hw.verified is got[n]["passed"], (n, hw)
            assert hw.challenge_digest.hex() == got[n]["challenge"] and hw.attesters == 1
        assert got["sim"]["attested_tx"]
        cheat = wait_until("the made-up root slashed", lambda: on_chain("made_up_root")
                           .last_slash_at, 60, check=procs.check_alive,
                           diag=lambda: procs.tail("validator", 40))
        assert cheat and on_chain("made_up_root").stake < 100
        assert on_chain("wrong_rows").last_slash_at == 0  # not provable on chain

        page = httpx.get(f"{base}/v1/dashboard/providers/{providers['h100']}", timeout=30)
        assert page.status_code == 200
        assert page.json()["hardware"]["result"] == "failed"
        assert "too_slow" in page.json()["hardware"]["reasons"]

        from gpum_validator.store_sqlite import SQLiteStore

        store = SQLiteStore(tmp_path / "validator.sqlite")
        try:
            evidence = store.wrong_answers(bytes(providers["made_up_root"]))
            assert len(evidence) == 4 and all(e.root != b"" for e in evidence)
            assert store.wrong_answers(bytes(providers["wrong_rows"])) == []
        finally:
            store.close()
    finally:
        procs.stop_all()
