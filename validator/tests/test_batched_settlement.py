"""Batched settlement: the settler packs the settlements due in one pass into as
few v0 transactions as fit, with a lookup table it creates and extends, and keeps the crash
safety of one intent per job. Against FakeChain plus ``FakeLookupTables`` below, which plays
the SDK's ``LookupTables`` (``client.lookup_tables``) with the ALT program's rules: one table
per (authority, recent slot), at most ``room`` addresses, entries usable one slot after they
were added, and transactions whose size is modelled from what the tables hold."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import pytest
from gpu_market.errors import ChainError, ConfirmationTimeout, RpcUnavailable, SdkError
from gpu_market.lookup_tables import LookupTable, derive_lookup_table_address
from gpu_market.pda import escrow_pda, validator_pda
from gpu_market.receipt import receipt_message
from gpum_validator.attest import attestation_message
from gpum_validator.config import SettlePolicy
from gpum_validator.errors import ChainUnavailable
from gpum_validator.intake import Intake
from gpum_validator.settle_policy import classify_send_error
from gpum_validator.settle_tables import LOOKUP_TABLES_META, PENDING_TABLE_SECONDS
from gpum_validator.store_sqlite import SQLiteStore
from solders.pubkey import Pubkey
from vtestkit import (
    JOB,
    MARKET,
    ME,
    PROGRAM,
    VALIDATOR_KEYS,
    FakeChain,
    cfg,
    chain_of,
    err,
    make_settler,
    pk,
    signed_json,
)

U64_MAX = 2**64 - 1
FEE_VAULT = pk(bytes([60] * 32))
MINT = pk(bytes([61] * 32))
SYSVARS = (pk(bytes([62] * 32)), pk(bytes([63] * 32)))


@dataclass(frozen=True)
class Prepared:
    """The SDK's PreparedSettle shape: the item and the accounts a table can hold."""

    item: Any
    shared: tuple[Pubkey, ...]
    own: tuple[Pubkey, ...]

    @property
    def job(self) -> Pubkey:
        return self.item.job


