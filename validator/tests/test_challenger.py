"""The challenger against real worker APIs on 127.0.0.1: the worker's own challenge service
(honest) and the hostile variants of ``worker/tests/hostile_challenges.py``; each bad answer
fails with its code, evidence of a wrong answer is kept, busy workers are asked later, and
the schedule (registration, spec change, random) follows the configuration."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from gpu_market import hardware as H
from gpu_market.challenge_messages import verify_digest
from gpu_market.proof import GpuWindow
from gpum_validator.challenger import Challenger, hardware_answer
from gpum_validator.config import ChallengeConfig
from gpum_validator.hardware import CODES
from gpum_validator.hardware_quorum import HardwareQuorum
from gpum_validator.store_sqlite import SQLiteStore
from gpum_worker.api import WorkerApi
from gpum_worker.challenge_api import ChallengeService, nvml_library
from gpum_worker.challenge_compute import NumpyBackend
from gpum_worker.gpu import GpuInfo
from gpum_worker.keys import WorkerKey
from gpum_worker.workload_store import WorkloadStore
from gpum_worker.workloads import WorkloadManager
from solders.pubkey import Pubkey
from storekit import accept
from vtestkit import (
    MARKET,
    ME,
    ME_PUB,
    PROGRAM,
    WORKER_KEY,
    WORKER_PUB,
    WORKER_SEED,
    cfg,
    make_proof,
    pk,
    provider_view,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "worker" / "tests"))
from hostile_challenges import HostileChallenges

GPUS = [GpuInfo(0, "GPU-1111", "Simulated H100 80GB")]
SMALL = ChallengeConfig(enabled=True, n=512, rounds=2, rows=4, memory_fraction=0,
                        deadline_seconds=3, retry_seconds=100, interval_seconds=1000, seed=7)


class Worker:
    """A worker API serving one provider's challenges (``mode`` None: honest)."""

    def __init__(self, provider: bytes, mode: str | None = None, gpus: list[GpuInfo] = GPUS,
                 busy: set[str] | None = None, delay_s: float = 30.0,
                 clock: Any = None) -> None:
        key = WorkerKey(WORKER_KEY, WORKER_SEED, WORKER_PUB)
        kw: dict[str, Any] = dict(
            key=key, program_id=PROGRAM, market=MARKET, provider=provider,
            gpus=lambda: gpus, busy=lambda: busy or set(),
            validators=lambda v: v == ME_PUB, backend=NumpyBackend(),
            nvml=nvml_library(True), min_interval_s=0, **({"clock": clock} if clock else {}))
        self.svc = (ChallengeService(**kw) if mode is None
                    else HostileChallenges(**kw, mode=mode, delay_s=delay_s))
        self.api = WorkerApi(WorkloadManager(None, WorkloadStore(":memory:"), WORKER_SEED),
                             "127.0.0.1:0", challenges=self.svc)
        self.api.start()
        self.url = self.api.url

    def close(self) -> None:
        if isinstance(self.svc, HostileChallenges):
            self.svc.closed.set()
        self.api.close()


class Chain:
    """The chain reads the challenger and the quorum make."""

    def __init__(self) -> None:
        self.providers: list[Any] = []
        self.attested, self.slashed = [], []
        self.params = SimpleNamespace(hardware_quorum=1,
                                      hardware_attestation_max_age_seconds=600)

    def _program_accounts(self, kind: str, filters: dict[str, Any]) -> list[Any]:
        assert kind == "Provider" and filters == {"market": MARKET}
        return list(self.providers)

    def fetch_market(self, market: Any) -> Any:
        return SimpleNamespace(params=self.params)

    def list_validators(self, market: Any, statuses: Any) -> list[Any]:
        return []

    attested: list[Any]
    slashed: list[Any]
    fail_slash: Exception | None = None

    def attest_hardware(self, submitter: Any, provider: Any, verdict: Any,
                        signatures: Any) -> str:
        """Checks what the SDK checks before sending: every signature over the digest."""
        digest = verdict.digest(Pubkey.from_bytes(PROGRAM), Pubkey.from_bytes(MARKET), provider)
        assert all(verify_digest(bytes(a), s, verdict.message(
            Pubkey.from_bytes(PROGRAM), Pubkey.from_bytes(MARKET), provider))
            for a, s in signatures) and len(digest) == 32
        self.attested.append((submitter.pubkey(), provider, verdict, signatures))
        return f"attest-{len(self.attested)}"

    def slash_wrong_answer(self, reporter: Any, provider: Any, evidence: Any, answer: Any,
                           row: Any) -> str:
        if self.fail_slash is not None:
            raise self.fail_slash
        keys = (Pubkey.from_bytes(PROGRAM), Pubkey.from_bytes(MARKET), provider)
        if not evidence.is_wrong:
            raise ValueError("consistent")
        assert verify_digest(bytes(answer[0]), answer[1], evidence.answer_message(*keys))
        assert verify_digest(bytes(row[0]), row[1], evidence.row_message(*keys))
        self.slashed.append((reporter.pubkey(), provider, evidence))
        return f"slash-{len(self.slashed)}"


