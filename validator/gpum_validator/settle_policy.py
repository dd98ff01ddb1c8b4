"""Settlement policy, pure: when a job is due for settlement, its round, the backoff after a
failed attempt, how a failed send is classified, and the report of one pass. No clock, no I/O:
the settler (``settlement.Settler``) and the reporters (``slashing``, ``downtime``) pass in
what they read.

Policy. A job's newest accepted receipt covers every second up to its cumulative claim, so
only that receipt is settled. "Window" is the job's own ``terms.window_seconds`` (as last
read from chain). It is due when (first match wins):

* ``job_finishing``   the job is Finishing on chain (its settlement grace is short);
* ``escrow_low``      after paying the approved-but-unpaid seconds the escrow covers fewer
                      than ``low_escrow_windows`` windows;
* ``every_n_windows`` ``settle_every_windows`` accepted windows are unsettled;
* ``stale``           the oldest unsettled window ended ``max_unsettled_age_windows`` windows
                      ago (a job whose worker went quiet still gets paid).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpu_market.errors import ConfirmationTimeout, RpcUnavailable

from .chain import chain_error_name
from .config import SettlePolicy
from .errors import ChainUnavailable
from .records import SettleCandidate

ALREADY_SETTLED_ERRORS = frozenset({"StaleSequence", "WindowNotAfterLast", "CumulativeDecreased"})
"""Program errors meaning a receipt at or after this one was settled first."""
RETRYABLE_CHAIN_ERRORS = frozenset({"WindowEndInFuture"})
"""Program errors that may pass later (clock skew); retried ``max_chain_error_attempts``."""
SETTLEABLE_STATUSES = ("running", "finishing")


def classify_send_error(exc: BaseException) -> tuple[str, str | None]:
    """``(kind, name)`` of a failed batched (v0) settle: ``program`` (a program error, or a
    ValueError such as TransactionTooLarge raised before anything was sent; ``name`` is its
    name), ``transport`` (unreachable RPC, or sent but not confirmed in time: it may still
    land) or ``rejected`` (anything else: the cluster refused the transaction, e.g. a lookup
    table entry not usable yet, or the v0 path itself failed). The settler resends
    ``rejected`` items one legacy transaction each, after reading the chain, so even a batch
    that did land is never paid twice (the program refuses a replayed receipt)."""
    name = chain_error_name(exc)
    if name is not None:
        return "program", name
    if isinstance(exc, ValueError):
        return "program", type(exc).__name__
    if isinstance(exc, (RpcUnavailable, ConfirmationTimeout, ChainUnavailable, OSError)):
        return "transport", None
    return "rejected", type(exc).__name__
def due_reason(c: SettleCandidate, policy: SettlePolicy, now: float) -> str | None:
    """Why candidate ``c`` should be settled now, or None (see the module docstring).

    The rules that are measured in windows (``escrow_low``, ``stale``) use the job's
    ``terms.window_seconds`` from ``c.chain``; without chain facts only ``every_n_windows``
    can apply (the settler always reads the chain before it asks)."""
    chain = c.chain
    window = chain.window_seconds if chain is not None else 0
    if chain is not None:
        if chain.status not in SETTLEABLE_STATUSES:
            return None
        if chain.status == "finishing":
            return "job_finishing"
        unsettled = max(0, c.approved_total - chain.paid_seconds)
        left = chain.escrow_remaining - unsettled * chain.rate_per_second
        if left < policy.low_escrow_windows * window * chain.rate_per_second:
            return "escrow_low"
    if c.unsettled_windows >= policy.settle_every_windows:
        return "every_n_windows"
    if window > 0 and (now - c.oldest_unsettled_window_end
                       >= policy.max_unsettled_age_windows * window):
        return "stale"
    return None


def backoff(policy: SettlePolicy, attempts: int) -> float:
    """Delay after ``attempts`` failed attempts: min(cap, base * 2**(attempts-1))."""
    return min(policy.retry_cap_seconds,
               policy.retry_base_seconds * 2 ** max(0, min(attempts - 1, 30)))


def round_of(seq: int, policy: SettlePolicy) -> int:
    """The settle round a job is in when its newest accepted seq is ``seq``."""
    return seq // policy.settle_every_windows
@dataclass
class SettleReport:
    """What one ``settle_now`` pass did (receipt counts)."""

    intended: int = 0
    not_leader: int = 0
    waiting: int = 0
    deferred: int = 0
    confirmed: int = 0
    already_settled: int = 0
    failed: int = 0
    retry_later: int = 0
    signatures: list[str] = field(default_factory=list)
    """Settle transactions that landed (one per transaction, however many receipts)."""
    table_transactions: int = 0
    """Lookup table transactions sent (create, extend, deactivate, close)."""
    held: int = 0
    """Intents kept for a later pass to share a transaction (``batch_hold_windows``)."""
