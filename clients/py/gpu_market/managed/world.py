"""Everything the managed-job controller reads and sends, behind one small interface
(:class:`World`), and its real implementation on a cluster (:class:`ChainWorld`): the chain
through a :class:`~gpu_market.client.GpuMarketClient` and the user's wallet, the provider's
worker API (signed by the wallet), the committee validators' ``/health`` and
``/v1/jobs/<job>/head``. Unit tests replace it with a fake chain.

Failure contract: reads of the chain raise ``SdkError`` (the controller retries next round);
a transaction that the program refused raises ``GpuMarketError`` (definitive: it did not
land); any other ``SdkError`` from a send may mean it landed (the controller re-reads the
chain before it acts again). The worker's API raises ``WorkerApiError``. :meth:`heads` never
raises: what a member did not answer is in the errors it returns. Every HTTP call has a total
deadline and a size cap.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from solders.keypair import Keypair
from solders.pubkey import Pubkey

from .detect import Head

__all__ = ["HEAD_DEADLINE_S", "ChainWorld", "CommitteeView", "World"]

HEAD_DEADLINE_S = 3.0
"""Total deadline of one committee member's head (or windows) request."""
HEAD_MAX_BYTES = 64 * 1024
WINDOWS_MAX_BYTES = 512 * 1024
CHECKPOINT_DEADLINE_S = 20.0
"""The longest one look at the checkpoint store may take."""
WORKER_TIMEOUT_S = 10.0
"""The longest one delivery or status request to a worker may take."""
WORKER_STATUS_MAX_BYTES = 256 * 1024


@dataclass(frozen=True)
class CommitteeView:
    """What the committee said about a job: the newest proof each member that answered holds,
    the newest window any of them accepted, and who did not answer and why."""

    heads: tuple[Head, ...] = ()
    newest_accepted_end: int | None = None
    answered: int = 0
    errors: tuple[str, ...] = field(default_factory=tuple)


class World(Protocol):
    """The controller's view of the chain, the workers and the validators (see the module
    docstring for the failure contract)."""

    def now(self) -> int: ...
    def job(self, job: Pubkey) -> Any: ...
    def tombstone(self, job: Pubkey) -> bool: ...
    def provider(self, provider: Pubkey) -> Any: ...
    def params(self) -> Any: ...
    def offers(self) -> list[Any]: ...
    def healthy_validators(self, authorities: Sequence[Pubkey]) -> list[Pubkey]: ...
    def default_committee(self, exclude: Sequence[Pubkey]) -> list[Pubkey]: ...
    def balance(self) -> int: ...
    def create_job(self, job_id: int, provider: Pubkey, gpus: int, deposit: int,
                   committee: Sequence[Pubkey], quorum: int, max_price: int,
                   workload_hash: bytes) -> str: ...  # fmt: skip
    def cancel_job(self, job: Pubkey) -> str: ...
    def finish_job(self, job: Pubkey) -> str: ...
    def escrow(self, job: Pubkey) -> int: ...
    def close_job(self, job: Pubkey, view: Any) -> tuple[str, Any]: ...
    def deliver(self, endpoint: str, job: Pubkey, spec: Any) -> dict[str, Any]: ...
    def workload_status(self, endpoint: str, job: Pubkey, workload_hash: bytes) -> dict[str, Any]: ...
    def committee(self, job: Pubkey, members: Sequence[Pubkey]) -> CommitteeView: ...
    def remember(self, job: Pubkey, job_id: int, created_at: int) -> None: ...
    def latest_checkpoint(self, config: Mapping[str, Any], credentials: tuple[str, str]) -> int | None: ...