class FakeLookupTables:
    """``client.lookup_tables`` of FakeChain. ``capacity`` units fit one transaction: an
    item whose accounts the tables hold (usable at the send's slot) costs 1, one that needs
    its accounts as static keys costs 2; so 2 table-backed quorum-1 items or 1 other fit, as
    the SDK measures. A group over capacity raises TransactionTooLarge, a job twice
    ValueError; the items are applied with ``FakeChain.settle`` (the program's rules,
    all-or-nothing)."""

    def __init__(self, chain: FakeChain, capacity: int = 2, room: int = 256) -> None:
        self.chain = chain
        self.capacity = capacity
        self.room = room
        self.sized: list[tuple[int, bool]] = []
        self.sent_tables: list[list[Pubkey]] = []
        self.deactivations: list[Pubkey] = []
        self.closes: list[Pubkey] = []
        self.deactivate_lost = False
        self.current_slot = 100
        self.recent_slots = [100]
        self.frozen = False
        self.tables: dict[Pubkey, LookupTable] = {}
        self.creates: list[int] = []
        self.extends: list[tuple[Pubkey, list[Pubkey]]] = []
        self.sends: list[tuple[list[bytes], int]] = []
        self.send_error: BaseException | None = None
        self.create_error: BaseException | None = None
        self.prepare_error: BaseException | None = None
        self.fail_jobs: dict[bytes, str] = {}
        self.land_then_raise: BaseException | None = None

    # -- reads
    def slot(self) -> int:
        self.chain._io()
        return self.current_slot

    def fetch(self, table: Pubkey) -> LookupTable | None:
        self.chain._io()
        t = self.tables.get(table)
        if t is None:
            return None
        return replace(t, addresses=t.addresses)

    def free_recent_slot(self, authority: Pubkey) -> tuple[int, Pubkey]:
        for s in self.recent_slots:
            address = derive_lookup_table_address(authority, s)[0]
            if address not in self.tables:
                return s, address
        raise SdkError("every recent slot taken")

    # -- writes
    def create(self, authority: Any, recent_slot: int) -> str:
        self.chain._io()
        self.creates.append(recent_slot)
        if self.create_error is not None:
            raise self.create_error
        address = derive_lookup_table_address(authority.pubkey(), recent_slot)[0]
        assert address not in self.tables, "a table is created twice"
        self.tables[address] = LookupTable(address, authority.pubkey(), U64_MAX, 0, 0, ())
        return f"create{len(self.creates)}"

    def extend(self, authority: Any, table: Pubkey, addresses: Any) -> list[str]:
        self.chain._io()
        t = self.tables[table]
        assert t.authority == authority.pubkey()
        new = [a for a in dict.fromkeys(addresses) if a not in t.addresses]
        if len(t.addresses) + len(new) > self.room:
            raise ValueError("no room")
        if not new:
            return []
        start = (t.last_extended_slot_start_index if t.last_extended_slot == self.current_slot
                 else len(t.addresses))
        self.tables[table] = replace(t, addresses=t.addresses + tuple(new),
                                     last_extended_slot=self.current_slot,
                                     last_extended_slot_start_index=start)
        self.extends.append((table, new))
        return [f"extend{len(self.extends)}"]

    def deactivate(self, authority: Any, table: Pubkey) -> str:
        self.chain._io()
        t = self.tables[table]
        assert t.authority == authority.pubkey() and t.is_active, "deactivated twice"
        self.deactivations.append(table)
        if self.deactivate_lost:  # sent, never landed
            return "lost"
        self.tables[table] = replace(t, deactivation_slot=self.current_slot)
        return f"deactivate{len(self.deactivations)}"

    def close(self, authority: Any, table: Pubkey) -> str:
        """The ALT program's rule: closable once the deactivation slot left SlotHashes."""
        self.chain._io()
        t = self.tables[table]
        assert t.authority == authority.pubkey()
        if t.is_active or self.current_slot <= t.deactivation_slot + 512:
            raise err("InvalidArgument")  # still active or deactivating
        del self.tables[table]
        self.closes.append(table)
        return f"close{len(self.closes)}"

    def wait_usable(self, table: Pubkey, timeout: float = 5.0) -> LookupTable:
        if not self.frozen:
            self.current_slot += 1
        t = self.fetch(table)
        assert t is not None
        return t

    # -- settle
    def prepare(self, validator_authority: Pubkey, items: list[Any]) -> list[Prepared]:
        self.chain._io()
        if self.prepare_error is not None:
            raise self.prepare_error
        out = []
        for it in items:
            job = self.chain.jobs[bytes(it.job)]
            provider = job.provider
            shared = (pk(MARKET), validator_pda(pk(MARKET), validator_authority, pk(PROGRAM)),
                      FEE_VAULT, MINT, *SYSVARS, provider, escrow_pda(provider, pk(PROGRAM)),
                      *(validator_pda(pk(MARKET), a.authority, pk(PROGRAM))
                        for a in it.attestations))
            out.append(Prepared(it, shared, (it.job, escrow_pda(it.job, pk(PROGRAM)))))
        return out

    def _units(self, p: Prepared, tables: list[LookupTable], slot: int) -> int:
        usable = {a for t in tables for a in t.usable(slot)}
        return 1 if set(p.shared) <= usable else 2

    def max_items_per_tx(self, quorum: int, own_accounts_in_table: bool) -> int:
        self.sized.append((quorum, own_accounts_in_table))
        return self.capacity  # table-backed items cost one unit each

    def pack(self, payer: Pubkey, prepared: list[Prepared], tables: list[LookupTable],
             slot: int) -> list[list[int]]:
        groups: list[list[int]] = []
        used: list[int] = []
        last: dict[bytes, int] = {}
        for i, p in enumerate(prepared):
            u = self._units(p, tables, slot)
            job = bytes(p.job)
            for g in range(last.get(job, -1) + 1, len(groups)):
                if used[g] + u <= self.capacity:
                    groups[g].append(i)
                    used[g] += u
                    last[job] = g
                    break
            else:
                groups.append([i])
                used.append(u)
                last[job] = len(groups) - 1
        return groups

    def send_settle(self, authority: Any, prepared: list[Prepared], tables: list[LookupTable],
                    slot: int | None = None) -> str:
        from gpu_market.errors import TransactionTooLarge

        self.chain._io()
        at = self.current_slot if slot is None else slot
        jobs = [bytes(p.job) for p in prepared]
        if len(set(jobs)) != len(jobs):
            raise ValueError("a job appears twice")
        for t in tables:
            assert t.address in self.tables, "a table that does not exist"
            assert set(t.usable(at)) <= set(self.tables[t.address].usable(self.current_slot))
        if sum(self._units(p, tables, at) for p in prepared) > self.capacity:
            raise TransactionTooLarge("over the packet")
        self.sends.append((jobs, at))
        self.sent_tables.append([t.address for t in tables])
        if self.send_error is not None:
            raise self.send_error
        for j in jobs:
            if j in self.fail_jobs:
                raise err(self.fail_jobs[j])
        sig = self.chain.settle(authority, [p.item for p in prepared])
        if self.land_then_raise is not None:
            raise self.land_then_raise
        return f"v0-{sig}"


JOBS = [bytes([40 + i] * 32) for i in range(6)]


@pytest.fixture
def alt(chain: FakeChain) -> FakeLookupTables:
    api = FakeLookupTables(chain)
    chain.lookup_tables = api  # type: ignore[attr-defined]
    real_settle = chain.settle
    fail = api.fail_jobs

    def settle(authority: Any, items: list[Any]) -> str:  # the legacy path refuses them too
        for it in items:
            if bytes(it.job) in fail:
                chain.settle_calls.append(list(items))
                raise err(fail[bytes(it.job)])
        return real_settle(authority, items)

    chain.settle = settle  # type: ignore[method-assign]
    return api


def setup(tmp_path, chain, clock, n_jobs=5, **policy):
    """Store, intake and settler (every window due; no hold unless ``batch_hold_windows``)."""
    policy.setdefault("batch_hold_windows", 0)
    store = SQLiteStore(tmp_path / "v.sqlite")
    intake = Intake(cfg(), store, chain, clock=lambda: clock[0])
    settler = make_settler(chain, store, clock, SettlePolicy(settle_every_windows=1, **policy))
    for j in JOBS[:n_jobs]:
        chain.jobs[j] = replace(chain.jobs[JOB], address=pk(j))
    return store, intake, settler


def feed(intake, jobs, upto=1, start=1):
    for j in jobs:
        for p in chain_of(upto, job=j)[start - 1:]:
            status, body = intake.submit(signed_json(p))
            assert status == 200, body


