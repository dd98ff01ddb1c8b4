"""Which jobs this worker proves: the ``JobSource`` interface and its implementations.

* ``StaticJobSource``: a fixed list (tests, and ``gpum-worker run --job PUBKEY[:GPUS]``).
* ``ChainJobSource``: jobs of this provider read from chain through the SDK
  (``gpu_market.client.GpuMarketClient``), imported lazily so the worker runs without it.

``assign_gpus`` (pure) gives each job the first free GPUs by index and never hands out a
GPU that a stored assignment still books.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from .errors import JobSourceError
from .keys import WorkerKey, b58encode

JOB_STATUSES = ("open", "running", "finishing")
LIVE_STATUSES = frozenset(JOB_STATUSES)
NO_WORKLOAD_HASH = bytes(32)
"""``job.workload_hash`` of a job without a workload."""
TERMINAL_STATUSES = frozenset({"completed", "cancelled", "failed", "declined", "closed",
                               "removed"})
"""Statuses after which a job never books GPUs again ("closed": the user's ``close_job`` left
its tombstone at the job's address; "removed": gone from a static list)."""


@dataclass(frozen=True)
class JobTerms:
    """The part of a job's on-chain ``terms`` (fixed at ``create_job``) the worker obeys.

    Window length and the billing health thresholds of a job come from here, never from
    the market's current parameters or the worker's configuration.
    """

    window_seconds: int
    max_skew_seconds: int
    temp_critical_c: int
    ecc_uncorrected_max: int
    grace_seconds: int | None = None
    """How long after ``ended_at`` a Finishing job's receipts still settle; ``complete_job``
    succeeds only strictly after ``ended_at + grace_seconds``. None: unknown (an old SDK)."""


@dataclass(frozen=True)
class AssignedJob:
    """A job assigned to this provider, as the worker needs it (raw 32-byte keys).

    ``started_at`` is set once the job is Running (unix seconds). ``ended_at`` is set for a
    Finishing job: the worker's last window then ends at ``ended_at``. ``terms`` is None only
    for jobs without an on-chain account (``--job``): the worker's configuration stands in.
    ``last_seq`` / ``last_window_end`` / ``claimed_seconds`` are the chain's view of the
    last settled receipt (its seq, window end and cumulative claim; 0 before the first
    settlement). ``committee`` lists the job's validator authorities (raw keys, in committee
    order); None when the job has no chain account (``--job``) or the SDK predates
    committees: then only a static validator list (``--validator``) can take its proofs.
    ``user`` is the job's user (the only wallet whose requests the worker API serves for
    the job); None without a chain account. ``workload_hash`` is the sha256 of the job's
    workload spec fixed at ``create_job`` (all zeros: no workload, GPUs only).
    """

    job: bytes
    market: bytes
    program_id: bytes
    provider: bytes
    gpu_count: int
    status: str
    started_at: int | None = None
    ended_at: int | None = None
    terms: JobTerms | None = None
    last_seq: int = 0
    last_window_end: int = 0
    claimed_seconds: int = 0
    committee: tuple[bytes, ...] | None = None
    user: bytes | None = None
    workload_hash: bytes = NO_WORKLOAD_HASH
    escrow_dry: bool = False
    """The booked escrow is less than one second of the job's rate: no settlement can pay
    more (a Completed job with a dry escrow was ended by ``settle``: its escrow ran dry)."""

    @property
    def job_b58(self) -> str:
        return b58encode(self.job)

    @property
    def has_workload(self) -> bool:
        return self.workload_hash != NO_WORKLOAD_HASH


@dataclass(frozen=True)
class ValidatorInfo:
    """What the chain says about one committee member (its Validator account)."""

    endpoint: str
    status: str
    """Lower case: "active", "unbonding", ..."""
    bond: int


class JobSource(Protocol):
    def assigned_jobs(self) -> list[AssignedJob]:
        """Jobs of this provider that are open, running or finishing. Raises JobSourceError.

        A listing may be incomplete (a lagging or failing RPC node); the agent never ends a
        job because it is missing here, only on ``job_status``.
        """
        ...

    def job_status(self, job: bytes) -> str | None:
        """The job's current status read directly (lower case), or None when no such
        account exists. "closed" when the user's ``close_job`` left its tombstone there.
        Raises JobSourceError when it cannot tell."""
        ...

    def chain_time(self) -> int:
        """The chain's clock (unix seconds), which decides every deadline. Raises
        JobSourceError."""
        ...

    def complete(self, job: AssignedJob) -> None:
        """Complete a Finishing job whose grace is over (``complete_job``, any signer: the
        worker key pays). Raises JobSourceError."""
        ...

    def accept(self, job: AssignedJob) -> None:
        """Accept an Open job with the worker key (Open -> Running). Raises JobSourceError."""
        ...

    def decline(self, job: AssignedJob) -> None:
        """Decline an Open job with the worker key (Open -> Declined; the user's
        ``close_job`` refunds the whole deposit). Raises JobSourceError."""
        ...

    def validator_info(self, market: bytes, authority: bytes) -> Any:
        """The Validator account of ``authority`` in ``market`` as a
        ``ValidatorInfo`` (endpoint, status, bond), or None when it does not
        exist. Raises JobSourceError when it cannot tell."""
        ...

    def market_min_bond(self, market: bytes) -> int:
        """The market's ``validator_min_bond``. Raises JobSourceError when it cannot tell."""
        ...

    def finish(self, job: AssignedJob) -> None:
        """Finish a Running job with the worker key (Running -> Finishing; billing stops at
        the transaction's time): a workload with ``finish_on_exit`` whose container exited.
        Raises JobSourceError."""
        ...

    def worker_keys(self) -> frozenset[bytes]:
        """Every worker key of this provider: current and retired. Raises JobSourceError."""
        ...

    def fetch(self, job: bytes) -> AssignedJob | None:
        """The job read directly (any status), or None when no such account exists.
        Raises JobSourceError when it cannot tell."""
        ...

    def validator_endpoint(self, market: bytes, authority: bytes) -> str | None:
        """The endpoint stored in the Validator account of ``authority`` in ``market`` as
        written on chain ("" when empty), or None when that account does not exist.
        Raises JobSourceError when it cannot tell."""
        ...


class StaticJobSource:
    """A fixed job list; ``accept`` marks an open job running with ``started_at = now``,
    ``finish`` a running job finishing with ``ended_at = now``.

    A job removed from the list has ended ("removed"). ``worker_keys`` are the provider's
    other worker keys (e.g. retired ones) whose proofs the worker may resume from; the
    agent always trusts its own key.
    """

    def __init__(self, jobs: Iterable[AssignedJob], clock: Callable[[], float] = time.time,
                 worker_keys: Iterable[bytes] = ()):
        self._jobs = {j.job: j for j in jobs}
        self._clock = clock
        self._worker_keys = frozenset(worker_keys)
        self.accepted: list[bytes] = []
        self.declined: list[bytes] = []
        self.finished: list[bytes] = []
        self.completed: list[bytes] = []

    def assigned_jobs(self) -> list[AssignedJob]:
        return list(self._jobs.values())

    def job_status(self, job: bytes) -> str | None:
        cur = self._jobs.get(job)
        return "removed" if cur is None else cur.status

    def worker_keys(self) -> frozenset[bytes]:
        return self._worker_keys

    def chain_time(self) -> int:
        return int(self._clock())

    def complete(self, job: AssignedJob) -> None:
        cur = self._jobs.get(job.job)
        grace = cur.terms.grace_seconds if cur is not None and cur.terms else None
        if cur is None or cur.status != "finishing" or cur.ended_at is None or grace is None:
            raise JobSourceError(f"job {job.job_b58} is not a finishing job with a grace")
        if self._clock() <= cur.ended_at + grace:
            raise JobSourceError(f"job {job.job_b58}: GracePeriodActive")
        self._jobs[job.job] = replace(cur, status="completed")
        self.completed.append(job.job)

    def fetch(self, job: bytes) -> AssignedJob | None:
        return self._jobs.get(job)

    def validator_endpoint(self, market: bytes, authority: bytes) -> str | None:
        raise JobSourceError("fixed jobs have no committee on chain; pass --validator")

    def accept(self, job: AssignedJob) -> None:
        cur = self._jobs.get(job.job)
        if cur is None or cur.status != "open":
            raise JobSourceError(f"job {job.job_b58} is not open")
        self._jobs[job.job] = replace(cur, status="running", started_at=int(self._clock()))
        self.accepted.append(job.job)

    def decline(self, job: AssignedJob) -> None:
        cur = self._jobs.get(job.job)
        if cur is None or cur.status != "open":
            raise JobSourceError(f"job {job.job_b58} is not open")
        self._jobs[job.job] = replace(cur, status="declined")
        self.declined.append(job.job)

    def validator_info(self, market: bytes, authority: bytes) -> Any:
        raise JobSourceError("fixed jobs have no committee on chain; pass --validator")

    def market_min_bond(self, market: bytes) -> int:
        raise JobSourceError("fixed jobs have no market account")

    def finish(self, job: AssignedJob) -> None:
        cur = self._jobs.get(job.job)
        if cur is None or cur.status != "running":
            raise JobSourceError(f"job {job.job_b58} is not running")
        self._jobs[job.job] = replace(cur, status="finishing", ended_at=int(self._clock()))
        self.finished.append(job.job)

    # test / operator helpers
    def set(self, job: AssignedJob) -> None:
        self._jobs[job.job] = job

    def remove(self, job: bytes) -> None:
        self._jobs.pop(job, None)


RPC_DEADLINE_S = 20.0
"""Total deadline of one JSON-RPC call of the worker (connect, send, the whole answer)."""
RPC_MAX_BYTES = 64 << 20
"""The largest JSON-RPC answer read (a provider's job listing is far smaller)."""


class BoundedRpcSession:
    """The HTTP session of the worker's Solana RPC client (``solana.rpc.api.Client`` posts
    through ``session.post(url=, headers=, content=)``): each call goes through
    ``gpu_market.net.BoundedClient``, so it ends within ``deadline_s`` in total and reads
    at most ``max_bytes``. A failure is raised as an ``httpx.TransportError`` (the RPC client
    reports it as its own error, the source as ``JobSourceError``)."""

    def __init__(self, deadline_s: float = RPC_DEADLINE_S,
                 max_bytes: int = RPC_MAX_BYTES) -> None:
        from gpu_market.net import BoundedClient

        self._client = BoundedClient(deadline_s, max_bytes)

    def post(self, url: Any, *, headers: Any = None, content: Any = None,
             **_ignored: Any) -> Any:
        import httpx
        from gpu_market.net import NetError

        body = content.encode() if isinstance(content, str) else content
        try:
            r = self._client.post(str(url), content=body, headers=dict(headers or {}))
        except NetError as e:
            raise httpx.TransportError(str(e)) from None
        return httpx.Response(r.status, headers=r.headers, content=r.body,
                              request=httpx.Request("POST", str(url)))

    def close(self) -> None:
        self._client.close()


class ChainJobSource:
    """Jobs of ``provider`` from chain via the SDK.

    Expects ``client.list_jobs(provider: Pubkey, statuses=(...)) -> list[JobView]`` where a
    JobView has ``pubkey``/``address``, ``market``, ``gpu_count``, ``status`` (str or enum
    with a name), ``started_at``, ``ended_at``, ``terms`` (JobTerms), ``last_seq``,
    ``last_window_end``, ``claimed_seconds`` and ``committee`` (validator authorities);
    ``client.fetch_job(Pubkey)``, ``client.fetch_provider(Pubkey)`` (``worker_key``,
    ``retired_keys``), ``client.fetch_validator_by_authority(market, authority)`` (or
    ``client.fetch_validator(validator PDA)``; a ValidatorView has ``endpoint``) and
    ``client.accept_job(signer: Keypair, job: Pubkey)`` and ``client.finish_job(signer,
    job)`` (docs/sdk-api.md); a JobView's ``user`` and ``workload_hash`` (32 bytes; absent in
    SDKs from before workloads: no workload) are read too. Fields are read
    as attributes or mapping keys, so anchorpy objects and SDK views both work; views from
    an SDK that predates committees (no ``committee``; ``settled_seconds`` instead of
    ``claimed_seconds``) still work, with ``committee`` None.
    """

    def __init__(self, client: Any, provider: bytes, program_id: bytes, key: WorkerKey) -> None:
        self._client = client
        self._provider = provider
        self._program_id = program_id
        self._key = key

    @classmethod
    def connect(cls, rpc_url: str, program_id: bytes, provider: bytes, key: WorkerKey, *,
                rpc_deadline_s: float = RPC_DEADLINE_S,
                rpc_max_bytes: int = RPC_MAX_BYTES) -> ChainJobSource:
        """A source over the SDK client whose every JSON-RPC call ends within
        ``rpc_deadline_s`` in total and reads at most ``rpc_max_bytes`` (``BoundedRpcSession``):
        a node that trickles or floods its answers fails the call, never hangs the worker."""
        try:
            from gpu_market.client import GpuMarketClient  # lazy: SDK is optional at import
            from solana.rpc.api import Client
            from solana.rpc.commitment import Commitment
        except ImportError as e:
            raise JobSourceError(
                f"the gpu_market SDK client is not available ({e}); pass --job to prove a "
                "fixed job instead"
            ) from None
        try:
            rpc = Client(rpc_url, commitment=Commitment("confirmed"), timeout=rpc_deadline_s)
            provider_http = rpc._provider  # solana-py offers no hook for its HTTP session
            provider_http.session.close()
            provider_http.session = BoundedRpcSession(rpc_deadline_s, rpc_max_bytes)
            client = GpuMarketClient(rpc_url, program_id=_pubkey(program_id), rpc=rpc)
        except Exception as e:  # noqa: BLE001 - SDK errors vary; make them one line
            raise JobSourceError(f"cannot connect to {rpc_url}: {e}") from None
        return cls(client, provider, program_id, key)

    def assigned_jobs(self) -> list[AssignedJob]:
        try:
            views = self._client.list_jobs(_pubkey(self._provider), statuses=JOB_STATUSES)
            return [self._to_job(v) for v in views]
        except Exception as e:
            raise JobSourceError(f"listing jobs failed: {e}") from e

    def _to_job(self, v: Any, job: bytes | None = None) -> AssignedJob:
        key = job if job is not None else bytes(_field(v, "pubkey", None)
                                                or _field(v, "address"))
        return AssignedJob(
            job=key, market=bytes(_field(v, "market")), program_id=self._program_id,
            provider=self._provider, gpu_count=int(_field(v, "gpu_count")),
            status=_status(_field(v, "status")),
            started_at=_opt_int(_field(v, "started_at", None)),
            ended_at=_opt_int(_field(v, "ended_at", None)),
            terms=job_terms(_field(v, "terms", None)),
            last_seq=int(_field(v, "last_seq", 0) or 0),
            last_window_end=int(_field(v, "last_window_end", 0) or 0),
            claimed_seconds=_claimed_seconds(v),
            committee=committee_of(v),
            user=_opt_key(_field(v, "user", None)),
            workload_hash=_workload_hash(_field(v, "workload_hash", None)),
            escrow_dry=_escrow_dry(v),
        )

    def fetch(self, job: bytes) -> AssignedJob | None:
        try:
            v = self._client.fetch_job(_pubkey(job))
            return None if v is None else self._to_job(v, job)
        except Exception as e:
            raise JobSourceError(f"reading job {b58encode(job)} failed: {e}") from e

    def read_jobs(self, jobs: Sequence[bytes]) -> dict[bytes, AssignedJob | str | None]:
        """Each of ``jobs`` read directly, 100 per getMultipleAccounts call: the job, "closed"
        where ``close_job`` left its tombstone, None where no account is, "invalid" where an
        account there is not a job of this program. Raises JobSourceError when any read
        fails (then nothing is returned)."""
        from gpu_market.accounts import ClosedJobView, decode_account

        out: dict[bytes, AssignedJob | str | None] = {}
        try:
            for i in range(0, len(jobs), 100):
                chunk = list(jobs[i:i + 100])
                infos = self._client.rpc.get_multiple_accounts(
                    [_pubkey(k) for k in chunk], encoding="base64").value
                if len(infos) != len(chunk):
                    raise JobSourceError(f"{len(infos)} accounts for {len(chunk)} addresses")
                for k, acc in zip(chunk, infos):
                    if acc is None:
                        out[k] = None
                        continue
                    try:
                        if bytes(acc.owner) != self._program_id:
                            raise ValueError("not owned by the program")
                        view = decode_account(bytes(acc.data), _pubkey(k), self._client.codec)
                        out[k] = ("closed" if isinstance(view, ClosedJobView)
                                  else self._to_job(view, k))
                    except (ValueError, AttributeError, TypeError, KeyError):
                        out[k] = "invalid"
        except JobSourceError:
            raise
        except Exception as e:
            raise JobSourceError(f"reading {len(jobs)} job(s) failed: {e}") from e
        return out

    def validator_endpoint(self, market: bytes, authority: bytes) -> str | None:
        v = self._validator(market, authority)
        if v is None:
            return None
        return endpoint_text(_field(v, "endpoint", ""))

    def _validator(self, market: bytes, authority: bytes) -> Any:
        try:
            by_authority = getattr(self._client, "fetch_validator_by_authority", None)
            if by_authority is not None:
                v = by_authority(_pubkey(market), _pubkey(authority))
            else:  # an SDK without the helper: derive the PDA ["validator", market, authority]
                from gpu_market.pda import validator_pda

                v = self._client.fetch_validator(validator_pda(
                    _pubkey(market), _pubkey(authority), _pubkey(self._program_id)))
        except Exception as e:
            raise JobSourceError(f"reading the Validator account of {b58encode(authority)} "
                                 f"failed: {e}") from e
        return v

    def validator_info(self, market: bytes, authority: bytes) -> Any:
        v = self._validator(market, authority)
        if v is None:
            return None
        bond = _field(v, "bond", None)
        return ValidatorInfo(endpoint=endpoint_text(_field(v, "endpoint", "")),
                             status=_status(_field(v, "status", "unknown")),
                             bond=int(bond) if bond is not None else 0)

    def market_min_bond(self, market: bytes) -> int:
        try:
            m = self._client.fetch_market(_pubkey(market))
        except Exception as e:
            raise JobSourceError(f"reading market {b58encode(market)} failed: {e}") from e
        if m is None:
            raise JobSourceError(f"no Market account at {b58encode(market)}")
        return int(_field(_field(m, "params"), "validator_min_bond"))

    def job_status(self, job: bytes) -> str | None:
        try:
            v = self._client.fetch_job(_pubkey(job))
            if v is not None:
                return _status(_field(v, "status"))
            tombstone = getattr(self._client, "fetch_closed_job", None)
            if tombstone is not None and tombstone(_pubkey(job)) is not None:
                return "closed"
        except Exception as e:
            raise JobSourceError(f"reading job {b58encode(job)} failed: {e}") from e
        return None

    def chain_time(self) -> int:
        try:
            return int(self._client.chain_time())
        except Exception as e:
            raise JobSourceError(f"reading the chain's clock failed: {e}") from e

    def complete(self, job: AssignedJob) -> None:
        from solders.keypair import Keypair

        try:
            self._client.complete_job(Keypair.from_bytes(self._key.secret_bytes),
                                      _pubkey(job.job))
        except Exception as e:
            raise JobSourceError(f"completing job {job.job_b58} failed: {e}") from e

    def worker_keys(self) -> frozenset[bytes]:
        """The provider's current worker key and every non-empty ``retired_keys`` slot."""
        try:
            p = self._client.fetch_provider(_pubkey(self._provider))
            if p is None:
                raise JobSourceError(f"no Provider account at {b58encode(self._provider)}")
            keys = {bytes(_field(p, "worker_key"))}
            for slot in _field(p, "retired_keys", None) or ():
                keys.add(bytes(_field(slot, "key")))
            # SDKs from before ``retired_keys`` expose the single previous key.
            prev = _field(p, "previous_worker_key", None)
            if prev is not None:
                keys.add(bytes(prev))
        except JobSourceError:
            raise
        except Exception as e:
            raise JobSourceError(f"reading the provider's worker keys failed: {e}") from e
        keys.discard(bytes(32))  # empty slots
        return frozenset(keys)

    def accept(self, job: AssignedJob) -> None:
        from solders.keypair import Keypair

        try:
            self._client.accept_job(Keypair.from_bytes(self._key.secret_bytes), _pubkey(job.job))
        except Exception as e:
            raise JobSourceError(f"accepting job {job.job_b58} failed: {e}") from e

    def decline(self, job: AssignedJob) -> None:
        from solders.keypair import Keypair

        try:
            self._client.decline_job(Keypair.from_bytes(self._key.secret_bytes),
                                     _pubkey(job.job))
        except Exception as e:
            raise JobSourceError(f"declining job {job.job_b58} failed: {e}") from e

    def finish(self, job: AssignedJob) -> None:
        from solders.keypair import Keypair

        try:
            self._client.finish_job(Keypair.from_bytes(self._key.secret_bytes), _pubkey(job.job))
        except Exception as e:
            raise JobSourceError(f"finishing job {job.job_b58} failed: {e}") from e


_MISSING = object()


def _field(obj: Any, name: str, default: Any = _MISSING) -> Any:
    """``name`` of an SDK view or anchorpy object (attribute) or of a mapping (key)."""
    if isinstance(obj, Mapping):
        value = obj.get(name, default)
    else:
        value = getattr(obj, name, default)
    if value is _MISSING:
        raise AttributeError(f"{type(obj).__name__} has no field {name!r}")
    return value


def _claimed_seconds(v: Any) -> int:
    """The cumulative claim of the last settled receipt (``settled_seconds`` in older SDKs,
    where paid and claimed were one number)."""
    value = _field(v, "claimed_seconds", None)
    if value is None:
        value = _field(v, "settled_seconds", 0)
    return int(value or 0)


def committee_of(v: Any) -> tuple[bytes, ...] | None:
    """The job's committee (validator authorities) from a JobView (``committee``, already
    ``committee_len`` long) or a raw account (``committee: [Pubkey; 5]`` + ``committee_len``);
    empty slots (all zeros) are skipped. None when the view has no committee at all."""
    members = _field(v, "committee", None)
    if members is None:
        return None
    members = list(members)
    n = _field(v, "committee_len", None)
    if n is not None:
        members = members[: int(n)]
    out = [bytes(m) for m in members]
    return tuple(dict.fromkeys(m for m in out if m != bytes(32)))


def endpoint_text(value: Any) -> str:
    """A Validator ``endpoint`` as text: a str, or the raw zero-padded ``[u8; 96]``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raw = bytes(value)
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")


def _status(value: Any) -> str:
    """A JobStatus as lower-case text: from a string, an enum, or an anchorpy variant."""
    name = getattr(value, "name", None)
    if name is None and not isinstance(value, str):
        name = type(value).__name__
    return str(name if name is not None else value).lower()


def job_terms(terms: Any) -> JobTerms | None:
    """``JobTerms`` from the on-chain ``job.terms`` (None when the view has none: an SDK
    that predates per-job terms; the worker's configuration then stands in)."""
    if terms is None:
        return None
    return JobTerms(
        window_seconds=int(_field(terms, "window_seconds")),
        max_skew_seconds=int(_field(terms, "max_skew_seconds")),
        temp_critical_c=int(_field(terms, "temp_critical_c")),
        ecc_uncorrected_max=int(_field(terms, "ecc_uncorrected_max")),
        grace_seconds=_grace(_field(terms, "grace_seconds", None)),
    )


def _grace(v: Any) -> int | None:
    return None if v is None else int(v)


def _escrow_dry(v: Any) -> bool:
    """Whether a JobView's booked escrow is below one second of its rate (False when the view
    lacks the figures)."""
    try:
        booked = getattr(v, "booked_escrow", None)
        rate = _field(_field(v, "terms"), "rate_per_second", None)
        return booked is not None and rate is not None and int(booked) < int(rate)
    except (AttributeError, TypeError, ValueError):
        return False


def _opt_key(v: Any) -> bytes | None:
    return None if v is None else bytes(v)


def _workload_hash(v: Any) -> bytes:
    """``job.workload_hash`` as 32 bytes (a list of ints, bytes, or a hex string); zeros when
    the view has none."""
    if v is None:
        return NO_WORKLOAD_HASH
    raw = bytes.fromhex(v) if isinstance(v, str) else bytes(v)
    if len(raw) != 32:
        raise ValueError(f"workload_hash must be 32 bytes, got {len(raw)}")
    return raw


def _pubkey(raw: bytes) -> Any:
    from solders.pubkey import Pubkey

    return Pubkey.from_bytes(raw)


def _opt_int(v: Any) -> int | None:
    if v is None:
        return None
    v = int(v)
    return v if v > 0 else None


def assign_gpus(
    jobs: Sequence[AssignedJob],
    gpu_uuids: Sequence[str],
    existing: Mapping[bytes, Sequence[str]],
) -> tuple[dict[bytes, tuple[str, ...]], list[AssignedJob]]:
    """Assign GPUs to jobs (pure).

    ``gpu_uuids`` are this machine's usable GPUs in index order; ``existing`` the stored
    assignments. A job keeps its stored assignment; a new job gets the first ``gpu_count``
    GPUs (by index) not used by another job, in the order ``jobs`` lists them. GPUs of every
    stored assignment stay booked, listed job or not: only releasing the assignment (when
    the chain shows the job ended) frees them. Returns (assignment per job, jobs that could
    not get enough free GPUs).
    """
    out: dict[bytes, tuple[str, ...]] = {}
    used: set[str] = set()
    for uuids in existing.values():
        used.update(uuids)
    for j in jobs:
        if j.job in existing:
            out[j.job] = tuple(existing[j.job])
    starved: list[AssignedJob] = []
    for j in jobs:
        if j.job in out:
            continue
        free = [u for u in gpu_uuids if u not in used]
        if len(free) < j.gpu_count or j.gpu_count < 1:
            starved.append(j)
            continue
        out[j.job] = tuple(free[: j.gpu_count])
        used.update(out[j.job])
    return out, starved