def provider(n: int, url: str = "", **spec: Any) -> Any:
    base = provider_view(address=pk(bytes([n]) * 32), endpoint=url, gpus_in_use=0)
    return replace(base, spec=replace(base.spec, gpu_model="Simulated H100", gpu_count=1,
                                      **spec))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[Any]:
    made: list[Worker] = []
    store = SQLiteStore(tmp_path / "v.sqlite")
    chain = Chain()
    now = [1_800_000_000.0]
    quorum = HardwareQuorum(chain, ME, store, cfg(), SMALL, clock=lambda: now[0])
    ch = Challenger(chain, ME, store, cfg(), SMALL, clock=lambda: now[0], quorum=quorum)

    def worker(n: int, mode: str | None = None, **kw: Any) -> tuple[Any, Worker]:
        w = Worker(bytes([n]) * 32, mode, clock=lambda: now[0], **kw)
        made.append(w)
        return provider(n, w.url), w

    yield SimpleNamespace(store=store, chain=chain, now=now, ch=ch, worker=worker)
    for w in made:
        w.close()
    ch.http.close()
    store.close()


def test_an_honest_simulated_gpu_declared_simulated_passes(world: Any) -> None:
    view, _ = world.worker(1)
    v = world.ch.challenge(view, "registration")
    assert v.passed and v.reasons == (), v.reasons
    assert v.detail["backend"] == "numpy" and v.detail["why"] == "registration"
    assert v.detail["gpus"][0]["uuid"] == "GPU-1111"
    assert v.detail["gpus"][0]["rows_checked"] == 4
    assert v.detail["signals"]["nvml_sha256"] == "simulated"
    assert world.store.latest_hardware_verdict(bytes(view.address)) == v
    assert world.store.gpu_claimants(["GPU-1111"]) == {"GPU-1111": {bytes(view.address)}}
    status, body = hardware_answer(world.store, str(view.address))
    assert status == 200 and body["passed"] is True and body["codes"] == []
    assert body["attestations"] == 1  # this node's own signature (quorum 1 on this chain)
    (submitter, on, args, sigs), = world.chain.attested  # attested on chain at once
    assert (submitter, on, args.passed, args.gpu_model) == (ME.pubkey(), view.address, True,
                                                            "Simulated H100")
    assert args.challenge_digest == v.challenge and [a for a, _ in sigs] == [ME.pubkey()]
    assert body["attested_tx"] == "attest-1"


def test_a_verdict_the_chain_refuses_keeps_why(world: Any) -> None:
    view, _ = world.worker(1)
    world.chain.attest_hardware = lambda *a: (_ for _ in ()).throw(RuntimeError("rpc down"))
    v = world.ch.challenge(view, "registration")
    assert v.passed
    got = world.store.latest_hardware_verdict(bytes(view.address))
    assert "rpc down" in got.detail["attest_error"] and "attested_tx" not in got.detail


def test_without_a_quorum_nothing_is_sent(world: Any) -> None:
    world.chain.params.hardware_quorum = 2  # and no peer answers
    view, _ = world.worker(1)
    assert world.ch.challenge(view, "registration").passed
    assert world.chain.attested == []


def test_a_simulated_gpu_declared_as_an_h100_is_too_slow(world: Any) -> None:
    view, _ = world.worker(1)
    view = replace(view, spec=replace(view.spec, gpu_model="H100 80GB HBM3"))
    v = world.ch.challenge(view, "registration")
    assert not v.passed and "too_slow" in v.codes, v.reasons
    assert any(n.startswith("device_name") for n in v.detail["signals"]["notes"])