def sigs_by_job(store) -> dict[bytes, list[str | None]]:
    out: dict[bytes, list[str | None]] = {}
    for it in store.intents():
        out.setdefault(it.job, []).append(it.signature)
    return out


# ------------------------------------------------------------------ packing


def test_due_jobs_of_one_pass_share_transactions(tmp_path, chain, clock, alt):
    store, intake, settler = setup(tmp_path, chain, clock)
    feed(intake, JOBS[:5])
    r = settler.settle_now()
    assert (r.intended, r.confirmed, r.failed) == (5, 5, 0)
    assert [len(c) for c in chain.settle_calls] == [2, 2, 1]
    assert len(r.signatures) == 3
    # one table, created once, extended with the accounts the items share
    assert len(alt.tables) == 1 and alt.creates == [100]
    (table,) = alt.tables.values()
    assert json.loads(store.get_meta(LOOKUP_TABLES_META)) == {"tables": [str(table.address)],
                                                              "pending": None, "retiring": {}}
    assert settler.tables.addresses() == [str(table.address)]
    assert r.table_transactions == 2  # create + extend
    # job accounts go in the table too by default (four quorum-1 settlements per transaction)
    assert {pk(j) for j in JOBS[:5]} <= set(table.addresses)
    assert {escrow_pda(pk(j), pk(PROGRAM)) for j in JOBS[:5]} <= set(table.addresses)
    # every intent confirmed with the signature of the transaction that carried it
    for it in store.intents():
        assert it.status == "confirmed" and it.signature.startswith("v0-")
    assert len({it.signature for it in store.intents()}) == 3
    for j in JOBS[:5]:
        assert chain.jobs[j].last_seq == 1


def test_table_is_reused_across_passes_and_restarts(tmp_path, chain, clock, alt):
    store, intake, settler = setup(tmp_path, chain, clock)
    feed(intake, JOBS[:4])
    settler.settle_now()
    extends = len(alt.extends)
    feed(intake, JOBS[:4], upto=2, start=2)
    r = settler.settle_now()
    assert r.confirmed == 4 and r.table_transactions == 0 and len(alt.extends) == extends
    store.close()
    store2 = SQLiteStore(tmp_path / "v.sqlite")
    settler2 = make_settler(chain, store2, clock, SettlePolicy(settle_every_windows=1,
                                                               batch_hold_windows=0))
    intake2 = Intake(cfg(), store2, chain, clock=lambda: clock[0])
    feed(intake2, JOBS[:4], upto=3, start=3)
    r = settler2.settle_now()
    assert (r.confirmed, r.table_transactions, len(alt.creates)) == (4, 0, 1)
    assert [len(c) for c in chain.settle_calls[-2:]] == [2, 2]


def test_entries_are_used_only_once_usable(tmp_path, chain, clock, alt):
    """Entries added in a slot are not usable in it: the pass that added them packs without
    them (one item per transaction); the next pass uses them."""
    _store, intake, settler = setup(tmp_path, chain, clock)
    alt.frozen = True
    feed(intake, JOBS[:4])
    r = settler.settle_now()
    assert r.confirmed == 4 and [len(c) for c in chain.settle_calls] == [1, 1, 1, 1]
    alt.frozen = False
    alt.current_slot += 1
    feed(intake, JOBS[:4], upto=2, start=2)
    assert settler.settle_now().confirmed == 4
    assert [len(c) for c in chain.settle_calls[4:]] == [2, 2]


def test_job_accounts_policy_puts_jobs_in_the_table(tmp_path, chain, clock, alt):
    _store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2,
                                    lookup_table_job_accounts=True)
    feed(intake, JOBS[:2])
    assert settler.settle_now().confirmed == 2
    (table,) = alt.tables.values()
    assert {pk(j) for j in JOBS[:2]} <= set(table.addresses)


def test_a_full_table_gets_a_successor(tmp_path, chain, clock, alt):
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2)
    old = derive_lookup_table_address(ME.pubkey(), 5)[0]
    filler = tuple(pk(bytes([1, i]) + bytes(30)) for i in range(251))
    alt.tables[old] = LookupTable(old, ME.pubkey(), U64_MAX, 0, 0, filler)
    store.set_meta(LOOKUP_TABLES_META, json.dumps({"tables": [str(old)], "pending": None}))
    feed(intake, JOBS[:2])
    r = settler.settle_now()
    assert r.confirmed == 2 and len(alt.tables) == 2 and alt.creates == [100]
    new = next(a for a in alt.tables if a != old)
    assert settler.tables.addresses() == [str(old), str(new)]
    # a settlement's accounts all go in one table (its transaction then names one): the 8
    # shared accounts and the 2 jobs' own 4 do not fit the 5 left in the old table
    assert len(alt.tables[old].addresses) == 251 and len(alt.tables[new].addresses) == 12
    assert [len(c) for c in chain.settle_calls] == [2]


