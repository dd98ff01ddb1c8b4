"""Downtime by observation: ``slash_downtime`` when the worker stopped sending proofs.

Rule (docs/protocol.md, "Downtime and liveness"): a quorum of the committee attests that it
accepted no proof of a Running job for ``max_missed_windows`` windows, measured from proofs
seen, never from settlement lag. A Finishing job stays reportable for the windows it missed
before ``ended_at`` (the program counts them up to ``ended_at``), so a silent provider cannot
escape by finishing first.

``DowntimeReporter.report_pending`` runs on the settlement loop. For every job this
validator holds proofs of, on its committee and Running on chain (re-read every
``chain_refresh_seconds``):

1. ``last_proof_window_end`` = the ``window_end`` of the newest proof this validator accepted;
   the job is idle when ``now - max(that, chain last_window_end) >= max_missed_windows *
   window_seconds`` (the program's own rule). A worker that keeps sending proofs is never
   idle here, however late settlement is. The silence counts only from when this node has
   been up and reachable without a gap (``liveness.Liveness.observation_start``): a node
   that was down, or unreachable at its registered endpoint, reports nothing until it has
   itself watched ``max_missed_windows`` windows pass without a proof (the worker delivers
   its backlog to a returning validator in that time).
2. Leader: ``attest.leader_of(job, last_seq // settle_every, committee, timeouts)``, where
   ``timeouts`` counts the ``leader_timeout_windows`` since the job became idle (a moment
   every member computes alike from the proofs it saw). Only an Active validator reports
   (``Peers.active``; the program counts only Active members for downtime): a leader that is
   exiting does nothing (``not_active``) and the next member leads after the timeout.
3. Before it asks anyone, the leader asks every other member for the newest proof it holds
   (``GET /v1/jobs/<job>/head``, in parallel, each within the peer deadline). A proof newer
   than its own is handed to this node's own intake (``deliver``), which verifies it like
   any worker delivery: a worker that reached other members but not this one is not idle,
   and this node catches up. Forged or unverifiable heads change nothing.
   Exiting members are asked too (they still receive proofs): more evidence of a live worker
   only ever means fewer slashes.
4. The leader builds the ``slash_downtime`` message with the SDK
   (``client.slash_downtime_message(me, job, others, last_proof_window_end)``), asks each
   co-signer ``POST /v1/downtime/sign`` (a member signs only if it saw no later proof), and
   replaces a member that refuses or does not answer by the next one; co-signers are the
   other Active members only; with ``q - 1`` signatures it records ``sent`` and calls
   ``client.send_presigned(tx)``.
5. Success -> ``done`` (the job fails; its user's ``close_job`` refunds). The job no longer
   Running -> ``done`` (nothing to report). ``NotEnoughMissedWindows`` (the chain's clock is
   behind ours), transport errors -> ``retry`` with backoff; other errors up to
   ``max_chain_error_attempts`` times, then ``failed``. A report that is ``done`` or
   ``failed`` for (job, last_proof_window_end) is never resubmitted.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.transaction import Transaction

from .attest import leader_of, timeouts_elapsed
from .chain import chain_error_name, job_info, read
from .config import SettlePolicy
from .errors import ChainUnavailable
from .liveness import Liveness, watch_due
from .metrics import Metrics
from .peers import Peers
from .records import ChainJobInfo, JobRow, ReportKind, ReportStatus, Store
from .settle_policy import backoff, round_of

log = logging.getLogger("gpum_validator.downtime")

MAX_HEAD_BYTES = 512 * 1024
"""The most a member's ``/v1/jobs/<job>/head`` answer may hold (one proof, base64)."""
JOB_ENDED_ERRORS = frozenset({"InvalidJobStatus", "AccountNotInitialized"})
CLOCK_ERRORS = frozenset({"NotEnoughMissedWindows"})


def idle_since(row: JobRow, chain: ChainJobInfo) -> int:
    """When the job's newest known proof window ended: this validator's newest accepted
    window or the chain's last settled one, whichever is later."""
    return max(row.last_window_end, chain.last_window_end)


