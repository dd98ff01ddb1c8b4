"""The slice of the SDK client (``gpu_market.client.GpuMarketClient``) the validator uses.

``ChainClient`` is that interface (docs/sdk-api.md); the real client is used in production
and end-to-end tests, a fake only in unit tests. ``ProviderKeys`` caches Provider accounts
with a short TTL in a bounded LRU and refreshes on a key mismatch, so a rotation is seen at
the next proof and no number of distinct provider addresses grows memory without bound.
Every read failure that is not "account missing" becomes ``ChainUnavailable``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from solders.pubkey import Pubkey

from .errors import ChainUnavailable, Rejection
from .records import ChainJobInfo
from .verify import JobState, committee_of, field_of, quorum_of, status_of


class ChainClient(Protocol):
    """Chain reads and transactions, as documented in docs/sdk-api.md (the SDK's names)."""

    def fetch_market(self, market: Pubkey) -> Any | None: ...
    def fetch_provider(self, provider: Pubkey) -> Any | None: ...
    def fetch_job(self, job: Pubkey) -> Any | None: ...
    def fetch_validator_by_authority(self, market: Pubkey, authority: Pubkey) -> Any | None: ...
    def settle(self, validator_authority: Any, items: Sequence[Any]) -> Any: ...
    def max_settle_items_per_tx(self, quorum: int = 1) -> int: ...


def chain_error_name(exc: BaseException) -> str | None:
    """The IDL error name of a program error (SDK ``GpuMarketError``), else None."""
    name = getattr(exc, "name", None)
    code = getattr(exc, "code", None)
    if isinstance(name, str) and isinstance(code, int) and not isinstance(code, bool):
        return name
    return None


def read(what: str, fn: Callable[[], Any]) -> Any:
    """Run one chain read; a transport failure becomes ChainUnavailable naming ``what``.

    An account that exists but is not of the expected gpu_market type (the SDK's
    ``InvalidAccount``, a ValueError) reads as None: for the validator it is "no such
    account", and the proof is rejected instead of retried forever.
    """
    try:
        return fn()
    except ValueError:
        return None
    except Exception as e:  # the SDK raises RpcUnavailable; anything else is equally fatal here
        if chain_error_name(e) is not None:
            raise
        raise ChainUnavailable(f"cannot read {what} from the chain: {type(e).__name__}: {e}; "
                               "check the RPC URL and that the node is up") from None


def escrow_remaining(job: Any) -> int:
    """Escrow booked balance from the job's accounting (the program's invariant: deposited
    == paid_provider + paid_validators + paid_treasury + burned + refunded + escrow; a view
    without ``paid_validators`` counts it as 0). Donations to the escrow are not counted."""
    spent = sum(int(field_of(job, k)) for k in ("paid_provider", "paid_treasury", "burned",
                                                 "refunded"))
    spent += int(_field_or(job, "paid_validators", 0))
    return max(0, int(field_of(job, "deposited")) - spent)


def _field_or(obj: Any, name: str, default: Any) -> Any:
    try:
        return field_of(obj, name)
    except (KeyError, AttributeError):
        return default


def job_info(job: Any) -> ChainJobInfo:
    """The settlement facts of a Job view; rate, window length, quorum and the other limits
    come from ``job.terms``."""
    terms = field_of(job, "terms")
    return ChainJobInfo(
        status=status_of(job),
        last_seq=int(field_of(job, "last_seq")),
        paid_seconds=int(field_of(job, "paid_seconds")),
        rate_per_second=int(field_of(terms, "rate_per_second")),
        escrow_remaining=escrow_remaining(job),
        ended_at=int(field_of(job, "ended_at")),
        window_seconds=int(field_of(terms, "window_seconds")),
        claimed_seconds=int(field_of(job, "claimed_seconds")),
        last_window_end=int(field_of(job, "last_window_end")),
        started_at=int(field_of(job, "started_at")),
        committee=tuple(committee_of(job)),
        quorum=quorum_of(job),
        max_skew_seconds=int(field_of(terms, "max_skew_seconds")),
        max_missed_windows=int(field_of(terms, "max_missed_windows")),
    )


def baseline_state(job: Any) -> JobState:
    """Where a job's approved history starts when this validator has none (or only older
    than the chain's): the chain's last settled receipt, with the committee's approved
    total ``paid_seconds`` (``last_window_end`` is ``started_at`` before the first
    settlement, when there is no receipt hash to chain to)."""
    last_seq = int(field_of(job, "last_seq"))
    return JobState(
        last_seq=last_seq,
        cumulative_seconds=int(field_of(job, "claimed_seconds")),
        last_window_end=int(field_of(job, "last_window_end")),
        approved_total=int(field_of(job, "paid_seconds")),
        last_hash=bytes(field_of(job, "last_receipt_hash")) if last_seq > 0 else None,
    )


DEFAULT_PROVIDER_CACHE = 4096


REFRESH_INTERVAL = 5.0
"""Seconds within which a forced re-read of one account is served from the read before."""


class ReadBudget:
    """Chain reads each request source may cause: a token bucket per source (an IPv4
    address, an IPv6 /64, ``server.source_of``) refilled at ``rate`` per second up to
    ``burst``. ``take(source)`` spends one read, False when the source has none left. At most
    ``max_sources`` buckets (the least recently used dropped: a dropped source starts full
    again, which only gives back what the bound costs). Thread-safe.

    What it bounds: a proof signed by any key for a job address nobody cached costs one job
    read before anything can be refused, so a stranger naming fresh random addresses could
    otherwise spend the node's RPC quota without limit and starve honest reads."""

    def __init__(self, rate: float, burst: float | None = None,
                 clock: Callable[[], float] = time.monotonic, max_sources: int = 65_536) -> None:
        if burst is None:
            burst = rate * READ_BURST_SECONDS
        if rate <= 0 or burst < 1:
            raise ValueError("a read budget needs rate > 0 and burst >= 1")
        self.rate, self.burst, self.clock, self.max_sources = rate, burst, clock, max_sources
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.refused = 0
        """Reads refused so far."""

    def take(self, source: str) -> bool:
        now = self.clock()
        with self._lock:
            tokens, at = self._buckets.pop(source, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            ok = tokens >= 1
            if ok:
                tokens -= 1
            else:
                self.refused += 1
            self._buckets[source] = (tokens, now)
            while len(self._buckets) > self.max_sources:
                self._buckets.popitem(last=False)
            return ok

    def payer(self, source: str) -> Callable[[], bool] | None:
        """What ``AccountCache.get(budget=)`` charges for a request from ``source``; None for
        "" (in-process callers, which pay nothing)."""
        return (lambda: self.take(source)) if source else None


class ReadRefused(Exception):
    """A read a ``ReadBudget`` refused (nothing was read)."""


def read_refused(budget: ReadBudget) -> Rejection:
    """The answer to a request whose job read its source's budget refused: retryable 429."""
    return Rejection("chain_read_budget", "this source named more jobs this node has not read "
                     f"yet than it reads per second ({budget.rate:g}, bursts of "
                     f"{budget.burst:g}); retry later", 429, retry_after=1)


class AccountCache:
    """Accounts (or their absence) read by ``fetch(Pubkey)`` and cached for ``ttl`` seconds in
    an LRU of at most ``max_entries``; ``get(..., refresh=True)`` re-reads, ``forget`` drops
    one entry (a subscription saw the account change). Thread-safe. Memory is bounded
    whatever addresses are asked for; a read failure is ``ChainUnavailable`` (nothing is
    cached).

    With ``follow(live_since, live_ttl)`` (a PubSub subscription to these accounts), a read
    is kept for ``live_ttl`` instead of ``ttl`` while it stays covered by the subscription:
    it began after the subscription was confirmed (``live_since()``, on this cache's clock;
    None while there is none), that subscription is still the live one, and no ``forget`` of
    that address happened while it was in flight (a change notified during a read may not be
    in it).
    Any change after such a read is notified and drops it, so it is as fresh as the
    notifications; without a subscription, or after it drops and comes back, reads fall back
    to ``ttl``."""

    def __init__(self, fetch: Callable[[Pubkey], Any | None], what: str, ttl: float,
                 clock: Callable[[], float] = time.monotonic,
                 max_entries: int = DEFAULT_PROVIDER_CACHE) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.fetch = fetch
        self.what = what
        self.ttl = ttl
        self.clock = clock
        self.max_entries = max_entries
        self.reads = 0
        """Chain reads made (cache misses and refreshes)."""
        self._cache: OrderedDict[bytes, tuple[float, Any | None, bool]] = OrderedDict()
        """Per address: when it was read, what was read, whether no ``forget`` happened
        during the read."""
        self._forced: OrderedDict[bytes, float] = OrderedDict()
        """When each address was last read because ``refresh`` forced it (bounded too)."""
        self._lock = threading.Lock()
        self._live_since: Callable[[], float | None] = lambda: None
        self.live_ttl = ttl
        self._reading: dict[bytes, list[list[bool]]] = {}
        """Per address being read, one flag per read in flight: still covered (no ``forget``
        of that address since it began). Only the address's own notifications count, so
        nobody can uncover other reads by causing forgets of other addresses."""

    def follow(self, live_since: Callable[[], float | None], live_ttl: float) -> None:
        """Keep reads covered by a subscription (see the class) for ``live_ttl`` seconds.
        ``live_since()``: when the current subscription was confirmed, on this cache's
        clock; None while there is none."""
        self._live_since, self.live_ttl = live_since, max(live_ttl, self.ttl)

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def forget(self, address: bytes) -> None:
        """Drop ``address``'s entry: the next use reads it afresh instead of waiting out the
        TTL."""
        address = bytes(address)
        with self._lock:
            for flag in self._reading.get(address, ()):
                flag[0] = False
            self._cache.pop(address, None)

    def _fresh(self, entry: tuple[float, Any | None, bool], now: float) -> bool:
        read_at, _, covered = entry
        age = now - read_at
        if age < self.ttl:
            return True
        if not covered or age >= self.live_ttl:
            return False
        since = self._live_since()
        return since is not None and read_at >= since

    def get(self, address: bytes, refresh: bool = False,
            budget: Callable[[], bool] | None = None) -> Any | None:
        """The cached account, or a fresh read. ``refresh`` forces a read, but at most once per
        ``REFRESH_INTERVAL`` seconds per address: a stream of proofs signed by unknown keys
        for a real provider costs one read per interval, not one each (they are retryable,
        so a genuine rotation is still seen within the interval). ``budget``: called before
        a read; False raises ``ReadRefused`` instead (a cached account costs nothing)."""
        now = self.clock()
        if not refresh:
            # A hit needs no lock (every proof asks twice, from many threads: a lock taken
            # and released per call convoyed the request threads and the group commit's
            # leader on the GIL). Each dict operation is atomic under the GIL; an entry
            # dropped or replaced meanwhile makes this the answer of a call just before.
            hit = self._cache.get(address)
            if hit is not None and self._fresh(hit, now):
                try:
                    self._cache.move_to_end(address)
                except KeyError:  # evicted meanwhile
                    pass
                return hit[1]
        with self._lock:
            hit = self._cache.get(address)
            if refresh:
                forced = self._forced.get(address)
                if hit is not None and forced is not None and now - forced < REFRESH_INTERVAL:
                    refresh = False  # forced a read less than an interval ago: keep it
                else:
                    self._forced[address] = now
                    self._forced.move_to_end(address)
                    while len(self._forced) > self.max_entries:
                        self._forced.popitem(last=False)
            if hit is not None and not refresh and self._fresh(hit, now):
                self._cache.move_to_end(address)
                return hit[1]
            if budget is not None and not budget():
                raise ReadRefused(self.what)
            self.reads += 1
            flag = [True]
            self._reading.setdefault(address, []).append(flag)
        try:
            view = read(self.what, lambda: self.fetch(Pubkey.from_bytes(address)))
        finally:
            with self._lock:
                flags = self._reading[address]
                del flags[next(i for i, f in enumerate(flags) if f is flag)]
                if not flags:
                    del self._reading[address]
        with self._lock:
            self._cache[address] = (now, view, flag[0])
            self._cache.move_to_end(address)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return view


class ProviderKeys(AccountCache):
    """Provider accounts cached for ``ttl`` seconds (30 by default); the intake re-reads once
    on a worker-key mismatch, so a rotation or registration is seen at the next proof."""

    def __init__(self, client: ChainClient, ttl: float = 30.0,
                 clock: Callable[[], float] = time.monotonic,
                 max_entries: int = DEFAULT_PROVIDER_CACHE) -> None:
        super().__init__(client.fetch_provider, "the provider account", ttl, clock, max_entries)
        self.client = client


DEFAULT_JOB_TTL = 2.0
"""How long a Job account read by the intake is reused (``JobAccounts``)."""
SUBSCRIBED_TTL = 300.0
"""How long the intake reuses a Job or Provider account read while a PubSub subscription to
them covers it (``AccountCache.follow``): a change drops it at once, so this bounds only what
a notification the node lost could cost. With one window a minute, a job is read once per
five proofs instead of once per proof (``DEFAULT_JOB_TTL``)."""
JOB_READS_PER_SOURCE = 20.0
"""The intake's ``ReadBudget`` of job reads per request source and second: an honest worker's
job is read at most once per window (2 s TTL without PubSub; once per five with it), so even
a thousand workers behind one NAT stay under it."""
READ_BURST_SECONDS = 10.0
"""A ``ReadBudget``'s burst, in seconds of its rate, unless given."""
DEFAULT_JOB_CACHE = 32_768
"""Job accounts the intake keeps (a few KiB each): more than the running jobs of any one
validator's committees, so a busy node does not thrash."""


class JobAccounts(AccountCache):
    """Job accounts as the intake judges proofs against them, cached for ``ttl`` seconds
    (``DEFAULT_JOB_TTL``) and dropped at once when a subscription sees the job change. A
    proof is therefore judged against the job as it was at most ``ttl`` seconds ago, as if
    its single read had been that much slower; every proof of a job no longer reads the chain.
    (A worker that keeps sending windows after its own job ended gets them approved here for
    at most ``ttl`` seconds; the chain refuses to settle a receipt after the job's end, so
    the only party this can hurt is that provider.)"""

    def __init__(self, client: ChainClient, ttl: float = DEFAULT_JOB_TTL,
                 clock: Callable[[], float] = time.monotonic,
                 max_entries: int = DEFAULT_JOB_CACHE) -> None:
        super().__init__(client.fetch_job, "the job account", ttl, clock, max_entries)