def test_each_transaction_loads_from_its_jobs_home_table(tmp_path, chain, clock, alt):
    """A settlement's accounts all sit in one table, its job's home, and a transaction names
    only that table (each further table costs 34+ bytes: four settlements fit one packet
    with one table, not with two), so jobs homed in different tables go apart."""
    alt.capacity = 8
    alt.recent_slots = [100, 101]
    _store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2)
    feed(intake, JOBS[:1])
    settler.settle_now()
    (first,) = alt.tables
    t = alt.tables[first]
    filler = tuple(pk(bytes([3, i]) + bytes(30)) for i in range(256 - len(t.addresses)))
    alt.tables[first] = replace(t, addresses=t.addresses + filler)  # full now
    settler.tables.forget()
    feed(intake, [JOBS[0]], upto=2, start=2)
    feed(intake, [JOBS[1]])
    r = settler.settle_now()
    assert r.confirmed == 2 and len(alt.tables) == 2
    second = next(a for a in alt.tables if a != first)
    assert {pk(JOBS[1]), escrow_pda(pk(JOBS[1]), pk(PROGRAM))} <= set(alt.tables[second].addresses)
    # the shared accounts are repeated in the second table: JOBS[1] loads from it alone
    assert set(alt.tables[first].addresses[:len(t.addresses)]) - {
        pk(JOBS[0]), escrow_pda(pk(JOBS[0]), pk(PROGRAM))} <= set(alt.tables[second].addresses)
    assert [len(c) for c in chain.settle_calls][-2:] == [1, 1]
    assert sorted(map(str, (x for ts in alt.sent_tables[-2:] for x in ts))) == sorted(
        [str(first), str(second)])
    assert all(len(ts) == 1 for ts in alt.sent_tables[-2:])


def test_each_job_at_most_once_per_transaction_in_order(tmp_path, chain, clock, alt):
    """A job with two open intents (an older one backing off) gets them in two
    transactions, the older first."""
    alt.capacity = 8
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=3)
    feed(intake, JOBS[:3])
    for c in store.settle_candidates():
        store.add_intent(c.latest, 1, clock[0])
    feed(intake, [JOBS[0]], upto=2, start=2)
    (c,) = [c for c in store.settle_candidates() if c.job == JOBS[0]]
    store.add_intent(c.latest, 2, clock[0])
    r = settler.settle_now()
    assert r.confirmed == 4 and [len(c) for c in chain.settle_calls] == [3, 1]
    assert [i.seq for i in chain.settle_calls[0]] == [1, 1, 1]
    assert (bytes(chain.settle_calls[1][0].job), chain.settle_calls[1][0].seq) == (JOBS[0], 2)


def test_quorum_two_items_carry_their_attestations(tmp_path, chain, clock, alt):
    """Intents with stored attestations settle batched with them (the fake verifies each
    member's signature over the attestation message, as the program does)."""
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2)
    other = VALIDATOR_KEYS[1]
    for j in JOBS[:2]:
        chain.set_committee([bytes(ME.pubkey()), bytes(other.pubkey())], 2, job=j)
    feed(intake, JOBS[:2])
    for c in store.settle_candidates():
        msg = receipt_message(PROGRAM, MARKET, c.job, c.latest.seq, c.latest.cumulative_seconds,
                              c.latest.window_end, c.latest.hash)
        sig = bytes(other.sign_message(attestation_message(msg, c.approved_total)))
        store.add_intent(c.latest, 1, clock[0], c.approved_total,
                         [(bytes(other.pubkey()), sig)])
    alt.capacity = 4
    r = settler.settle_now()
    assert (r.confirmed, r.failed) == (2, 0) and [len(c) for c in chain.settle_calls] == [2]
    assert all(len(i.attestations) == 1 for i in chain.settle_calls[0])
    (table,) = alt.tables.values()
    assert validator_pda(pk(MARKET), other.pubkey(), pk(PROGRAM)) in table.addresses
    # alone in a transaction with room for more (two quorum-2 items fit since the receipt
    # digest), a quorum-2 settlement waits like a quorum-1 one, sized for its quorum
    settler.policy = SettlePolicy(settle_every_windows=1)
    feed(intake, [JOBS[0]], upto=2, start=2)
    (c,) = store.settle_candidates()
    msg = receipt_message(PROGRAM, MARKET, c.job, c.latest.seq, c.latest.cumulative_seconds,
                          c.latest.window_end, c.latest.hash)
    sig = bytes(other.sign_message(attestation_message(msg, c.approved_total)))
    store.add_intent(c.latest, 2, clock[0], c.approved_total, [(bytes(other.pubkey()), sig)])
    assert settler.settle_now().held == 1 and alt.sized[-1] == (2, True)
    clock[0] += 0.25 * 60
    r = settler.settle_now()
    assert (r.confirmed, r.held) == (1, 0)


def test_a_lone_settlement_waits_briefly_for_a_partner(tmp_path, chain, clock, alt):
    """Three due jobs, two per transaction: the full transaction goes at once, the third
    waits (a quarter window at most) and shares the next pass's transaction; alone past the
    hold, or forced, it goes alone."""
    store, intake, settler = setup(tmp_path, chain, clock, batch_hold_windows=0.25)
    feed(intake, JOBS[:3])
    r = settler.settle_now()
    assert (r.confirmed, r.held) == (2, 1) and [len(c) for c in chain.settle_calls] == [2]
    (waiting,) = store.open_intents()
    assert waiting.status == "intended" and waiting.attempts == 0
    clock[0] += 5  # within 0.25 * 60 s
    feed(intake, [JOBS[3]])
    r = settler.settle_now()
    assert (r.confirmed, r.held) == (2, 0) and [len(c) for c in chain.settle_calls] == [2, 2]
    assert {bytes(i.job) for i in chain.settle_calls[1]} == {waiting.job, JOBS[3]}
    # alone: held until a quarter window passed, then sent alone
    feed(intake, [JOBS[4]])
    assert settler.settle_now().held == 1
    clock[0] += 0.25 * 60
    r = settler.settle_now()
    assert (r.confirmed, r.held) == (1, 0) and [len(c) for c in chain.settle_calls][-1] == 1
    # forced passes never hold
    feed(intake, [JOBS[0]], upto=2, start=2)
    assert settler.settle_now(force=True).confirmed == 1