class ChainWorld:
    """:class:`World` on a cluster: ``client`` (its RPC), the user's ``keypair`` (signs every
    transaction and worker request) and ``market``."""

    def __init__(self, client: Any, keypair: Keypair, market: Pubkey, *,
                 http: Any = None) -> None:  # fmt: skip
        from ..net import BoundedClient

        self.client, self.keypair, self.market = client, keypair, market
        self._own_http = http is None
        self.http = http or BoundedClient(deadline=HEAD_DEADLINE_S, max_bytes=HEAD_MAX_BYTES)
        self._endpoints: dict[Pubkey, tuple[str | None, str]] = {}

    def close(self) -> None:
        if self._own_http:
            self.http.close()

    # ------------------------------------------------------------------ chain reads

    def now(self) -> int:
        return self.client.chain_time()

    def job(self, job: Pubkey) -> Any:
        return self.client.fetch_job(job)

    def tombstone(self, job: Pubkey) -> bool:
        return self.client.fetch_closed_job(job) is not None

    def provider(self, provider: Pubkey) -> Any:
        return self.client.fetch_provider(provider)

    def params(self) -> Any:
        from ..accounts import effective_params

        m = self.client.fetch_market(self.market)
        if m is None:
            from ..errors import AccountNotFound

            raise AccountNotFound(f"market {self.market} does not exist on {self.client.url}")
        return effective_params(m, self.client.chain_time())

    def offers(self) -> list[Any]:
        """The market's offers with their workers' liveness probed (offline ones last)."""
        from ..offers import list_offers

        return list_offers(self.client, self.market, probe=True)

    def _validator(self, authority: Pubkey) -> tuple[str | None, str]:
        """``(endpoint, status)`` of ``authority``'s validator (cached; None: not one)."""
        if authority not in self._endpoints:
            v = self.client.fetch_validator_by_authority(self.market, authority)
            self._endpoints[authority] = (None, "none") if v is None else (v.endpoint, v.status)
        return self._endpoints[authority]

    def healthy_validators(self, authorities: Sequence[Pubkey]) -> list[Pubkey]:
        """Those of ``authorities`` that are Active validators of the market whose endpoint
        answers ``/health`` now (in order)."""
        from ..committee import endpoint_healthy

        self._endpoints.clear()  # statuses change: read afresh
        known = [(a, *self._validator(a)) for a in authorities]
        active = [(a, e) for a, e, status in known if e and status == "active"]
        if not active:
            return []
        with ThreadPoolExecutor(max_workers=min(8, len(active))) as pool:
            ok = list(pool.map(lambda ae: endpoint_healthy(ae[1], HEAD_DEADLINE_S), active))
        return [a for (a, _), good in zip(active, ok) if good]

    def default_committee(self, exclude: Sequence[Pubkey]) -> list[Pubkey]:
        return self.client.default_committee(self.market, size=3, exclude=list(exclude))

    def balance(self) -> int:
        from ..deployment import holding

        m = self.client.fetch_market(self.market)
        return holding(self.client, self.keypair.pubkey(), m.payment_mint)[1]

    def escrow(self, job: Pubkey) -> int:
        from .. import pda
        from ..errors import AccountNotFound

        try:
            return self.client.token_balance(pda.escrow_pda(job, self.client.program_id))
        except AccountNotFound:
            return 0

    # ------------------------------------------------------------------ chain writes

    def create_job(self, job_id: int, provider: Pubkey, gpus: int, deposit: int,
                   committee: Sequence[Pubkey], quorum: int, max_price: int,
                   workload_hash: bytes) -> str:  # fmt: skip
        sig, _ = self.client.create_job(self.keypair, self.market, provider, job_id, gpus,
                                        deposit, committee=list(committee), quorum=quorum,
                                        max_price_per_gpu_second=max_price,
                                        workload_hash=workload_hash)  # fmt: skip
        return str(sig)

    def cancel_job(self, job: Pubkey) -> str:
        return str(self.client.cancel_job(self.keypair, job))

    def finish_job(self, job: Pubkey) -> str:
        return str(self.client.finish_job(self.keypair, job))

    def close_job(self, job: Pubkey, view: Any) -> tuple[str, Any]:
        """Close ``job`` (``view``: its JobView, settlement over); ``(signature, receipt)``,
        the receipt also kept in the local job history."""
        from ..deployment import close_with_receipt

        closed = close_with_receipt(self.client, self.keypair, job, view)
        return str(closed.signature), closed.receipt

    def remember(self, job: Pubkey, job_id: int, created_at: int) -> None:
        """Keep a created attempt in the local job history (``gpum job list``, receipts)."""
        from ..job_history import HistoryError, JobHistory

        try:
            JobHistory().record_created(job, url=self.client.url, market=self.market,
                                        user=self.keypair.pubkey(), job_id=job_id,
                                        created_at=created_at)  # fmt: skip
        except HistoryError:
            pass  # the store keeps the attempt; only `gpum job list --all` misses it

    def latest_checkpoint(self, config: Mapping[str, Any], credentials: tuple[str, str]) -> int | None:
        """``created_at`` of the newest complete checkpoint in the user's store (None: none);
        ``CheckpointError`` when the store fails (its operations have their own deadline)."""
        from ..checkpoint import CheckpointStore, Credentials
        from ..checkpoint_spec import CheckpointConfig

        store = CheckpointStore(CheckpointConfig(**dict(config)), Credentials(*credentials),
                                deadline_s=CHECKPOINT_DEADLINE_S)  # fmt: skip
        try:
            latest = store.latest()
        finally:
            store.close()
        return None if latest is None else latest.created_at

    # ------------------------------------------------------------------ worker

    def deliver(self, endpoint: str, job: Pubkey, spec: Any) -> dict[str, Any]:
        from ..workload_api import deliver_workload

        return deliver_workload(endpoint, bytes(job), spec, bytes(self.keypair),
                                timeout=WORKER_TIMEOUT_S, retries=0)  # fmt: skip

    def workload_status(self, endpoint: str, job: Pubkey, workload_hash: bytes) -> dict[str, Any]:
        """The worker's status of ``job``'s workload (signed by the wallet), within
        ``WORKER_TIMEOUT_S`` in all and ``WORKER_STATUS_MAX_BYTES``; WorkerApiError otherwise."""
        import time

        from ..net import NetError
        from ..workload import sign_request
        from ..workload_api import WorkerApiError, normalize_endpoint

        base = normalize_endpoint(endpoint)
        headers = sign_request(bytes(self.keypair), "status", bytes(job), workload_hash,
                               int(time.time()))  # fmt: skip
        try:
            r = self.http.get(f"{base}/v1/jobs/{job}/workload", headers=headers,
                              deadline=WORKER_TIMEOUT_S, max_bytes=WORKER_STATUS_MAX_BYTES)  # fmt: skip
        except NetError as e:
            raise WorkerApiError(f"cannot reach the provider's worker at {base}: {e}",
                                 endpoint=base) from None  # fmt: skip
        body = r.json_object()
        if r.status != 200 or body is None:
            why = (body or {}).get("error") if body else None
            raise WorkerApiError(f"the provider's worker at {base} answered HTTP {r.status}"
                                 + (f": {why}" if why else ""), status=r.status, endpoint=base)  # fmt: skip
        return body

    # ------------------------------------------------------------------ committee

    def committee(self, job: Pubkey, members: Sequence[Pubkey]) -> CommitteeView:
        """Each member's newest proof of ``job`` (``GET /v1/jobs/<job>/head``, in parallel,
        each within ``HEAD_DEADLINE_S``); for a member whose newest is rejected, its newest
        accepted window from ``/v1/jobs/<job>/windows``."""
        if not members:
            return CommitteeView(errors=("the job has no committee",))
        with ThreadPoolExecutor(max_workers=min(8, len(members))) as pool:
            answers = list(pool.map(lambda a: self._member(job, a), members))
        heads = tuple(h for h, _, _ in answers if h is not None)
        accepted = [end for _, end, _ in answers if end is not None]
        errors = tuple(e for _, _, e in answers if e)
        answered = sum(1 for h, _, e in answers if h is not None or not e)
        return CommitteeView(heads, max(accepted, default=None), answered, errors)

    def _member(self, job: Pubkey, authority: Pubkey) -> tuple[Head | None, int | None, str]:
        """``(head, newest accepted window_end, error)`` of one member; a member that holds
        nothing of the job answered (no head, no window, no error)."""
        from ..net import NetError
        from ..proof import ProofFormatError, decode_proof

        try:
            endpoint, _ = self._validator(authority)
        except Exception as e:  # noqa: BLE001 - a failed read is this member's error
            return None, None, f"{authority}: {e}"
        if not endpoint:
            return None, None, f"{authority}: not a validator of this market"
        base = endpoint.rstrip("/")
        try:
            r = self.http.get(f"{base}/v1/jobs/{job}/head", deadline=HEAD_DEADLINE_S,
                              max_bytes=HEAD_MAX_BYTES)  # fmt: skip
        except NetError as e:
            return None, None, f"{authority} at {base}: {e}"
        if r.status == 404:
            return None, None, ""
        body = r.json_object()
        if r.status != 200 or body is None:
            return None, None, f"{authority} at {base}: HTTP {r.status}"
        try:
            p = decode_proof(base64.b64decode(str(body.get("proof", "")), validate=True))
        except (ValueError, ProofFormatError) as e:
            return None, None, f"{authority} at {base}: an undecodable head ({e})"
        if bytes(p.job) != bytes(job):
            return None, None, f"{authority} at {base}: a head of another job"
        decision = str(body.get("decision"))
        head = Head(str(authority), p.seq, p.window_end, decision, p.health_flags,
                    p.billable_seconds, p.workload.state, p.workload.exit_code)  # fmt: skip
        if decision == "accepted":
            return head, p.window_end, ""
        return head, self._newest_accepted(base, job), ""

    def _newest_accepted(self, base: str, job: Pubkey) -> int | None:
        from ..net import NetError

        try:
            r = self.http.get(f"{base}/v1/jobs/{job}/windows?limit=50", deadline=HEAD_DEADLINE_S,
                              max_bytes=WINDOWS_MAX_BYTES)  # fmt: skip
        except NetError:
            return None
        body = r.json_object() if r.status == 200 else None
        windows = body.get("windows") if body else None
        if not isinstance(windows, list):
            return None
        ends = [w.get("window_end") for w in windows
                if isinstance(w, dict) and w.get("decision") == "accepted"]  # fmt: skip
        return max((e for e in ends if isinstance(e, int)), default=None)
