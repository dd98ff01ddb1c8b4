"""The worker loop: sample GPUs, follow jobs, close windows into signed proofs, deliver.

The threads share nothing but the sample buffer (locked) and wake-up events (the worker
API, ``api.py``, runs in threads of its own and shares the ``WorkloadManager``):

* sampler: reads every GPU once per sample interval, at the middle of each interval
  (``k * interval + interval / 2``), so jitter below half an interval never moves a sample
  into the wrong one-second slot, and notes the GPU processes of workload jobs, which are
  attributed to their containers in threads of their own (``workload_windows``);
* main: polls the ``JobSource`` (chain reads), reconciles the jobs' workload containers
  (``workloads.WorkloadManager``) and starts proving accepted jobs;
* prover: closes due windows (``Agent.close_windows``) and records each signed proof in the
  outbox before anything is sent, on an outbox connection of its own. It never calls the
  chain or the container runtime: a window's proof uses what is known when it closes (GPU
  samples, observed container states, process attributions, in memory), so a slow RPC node
  or a hung runtime never delays or skips a proof;
* delivery: one lane (thread) per destination delivers its outbox rows
  (``sender.DeliveryLanes``), so a slow or dead validator delays only itself;
* background checks (``background.Background``): asking a job's committee where its
  proofs stand, and checking an Open job's committee and accepting or declining it, run in
  a thread per job, never on the main loop.

Each poll also refreshes every job's route (``committee.CommitteeRouter``): the endpoints of
its committee members read from chain, stored in the outbox as the job's destinations, for
the jobs listed, proven, or still holding undelivered proofs. A static ``--validator`` list
overrides this for every job.

Windows of a job are contiguous: each starts at the previous one's end and lasts the job's
``terms.window_seconds`` (for a ``--job`` job without terms: the length stored at its first
proof). Windows the worker did not observe (it was down) are still proven, with 0 samples
and 0 billable seconds, so seq has no gaps and every second of the job is accounted for. A
Finishing job's last window ends at its ``ended_at``. Billing health thresholds
(``temp_critical_c``, ``ecc_uncorrected_max``) are the job's terms too.

Guarantees of the main loop:

* Never signs a (job, seq) it cannot prove it has not signed before. A job is proven from
  the outbox's chain state only when that state is at least as far as the chain's
  ``last_seq`` and every head a validator answered; otherwise (no local state: lost disk,
  new key with a fresh database; or a stale one: a restored backup) it resumes after what
  the validators and the chain hold (``heads.resume_point``), and signs nothing for the job
  until *every* member of the job's committee answered (it keeps sampling and retries each
  poll). The one exception is a job this database accepted (``Outbox.accepted_here``,
  recorded once ``accept_job`` landed) with nothing settled and no head anywhere: nothing was
  ever signed for it, so a committee member that is down cannot keep it from starting.
* A job keeps its GPUs until its source shows it ended (a terminal status, the tombstone
  of the user's ``close_job``, or an account missing for ``ABSENT_CONFIRMATIONS`` polls); a job missing from one listing, or
  a failing source, changes nothing. The same holds for its workload container: only a job
  that left Running (Finishing, or ended by that rule) loses it; a failing source
  reconciles nothing.
* An Open job is accepted only when it can be served: GPUs free here and, for a job with a
  workload, its spec delivered and a container runtime present
  (``WorkloadManager.acceptance_blocker``).
* Every proof carries the window's workload state (``WorkloadWindow``: none for a job
  without a workload). A window whose workload FAILED to start, or in which a GPU compute
  process outside the job's container ran on the job's GPUs (``HEALTH_FOREIGN_PROCESS``),
  claims 0 billable seconds. A window without any workload process is billable otherwise:
  the GPUs stay reserved for the user (``finish_on_exit`` ends the job when it exits).
  A GPU process the runtime did not attribute in time (it hangs or fails) is counted as
  neither the job's nor foreign; such a window bills only when the container was seen
  running throughout it, else 0 seconds, never flagged foreign (``workload_windows``).
* A Finishing job is completed on chain by the worker once its grace is over by the chain's
  clock (``completion.Completer``), never before, so its GPUs are freed without the user.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gpu_market.proof import (
    HEALTH_FOREIGN_PROCESS,
    WORKLOAD_FAILED,
    WORKLOAD_RUNNING,
    WindowProof,
    encode_proof,
    process_list_hash,
    proof_hash,
    receipt_for_proof,
    sign_proof,
)
from gpu_market.receipt import sign_receipt

from .background import Background, Pending
from .committee import ACCEPT, CommitteeGate, CommitteeRouter, Verdict
from .completion import Completer
from .errors import JobSourceError, WorkerError
from .gpu import GpuBackend, GpuInfo, GpuSample, discover, read_sample
from .heads import Head, HeadsIncomplete, HeadSource, HeadsPending, resume_point
from .health import DEFAULT_THRESHOLDS, Thresholds, describe, sample_flags
from .jobs import LIVE_STATUSES, TERMINAL_STATUSES, AssignedJob, JobSource, assign_gpus
from .keys import WorkerKey, b58encode
from .outbox import JobChain, Outbox
from .sender import DeliveryLanes, HttpPoster, RetryPolicy
from .window import aggregate_gpu, billable_seconds
from .workload_store import WorkloadStore
from .workloads import WorkloadManager

log = logging.getLogger("gpum_worker.agent")

MAX_CATCH_UP_PER_ROUND = 1000
ABSENT_CONFIRMATIONS = 3
MIN_POLL_INTERVAL_S = 1.0
"""Polls made early (a subscription, the worker API or a background check asked) are at
least this far apart, so nobody can make the worker read the chain faster."""
"""Polls in a row that must find a job's account gone before its GPUs are released."""