def test_jobs_are_read_in_one_call_per_pass_step(tmp_path, chain, clock, alt):
    """With a client that has ``fetch_jobs``, planning (jobs whose chain facts are older
    than ``chain_refresh_seconds``) and the pre-send chain check each read every job in one
    call, not one RPC per job; a batch that fails to decode falls back to single reads."""
    _store, intake, settler = setup(tmp_path, chain, clock, n_jobs=5)
    feed(intake, JOBS[:5])
    batches: list[int] = []
    singles: list[bytes] = []
    broken = [False]
    real_fetch_job = chain.fetch_job

    def fetch_jobs(keys: list[Pubkey]) -> list[Any]:
        batches.append(len(keys))
        if broken[0]:
            raise ValueError("not a Job account")  # the SDK's InvalidAccount
        return [real_fetch_job(k) for k in keys]

    def fetch_job(key: Pubkey) -> Any:
        singles.append(bytes(key))
        return real_fetch_job(key)

    chain.fetch_jobs = fetch_jobs  # type: ignore[attr-defined]
    chain.fetch_job = fetch_job  # type: ignore[method-assign]
    assert settler.settle_now().confirmed == 5
    assert batches == [5] and singles == []  # the intake's facts were fresh: no planning read
    feed(intake, JOBS[:3], upto=2, start=2)
    singles.clear()
    clock[0] += 31
    assert settler.settle_now().confirmed == 3
    assert batches == [5, 3, 3] and singles == []
    feed(intake, JOBS[:2], upto=3, start=3)
    singles.clear()
    broken[0] = True
    assert settler.settle_now().confirmed == 2
    assert batches[3:] == [2] and sorted(singles) == sorted(JOBS[:2])


def test_downtime_checks_read_only_jobs_that_look_idle(tmp_path, chain, clock, alt):
    """The downtime reporter shares the settlement loop: with thousands of jobs, re-reading
    each one every ``chain_refresh_seconds`` made a pass take minutes. A job that is not idle
    by its stored facts is not read (a fresher read could only make it idle later)."""
    from gpum_validator.downtime import DowntimeReporter

    store, intake, _ = setup(tmp_path, chain, clock, n_jobs=3)
    clock[0] = chain.jobs[JOBS[0]].started_at + 61  # window 1 just ended
    feed(intake, JOBS[:3])
    reads: list[bytes] = []
    real_fetch_job = chain.fetch_job

    def fetch_job(key: Pubkey) -> Any:
        reads.append(bytes(key))
        return real_fetch_job(key)

    chain.fetch_job = fetch_job  # type: ignore[method-assign]
    reporter = DowntimeReporter(chain, ME, store, None, SettlePolicy(),
                                clock=lambda: clock[0])
    clock[0] += 31  # the stored facts are stale, the jobs far from idle (10 windows)
    assert reporter.report_pending() == [] and reads == []
    idle_at = chain.jobs[JOBS[0]].started_at + 60 + 10 * 60
    clock[0] = max(clock[0], idle_at)
    reporter.report_pending()
    assert sorted(set(reads)) == sorted(JOBS[:3])  # idle by the stored facts: read first


# ------------------------------------------------------------------ failures


def test_program_error_in_a_batch_retries_its_items_singly(tmp_path, chain, clock, alt):
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=4)
    feed(intake, JOBS[:4])
    alt.fail_jobs[JOBS[1]] = "BilledSecondsExceedWallTime"
    r = settler.settle_now()
    assert (r.confirmed, r.failed) == (3, 1)
    status = {it.job: it.status for it in store.intents()}
    assert status[JOBS[1]] == "failed" and status[JOBS[0]] == "confirmed"
    assert [j for j, _ in alt.sends] == [[JOBS[0], JOBS[1]], [JOBS[2], JOBS[3]]]
    # the failed batch went one legacy transaction per item; the other batch was untouched
    assert [[bytes(i.job) for i in c] for c in chain.settle_calls] == \
        [[JOBS[0]], [JOBS[1]], [JOBS[2], JOBS[3]]]
    calls = len(chain.settle_calls)
    settler.settle_now(force=True)
    assert len(chain.settle_calls) == calls  # never again: no loop


def test_already_settled_item_in_a_batch_is_confirmed(tmp_path, chain, clock, alt):
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2)
    feed(intake, JOBS[:2])
    alt.fail_jobs[JOBS[0]] = "StaleSequence"
    r = settler.settle_now()
    assert (r.confirmed, r.already_settled, r.failed) == (1, 1, 0)
    assert {it.status for it in store.intents()} == {"confirmed"}


