"""The settler's address lookup tables: which tables this validator settles with, creating and
extending them for the settlements of a pass, and retiring them once their jobs ended (I/O
through the SDK's ``gpu_market.lookup_tables.LookupTables``; the list kept in the store).

Accounts of batched (v0) settle transactions come from this validator's lookup tables,
created on first need and extended with the accounts of new providers and attesters
(``lookup_table_job_accounts`` adds each job's own); their addresses are kept in the store's
meta (``LOOKUP_TABLES_META``). A table is recorded as *pending* before the transaction that
creates it is sent, so a crash never leaks one: after a restart a pending table that exists
is adopted, one that does not is forgotten once its create can no longer land
(``PENDING_TABLE_SECONDS``). Extending is its own transaction; the extension is read back
first (never appended twice) and the pass waits up to ``lookup_table_wait_seconds`` for the
new entries to become usable (one slot later), packing with the entries usable then. A table
that cannot be read, created or extended never stops settlement: the pass packs with what is
usable (without a table a v0 transaction carries what a legacy one does).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from solders.pubkey import Pubkey

from .chain import job_info
from .config import SettlePolicy
from .records import TERMINAL_CHAIN_STATUSES, Store
from .settle_policy import SettleReport, classify_send_error

log = logging.getLogger("gpum_validator.settle")

LOOKUP_TABLES_META = "settle_lookup_tables"
"""Store meta key: JSON ``{"tables": [base58, ...], "pending": {"address", "slot", "at"} | null,
"retiring": {base58: deactivation slot}}``."""
LOOKUP_TABLE_CLOSE_SLOTS = 513
"""Slots after its deactivation before a lookup table can be closed: its deactivation slot
must have left the SlotHashes sysvar (512 entries)."""
PENDING_TABLE_SECONDS = 180.0
"""After this long a pending table create that has not landed never will (its blockhash,
valid for 150 slots, has expired); it is forgotten and another table may be created."""


class LookupTableApi(Protocol):
    """The slice of ``gpu_market.lookup_tables.LookupTables`` (``client.lookup_tables``) the
    settler uses; see that class for each method's guarantees."""

    def slot(self) -> int: ...
    def fetch(self, table: Pubkey) -> Any | None: ...
    def free_recent_slot(self, authority: Pubkey) -> tuple[int, Pubkey]: ...
    def create(self, authority: Any, recent_slot: int) -> Any: ...
    def extend(self, authority: Any, table: Pubkey, addresses: Iterable[Pubkey]) -> list[Any]: ...
    def deactivate(self, authority: Any, table: Pubkey) -> Any: ...
    def close(self, authority: Any, table: Pubkey) -> Any: ...
    def wait_usable(self, table: Pubkey, timeout: float = 5.0) -> Any: ...
    def prepare(self, validator_authority: Pubkey, items: Sequence[Any]) -> list[Any]: ...
    def pack(self, payer: Pubkey, prepared: Sequence[Any], tables: Sequence[Any],
             slot: int) -> list[list[int]]: ...
    def max_items_per_tx(self, quorum: int, own_accounts_in_table: bool) -> int: ...
    def send_settle(self, validator_authority: Any, prepared: Sequence[Any],
                    tables: Sequence[Any], slot: int | None = None) -> Any: ...