class SampleBuffer:
    """Thread-safe recent samples per GPU uuid, with the ECC reading before the oldest kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: dict[str, deque[GpuSample]] = {}
        self._ecc_before: dict[str, int] = {}

    def add(self, s: GpuSample) -> None:
        with self._lock:
            self._samples.setdefault(s.uuid, deque()).append(s)

    def window(self, uuid: str, start: float, end: float) -> tuple[list[GpuSample], int | None]:
        """Samples with start <= t < end, and the last ECC total read before ``start``."""
        with self._lock:
            dq = self._samples.get(uuid, ())
            inside = [s for s in dq if start <= s.t < end]
            base = self._ecc_before.get(uuid)
            for s in dq:
                if s.t >= start:
                    break
                if s.ok and s.ecc_uncorrected_total is not None:
                    base = s.ecc_uncorrected_total
            return inside, base

    def prune(self, before: float) -> None:
        with self._lock:
            for uuid, dq in self._samples.items():
                while dq and dq[0].t < before:
                    s = dq.popleft()
                    if s.ok and s.ecc_uncorrected_total is not None:
                        self._ecc_before[uuid] = s.ecc_uncorrected_total

    def __len__(self) -> int:
        with self._lock:
            return sum(len(d) for d in self._samples.values())


@dataclass
class ActiveJob:
    job: AssignedJob
    uuids: tuple[str, ...]
    chain: JobChain
    done: bool = False


@dataclass
class _GpuLogState:
    lost: bool = False
    flags: int = 0
    unsupported: frozenset[str] = frozenset()
    error_logged_at: dict[str, float] = field(default_factory=dict)


class Agent:
    """Pure-ish core of the worker; every step takes ``now`` so tests drive time."""

    def __init__(
        self,
        *,
        backend: GpuBackend,
        job_source: JobSource,
        outbox: Outbox,
        key: WorkerKey,
        window_seconds: int = 60,
        sample_interval_ms: int = 1000,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
        poll_seconds: float = 10.0,
        close_grace_s: float | None = None,
        heads: HeadSource,
        router: CommitteeRouter | None = None,
        workloads: WorkloadManager | None = None,
        workload_thread: bool = False,
        background_checks: bool = False,
        committee_gate: CommitteeGate | None = None,
    ) -> None:
        """``workloads`` runs the jobs' containers; without one (tests, old callers) the
        agent has no container runtime: it accepts no job with a workload. With
        ``workload_thread`` (``gpum-worker run``) each poll's container reconcile runs in a
        thread of its own, one at a time, so a slow container runtime never delays closing
        windows (a late window can get an honest provider slashed for downtime). With
        ``background_checks`` (``gpum-worker run``) a job's head check and the acceptance
        of an Open job (committee check, ``accept_job`` / ``decline_job``) run in threads
        of their own (``background.Background``): the job waits for them alone.
        ``committee_gate`` is the provider's committee policy; None accepts any committee
        (tests, static validator lists)."""
        if window_seconds < 1:
            raise WorkerError("window_seconds must be at least 1")
        self.backend = backend
        self.job_source = job_source
        self.outbox = outbox
        self.key = key
        self.window_seconds = window_seconds
        self.sample_interval_ms = sample_interval_ms
        self.thresholds = thresholds
        self.poll_seconds = poll_seconds
        iv = sample_interval_ms / 1000
        # A window closes once its last sample (taken at end - iv/2) had time to arrive.
        self.close_grace_s = close_grace_s if close_grace_s is not None else min(0.4, iv / 2)
        self.buffer = SampleBuffer()
        self.gpus: list[GpuInfo] = []
        self.heads = heads
        self.router = router if router is not None else CommitteeRouter(outbox.validators)
        self.workloads = workloads if workloads is not None else WorkloadManager(
            None, WorkloadStore(":memory:"), key.seed)
        self.workload_thread = workload_thread
        self.head_asks = Background(self.poke, "head check") if background_checks else None
        self.acceptance = Background(self.poke, "acceptance") if background_checks else None
        self.committee_gate = committee_gate
        self.completer = Completer(job_source, Background(self.poke, "completion")
                                   if background_checks else None)
        self._open_since: dict[bytes, float] = {}  # open job -> first seen (poll time)
        self._accepted_unrecorded: set[bytes] = set()
        """Jobs a background check accepted on chain, not yet ``Outbox.mark_accepted``."""
        self._accepted_lock = threading.Lock()
        self._reconciling: threading.Thread | None = None
        self.active: dict[bytes, ActiveJob] = {}
        self._active_lock = threading.RLock()
        """Held while windows are closed and while a job enters or leaves ``active``."""
        self._absent: dict[bytes, int] = {}  # job -> polls in a row its account was gone
        self._missing_noted: set[bytes] = set()  # live jobs missing from the listing (logged)
        self._waiting: dict[bytes, str] = {}  # job -> why it is not proven yet (logged once)
        self._gpu_log: dict[str, _GpuLogState] = {}
        self.on_record: Callable[[], None] = lambda: None
        self._main_done = threading.Event()
        self._poke = threading.Event()  # poll early (a workload spec was delivered)

    def poke(self) -> None:
        """Poll the jobs at the next turn of the main loop (about a second at most), e.g.
        because a subscription saw one of this provider's jobs change."""
        self._poke.set()

    # ------------------------------------------------------------------ GPUs

    def start(self) -> None:
        """Initialise the backend and discover GPUs; raises NvmlUnavailable/WorkerError."""
        self.backend.init()
        self.gpus = discover(self.backend)
        if not self.gpus:
            raise WorkerError(f"the {self.backend.kind} backend reports no usable GPU")
        for g in self.gpus:
            log.info("GPU %d: %s %s", g.index, g.name, g.uuid)

    def sample_tick(self, now: float) -> list[GpuSample]:
        """Read every GPU once at ``now``; failures are logged and never stop other GPUs.
        The GPU processes of workload jobs are handed on for attribution."""
        out = []
        for g in self.gpus:
            s = read_sample(self.backend, g, now)
            self.buffer.add(s)
            self._log_sample(g, s)
            out.append(s)
        self._observe_workloads(out, now)
        return out

    def _log_sample(self, g: GpuInfo, s: GpuSample) -> None:
        st = self._gpu_log.setdefault(g.uuid, _GpuLogState())
        if not s.ok:
            if not st.lost:
                log.error("GPU %d (%s) LOST: %s. Its time is not billable; the other GPUs "
                          "continue", g.index, g.uuid, s.lost_reason)
            st.lost = True
            return
        if st.lost:
            log.warning("GPU %d (%s) is readable again", g.index, g.uuid)
            st.lost = False
        new_unsupported = s.unsupported - st.unsupported
        if new_unsupported:
            log.info("GPU %d: not supported, recorded as absent: %s", g.index,
                     ", ".join(sorted(new_unsupported)))
            st.unsupported = st.unsupported | new_unsupported
        for metric, msg in s.errors:
            last = st.error_logged_at.get(metric)
            if last is None or s.t - last >= 60:
                log.warning("NVML call failed (%s); metric recorded as absent", msg)
                st.error_logged_at[metric] = s.t
        f = sample_flags(s, self.thresholds)
        raised = f & ~st.flags & ~0x80  # NVML errors are logged above
        if raised:
            th = self.thresholds
            log.warning("GPU %d health: %s (temp %s C, warn %d / critical %d; fan %s%%; "
                        "power %s / limit %s mW)", g.index, describe(raised), s.temp_c,
                        th.temp_warn_c, th.temp_critical_c, s.fan_pct, s.power_mw,
                        s.power_limit_mw)
        st.flags = f

    # ------------------------------------------------------------------ jobs

    def poll_jobs(self, now: float) -> None:
        """Refresh the job list; a failing or incomplete source keeps the current jobs."""
        with self._accepted_lock:
            accepted, self._accepted_unrecorded = self._accepted_unrecorded, set()
        for job_key in accepted:
            self.outbox.mark_accepted(job_key)
        try:
            listed = {j.job: j for j in self.job_source.assigned_jobs()
                      if j.status in LIVE_STATUSES}
        except JobSourceError as e:
            log.warning("job source failed, keeping current jobs: %s", e)
            return
        if self.router.discovering:
            self._refresh_routes(listed)
        stored = self.outbox.assignments()
        for job_key in listed:
            self._absent.pop(job_key, None)
            self._missing_noted.discard(job_key)
        held: set[bytes] = set()  # booked, not listed, not known to have ended
        for job_key in (set(self.active) | set(stored)) - set(listed):
            ended = self._ended(job_key)
            if ended is not None:
                self._drop(job_key, ended)
                stored.pop(job_key, None)
            elif job_key in self.active:  # keep proving it from the last view we had
                listed[job_key] = self.active[job_key].job
            else:
                held.add(job_key)
        jobs = list(listed.values())
        assignment, starved = assign_gpus(jobs, [g.uuid for g in self.gpus], stored)
        for j in starved:
            free = len(self.gpus) - len({u for us in stored.values() for u in us}
                                        | {u for us in assignment.values() for u in us})
            self._wait(j, f"needs {j.gpu_count} GPU(s) but only {free} are free here; not "
                          "taking it", logging.ERROR)
        for j in jobs:
            uuids = assignment.get(j.job)
            if uuids is None:
                continue
            if j.job not in stored:
                self.outbox.set_assignment(j.job, uuids)
                log.info("job %s: assigned GPU(s) %s", j.job_b58, ", ".join(uuids))
            if j.status == "open":
                blocker = self.workloads.acceptance_blocker(j)
                if blocker is not None:
                    self._wait(j, blocker)
                    continue
                self._take_open(j, now)
                continue
            if j.started_at is None:
                self._wait(j, f"is {j.status} but has no started_at; waiting")
                continue
            cur = self.active.get(j.job)
            if cur is not None:
                cur.job = j
                continue
            chain = self._chain_to_extend(j)
            if chain is None:
                continue
            missing = [u for u in uuids if u not in {g.uuid for g in self.gpus}]
            if missing:
                log.error("job %s: assigned GPU(s) %s are not present on this machine; their "
                          "windows are not billable", j.job_b58, ", ".join(missing))
            with self._active_lock:
                self.active[j.job] = ActiveJob(job=j, uuids=tuple(uuids), chain=chain)
            self._waiting.pop(j.job, None)
            log.info("job %s: proving from seq %d, window start %d", j.job_b58,
                     chain.last_seq + 1, chain.last_window_end)
        self._reconcile_workloads(listed, assignment, held, now)
        self.completer.poll(listed.values(), now)

    def _reconcile_workloads(self, listed: dict[bytes, AssignedJob],
                             assignment: dict[bytes, tuple[str, ...]], held: set[bytes],
                             now: float) -> None:
        """Containers follow this poll's jobs; a runtime failure never stops the loop."""
        jobs = {k: (j, tuple(assignment.get(k, ()))) for k, j in listed.items()}

        def reconcile() -> None:
            try:
                self.workloads.reconcile(jobs, held=held, finish=self.job_source.finish,
                                         now=now)
            except Exception:
                log.exception("reconciling workload containers failed; retrying next poll")

        if not self.workload_thread:
            reconcile()
            return
        if self._reconciling is not None and self._reconciling.is_alive():
            return  # the previous poll's reconcile still runs: this poll's jobs come next time
        self._reconciling = threading.Thread(target=reconcile, name="workloads", daemon=True)
        self._reconciling.start()

    def _take_open(self, j: AssignedJob, now: float) -> None:
        """Accept an Open job whose committee meets the policy (``committee_gate``), or
        decline it: at once when the chain shows it never will, after the policy's
        ``health_grace_s`` when members stay silent. With ``background_checks`` the
        committee check and the transaction run off the main loop."""
        gate = self.committee_gate
        since = self._open_since.setdefault(j.job, now)
        give_up = gate is not None and now - since >= gate.policy.health_grace_s

        def decide() -> tuple[Verdict, bool]:
            verdict = gate.check(j) if gate is not None else ACCEPT
            if verdict.accept:
                self.job_source.accept(j)
                with self._accepted_lock:  # recorded by the next poll, whatever it lists
                    self._accepted_unrecorded.add(j.job)
                log.info("job %s accepted", j.job_b58)
                return verdict, False
            if verdict.final or give_up:
                self.job_source.decline(j)
                log.warning("job %s DECLINED: its committee does not meet this provider's "
                            "policy (%s)", j.job_b58, verdict.reason)
                return verdict, True
            return verdict, False

        try:
            if self.acceptance is None:
                verdict, declined = decide()
            else:
                verdict, declined = self.acceptance.result(j.job, "open", decide)
        except Pending:
            self._wait(j, "is open: checking its committee and accepting it in the background",
                       logging.INFO)
            return
        except JobSourceError as e:
            log.warning("cannot accept job %s yet: %s", j.job_b58, e)
            return
        if verdict.accept:
            self._open_since.pop(j.job, None)
            self.outbox.mark_accepted(j.job)
        elif declined:
            self._open_since.pop(j.job, None)
        else:
            self._wait(j, f"is not accepted yet: {verdict.reason}; it is declined if this "
                          f"lasts {gate.policy.health_grace_s if gate else 0:.0f} s")

    def _refresh_routes(self, listed: dict[bytes, AssignedJob]) -> None:
        """Routes of listed jobs, and of proven or undelivered ones read directly."""
        jobs = dict(listed)
        for key in sorted((set(self.active) | set(self.outbox.jobs_with_proofs()))
                          - set(listed)):
            try:
                j = self.job_source.fetch(key)
            except JobSourceError as e:
                log.warning("job %s: cannot read its committee (%s); delivery keeps its last "
                            "route", b58encode(key), e)
                continue
            if j is not None:  # a closed job's proofs keep the route stored last
                jobs[key] = j
        self.router.refresh(self.job_source, jobs.values(), self.outbox)

    def _ended(self, job_key: bytes) -> str | None:
        """The job's terminal status when the source shows it ended (see the module
        docstring; "closed" for an account gone ``ABSENT_CONFIRMATIONS`` polls), else None."""
        try:
            status = self.job_source.job_status(job_key)
        except JobSourceError as e:
            log.warning("job %s is not listed and its status cannot be read (%s); keeping "
                        "its GPUs", b58encode(job_key), e)
            return None
        if status in TERMINAL_STATUSES:
            log.info("job %s is %s; releasing its GPUs", b58encode(job_key), status)
            return status
        if status is None:
            n = self._absent[job_key] = self._absent.get(job_key, 0) + 1
            if n >= ABSENT_CONFIRMATIONS:
                log.info("job %s: account closed (%d polls in a row); releasing its GPUs",
                         b58encode(job_key), n)
                return "closed"
            log.warning("job %s: account not found (%d/%d); keeping its GPUs until that is "
                        "confirmed", b58encode(job_key), n, ABSENT_CONFIRMATIONS)
            return None
        self._absent.pop(job_key, None)
        if job_key not in self._missing_noted:
            self._missing_noted.add(job_key)
            log.warning("job %s is %s on chain but missing from the job list; keeping its "
                        "GPUs%s", b58encode(job_key), status,
                        " and proving it" if job_key in self.active else "")
        return None

    def _drop(self, job_key: bytes, status: str = "removed") -> None:
        view = None
        if status == "completed" and self.workloads.has_record(job_key):
            try:  # a dry escrow tells the user why the job ended
                view = self.job_source.fetch(job_key)
            except JobSourceError:
                view = None
        with self._active_lock:
            was = self.active.pop(job_key, None)
        self._absent.pop(job_key, None)
        self._missing_noted.discard(job_key)
        self._waiting.pop(job_key, None)
        self._open_since.pop(job_key, None)
        for bg in (self.head_asks, self.acceptance):
            if bg is not None:
                bg.forget(job_key)
        self.outbox.release(job_key)
        self.workloads.job_ended(job_key, status, view or (was.job if was else None))

    def _wait(self, j: AssignedJob, why: str, level: int = logging.WARNING) -> None:
        """Log once per reason that job ``j`` is not proven yet."""
        if self._waiting.get(j.job) != why:
            self._waiting[j.job] = why
            log.log(level, "job %s %s", j.job_b58, why)

    def _window_seconds(self, job: AssignedJob, chain: JobChain | None = None) -> int:
        if job.terms is not None:
            return job.terms.window_seconds
        return chain.window_seconds if chain is not None else self.window_seconds

    def _thresholds(self, job: AssignedJob) -> Thresholds:
        """Billing thresholds from the job's terms; warning levels from the configuration."""
        t = job.terms
        if t is None:
            return self.thresholds
        return replace(self.thresholds, temp_critical_c=t.temp_critical_c,
                       temp_warn_c=min(self.thresholds.temp_warn_c, t.temp_critical_c),
                       ecc_uncorrected_max=t.ecc_uncorrected_max)

    def _chain_to_extend(self, j: AssignedJob) -> JobChain | None:
        """The chain state the next proof of ``j`` extends, or None: do not sign yet.

        The local state is used only if neither the chain nor any committee member that
        answered holds a higher seq. Otherwise every member of the job's committee must
        answer, and the job resumes after the highest seq anyone holds
        (``heads.resume_point``).
        """
        assert j.started_at is not None
        local = self.outbox.job_chain(j.job)
        heads: list[Head] | None
        partial: list[Head] = []
        try:
            route = self.router.route(j.job)
            if route is None:
                raise HeadsIncomplete(["the committee's endpoints are not known yet"])
            heads = self._heads_of(j, route.destinations)
            if route.problems:  # a member that cannot be asked may hold more
                partial, heads = heads, None
                raise HeadsIncomplete(route.problems)
            problem = ""
        except HeadsPending:
            self._wait(j, "waits for its committee to say where its proofs stand (asked in "
                          "the background)", logging.INFO)
            return None
        except HeadsIncomplete as e:
            heads, problem = None, str(e)
        if (local is None and j.last_seq == 0 and self.outbox.accepted_here(j.job)
                and not any(h.proof.seq for h in heads or partial)):
            # This database accepted the job and holds no proof of it: nothing was ever
            # signed for it, so no member can hold more; a member that is down (or does not
            # answer) cannot keep a new job from starting.
            return self.outbox.ensure_job(j.job, j.started_at, self._window_seconds(j))
        if local is None:
            why = "has no local chain state (a new job, or a lost or new database)"
        else:
            ahead = max((h.proof.seq for h in heads or partial), default=0)
            if j.last_seq <= local.last_seq and ahead <= local.last_seq:
                if j.terms is None and local.window_seconds != self.window_seconds:
                    log.warning("job %s keeps its window length of %ds (configured: %ds)",
                                j.job_b58, local.window_seconds, self.window_seconds)
                return local
            why = (f"is behind in this outbox (last seq {local.last_seq}; chain {j.last_seq}, "
                   f"validators {ahead}): a restored backup, or another worker with this key?")
        if heads is None:
            self._wait(j, f"{why}; not every committee member told where its proofs stand "
                          f"({problem}); signing nothing for it until they do",
                       logging.WARNING if local is None else logging.ERROR)
            return None
        if local is not None:
            log.error("job %s %s Resuming after the highest seq held elsewhere", j.job_b58, why)
        point = resume_point(started_at=j.started_at, chain_last_seq=j.last_seq,
                             chain_last_window_end=j.last_window_end,
                             chain_claimed_seconds=j.claimed_seconds, heads=heads)
        chain = self.outbox.resume_job(j.job, j.started_at, self._window_seconds(j), point)
        if point.last_seq:
            log.warning("job %s: resumed from the validators (%d head(s)) and the chain: last "
                        "seq %d, cumulative %ds, next window from %d", j.job_b58, len(heads),
                        chain.last_seq, chain.cumulative, chain.last_window_end)
        return chain

    def _heads_of(self, j: AssignedJob, destinations: tuple[str, ...]) -> list[Head]:
        """The verified heads of ``j``'s committee; ``HeadsIncomplete`` unless every member
        answered; with ``background_checks``, ``HeadsPending`` until the background ask
        ends."""

        def ask() -> list[Head]:
            try:
                keys = self.job_source.worker_keys() | {self.key.pubkey}
            except JobSourceError as e:
                raise HeadsIncomplete([str(e)]) from None
            return self.heads.heads(j.job, j.provider, keys, destinations)

        if self.head_asks is None:
            return ask()
        try:
            return self.head_asks.result(j.job, destinations, ask)
        except Pending:
            raise HeadsPending(
                ["the committee is being asked where the job's proofs stand"]) from None

    # ------------------------------------------------------------------ windows

    def next_close_at(self) -> float | None:
        """When the earliest open window of any job can be closed."""
        ends = [self._next_end(a) for a in self.active.values() if not a.done]
        ends = [e for e in ends if e is not None]
        return min(ends) + self.close_grace_s if ends else None

    def _next_end(self, a: ActiveJob) -> int | None:
        start = a.chain.last_window_end
        end = start + self._window_seconds(a.job, a.chain)
        if a.job.ended_at is not None:
            end = min(end, a.job.ended_at)
        return end if end > start else None

    def close_windows(self, now: float, outbox: Outbox | None = None) -> list[WindowProof]:
        """Prove every window that ended at least ``close_grace_s`` before ``now``, recording
        through ``outbox`` (the calling thread's connection; default: ``self.outbox``)."""
        recorded: list[WindowProof] = []
        with self._active_lock:
            for a in list(self.active.values()):
                for _ in range(MAX_CATCH_UP_PER_ROUND):
                    end = self._next_end(a)
                    if end is None:
                        if not a.done:
                            log.info("job %s: final window proven (ended_at %s)",
                                     a.job.job_b58, a.job.ended_at)
                        a.done = True
                        break
                    if end + self.close_grace_s > now:
                        break
                    recorded.append(self._prove(a, a.chain.last_window_end, end,
                                                outbox or self.outbox))
            starts = [a.chain.last_window_end for a in self.active.values() if not a.done]
        if recorded:
            self.on_record()
        self.buffer.prune(min(starts) - 1 if starts else now - 5)
        return recorded

    def _observe_workloads(self, samples: list[GpuSample], now: float) -> None:
        """Hand the GPU processes of workload jobs in ``samples`` to their attribution
        (``WorkloadWindows.observe_processes``; it never blocks once ``run`` started)."""
        by_uuid = {s.uuid: s for s in samples if s.ok and s.processes}
        for a in list(self.active.values()):
            if a.done or not a.job.has_workload:
                continue
            pids = {pid for uuid in a.uuids if uuid in by_uuid
                    for pid, _ in by_uuid[uuid].processes}  # type: ignore[union-attr]
            if pids:
                try:
                    self.workloads.observe_processes(a.job, pids, now)
                except Exception:
                    log.exception("job %s: attributing GPU processes failed", a.job.job_b58)

    def _prove(self, a: ActiveJob, start: int, end: int, outbox: Outbox) -> WindowProof:
        results = []
        procs: list[tuple[str, int, int | None]] = []
        th = self._thresholds(a.job)
        for uuid in a.uuids:
            samples, ecc_base = self.buffer.window(uuid, start, end)
            results.append(aggregate_gpu(uuid, samples, start, end, th, ecc_base))
            for s in samples:
                if s.ok and s.processes:
                    procs.extend((uuid, pid, used) for pid, used in s.processes)
        billable = billable_seconds(end - start, results)
        flags = 0
        for r in results:
            flags |= r.window.health_flags
        account = self.workloads.window_account(a.job, start, end, {p for _, p, _ in procs})
        workload = account.workload
        if account.unattributed:  # the runtime did not answer in time (see the docstring)
            running = workload.state == WORKLOAD_RUNNING
            if not running:
                billable = 0
            log.warning("job %s [%d, %d): %d GPU process(es) not attributed: the container "
                        "runtime did not answer in time; counted neither as the job's nor as "
                        "foreign; the window %s", a.job.job_b58, start, end,
                        account.unattributed,
                        "bills as the container was seen running" if running else
                        "is not billable: the container was not seen running throughout it")
        if workload.foreign_processes:
            flags |= HEALTH_FOREIGN_PROCESS
            billable = 0
            log.error("job %s [%d, %d): %d GPU compute process(es) outside the job's container "
                      "ran on its GPUs; the window is not billable", a.job.job_b58, start, end,
                      workload.foreign_processes)
        if workload.state == WORKLOAD_FAILED or not self.workloads.has_run(a.job, end):
            billable = 0  # the user's container never ran by the window's end
        c = a.chain
        proof = WindowProof(
            program_id=a.job.program_id, market=a.job.market, job=a.job.job,
            provider=a.job.provider, worker_key=self.key.pubkey, seq=c.last_seq + 1,
            window_start=start, window_end=end, sample_interval_ms=self.sample_interval_ms,
            gpus=tuple(r.window for r in results), process_list_hash=process_list_hash(procs),
            prev_proof_hash=c.last_hash, health_flags=flags, billable_seconds=billable,
            cumulative_seconds=c.cumulative + billable, workload=workload,
        )
        data = encode_proof(proof)
        h = proof_hash(data)
        psig = sign_proof(self.key.private_key, data)
        rsig = sign_receipt(self.key.private_key, receipt_for_proof(proof, data))
        a.chain = outbox.record(proof, data, h, psig, rsig)
        level = logging.INFO if billable == end - start else logging.WARNING
        log.log(level, "job %s seq %d [%d, %d): billable %ds of %ds, cumulative %ds, health %s%s",
                a.job.job_b58, proof.seq, start, end, billable, end - start,
                proof.cumulative_seconds, describe(flags),
                f", workload {workload.state_name}" if a.job.has_workload else "")
        return proof

    # ------------------------------------------------------------------ threads

    def run(self, *, validators_client: Callable[[], HttpPoster], policy: RetryPolicy,
            outbox_factory: Callable[[], Outbox], stop: threading.Event,
            run_seconds: float | None = None) -> None:
        """Run sampler, delivery lanes and the main loop until ``stop`` is set (or
        ``run_seconds``). ``validators_client`` makes one bounded HTTP client per
        destination (``gpu_market.net.BoundedClient``)."""
        deadline = None if run_seconds is None else time.time() + run_seconds
        wake = threading.Event()
        self.on_record = wake.set
        self.workloads.on_delivered = self._poke.set
        self.workloads.attribute_in_background()
        if self.outbox.rotated_from is not None:
            log.warning("worker key changed from %s to %s (rotate_worker_key): new windows are "
                        "signed by the new key; %d pending proof(s) signed by the old key are "
                        "still delivered as signed", b58encode(self.outbox.rotated_from),
                        self.key.pubkey_b58,
                        self.outbox.pending_by_key().get(self.outbox.rotated_from, 0))
        for v in self.outbox.sync_validators():
            log.warning("validator %s is no longer a destination; its undelivered proofs are "
                        "dropped for it", v)
        counts = self.outbox.counts()
        if counts["proofs"]:
            log.info("outbox holds %d proof(s) to deliver (%s)", counts["proofs"], counts)

        lanes = DeliveryLanes(outbox_factory, validators_client, policy)
        threads = [
            threading.Thread(target=self._sampler_loop, args=(stop,), name="sampler",
                             daemon=True),
            threading.Thread(target=lanes.run, args=(stop, wake, self._main_done),
                             name="sender", daemon=True),
        ]
        prover = threading.Thread(target=self._prover_loop, args=(stop, outbox_factory),
                                  name="prover", daemon=True)
        for t in threads:
            t.start()
        prover.start()
        try:
            next_poll, last_poll = 0.0, -MIN_POLL_INTERVAL_S
            while not stop.is_set():
                now = time.time()
                if deadline is not None and now >= deadline:
                    break
                if self._poke.is_set():  # at most one early poll per MIN_POLL_INTERVAL_S
                    self._poke.clear()
                    next_poll = min(next_poll, last_poll + MIN_POLL_INTERVAL_S)
                if now >= next_poll:
                    self.poll_jobs(now)
                    last_poll, next_poll = now, now + self.poll_seconds
                wait_until = min(x for x in (next_poll, deadline, now + 1.0) if x is not None)
                soon = next_poll <= last_poll + MIN_POLL_INTERVAL_S  # a poke changes nothing
                (stop if soon else self._poke).wait(max(0.01, wait_until - time.time()))
        finally:
            stop.set()
            prover.join(timeout=30)  # the last windows are recorded before the last sends
            self._main_done.set()
            wake.set()
            for t in threads:
                t.join(timeout=policy.timeout_s + 10)
            self.backend.shutdown()

    def _prover_loop(self, stop: threading.Event, outbox_factory: Callable[[], Outbox]) -> None:
        """Close windows as they end, on a thread and an outbox connection of its own: no
        chain read, container runtime or validator ever delays a proof (the outbox record,
        a local SQLite transaction, is the one wait)."""
        outbox = outbox_factory()
        try:
            while not stop.is_set():
                try:
                    self.close_windows(time.time(), outbox)
                except Exception:  # never let one bad round stop proving
                    log.exception("closing windows failed")
                nxt = self.next_close_at()
                wait_until = time.time() + 1.0 if nxt is None else min(nxt, time.time() + 1.0)
                stop.wait(max(0.01, wait_until - time.time()))
        finally:
            outbox.close()

    def _sampler_loop(self, stop: threading.Event) -> None:
        iv = self.sample_interval_ms / 1000
        while not stop.is_set():
            now = time.time()
            nxt = (math.floor(now / iv) + 0.5) * iv
            if nxt <= now:
                nxt += iv
            if stop.wait(nxt - now):
                return
            try:
                self.sample_tick(time.time())
            except Exception:  # never let one bad round kill sampling
                log.exception("sampling round failed")