def test_transport_error_keeps_the_batch_open_and_resends_it(tmp_path, chain, clock, alt):
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2)
    feed(intake, JOBS[:2])
    alt.send_error = RpcUnavailable("timeout")
    r = settler.settle_now()
    assert r.retry_later == 2 and chain.settle_calls == []  # never singly
    opened = store.open_intents()
    assert {i.status for i in opened} == {"sent"} and all(i.next_attempt_at > clock[0] for i in opened)
    assert settler.settle_now().retry_later == 2 and len(alt.sends) == 1  # backing off
    alt.send_error = None
    clock[0] = max(i.next_attempt_at for i in opened)
    r = settler.settle_now()
    assert r.confirmed == 2 and [len(c) for c in chain.settle_calls] == [2]


def test_confirmation_timeout_that_landed_is_confirmed_without_resending(tmp_path, chain, clock,
                                                                        alt):
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2)
    feed(intake, JOBS[:2])
    alt.land_then_raise = ConfirmationTimeout("not confirmed in time")
    assert settler.settle_now().retry_later == 2
    alt.land_then_raise = None
    clock[0] += 600
    r = settler.settle_now()
    assert (r.already_settled, len(chain.settle_calls)) == (2, 1)
    assert {it.status for it in store.intents()} == {"confirmed"}


def test_rejected_v0_falls_back_to_one_legacy_transaction_each(tmp_path, chain, clock, alt):
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2)
    feed(intake, JOBS[:2])
    alt.send_error = ChainError("invalid transaction: lookup table entry not usable")
    r = settler.settle_now()
    assert r.confirmed == 2 and [len(c) for c in chain.settle_calls] == [1, 1]
    assert settler.tables._tables is None  # read afresh next pass
    assert {it.signature for it in store.intents()} == {"sig1", "sig2"}


@pytest.mark.parametrize("error", [ValueError("an attester is not on the committee"),
                                   TypeError("a bug in the v0 path")])
def test_prepare_failure_sends_each_alone(tmp_path, chain, clock, alt, error):
    _store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2)
    feed(intake, JOBS[:2])
    alt.prepare_error = error
    r = settler.settle_now()
    assert r.confirmed == 2 and [len(c) for c in chain.settle_calls] == [1, 1]
    alt.prepare_error = RpcUnavailable("down")
    feed(intake, JOBS[:2], upto=2, start=2)
    assert settler.settle_now().retry_later == 2 and len(chain.settle_calls) == 2


def test_chain_down_during_table_setup_still_settles_nothing_twice(tmp_path, chain, clock, alt):
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2)
    feed(intake, JOBS[:2])
    alt.create_error = RpcUnavailable("down")
    r = settler.settle_now()
    # no table this pass: settled one per transaction, the create stays pending
    assert r.confirmed == 2 and [len(c) for c in chain.settle_calls] == [1, 1]
    assert json.loads(store.get_meta(LOOKUP_TABLES_META))["pending"] is not None
    # the create never landed; while it might, no second table is made
    alt.create_error = None
    feed(intake, JOBS[:2], upto=2, start=2)
    settler.settle_now()
    assert alt.creates == [100]
    clock[0] += PENDING_TABLE_SECONDS + 1
    feed(intake, JOBS[:2], upto=3, start=3)
    settler.settle_now()
    assert alt.creates == [100, 100] and len(alt.tables) == 1


def test_refused_create_is_not_kept_pending(tmp_path, chain, clock, alt):
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2)
    feed(intake, JOBS[:2])
    alt.create_error = ChainError("recent slot not in SlotHashes")
    assert settler.settle_now().confirmed == 2
    assert json.loads(store.get_meta(LOOKUP_TABLES_META))["pending"] is None
    alt.create_error = None
    feed(intake, JOBS[:2], upto=2, start=2)
    assert settler.settle_now().confirmed == 2
    assert len(alt.tables) == 1 and [len(c) for c in chain.settle_calls[-1:]] == [2]


def test_a_table_created_before_a_crash_is_adopted(tmp_path, chain, clock, alt):
    """Pending in the store, created on chain, then the process died: the restart adopts it
    instead of creating (and paying for) another."""
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2)
    address = derive_lookup_table_address(ME.pubkey(), 100)[0]
    store.set_meta(LOOKUP_TABLES_META, json.dumps(
        {"tables": [], "pending": {"address": str(address), "slot": 100, "at": clock[0]}}))
    alt.tables[address] = LookupTable(address, ME.pubkey(), U64_MAX, 0, 0, ())
    feed(intake, JOBS[:2])
    r = settler.settle_now()
    assert r.confirmed == 2 and alt.creates == []
    assert json.loads(store.get_meta(LOOKUP_TABLES_META)) == {"tables": [str(address)],
                                                              "pending": None, "retiring": {}}


def test_a_deactivated_table_is_dropped(tmp_path, chain, clock, alt):
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2)
    old = derive_lookup_table_address(ME.pubkey(), 5)[0]
    alt.tables[old] = LookupTable(old, ME.pubkey(), 50, 0, 0, ())
    store.set_meta(LOOKUP_TABLES_META, json.dumps({"tables": [str(old)], "pending": None}))
    feed(intake, JOBS[:2])
    assert settler.settle_now().confirmed == 2
    assert str(old) not in settler.tables.addresses() and len(settler.tables.addresses()) == 1