class SettleTables:
    """This validator's lookup tables for its settle transactions (see the module docstring).
    ``read_jobs`` reads Job views by address (``Settler._read_jobs``)."""

    def __init__(self, store: Store, authority: Any, policy: SettlePolicy,
                 clock: Callable[[], float],
                 read_jobs: Callable[[Sequence[bytes]], dict[bytes, Any]]) -> None:
        self.store = store
        self.authority = authority
        self.policy = policy
        self.clock = clock
        self._read_jobs = read_jobs
        self._tables: list[Any] | None = None
        """This validator's lookup tables as last read (None: read them from the store)."""
        self._retire_checked_at = clock()
        """When ``retire`` last looked (the first look one interval after start)."""

    def forget(self) -> None:
        """Read the tables afresh on the next pass (one may be gone or not usable)."""
        self._tables = None

    def _table_state(self) -> dict[str, Any]:
        raw = self.store.get_meta(LOOKUP_TABLES_META)
        try:
            state = json.loads(raw) if raw else {}
        except ValueError:
            log.error("unreadable %s in the store (%r); starting a new list", LOOKUP_TABLES_META,
                      raw)
            state = {}
        if not isinstance(state, dict):
            state = {}
        tables = state.get("tables")
        retiring = state.get("retiring")
        return {"tables": list(tables) if isinstance(tables, list) else [],
                "pending": state.get("pending") if isinstance(state.get("pending"), dict)
                else None,
                "retiring": {str(k): int(v) for k, v in retiring.items()
                             if isinstance(v, int) and not isinstance(v, bool)}
                if isinstance(retiring, dict) else {}}

    def _save_table_state(self, state: dict[str, Any]) -> None:
        self.store.set_meta(LOOKUP_TABLES_META, json.dumps(state, sort_keys=True))

    def addresses(self) -> list[str]:
        """Addresses (base58) of the lookup tables this validator settles with."""
        return list(self._table_state()["tables"])

    def _load_tables(self, api: LookupTableApi) -> list[Any]:
        """The tables of the store's list that exist and are active; a pending create that
        landed is adopted, one that can no longer land is forgotten."""
        if self._tables is not None:
            return self._tables
        state = self._table_state()
        changed = False
        tables = []
        for addr in list(state["tables"]):
            t = api.fetch(Pubkey.from_string(addr))
            if t is None or not t.is_active:
                log.warning("lookup table %s is %s; no longer used", addr,
                            "gone" if t is None else "deactivated")
                state["tables"].remove(addr)
                changed = True
            else:
                tables.append(t)
        pending = state["pending"]
        if pending is not None:
            t = api.fetch(Pubkey.from_string(pending["address"]))
            if t is not None:
                state["tables"].append(pending["address"])
                state["pending"] = None
                tables.append(t)
                changed = True
                log.info("lookup table %s created before a restart: adopted", pending["address"])
            elif self.clock() - float(pending.get("at", 0)) > PENDING_TABLE_SECONDS:
                state["pending"] = None
                changed = True
                log.info("lookup table create %s never landed; forgotten", pending["address"])
        if changed:
            self._save_table_state(state)
        self._tables = tables
        return tables

    def _create_table(self, api: LookupTableApi, report: SettleReport) -> Any | None:
        """A new table (pending in the store before its create is sent), or None while an
        earlier create may still land."""
        state = self._table_state()
        if state["pending"] is not None:
            return None
        slot, address = api.free_recent_slot(self.authority.pubkey())
        state["pending"] = {"address": str(address), "slot": slot, "at": self.clock()}
        self._save_table_state(state)
        try:
            api.create(self.authority, slot)
        except Exception as e:
            if classify_send_error(e)[0] != "transport":
                state["pending"] = None  # refused: it will never exist
                self._save_table_state(state)
            raise
        finally:
            report.table_transactions += 1
        table = api.fetch(address)
        if table is None:  # confirmed but not visible yet: adopted on a later pass
            return None
        state["tables"].append(str(address))
        state["pending"] = None
        self._save_table_state(state)
        log.info("created lookup table %s (recent slot %d)", address, slot)
        return table

    def tables_for(self, api: LookupTableApi, prepared: list[Any],
                    report: SettleReport) -> list[Any]:
        """The tables, extended with the accounts of ``prepared`` they lack; never raises
        (a failure is logged and the pass goes on with the tables as they are)."""
        try:
            tables = list(self._load_tables(api))
        except Exception as e:  # noqa: BLE001 - settlement goes on without tables
            log.warning("cannot read the lookup tables (%s: %s); settling without them",
                        type(e).__name__, e)
            return []
        if self.policy.lookup_table_job_accounts:
            return self._home_tables_for(api, tables, prepared, report)
        wanted: dict[Pubkey, None] = {}
        for p in prepared:
            wanted.update(dict.fromkeys(p.shared))
        held = {a for t in tables for a in t.addresses}
        missing = [a for a in wanted if a not in held]
        touched: list[Pubkey] = []
        try:
            while missing:
                target = next((t for t in reversed(tables) if t.room > 0), None)
                if target is None:
                    target = self._create_table(api, report)
                    if target is None:
                        break
                    tables.append(target)
                chunk, missing = missing[:target.room], missing[target.room:]
                self._extend(api, target.address, chunk, report)
                if target.address not in touched:
                    touched.append(target.address)
                # read back before the next round: its room changed
                fresh = api.fetch(target.address)
                tables = [fresh if t.address == target.address and fresh is not None else t
                          for t in tables]
        except Exception as e:  # noqa: BLE001 - settlement goes on with what is usable
            log.warning("cannot extend the lookup tables (%s: %s); packing with the entries "
                        "usable now", type(e).__name__, e)
        return self._await_usable(api, tables, touched)

    def _extend(self, api: LookupTableApi, table: Pubkey, addresses: list[Pubkey],
                report: SettleReport) -> None:
        sigs = api.extend(self.authority, table, addresses)
        report.table_transactions += len(sigs)
        log.info("lookup table %s: %d address(es) added in %d transaction(s)",
                 table, len(addresses), len(sigs))

    def _await_usable(self, api: LookupTableApi, tables: list[Any],
                      touched: list[Pubkey]) -> list[Any]:
        for address in touched:
            try:
                fresh = api.wait_usable(address, timeout=self.policy.lookup_table_wait_seconds)
            except Exception as e:  # noqa: BLE001 - same
                log.warning("cannot read lookup table %s (%s)", address, e)
                continue
            tables = [fresh if t.address == address else t for t in tables]
        # While a create is pending the list is read afresh each pass (it may land).
        self._tables = tables if self._table_state()["pending"] is None else None
        return tables

    def _home_tables_for(self, api: LookupTableApi, tables: list[Any], prepared: list[Any],
                         report: SettleReport) -> list[Any]:
        """With job accounts in the tables: every item gets one *home* table holding all its
        accounts (the table that already has its job, else the newest with room, else a new
        one), its shared accounts repeated there if another table has them (about ten per
        table), so its transaction loads from that table alone (``Settler._pack_by_home``)."""
        adds: dict[Pubkey, list[Pubkey]] = {}
        touched: list[Pubkey] = []

        def room(t: Any) -> int:
            return t.room - len(adds.get(t.address, ()))

        def holds(t: Any, a: Pubkey) -> bool:
            return a in t.addresses or a in adds.get(t.address, ())

        try:
            for p in prepared:
                wanted = list(dict.fromkeys((*p.own, *p.shared)))
                home = next((t for t in tables if holds(t, p.own[0])), None)
                need = [] if home is None else [a for a in wanted if not holds(home, a)]
                if home is None or len(need) > room(home):
                    home = next((t for t in reversed(tables) if room(t) >= len(wanted)), None)
                    if home is None:
                        home = self._create_table(api, report)
                        if home is None:  # a create is pending: the rest go without
                            break
                        tables.append(home)
                    need = [a for a in wanted if not holds(home, a)]
                adds.setdefault(home.address, []).extend(need)
            for address, new in adds.items():
                if new:
                    self._extend(api, address, new, report)
                    touched.append(address)
        except Exception as e:  # noqa: BLE001 - settlement goes on with what is usable
            log.warning("cannot extend the lookup tables (%s: %s); packing with the entries "
                        "usable now", type(e).__name__, e)
        return self._await_usable(api, tables, touched)

    def retire(self, api: LookupTableApi | None, report: SettleReport) -> None:
        """Give back the rent of tables that only serve ended jobs (at most once per
        ``lookup_table_retire_seconds``; never raises).

        A full table (no more extends go to it) holding job accounts is *retired* once at
        most ``lookup_table_compact_live_fraction`` (10 %) of the jobs of it this node knows
        (its store's jobs) are live (not ended on chain, or with an open intent):
        deactivated, then closed, its rent back to this validator, once the deactivation
        slot left SlotHashes (``LOOKUP_TABLE_CLOSE_SLOTS``). The live jobs' accounts and the
        shared ones (market, providers, ...) are added to the newest table by their next
        settlement. So a few long jobs cannot pin a table's rent: whoever wants to hold
        one must keep more than a tenth of its jobs running. Tables without job accounts
        (the node's default before job accounts went in, or ``lookup_table_job_accounts``
        off) are never retired: their entries serve every future settlement."""
        now = self.clock()
        if api is None or now - self._retire_checked_at < self.policy.lookup_table_retire_seconds:
            return
        self._retire_checked_at = now
        try:
            self._deactivate_finished(api, report)
            self._close_deactivated(api, report)
        except Exception as e:  # noqa: BLE001 - retried on a later check
            log.warning("lookup table retirement postponed (%s: %s)", type(e).__name__, e)

    def _deactivate_finished(self, api: LookupTableApi, report: SettleReport) -> None:
        tables = self._load_tables(api)
        open_jobs = {it.job for it in self.store.open_intents()}
        for t in tables:
            if t.room > 0:  # still being extended
                continue
            jobs = [bytes(a) for a in t.addresses if self.store.chain_info(bytes(a))[0] is not None]
            if not jobs:
                continue
            views = self._read_jobs(jobs)
            live = [j for j, v in views.items() if j in open_jobs or (
                v is not None and job_info(v).status not in TERMINAL_CHAIN_STATUSES)]
            if len(live) > self.policy.lookup_table_compact_live_fraction * len(jobs):
                continue
            slot = api.slot()
            state = self._table_state()
            state["retiring"][str(t.address)] = slot  # before the send: a crash retries it
            self._save_table_state(state)
            api.deactivate(self.authority, t.address)
            report.table_transactions += 1
            state["tables"] = [a for a in state["tables"] if a != str(t.address)]
            self._save_table_state(state)
            self._tables = None
            log.info("lookup table %s deactivated: %d of its %d job(s) ended (the others "
                     "move to the newest table); closed after %d slots", t.address,
                     len(jobs) - len(live), len(jobs), LOOKUP_TABLE_CLOSE_SLOTS)

    def _close_deactivated(self, api: LookupTableApi, report: SettleReport) -> None:
        state = self._table_state()
        if not state["retiring"]:
            return
        slot = api.slot()
        for address, since in list(state["retiring"].items()):
            if slot <= since + LOOKUP_TABLE_CLOSE_SLOTS:
                continue
            table = api.fetch(Pubkey.from_string(address))
            if table is not None:
                if table.is_active:  # the deactivation never landed: send it again
                    api.deactivate(self.authority, table.address)
                    report.table_transactions += 1
                    state["retiring"][address] = api.slot()  # after the send: it landed by then
                    self._save_table_state(state)
                    continue
                api.close(self.authority, table.address)
                report.table_transactions += 1
                log.info("lookup table %s closed; its rent is back", address)
            del state["retiring"][address]
            self._save_table_state(state)
