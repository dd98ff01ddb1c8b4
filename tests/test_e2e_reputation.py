"""Hardware verdicts, wrong-answer slashes and job ratings against the real program on the
local chain, through the SDK client and the ``gpum`` CLI.

One market (``hardware_quorum`` 2, ``verified_record_seconds`` 0 so the badge needs only a
verified verdict, 60 s windows) with one provider (owner, worker key), two bonded validators
V1 and V2 and a funded user:

* V1 and V2 sign a passing verdict, a stranger submits it: the Provider shows it and
  ``gpum offers`` lists the provider as ``verified`` with the badge; a replay, or a pass for
  another spec, fails with the program's exact error;
* the user rates a billed job with ``gpum job rate`` while it runs, and another after closing
  it (through the tombstone); a second rating fails, on chain ``JobAlreadyRated``; ``gpum
  offers`` shows the average and count;
* the worker's signed answer and a signed row whose Merkle path misses that answer's root
  slash the provider (burned), clear ``verified``, and cannot be used twice.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from gpu_market import challenge as C
from gpu_market import pda
from gpu_market.challenge_messages import sign_digest
from gpu_market.client import GpuMarketClient
from gpu_market.errors import GpuMarketError
from gpu_market.hardware import HardwareVerdictArgs, WrongAnswerEvidence
from gpu_market.instructions import rate_job_ix, slash_wrong_answer_ix
from gpu_market.localchain import warp_time
from gpu_market.processes import tool
from gpu_market.receipt import receipt_message, sign_receipt
from gpu_market.settle import SettleItem, ed25519_entries_instruction
from harness import Market
from solders.keypair import Keypair
from solders.pubkey import Pubkey

pytestmark = pytest.mark.e2e
OWN_LOCALNET = "settled windows and the close grace are reached by warping the clock"

WINDOW = 60
PRICE = 2
DEPOSIT = 100_000
STAKE = 100_000
SPEC = {"gpu_model": "H100 80GB HBM3", "gpu_count": 4, "vram_mib": 81559, "region": "local"}


@dataclass
class World:
    url: str
    client: GpuMarketClient
    kps: dict[str, Keypair]
    keys: dict[str, Path]
    market: Pubkey
    provider: Pubkey
    next_job_id: int = 1

    def gpum(self, who: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
        argv = [tool("gpum"), "--url", self.url, "--keypair", str(self.keys[who]), *args]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if ok and r.returncode != 0:
            raise AssertionError(f"gpum {' '.join(args)} failed:\n{r.stderr}")
        return r

    def offers(self, *query: str) -> list[dict[str, Any]]:
        r = self.gpum("user", "--output", "json", "offers", "--market", str(self.market), *query)
        return json.loads(r.stdout)

    def verdict(self, passed: bool = True, **changes: Any) -> HardwareVerdictArgs:
        now = self.client.chain_time()
        v = HardwareVerdictArgs(self.kps["worker"].pubkey(), SPEC["gpu_model"], SPEC["gpu_count"],
                                SPEC["vram_mib"], passed, now - 5, bytes([now % 251]) * 32)  # fmt: skip
        return replace(v, **changes)

    def signatures(self, v: HardwareVerdictArgs, *who: str) -> list[tuple[Pubkey, bytes]]:
        digest = v.digest(self.client.program_id, self.market, self.provider)
        return [(self.kps[n].pubkey(), bytes(self.kps[n].sign_message(digest))) for n in who]

    def billed_job(self) -> Pubkey:
        """A job of the user, accepted by the worker, with one settled 60 s window."""
        c = self.client
        job_id, self.next_job_id = self.next_job_id, self.next_job_id + 1
        _, job = c.create_job(self.kps["user"], self.market, self.provider, job_id, 1, DEPOSIT,
                              committee=[self.kps["v1"].pubkey()], quorum=1)  # fmt: skip
        c.accept_job(self.kps["worker"], job)
        j = c.fetch_job(job)
        window_end = j.started_at + WINDOW
        warp_time(self.url, window_end - c.chain_time() + 1)
        msg = receipt_message(bytes(c.program_id), bytes(self.market), bytes(job), 1, WINDOW,
                              window_end, bytes(32))  # fmt: skip
        item = SettleItem(job, 1, WINDOW, window_end, bytes(32), self.kps["worker"].pubkey(),
                          sign_receipt(self.kps["worker"], msg), approved_seconds=WINDOW)  # fmt: skip
        c.settle(self.kps["v1"], [item])
        assert c.fetch_job(job).paid_seconds == WINDOW
        return job


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, market_factory: Callable[..., Market]) -> World:
    m = market_factory(tmp_path_factory.mktemp("reputation"),
                       ["owner", "worker", "user", "v1", "v2", "stranger"],
                       {"unbonding_seconds": 0, "window_seconds": WINDOW, "hardware_quorum": 2,
                        "verified_record_seconds": 0},
                       stake={"owner": STAKE, "v1": 1_000, "v2": 1_000},
                       payment={"user": 10 * DEPOSIT})  # fmt: skip
    c, market = m.client, m.address
    c.register_provider(m.kps["owner"], m.kps["worker"].pubkey(), SPEC, PRICE, market)
    c.stake(m.kps["owner"], market, STAKE)
    for v in ("v1", "v2"):
        c.register_validator(m.kps[v], market, 1_000, "http://127.0.0.1:9")
    return World(m.url, c, m.kps, m.keys, market, pda.provider_pda(market, m.kps["owner"].pubkey()))


def _error(fn: Callable[..., Any], *args: Any) -> str:
    with pytest.raises(GpuMarketError) as info:
        fn(*args)
    return info.value.name


def test_a_quorum_verdict_makes_the_provider_verified_with_the_badge(world: World) -> None:
    c, stranger = world.client, world.kps["stranger"]
    assert world.offers("verified") == []
    v = world.verdict()
    c.attest_hardware(stranger, world.provider, v, world.signatures(v, "v1", "v2"))
    h = c.fetch_provider(world.provider).hardware
    assert (h.verified, h.passed, h.gpu_model, h.gpu_count, h.vram_mib, h.attesters) == (
        True, True, SPEC["gpu_model"], 4, 81559, 2)
    assert (h.challenged_at, h.challenge_digest) == (v.challenged_at, v.challenge_digest)
    (row,) = world.offers("verified", "badge")
    assert (row["provider"], row["hardware"], row["badge"]) == (str(world.provider), "verified", True)
    table = world.gpum("user", "offers", "--market", str(world.market)).stdout.splitlines()
    assert table[0].split()[10:12] == ["VERIFIED", "RATING"] and " badge " in table[1]
    # The program's own refusals, past the client's checks.
    again = world.signatures(v, "v1", "v2")
    assert _error(c.attest_hardware, stranger, world.provider, v, again) == "HardwareVerdictReplayed"
    other = world.verdict(gpu_count=2)
    assert _error(c.attest_hardware, stranger, world.provider, other,
                  world.signatures(other, "v1", "v2")) == "HardwareSpecMismatch"
    with pytest.raises(ValueError, match="hardware_quorum"):
        c.attest_hardware(stranger, world.provider, other, world.signatures(other, "v1"))


def test_ratings_before_and_after_close_show_in_the_offers(world: World) -> None:
    c = world.client
    running = world.billed_job()
    r = world.gpum("user", "--output", "json", "job", "rate", str(running), "4")
    assert json.loads(r.stdout)["stars"] == 4
    assert c.fetch_job(running).rated
    again = world.gpum("user", "job", "rate", str(running), "5", ok=False)
    assert again.returncode != 0 and "already rated" in again.stderr
    # The program refuses it too (the client's check bypassed).
    ix = rate_job_ix(c.codec, world.kps["user"].pubkey(), world.provider, running, 5)
    assert _error(c.send, [ix], [world.kps["user"]]) == "JobAlreadyRated"
    assert world.gpum("user", "job", "rate", str(running), "6", ok=False).returncode == 2

    closed = world.billed_job()
    c.finish_job(world.kps["user"], closed)
    warp_time(world.url, c.fetch_job(closed).terms.grace_seconds + 1)
    c.close_job(world.kps["user"], closed)
    assert c.fetch_job(closed) is None
    world.gpum("user", "job", "rate", str(closed), "5")
    tomb = c.fetch_closed_job(closed)
    assert (tomb.rated, tomb.paid_seconds, tomb.provider) == (True, WINDOW, world.provider)
    p = c.fetch_provider(world.provider)
    assert (p.ratings.count, p.ratings.sum) == (2, 9)
    (row,) = world.offers("rating>=4.5", "ratings=2")
    assert (row["rating"], row["ratings"]) == (4.5, 2)
    stranger = world.gpum("stranger", "job", "rate", str(closed), "1", ok=False)
    assert "only the job's user" in stranger.stderr


def test_a_row_that_contradicts_the_workers_root_is_slashed_once(world: World) -> None:
    c, worker, reporter = world.client, world.kps["worker"], world.kps["stranger"]
    v = world.verdict()
    c.attest_hardware(reporter, world.provider, v, world.signatures(v, "v1", "v2"))
    assert c.fetch_provider(world.provider).hardware.verified
    leaves = [C.row_leaf(i, bytes(16)) for i in range(256)]
    tree = C.MerkleTree.build(leaves)
    at = c.chain_time() - 30
    good = WrongAnswerEvidence.from_opening(bytes([7]) * 32, at, tree.root, 256, 9, leaves[9], tree.proof(9))
    wrong = replace(good, leaf_hash=C.row_leaf(9, bytes([1]) * 16))
    keys = (c.program_id, world.market, world.provider)

    def signed(e: WrongAnswerEvidence) -> tuple[tuple[Pubkey, bytes], tuple[Pubkey, bytes]]:
        return ((worker.pubkey(), sign_digest(worker, e.answer_message(*keys))),
                (worker.pubkey(), sign_digest(worker, e.row_message(*keys))))

    # A consistent opening is no evidence: the client refuses it, and so does the program.
    with pytest.raises(ValueError, match="no wrong answer"):
        c.slash_wrong_answer(reporter, world.provider, good, *signed(good))
    m = c.fetch_market(world.market)
    (a, r) = signed(good)
    ed = ed25519_entries_instruction([(bytes(a[0]), a[1], good.answer_digest(*keys)),
                                      (bytes(r[0]), r[1], good.row_digest(*keys))])  # fmt: skip
    ix = slash_wrong_answer_ix(c.codec, reporter.pubkey(), m, world.provider, good)
    assert _error(c.send, [ed, ix], [reporter]) == "NotAWrongAnswer"

    before = c.fetch_provider(world.provider)
    supply = c.mint_supply(m.stake_mint)
    c.slash_wrong_answer(reporter, world.provider, wrong, *signed(wrong))
    after = c.fetch_provider(world.provider)
    slashed = (before.stake + before.unbonding.amount) // 2  # equivocation_slash_bps 5000
    assert after.stake + after.unbonding.amount == before.stake + before.unbonding.amount - slashed
    assert c.mint_supply(m.stake_mint) == supply - slashed, "all of it burned"
    assert (after.hardware.verified, after.reputation.slashes) == (False, before.reputation.slashes + 1)
    assert after.last_slash_at >= at and after.status == "active"
    record = c.account_info(pda.wrong_answer_pda(world.provider, wrong.challenge_digest))
    assert record is not None
    other_row = replace(wrong, leaf_hash=C.row_leaf(9, bytes([2]) * 16))
    assert _error(c.slash_wrong_answer, reporter, world.provider, other_row,
                  *signed(other_row)) == "AccountAlreadyInUse"