def test_crash_between_sent_and_confirmed_checks_the_chain_first(tmp_path, chain, clock, alt):
    """Both intents of a batch were marked sent and the transaction landed, then the process
    died: the restart confirms them from the chain and sends nothing."""
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2)
    feed(intake, JOBS[:2])
    items = []
    for c in store.settle_candidates():
        it = store.add_intent(c.latest, 1, clock[0])
        store.mark_intent(it.id, "sent", clock[0], count_attempt=True)
        items.append(settler._item(it))
    chain.settle(ME, items)  # it landed
    store.close()
    store2 = SQLiteStore(tmp_path / "v.sqlite")
    r = make_settler(chain, store2, clock, SettlePolicy(settle_every_windows=1)).settle_now()
    assert (r.already_settled, len(chain.settle_calls), alt.sends) == (2, 1, [])


def test_crash_before_the_send_resends_the_batch(tmp_path, chain, clock, alt):
    store, intake, _settler = setup(tmp_path, chain, clock, n_jobs=2)
    feed(intake, JOBS[:2])
    for c in store.settle_candidates():
        it = store.add_intent(c.latest, 1, clock[0])
        store.mark_intent(it.id, "sent", clock[0], count_attempt=True)
    store.close()
    store2 = SQLiteStore(tmp_path / "v.sqlite")
    r = make_settler(chain, store2, clock, SettlePolicy(settle_every_windows=1)).settle_now()
    assert r.confirmed == 2 and [len(c) for c in chain.settle_calls] == [2]


def test_policy_off_keeps_the_legacy_path(tmp_path, chain, clock, alt):
    _store, intake, settler = setup(tmp_path, chain, clock, n_jobs=3, lookup_table=False)
    chain.max_items = 1
    feed(intake, JOBS[:3])
    assert settler.settle_now().confirmed == 3
    assert alt.sends == [] and alt.creates == [] and [len(c) for c in chain.settle_calls] == [1] * 3


@pytest.mark.parametrize("exc, kind", [
    (err("StaleSequence"), ("program", "StaleSequence")),
    (ValueError("x"), ("program", "ValueError")),
    (ChainError("blockhash not found"), ("rejected", "ChainError")),
    (ConfirmationTimeout("late"), ("transport", None)),
    (RpcUnavailable("down"), ("transport", None)),
    (ChainUnavailable("down"), ("transport", None)),
    (OSError("reset"), ("transport", None)),
    (TypeError("a bug in the v0 path"), ("rejected", "TypeError")),
])  # fmt: skip
def test_classify_send_error(exc, kind):
    assert classify_send_error(exc) == kind


def test_policy_validates_the_wait():
    from gpum_validator.errors import ConfigError

    with pytest.raises(ConfigError):
        SettlePolicy(lookup_table_wait_seconds=-1).validate()


# ------------------------------------------------------------------ table retirement


def _list_first(store, settler, *tables):
    """Put ``tables`` first in the node's table list (as if it had made them) and have the
    settler read the list afresh."""
    state = json.loads(store.get_meta(LOOKUP_TABLES_META))
    store.set_meta(LOOKUP_TABLES_META, json.dumps(
        {**state, "tables": [*(str(t) for t in tables), *state["tables"]]}))
    settler.tables.forget()


def _full_table_of(alt, jobs, slot=5):
    """A full table of this node holding ``jobs`` (and their escrows) among fillers."""
    address = derive_lookup_table_address(ME.pubkey(), slot)[0]
    own = [a for j in jobs for a in (pk(j), escrow_pda(pk(j), pk(PROGRAM)))]
    filler = tuple(pk(bytes([2, i]) + bytes(30)) for i in range(256 - len(own)))
    alt.tables[address] = LookupTable(address, ME.pubkey(), U64_MAX, 0, 0, tuple(own) + filler)
    return address


def test_a_full_table_of_ended_jobs_is_deactivated_then_closed(tmp_path, chain, clock, alt):
    """Rent comes back: once every job of a full table ended on chain (and has no open
    intent) the table is deactivated, and closed after 513 slots; its shared entries are
    added to the newest table again when needed."""
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=3)
    feed(intake, JOBS[:2])
    settler.settle_now()  # the jobs are known to the store; a table of this node exists
    old = _full_table_of(alt, JOBS[:2])
    _list_first(store, settler, old)
    clock[0] += 60
    assert settler.settle_now().table_transactions == 0  # the jobs still run: kept
    assert alt.deactivations == []
    chain.jobs[JOBS[0]] = replace(chain.jobs[JOBS[0]], status="completed")
    clock[0] += 60
    settler.settle_now()
    assert alt.deactivations == []  # one job of it still runs
    chain.jobs[JOBS[1]] = replace(chain.jobs[JOBS[1]], status="closed")
    settler.settle_now()
    assert alt.deactivations == []  # at most one look per lookup_table_retire_seconds
    clock[0] += 60
    r = settler.settle_now()
    assert alt.deactivations == [old] and r.table_transactions == 1
    state = json.loads(store.get_meta(LOOKUP_TABLES_META))
    assert str(old) not in state["tables"] and state["retiring"] == {str(old): alt.current_slot}
    alt.current_slot += 513  # not yet: its deactivation slot is still in SlotHashes
    clock[0] += 60
    settler.settle_now()
    assert alt.closes == [] and str(old) in json.loads(store.get_meta(LOOKUP_TABLES_META))["retiring"]
    alt.current_slot += 1
    clock[0] += 60
    r = settler.settle_now()
    assert alt.closes == [old] and r.table_transactions == 1
    assert json.loads(store.get_meta(LOOKUP_TABLES_META))["retiring"] == {}
    # a running job settles on with the shared accounts added to the newest table again
    feed(intake, [JOBS[2]])
    assert settler.settle_now().confirmed == 1


