"""Which jobs this worker proves: the ``JobSource`` interface and its implementations.

* ``StaticJobSource``: a fixed list (tests, and ``gpum-worker run --job PUBKEY[:GPUS]``).
* ``ChainJobSource``: jobs of this provider read from chain through the SDK
  (``gpu_market.client.GpuMarketClient``), imported lazily so the worker runs without it.

``assign_gpus`` (pure) gives each job the first free GPUs by index.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from .errors import JobSourceError
from .keys import WorkerKey, b58encode

JOB_STATUSES = ("open", "running", "finishing")


@dataclass(frozen=True)
class AssignedJob:
    """A job assigned to this provider, as the worker needs it (raw 32-byte keys).

    ``started_at`` is set once the job is Running (unix seconds). ``ended_at`` is set for a
    Finishing job: the worker's last window then ends at ``ended_at``.
    """

    job: bytes
    market: bytes
    program_id: bytes
    provider: bytes
    gpu_count: int
    status: str
    started_at: int | None = None
    ended_at: int | None = None

    @property
    def job_b58(self) -> str:
        return b58encode(self.job)


class JobSource(Protocol):
    def assigned_jobs(self) -> list[AssignedJob]:
        """Jobs of this provider that are open, running or finishing. Raises JobSourceError."""
        ...

    def accept(self, job: AssignedJob) -> None:
        """Accept an Open job with the worker key (Open -> Running). Raises JobSourceError."""
        ...


class StaticJobSource:
    """A fixed job list; ``accept`` marks an open job running with ``started_at = now``."""

    def __init__(self, jobs: Iterable[AssignedJob], clock: Callable[[], float] = time.time):
        self._jobs = {j.job: j for j in jobs}
        self._clock = clock
        self.accepted: list[bytes] = []

    def assigned_jobs(self) -> list[AssignedJob]:
        return list(self._jobs.values())

    def accept(self, job: AssignedJob) -> None:
        cur = self._jobs.get(job.job)
        if cur is None or cur.status != "open":
            raise JobSourceError(f"job {job.job_b58} is not open")
        self._jobs[job.job] = replace(cur, status="running", started_at=int(self._clock()))
        self.accepted.append(job.job)

    # test / operator helpers
    def set(self, job: AssignedJob) -> None:
        self._jobs[job.job] = job

    def remove(self, job: bytes) -> None:
        self._jobs.pop(job, None)


class ChainJobSource:
    """Jobs of ``provider`` from chain via the SDK.

    Expects ``client.list_jobs(provider: Pubkey, statuses=(...)) -> list[JobView]`` where a
    JobView has ``pubkey``/``address``, ``market``, ``gpu_count``, ``status`` (str or enum
    with a name), ``started_at`` and optionally ``ended_at``; and
    ``client.accept_job(signer: Keypair, job: Pubkey)`` (docs/sdk-api.md).
    """

    def __init__(self, client: Any, provider: bytes, program_id: bytes, key: WorkerKey) -> None:
        self._client = client
        self._provider = provider
        self._program_id = program_id
        self._key = key

    @classmethod
    def connect(cls, rpc_url: str, program_id: bytes, provider: bytes,
                key: WorkerKey) -> ChainJobSource:
        try:
            from gpu_market.client import GpuMarketClient  # lazy: SDK is optional at import
        except ImportError as e:
            raise JobSourceError(
                f"the gpu_market SDK client is not available ({e}); pass --job to prove a "
                "fixed job instead"
            ) from None
        try:
            client = GpuMarketClient(rpc_url, program_id=_pubkey(program_id))
        except Exception as e:  # noqa: BLE001 - SDK errors vary; make them one line
            raise JobSourceError(f"cannot connect to {rpc_url}: {e}") from None
        return cls(client, provider, program_id, key)

    def assigned_jobs(self) -> list[AssignedJob]:
        try:
            views = self._client.list_jobs(_pubkey(self._provider), statuses=JOB_STATUSES)
        except Exception as e:
            raise JobSourceError(f"listing jobs failed: {e}") from e
        return [self._to_job(v) for v in views]

    def _to_job(self, v: Any) -> AssignedJob:
        key = getattr(v, "pubkey", None) or v.address
        status = v.status
        status = str(getattr(status, "name", status)).lower()
        return AssignedJob(
            job=bytes(key), market=bytes(v.market), program_id=self._program_id,
            provider=self._provider, gpu_count=int(v.gpu_count), status=status,
            started_at=_opt_int(getattr(v, "started_at", None)),
            ended_at=_opt_int(getattr(v, "ended_at", None)),
        )

    def accept(self, job: AssignedJob) -> None:
        from solders.keypair import Keypair

        try:
            self._client.accept_job(Keypair.from_bytes(self._key.secret_bytes), _pubkey(job.job))
        except Exception as e:
            raise JobSourceError(f"accepting job {job.job_b58} failed: {e}") from e


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
    GPUs (by index) not used by another job, in the order ``jobs`` lists them. Returns
    (assignment per job, jobs that could not get enough free GPUs).
    """
    out: dict[bytes, tuple[str, ...]] = {}
    used: set[str] = set()
    for j in jobs:
        if j.job in existing:
            out[j.job] = tuple(existing[j.job])
            used.update(existing[j.job])
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