def test_a_made_up_root_fails_and_leaves_evidence_the_chain_takes(world: Any) -> None:
    view, _ = world.worker(1, "made_up_root")
    v = world.ch.challenge(view, "registration")
    assert not v.passed and "bad_proof" in v.codes, v.reasons
    evidence = world.store.wrong_answers(bytes(view.address))
    assert len(evidence) == SMALL.rows  # every opened row misses the made-up root
    keys = (Pubkey.from_bytes(PROGRAM), Pubkey.from_bytes(MARKET), view.address)
    for e in evidence:
        w = H.WrongAnswerEvidence(e.challenge_digest, e.challenged_at, e.root, e.leaf_count,
                                  e.row_index, e.leaf_hash, e.siblings)
        assert w.is_wrong  # what slash_wrong_answer checks on chain
        assert verify_digest(WORKER_PUB, e.answer_signature, w.answer_message(*keys))
        assert verify_digest(WORKER_PUB, e.row_signature, w.row_message(*keys))
    (reporter, on, sent), = world.chain.slashed  # reported at once, one per GPU challenge
    assert (reporter, on) == (ME.pubkey(), view.address) and sent.is_wrong
    assert world.store.wrong_answers(unreported=True) == []
    assert world.ch.report_wrong_answers() == [] and len(world.chain.slashed) == 1
    assert world.chain.attested[0][2].passed is False  # the failed verdict is attested too


@pytest.mark.parametrize("error, tries", [(ValueError("consistent"), 1),
                                          (RuntimeError("rpc down"), 5)])
def test_a_refused_report_ends_and_a_transport_error_is_retried(
        world: Any, error: Exception, tries: int) -> None:
    world.chain.fail_slash = error
    view, _ = world.worker(1, "made_up_root")
    world.ch.challenge(view, "registration")  # the first try
    for _ in range(6):
        world.ch.report_wrong_answers()
    assert world.ch._report_tries[(bytes(view.address), world.store.wrong_answers()[0]
                                   .challenge_digest)] == tries
    assert world.store.wrong_answers(unreported=True) == []


def test_rows_that_do_not_match_fail_without_chain_evidence(world: Any) -> None:
    view, _ = world.worker(1, "wrong_rows")
    v = world.ch.challenge(view, "registration")
    assert not v.passed and "wrong_row" in v.codes and "bad_proof" not in v.codes, v.reasons
    assert world.store.wrong_answers(bytes(view.address)) == []


@pytest.mark.parametrize("mode", ["late", "never"])
def test_a_late_or_missing_answer_fails(world: Any, mode: str) -> None:
    view, _ = world.worker(1, mode, delay_s=5)
    v = world.ch.challenge(view, "registration")
    assert v.codes == ("no_answer",), v.reasons
    assert "deadline" in v.reasons[0]


def test_gpu_uuids_another_provider_claims_fail_the_challenge(world: Any) -> None:
    a, _ = world.worker(1)
    b, _ = world.worker(2)  # the same simulated GPU UUIDs
    assert world.ch.challenge(a, "registration").passed
    v = world.ch.challenge(b, "registration")
    assert v.codes == ("uuid_shared",), v.reasons
    assert f"also claimed by provider {a.address}" in v.reasons[0]
    again = world.ch.challenge(a, "random")  # both claim it now: both fail
    assert again.codes == ("uuid_shared",) and str(b.address) in again.reasons[0]


def test_uuids_of_window_proofs_count_as_claims(world: Any) -> None:
    """A GPU that proved windows for one provider cannot pass another's challenge."""
    p = make_proof(gpus=(GpuWindow(uuid="GPU-1111", samples=60, covered_seconds=60),))
    accept(world.store, p, 1_700_000_000)
    assert world.ch.scan_claims() == 1
    assert world.ch.scan_claims() == 0  # once
    view, _ = world.worker(3)
    v = world.ch.challenge(view, "registration")
    assert v.codes == ("uuid_shared",) and str(pk(p.provider)) in v.reasons[0]


def test_answers_for_fewer_gpus_than_declared_fail(world: Any) -> None:
    view, _ = world.worker(1)
    v = world.ch.challenge(replace(view, spec=replace(view.spec, gpu_count=2)), "registration")
    assert v.codes == ("gpu_count",), v.reasons