def test_tables_in_use_are_never_retired(tmp_path, chain, clock, alt):
    """Not retired: the newest table (room left), a full table of shared accounts only, and a
    full table with an ended job that still has an open intent."""
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=2)
    feed(intake, JOBS[:2])
    settler.settle_now()
    shared_only = _full_table_of(alt, [], slot=6)
    pending_job = _full_table_of(alt, [JOBS[0]], slot=7)
    _list_first(store, settler, shared_only, pending_job)
    feed(intake, [JOBS[0]], upto=2, start=2)
    (c,) = store.settle_candidates()
    it = store.add_intent(c.latest, 2, clock[0])
    store.mark_intent(it.id, "intended", clock[0], next_attempt_at=clock[0] + 3600)  # backing off
    for j in JOBS[:2]:
        chain.jobs[j] = replace(chain.jobs[j], status="completed")
    clock[0] += 60
    settler.settle_now()
    assert alt.deactivations == [] and len(store.open_intents()) == 1
    store.mark_intent(it.id, "failed", clock[0], error="test")
    clock[0] += 60
    settler.settle_now()
    assert alt.deactivations == [pending_job]  # the shared-only and the newest table stay


def test_a_lost_deactivation_is_sent_again(tmp_path, chain, clock, alt):
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=1)
    feed(intake, JOBS[:1])
    settler.settle_now()
    old = _full_table_of(alt, JOBS[:1])
    _list_first(store, settler, old)
    chain.jobs[JOBS[0]] = replace(chain.jobs[JOBS[0]], status="completed")
    alt.deactivate_lost = True
    clock[0] += 60
    settler.settle_now()
    assert alt.deactivations == [old] and alt.tables[old].is_active
    alt.deactivate_lost = False
    alt.current_slot += 514
    clock[0] += 60
    settler.settle_now()  # still active after the wait: deactivated again, closed later
    assert alt.deactivations == [old, old] and not alt.tables[old].is_active
    alt.current_slot += 514
    clock[0] += 60
    settler.settle_now()
    assert alt.closes == [old] and old not in alt.tables


def test_a_table_mostly_of_ended_jobs_is_compacted(tmp_path, chain, clock, alt):
    """A few long jobs cannot pin a table's rent: once at most
    ``lookup_table_compact_live_fraction`` of its jobs still run, the table retires and the
    survivors settle on from the newest table."""
    alt.capacity = 8
    store, intake, settler = setup(tmp_path, chain, clock, n_jobs=5,
                                   lookup_table_compact_live_fraction=0.2)
    feed(intake, JOBS[:5])
    settler.settle_now()
    old = _full_table_of(alt, JOBS[:5])
    _list_first(store, settler, old)
    for j in JOBS[1:4]:
        chain.jobs[j] = replace(chain.jobs[j], status="completed")
    clock[0] += 60
    settler.settle_now()
    assert alt.deactivations == []  # 2 of 5 still run: more than a fifth
    chain.jobs[JOBS[4]] = replace(chain.jobs[JOBS[4]], status="cancelled")
    clock[0] += 60
    settler.settle_now()
    assert alt.deactivations == [old]  # 1 of 5
    # the survivor settles on, its accounts in a table that is still active
    feed(intake, [JOBS[0]], upto=2, start=2)
    assert settler.settle_now().confirmed == 1
    active = [t for t in alt.tables.values() if t.is_active]
    assert any(pk(JOBS[0]) in t.addresses for t in active)
    assert all(old not in ts for ts in alt.sent_tables[-1:])


def test_a_finishing_job_settles_at_once_without_waiting_for_a_table(tmp_path, chain, clock,
                                                                     alt):
    """Its grace runs out: no table is created, extended or waited for on its behalf, and it
    is not held for a partner; the running jobs of the pass still go batched."""
    _store, intake, settler = setup(tmp_path, chain, clock, n_jobs=3, batch_hold_windows=10)
    feed(intake, JOBS[:3])
    for j in JOBS[:3]:
        chain.jobs[j] = replace(chain.jobs[j], status="finishing", ended_at=clock[0])
    r = settler.settle_now()
    assert r.confirmed == 3 and r.table_transactions == 0
    assert alt.creates == [] and alt.extends == [] and alt.sends == []
    assert sum(len(c) for c in chain.settle_calls) == 3  # legacy transactions, no table
    # A pass with both: the finishing job alone and at once, the running ones batched.
    (tmp_path / "b").mkdir()
    _store2, intake2, settler2 = setup(tmp_path / "b", chain, clock, n_jobs=0)
    for j in JOBS[3:6]:
        chain.jobs[j] = replace(chain.jobs[JOB], address=pk(j))
    feed(intake2, JOBS[3:6])
    chain.jobs[JOBS[5]] = replace(chain.jobs[JOBS[5]], status="finishing", ended_at=clock[0])
    chain.settle_calls.clear()
    r = settler2.settle_now()
    assert r.confirmed == 3
    assert [bytes(it.job) for it in chain.settle_calls[0]] == [JOBS[5]]
    assert len(alt.sends) == 1 and sorted(alt.sends[0][0]) == sorted(JOBS[3:5])