def assemble(message: Any, signatures: dict[bytes, bytes]) -> Transaction:
    """The transaction of ``message`` signed by every required signer (ValueError when one
    is missing or does not verify)."""
    signers = list(message.account_keys[:message.header.num_required_signatures])
    payload = bytes(message)
    ordered = []
    for key in signers:
        raw = signatures.get(bytes(key))
        if raw is None:
            raise ValueError(f"no signature from {key}")
        sig = Signature.from_bytes(raw)
        if not sig.verify(key, payload):
            raise ValueError(f"the signature of {key} does not verify")
        ordered.append(sig)
    return Transaction.populate(message, ordered)


def heard_elsewhere(peers: Peers, deliver: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]],
                    job: bytes, me: bytes, committee: Sequence[bytes], last_seq: int,
                    deadline: float | None = None) -> bool:
    """True when another member of ``committee`` holds an accepted proof of ``job`` newer
    than ``last_seq`` and ``deliver`` (this node's intake) accepts it: the worker was
    delivering, just not here. Heads are asked in parallel, each within the peer deadline
    (or ``deadline``, shorter); one that does not verify changes nothing."""
    others = [m for m in committee if m != me]
    if not others:
        return False
    path = f"/v1/jobs/{Pubkey.from_bytes(job)}/head"
    with ThreadPoolExecutor(len(others)) as pool:
        heads = list(pool.map(lambda m: peers.get(m, path, MAX_HEAD_BYTES, deadline), others))
    newer = sorted(((a.body["seq"], m, a.body) for m, a in zip(others, heads)
                    if a is not None and a.status == 200 and _is_int(a.body.get("seq"))
                    and a.body["seq"] > last_seq and a.body.get("decision") == "accepted"),
                   key=lambda x: x[0])
    for seq, member, head in newer:
        signed = {k: head.get(k) for k in ("proof", "proof_signature", "receipt_signature",
                                            "worker_key")}
        status, answer = deliver(signed)
        if status == 200:
            log.info("job=%s: member %s holds seq %d, which this node now accepted (%s): the "
                     "worker is not idle", Pubkey.from_bytes(job), Pubkey.from_bytes(member),
                     seq, answer.get("status"))
            return True
    return False


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class DowntimeReporter:
    """Reports providers whose worker stopped, as the leader of the job's committee."""

    def __init__(self, client: Any, authority: Any, store: Store, peers: Peers | None,
                 policy: SettlePolicy | None = None, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.time,
                 liveness: Liveness | None = None,
                 deliver: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]] | None = None
                 ) -> None:
        self.client = client
        self.deliver = deliver
        """The intake's ``submit``: proofs other members hold are verified through it."""
        self.authority = authority
        self.me = bytes(authority.pubkey())
        self.store = store
        self.peers = peers
        self.policy = policy or SettlePolicy()
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.liveness = liveness
        """This node's uptime; None: only this object's lifetime counts as observed."""
        self._started = clock()
        self._lock = threading.Lock()

    def observation_start(self, since: float) -> float | None:
        """From when this node watched the silence since ``since`` (None: not up now)."""
        if self.liveness is None:
            return max(since, self._started)
        return self.liveness.observation_start(since)

    def report_pending(self) -> list[str]:
        """One pass; returns the signatures of the slashes sent. Never raises for chain or
        peer trouble: it is recorded and retried on a later pass."""
        with self._lock:
            sent: list[str] = []
            for row in self.store.jobs():
                try:
                    sig = self._job(row)
                except ChainUnavailable as e:
                    log.warning("downtime check of job=%s postponed: %s",
                                Pubkey.from_bytes(row.job), e)
                    continue
                if sig is not None:
                    sent.append(sig)
            return sent

    def _chain(self, row: JobRow) -> ChainJobInfo | None:
        now = self.clock()
        if (row.chain is not None and row.chain.window_seconds > 0
                and now - row.chain_checked_at < self.policy.chain_refresh_seconds):
            return row.chain
        view = read("the job account",
                    lambda: self.client.fetch_job(Pubkey.from_bytes(row.job)))
        if view is None:
            return None
        info = job_info(view)
        self.store.update_chain_info(row.job, info, now)
        return info

    def _job(self, row: JobRow) -> str | None:
        if row.chain is not None and row.chain.status not in ("running", "open", "finishing"):
            return None  # ended on chain for good: never read again
        known = row.chain
        if (known is not None and known.status == "running" and known.window_seconds > 0
                and self.clock() < idle_since(row, known)
                + known.max_missed_windows * known.window_seconds):
            # Not idle by the stored facts: a fresh read only moves last_window_end later
            # (terms never change), so it cannot make the job idle sooner. No chain read.
            return None
        chain = self._chain(row)
        if (chain is None or chain.status not in ("running", "finishing")
                or self.me not in chain.committee):
            return None
        window = max(1, chain.window_seconds)
        now = self.clock()
        idle_from = idle_since(row, chain)
        watched_from = self.observation_start(idle_from)
        if watched_from is None:
            log.debug("downtime of job=%s: this node is not known to be up and reachable "
                      "now; not judging", Pubkey.from_bytes(row.job))
            return None
        due_at = watch_due(idle_from, watched_from, chain.max_missed_windows * window)
        if chain.status == "finishing" and due_at > chain.ended_at:
            # Silence after the finish is no downtime: only a silence this node watched for
            # the whole allowance before ``ended_at`` is reported.
            return None
        if now < due_at:
            if watched_from > idle_from and now >= idle_from + chain.max_missed_windows * window:
                self.metrics.downtime_report("not_observed")
                log.info("job=%s idle since %d, but this node watched only since %.0f; no "
                         "downtime report before %.0f", Pubkey.from_bytes(row.job), idle_from,
                         watched_from, due_at)
            return None
        lpwe = row.last_window_end
        report = self.store.downtime_report(row.job, lpwe)
        if report is not None and (report.status in ("done", "failed")
                                   or report.next_attempt_at > now):
            return None
        timeout = self.policy.leader_timeout_windows * window
        # The rotation runs from the moment every member computes alike (the job's idle
        # allowance ran out), not from this node's own observation start.
        k = timeouts_elapsed(idle_from + chain.max_missed_windows * window, now, timeout)
        committee = list(chain.committee)
        if leader_of(row.job, round_of(row.last_seq, self.policy), committee, k) != self.me:
            return None
        if self.peers is not None and not self.peers.active(self.me):
            self.metrics.downtime_report("not_active")
            log.info("downtime of job=%s: this validator is not Active (exiting): it reports "
                     "no downtime; the next member leads after the timeout",
                     Pubkey.from_bytes(row.job))
            return None
        if self._heard_elsewhere(row, chain):
            self.metrics.downtime_report("proof_elsewhere")
            return None
        return self._report(row, chain, lpwe, report.attempts if report else 0)

    def _report(self, row: JobRow, chain: ChainJobInfo, lpwe: int, attempts: int) -> str | None:
        job = Pubkey.from_bytes(row.job)
        need = max(1, chain.quorum) - 1
        candidates = [m for m in chain.committee if m != self.me
                      and (self.peers is None or self.peers.active(m))]
        try:
            signatures, chosen = self._cosign(row.job, lpwe, candidates, need)
        except Exception as e:  # noqa: BLE001 - building the message read the chain
            self._error(row, lpwe, e, attempts + 1, counted=False)
            return None
        if signatures is None:
            self.metrics.downtime_report("waiting")
            log.info("downtime of job=%s: fewer than %d members co-sign; waiting", job, need)
            return None
        message, sigs = signatures
        now = self.clock()
        self.store.mark_report(ReportKind.DOWNTIME, (row.job, lpwe), ReportStatus.SENT, now,
                               count_attempt=True)
        try:
            sigs[self.me] = bytes(self.authority.sign_message(bytes(message)))
            tx = assemble(message, sigs)
            result = self.client.send_presigned(tx)
        except Exception as e:  # noqa: BLE001 - classified below
            self._error(row, lpwe, e, attempts + 1)
            return None
        sig_s = str(result)
        self.store.mark_report(ReportKind.DOWNTIME, (row.job, lpwe), ReportStatus.DONE,
                               self.clock(), signature=sig_s, outcome="slashed")
        self.metrics.downtime_report("slashed")
        log.critical("DOWNTIME reported job=%s last_proof_window_end=%d with %s tx=%s", job,
                     lpwe, ", ".join(str(Pubkey.from_bytes(m)) for m in chosen), sig_s)
        return sig_s

    def _heard_elsewhere(self, row: JobRow, chain: ChainJobInfo) -> bool:
        if self.peers is None or self.deliver is None:
            return False
        return heard_elsewhere(self.peers, self.deliver, row.job, self.me, chain.committee,
                               row.last_seq)

    def _cosign(self, job: bytes, lpwe: int, candidates: Sequence[bytes],
                need: int) -> tuple[tuple[Any, dict[bytes, bytes]] | None, list[bytes]]:
        """A message naming ``need`` co-signers and their signatures over it, replacing a
        member that refuses by the next candidate; (None, []) when too few sign."""
        pool = list(candidates)
        chosen: list[bytes] = []
        refused: set[bytes] = set()
        while True:
            chosen = [m for m in pool if m not in refused][:need]
            if len(chosen) < need:
                return None, []
            message = self.client.slash_downtime_message(
                Pubkey.from_bytes(self.me), Pubkey.from_bytes(job),
                [Pubkey.from_bytes(m) for m in chosen], lpwe)
            sigs: dict[bytes, bytes] = {}
            for m in chosen:
                sig = self._ask(m, job, lpwe, bytes(message))
                if sig is None:
                    refused.add(m)
                    break
                sigs[m] = sig
            else:
                return (message, sigs), chosen

    def _ask(self, member: bytes, job: bytes, lpwe: int, message: bytes) -> bytes | None:
        if self.peers is None:
            return None
        a = self.peers.post(member, "/v1/downtime/sign", {
            "job": str(Pubkey.from_bytes(job)), "last_proof_window_end": lpwe,
            "message": base64.b64encode(message).decode()})
        if a is None or a.status != 200:
            log.info("member %s did not co-sign the downtime of job=%s: %s",
                     Pubkey.from_bytes(member), Pubkey.from_bytes(job),
                     None if a is None else a.body.get("error"))
            return None
        try:
            sig = base64.b64decode(a.body["signature"], validate=True)
        except (KeyError, TypeError, ValueError):
            return None
        if len(sig) != 64 or not Signature.from_bytes(sig).verify(Pubkey.from_bytes(member),
                                                                  message):
            log.warning("member %s answered a downtime signature that does not verify",
                        Pubkey.from_bytes(member))
            return None
        return sig

    def _error(self, row: JobRow, lpwe: int, exc: Exception, attempts: int,
               counted: bool = True) -> None:
        """Classify a failed attempt (``counted``: its ``sent`` mark already counted it)."""
        now = self.clock()
        count = not counted
        job = Pubkey.from_bytes(row.job)
        name = chain_error_name(exc)
        if name in JOB_ENDED_ERRORS:
            self.store.mark_report(ReportKind.DOWNTIME, (row.job, lpwe), ReportStatus.DONE, now,
                                   outcome="job_gone", error=name, count_attempt=count)
            self.metrics.downtime_report("job_gone")
            log.info("downtime of job=%s: %s, the job is no longer running; done", job, name)
            return
        transport = name is None and not isinstance(exc, ValueError)
        why = f"{name or type(exc).__name__}: {exc}"
        if not transport and name not in CLOCK_ERRORS \
                and attempts >= self.policy.max_chain_error_attempts:
            self.store.mark_report(ReportKind.DOWNTIME, (row.job, lpwe), ReportStatus.FAILED,
                                   now, outcome="failed", error=why, count_attempt=count)
            self.metrics.downtime_report("failed")
            log.error("downtime of job=%s: slash_downtime FAILED after %d attempts: %s", job,
                      attempts, why)
            return
        delay = backoff(self.policy, attempts)
        self.store.mark_report(ReportKind.DOWNTIME, (row.job, lpwe), ReportStatus.RETRY, now,
                               error=why, next_attempt_at=now + delay, count_attempt=count)
        self.metrics.downtime_report("retry")
        log.warning("downtime of job=%s not reported (%s); retry in %.0fs", job, why, delay)