def test_an_answer_for_another_worker_key_fails(world: Any) -> None:
    view, _ = world.worker(1)
    v = world.ch.challenge(replace(view, worker_key=pk(bytes([99]) * 32)), "registration")
    assert {"wrong_worker_key", "bad_signature"} <= set(v.codes), v.reasons


def test_a_provider_without_an_endpoint_fails(world: Any) -> None:
    v = world.ch.challenge(provider(5), "registration")
    assert v.codes == ("no_answer",) and "endpoint" in v.reasons[0]


def test_an_endpoint_published_after_a_verdict_without_one_is_challenged_at_once(
        world: Any) -> None:
    bare = provider(5)
    v = world.ch.challenge(bare, "registration")
    assert not v.passed and v.detail["no_endpoint"] is True
    assert world.ch.due([bare]) == []
    published = replace(bare, endpoint="http://127.0.0.1:9")
    assert [w for _, w in world.ch.due([published])] == ["endpoint_published"]
    v = world.ch.challenge(published, "endpoint_published")
    assert v.codes == ("no_answer",) and "no_endpoint" not in v.detail
    assert world.ch.due([published]) == []  # then its random time, like any verdict


def test_an_unreachable_worker_fails(world: Any) -> None:
    v = world.ch.challenge(provider(5, "http://127.0.0.1:9"), "registration")
    assert v.codes == ("no_answer",)


def test_a_busy_worker_is_asked_later_never_failed_while_it_rents(world: Any) -> None:
    view, _ = world.worker(1, busy={"GPU-1111"})
    renting = replace(view, gpus_in_use=1)
    assert world.ch.challenge(renting, "registration") is None
    assert world.store.latest_hardware_verdict(bytes(view.address)) is None
    assert world.ch.due([renting]) == []  # held back until the retry time
    world.now[0] += SMALL.retry_seconds
    assert [w for _, w in world.ch.due([renting])] == ["registration"]
    for _ in range(3):  # busy while the chain shows no GPU in use: asked again three times
        assert world.ch.challenge(view, "registration") is None
    v = world.ch.challenge(view, "registration")
    assert v.codes == ("no_answer",) and "busy" in v.reasons[0]


def test_a_worker_that_keeps_putting_it_off_fails(world: Any) -> None:
    view, w = world.worker(1)
    held = w.svc._running
    assert held.acquire()  # another challenge runs there, every time
    try:
        for _ in range(3):
            assert world.ch.challenge(view, "registration") is None
        v = world.ch.challenge(view, "registration")
    finally:
        held.release()
    assert v.codes == ("no_answer",) and "challenge_running" in v.reasons[0]
    assert world.ch.challenge(view, "random").passed  # the count starts again after


def test_a_worker_that_cannot_compute_fails_at_once(world: Any) -> None:
    view, w = world.worker(1)

    def broken(*_a: Any) -> Any:
        from gpum_worker.challenge_compute import ChallengeComputeError

        raise ChallengeComputeError("GPU 0: OutOfMemoryError")

    w.svc.backend.multiply = broken  # type: ignore[method-assign]
    v = world.ch.challenge(view, "registration")
    assert v.codes == ("no_answer",) and "compute_failed" in v.reasons[0]


def test_the_schedule(world: Any) -> None:
    view, _ = world.worker(1)
    world.chain.providers = [view, replace(provider(9), status="paused")]
    assert [(p.address, why) for p, why in world.ch.due(world.ch.providers())] == [
        (view.address, "registration")]  # paused providers are not challenged
    (v,) = world.ch.run_pass()
    assert v.passed and world.ch.due([view]) == []
    changed = replace(view, spec=replace(view.spec, vram_mib=1))
    assert [w for _, w in world.ch.due([changed])] == ["spec_change"]
    rotated = replace(view, worker_key=pk(bytes([8]) * 32))
    assert [w for _, w in world.ch.due([rotated])] == ["spec_change"]
    next_at = world.ch._next[bytes(view.address)]
    assert world.now[0] + 100 <= next_at <= world.now[0] + 3000  # clipped to [mean/10, 3 mean]
    world.now[0] = next_at
    assert [w for _, w in world.ch.due([view])] == ["random"]


