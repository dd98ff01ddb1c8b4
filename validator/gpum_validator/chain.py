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

from .errors import ChainUnavailable
from .store import ChainJobInfo
from .verify import JobState, committee_of, field_of, quorum_of, status_of


class ChainClient(Protocol):
    """Chain reads and transactions, as documented in docs/sdk-api.md (issue 8 names)."""

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


class ProviderKeys:
    """Provider accounts (or their absence) cached for ``ttl`` seconds in an LRU of at most
    ``max_entries``; ``get(..., refresh=True)`` re-reads. Thread-safe."""

    def __init__(self, client: ChainClient, ttl: float = 30.0,
                 clock: Callable[[], float] = time.monotonic,
                 max_entries: int = DEFAULT_PROVIDER_CACHE) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.client = client
        self.ttl = ttl
        self.clock = clock
        self.max_entries = max_entries
        self._cache: OrderedDict[bytes, tuple[float, Any | None]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def forget(self, provider: bytes) -> None:
        """Drop ``provider``'s entry (a subscription saw its account change): the next proof
        reads it afresh instead of waiting out the TTL."""
        with self._lock:
            self._cache.pop(bytes(provider), None)

    def get(self, provider: bytes, refresh: bool = False) -> Any | None:
        now = self.clock()
        with self._lock:
            hit = self._cache.get(provider)
            if hit is not None and not refresh and now - hit[0] < self.ttl:
                self._cache.move_to_end(provider)
                return hit[1]
        view = read("the provider account",
                    lambda: self.client.fetch_provider(Pubkey.from_bytes(provider)))
        with self._lock:
            self._cache[provider] = (now, view)
            self._cache.move_to_end(provider)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return view