def test_random_times_follow_the_seed_and_the_mean() -> None:
    def draws(seed: int) -> list[float]:
        c = Challenger(Chain(), ME, None, cfg(), replace(SMALL, seed=seed))
        c.http.close()
        return [c.draw() for _ in range(2000)]

    a = draws(1)
    assert a == draws(1) and a != draws(2)
    assert min(a) >= 100 and max(a) <= 3000
    assert 800 < sum(a) / len(a) < 1100  # an exponential of mean 1000, clipped


def test_a_restarted_challenger_keeps_its_schedule(world: Any, tmp_path: Path) -> None:
    view, _ = world.worker(1)
    assert world.ch.challenge(view, "registration").passed
    again = Challenger(world.chain, ME, world.store, cfg(), SMALL, clock=lambda: world.now[0])
    try:
        assert again.due([view]) == []  # judged before the restart: not a registration
    finally:
        again.http.close()


def test_every_code_is_documented() -> None:
    from gpu_market.challenge_verdict import FAILURE_CODES

    assert set(FAILURE_CODES) <= set(CODES)


def test_the_verdict_route_refuses_bad_addresses(world: Any) -> None:
    assert hardware_answer(world.store, "not-an-address")[0] == 400
    status, body = hardware_answer(world.store, str(pk(bytes([4]) * 32)))
    assert (status, body["error"]) == (404, "not_judged")


def test_the_loop_runs_passes_until_stopped(world: Any) -> None:
    view, _ = world.worker(1)
    world.chain.providers = [view]
    ch = Challenger(world.chain, ME, world.store, cfg(), replace(SMALL, pass_seconds=0.05),
                    clock=lambda: world.now[0])
    done = threading.Event()
    original = ch.run_pass

    def run_pass() -> list[Any]:
        out = original()
        if out:
            done.set()
        return out

    ch.run_pass = run_pass  # type: ignore[method-assign]
    ch.start()
    try:
        assert done.wait(20)
    finally:
        ch.stop()
    assert world.store.latest_hardware_verdict(bytes(view.address)).passed


def test_the_flags(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from gpum_validator.cli import main

    known = tmp_path / "nvml.txt"
    known.write_text("# driver 580.159.04\n941C7F79" + "0" * 56 + "  # H200 host\n\n")
    base = ["run", "--url", "http://127.0.0.1:9", "--keypair", str(tmp_path / "none.json"),
            "--market", str(pk(MARKET))]
    r = CliRunner().invoke(main, [*base, "--challenge-n", "300"])
    assert r.exit_code == 2 and "multiple of 256" in r.output
    r = CliRunner().invoke(main, [*base, "--challenge-memory-fraction", "2"])
    assert r.exit_code == 2 and "--challenge-memory-fraction" in r.output
    from gpum_validator.cli import challenge_config

    c = challenge_config({"challenge_enabled": True, "challenge_interval": 60.0,
                          "challenge_deadline": 5.0, "challenge_retry": 5.0,
                          "challenge_pass": 1.0, "challenge_n": 512, "challenge_rounds": 2,
                          "challenge_rows": 4, "challenge_memory_fraction": 0.5,
                          "challenge_max_memory_mib": 8, "challenge_known_nvml": known})
    assert c.known_nvml_sha256 == frozenset({"941c7f79" + "0" * 56})
    known.write_text("not-a-digest\n")
    r = CliRunner().invoke(main, [*base, "--challenge-known-nvml", str(known)])
    assert r.exit_code == 2 and "not a sha256" in r.output


@pytest.mark.parametrize(("pass_s", "ttl_s"), [(1.0, 2.0), (30.0, 60.0), (120.0, 60.0)])
def test_a_new_provider_is_seen_within_two_passes(tmp_path: Path, pass_s: float,
                                                  ttl_s: float) -> None:
    store = SQLiteStore(tmp_path / "v.sqlite")
    chain, mono = Chain(), [100.0]
    ch = Challenger(chain, ME, store, cfg(), replace(SMALL, pass_seconds=pass_s),
                    monotonic=lambda: mono[0])
    try:
        first = provider(1)
        chain.providers = [first]
        assert [p.address for p in ch.providers()] == [first.address]
        chain.providers = [first, provider(2)]  # registers now
        mono[0] += ttl_s - 0.01
        assert len(ch.providers()) == 1  # still the cached list
        mono[0] += 0.02
        assert len(ch.providers()) == 2
    finally:
        ch.http.close()
        store.close()
