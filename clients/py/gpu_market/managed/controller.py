"""The managed-job controller: watches the current attempt, decides when it failed
(:mod:`.detect`), and migrates the job to another provider by its policy (:mod:`.policy`).

It runs as the user (their wallet signs everything) and keeps all its state in the database
(:mod:`.store`). Each step below is recorded **before** its side effect (an intent), and is
idempotent when run again from the recorded state, so a controller killed (kill -9) between
any two steps and started again resumes where it stopped::

    attempt states (one row per slot idx; the job address is fixed by uid and idx)

    planned --create_job, or find the job already at the address--> created
    created --deliver the spec (sealed to that worker)------------> delivered
    delivered --job Running and its container runs----------------> running
    created | delivered --declined, refused, not started in time--> stopping (failure)
    running --a failure decided (detect), or the user's migrate---> stopping
    stopping --finish (Running) | cancel (Open) | nothing---------> stopped
    stopped --settlement over: intent (books, escrow) then close--> closing --> closed

    managed phases: starting -> running -> migrating [-> waiting] -> running ... ;
    stopping (the user asked) -> done; done (ended normally); gave_up (restarts or budget)

Guarantees:

* **One successor per failure.** A failure of slot k leads only to slot k+1, whose job id
  (hence address) is fixed before anything is sent; a restarted controller first looks at
  that address, and a create retried after an ambiguous error lands at the same address or
  fails. A slot whose create the program refused definitively is planned again with another
  offer, still at the same address. A successor that never runs (declined, not accepted or
  not started within ``start_timeout_s``, its spec refused) is cancelled (full refund) and
  counts as a failed attempt: the next one takes slot k+2.
* **Budget.** Before a slot is planned (and recorded with its deposit), ``sum(deposited -
  refunded)`` over every attempt, the planned one included at its whole deposit, stays
  within the policy's budget; a successor's deposit is ``min(deposit for the hours, budget
  left)``. When that is less than one window, the controller waits for the refunds of ended
  attempts, or gives up when none is due.
* **The old job stops paying first.** A failed attempt is finished (Running) or cancelled
  (Open) before a successor is chosen; billing ends at the finish, and its container is
  removed by its worker if it comes back (a job that left Running is never restarted). Its
  close (refund and receipt) waits for the end of its settlement grace, in the background:
  proven seconds up to the finish still settle.
* **Checkpoints.** Every attempt's spec carries the checkpoint section (the store's keys
  sealed to its worker), so its worker restores the newest checkpoint before the container
  starts. After a migration the user asked for, or a recover-on exit, whose worker is alive
  and syncs once more when its job stops, the successor waits for that final checkpoint
  (one created after the old job ended) for up to ``FINAL_CHECKPOINT_WAIT_S``.
* Every warning and decision is an event in the database, printed as it is written.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from solders.pubkey import Pubkey

from ..units import format_price_per_hour, format_span, format_ui_amount, when
from .detect import Observation, assess
from .policy import RecoveryPolicy
from .store import ENDED_PHASES, Attempt, Event, ManagedJob, ManagedStore
from .template import TemplateError, attempt_job_id, attempt_spec
from .world import World

__all__ = ["BACKOFF_MAX_S", "BACKOFF_MIN_S", "FINAL_CHECKPOINT_WAIT_S", "Controller", "paid_total"]

BACKOFF_MIN_S = 10
BACKOFF_MAX_S = 300
"""Waiting for an offer (or a refund) retries after 10 s, doubling to 5 minutes."""
MAX_STEPS_PER_TICK = 12
FINAL_CHECKPOINT_WAIT_S = 120
"""How long a successor waits for the final checkpoint of an attempt whose worker lives."""
FAILED_BY_PROVIDER = ("failure",)


def paid_total(j: Any) -> int:
    """What a job paid so far: the provider and the fees."""
    return j.paid_provider + j.paid_validators + j.paid_treasury + j.burned


def _key(text: str) -> Pubkey:
    return Pubkey.from_string(text)


class Controller:
    """The controller of managed job ``managed_id`` in ``store``, acting through ``world``.
    ``secrets``: the plaintext values of the template's secret names (memory only);
    ``checkpoint_credentials``: ``(access key id, secret access key)`` of the checkpoint store;
    ``say(event)`` shows each event as it is written; ``sleep`` waits between rounds."""

    def __init__(self, store: ManagedStore, managed_id: int, world: World, *,
                 secrets: Mapping[str, str] | None = None,
                 checkpoint_credentials: tuple[str, str] | None = None,
                 say: Callable[[Event], None] = lambda e: None,
                 sleep: Callable[[float], None] = time.sleep,
                 poll_s: float | None = None) -> None:  # fmt: skip
        self.store, self.id, self.world = store, managed_id, world
        self.secrets = dict(secrets or {})
        self.checkpoint_credentials = checkpoint_credentials
        self.say, self.sleep, self.poll_s = say, sleep, poll_s
        self.shown: dict[str, str] = {}
        """Warnings being shown, by kind (each is written once while it lasts)."""
        self.refused: dict[int, set[str]] = {}
        """Providers whose create the program refused, by slot (this run)."""
        self.window_seconds: int | None = None
        self.last_event = store.last_event_id(managed_id)

    # ------------------------------------------------------------------ plumbing

    def managed(self) -> ManagedJob:
        return self.store.managed(self.id)

    def attempts(self) -> list[Attempt]:
        return self.store.attempts(self.id)

    def policy(self, m: ManagedJob | None = None) -> RecoveryPolicy:
        return RecoveryPolicy.from_json((m or self.managed()).policy)

    def _commit(self, now: int, **kw: Any) -> None:
        self.store.commit(self.id, now, **kw)
        self.flush()

    def flush(self) -> None:
        """Show the events written since the last shown."""
        for e in self.store.events(self.id, after=self.last_event):
            self.last_event = e.id
            self.say(e)

    def _tokens(self, m: ManagedJob, amount: int) -> str:
        return format_ui_amount(amount, m.decimals)

    def _warn(self, now: int, kind: str, text: str) -> None:
        """Write warning ``text`` of ``kind`` unless that kind is already shown."""
        if kind not in self.shown:
            self.shown[kind] = text
            self._commit(now, events=[("warning", text)])

    def _clear(self, now: int, kind: str, text: str | None = None) -> None:
        if self.shown.pop(kind, None) is not None and text:
            self._commit(now, events=[("info", text)])

    # ------------------------------------------------------------------ the loop

    def run(self, until: Callable[[Controller], bool] | None = None) -> ManagedJob:
        """Tick until ``until(self)`` holds, or the managed job ended and every attempt is
        closed. Chain, network and worker errors are shown and retried; KeyboardInterrupt
        and kills stop it anywhere (the next run resumes)."""
        from ..errors import SdkError
        from ..net import NetError
        from ..workload_api import WorkerApiError

        while True:
            try:
                self.tick()
                self._clear(int(time.time()), "round")
            except (SdkError, NetError, WorkerApiError, OSError) as e:
                self._warn(int(time.time()), "round", f"a round failed ({' '.join(str(e).split())}); "
                                                      "retrying")  # fmt: skip
            if until is not None and until(self):
                return self.managed()
            if self.finished():
                return self.managed()
            self.sleep(self.poll())

    def finished(self) -> bool:
        """The managed job ended and no attempt is left to close."""
        return self.managed().ended and all(a.state in ("closed", "abandoned")
                                             for a in self.attempts())  # fmt: skip

    def poll(self) -> float:
        if self.poll_s is not None:
            return self.poll_s
        return float(max(1, min(10, (self.window_seconds or 4) // 2)))

    def tick(self) -> None:
        """One round: the user's requests, every step that can move now, the closes."""
        now = self.world.now()
        m = self.managed()
        if m.stop_requested_at and m.phase not in ("stopping", *ENDED_PHASES):
            self._commit(now, managed={"phase": "stopping", "phase_reason": "stopped by the user"},
                         events=[("decision", ("stopping: every attempt is finished or cancelled, "
                                              "then closed with its receipt"))])  # fmt: skip
        for _ in range(MAX_STEPS_PER_TICK):
            if not self._step(now):
                break
        self._close_ended(now)

    def _step(self, now: int) -> bool:
        """One step of the state machine; whether it moved (another may follow)."""
        m = self.managed()
        atts = self.attempts()
        for a in atts:
            if a.state == "stopping":
                return self._stop(m, a, now)
        if m.phase == "stopping":
            return self._stop_all(m, atts, now)
        if m.phase in ENDED_PHASES:
            return False
        if not atts:
            if m.phase == "waiting" and m.next_try_at is not None and now < m.next_try_at:
                return False
            return self.plan_slot(m, atts, 0, now)
        cur = atts[-1]
        if m.phase == "running":
            if cur.state != "running":  # never written apart; repaired all the same
                self._commit(now, managed={"phase": "migrating"})
                return True
            return self._watch(m, cur, now)
        # starting, migrating, waiting
        if m.phase == "waiting" and m.next_try_at is not None and now < m.next_try_at:
            return False
        if cur.state in ("stopped", "closing", "closed", "abandoned"):
            return self.plan_slot(m, atts, cur.idx + 1, now)
        if cur.state == "planned":
            if cur.needs_offer:
                return self.plan_slot(m, atts, cur.idx, now)
            return self._create(m, cur, now)
        if cur.state == "created":
            return self._deliver(m, cur, now)
        if cur.state == "delivered":
            return self._await_running(m, cur, now)
        if cur.state == "running":
            self._commit(now, managed={"phase": "running", "phase_reason": None})
            return True
        return False

    # ------------------------------------------------------------------ choosing and planning

    def _wait(self, m: ManagedJob, now: int, why: str, by: int | None = None) -> bool:
        """Phase waiting: retry after the next backoff (at ``by`` at the latest), saying why."""
        backoff = min(BACKOFF_MAX_S, max(BACKOFF_MIN_S, m.backoff_s * 2 if m.backoff_s else 0))
        at = now + backoff if by is None else max(now + 1, min(now + backoff, by))
        self._commit(now, managed={"phase": "waiting", "phase_reason": why, "next_try_at": at,
                                   "backoff_s": backoff},
                     events=[("warning", f"{why}; retrying at {when(at, now)}")])  # fmt: skip
        return False

    def _give_up(self, now: int, why: str) -> bool:
        self._commit(now, managed={"phase": "gave_up", "phase_reason": why, "next_try_at": None},
                     events=[("decision", f"giving up: {why}")])  # fmt: skip
        return True

    def excluded(self, atts: list[Attempt]) -> frozenset[str]:
        """Providers this managed job left for their failure."""
        return frozenset(a.provider for a in atts if a.end_kind in FAILED_BY_PROVIDER)

    def choose(self, m: ManagedJob, policy: RecoveryPolicy, atts: list[Attempt], idx: int,
               ) -> tuple[Any, str]:  # fmt: skip
        """The best live offer the policy allows (``m.migrate_to`` first when the user named
        one), or ``(None, why none)``."""
        offers = self.world.offers()
        excluded = self.excluded(atts) | frozenset(self.refused.get(idx, ()))
        if m.migrate_to:
            named = next((o for o in offers if str(o.provider) == m.migrate_to), None)
            if named is None:
                why: str | None = "it has no free GPU fitting the job now"
            elif named.online is False:
                why = "its worker does not answer"
            else:  # the user's choice overrides the avoid list and past failures only
                why = replace(policy, avoid=()).offer_refusal(named)
            if why is None:
                return named, ""
            self._commit(self.world.now(), managed={"migrate_to": None},
                         events=[("warning", (f"provider {m.migrate_to}, asked for, cannot take "
                                             f"the job ({why}): choosing by the policy"))])  # fmt: skip
        reasons: dict[str, int] = {}
        fit = []
        for o in offers:
            why = policy.offer_refusal(o, excluded=excluded)
            if why is None and o.online is False:
                why = "its worker does not answer"
            if why is None:
                fit.append(o)
            else:
                reasons[why] = reasons.get(why, 0) + 1
        if fit:
            return fit[0], ""  # offers come ranked (offline last)
        if not offers:
            return None, "no offer satisfies the policy: no provider has a free GPU"
        detail = "; ".join(f"{n} {why}" for why, n in sorted(reasons.items(), key=lambda x: -x[1])[:4])
        return None, f"no offer satisfies the policy ({len(offers)} offer(s): {detail})"

    def plan_slot(self, m: ManagedJob, atts: list[Attempt], idx: int, now: int) -> bool:
        """Plan slot ``idx`` (a successor, or the same slot again after a refused create):
        restarts and budget checked, offer chosen, deposit, committee and spec fixed and
        recorded before anything is sent."""
        from ..accounts import min_deposit

        policy = self.policy(m)
        if idx > policy.max_restarts:
            return self._give_up(now, f"{policy.max_restarts} restart(s) used, the most the "
                                      "policy allows")  # fmt: skip
        same = next((a for a in atts if a.idx == idx), None)
        if same is not None and self._adopt_existing(m, same, now):
            return True
        waiting = self._final_checkpoint(m, atts, idx, now)
        if waiting is not None:
            return self._wait(m, now, waiting[0], by=waiting[1])
        offer, why = self.choose(m, policy, atts, idx)
        if offer is None:
            return self._wait(m, now, why)
        p = self.world.provider(offer.provider)
        if p is None or not p.endpoint:
            return self._wait(m, now, f"provider {offer.provider} disappeared while choosing it")
        params = self.world.params()
        price = p.price_per_gpu_second
        if policy.max_price_per_gpu_second is not None and price > policy.max_price_per_gpu_second:
            return self._wait(m, now, f"provider {offer.provider} just raised its price above the cap")
        rate = price * policy.gpus
        want = max(math.ceil(rate * policy.hours_seconds), min_deposit(params, price, policy.gpus))
        others = [a for a in atts if a.idx != idx]
        budget = policy.budget if policy.budget is not None else (policy.max_restarts + 1) * want
        left = budget - sum(a.committed for a in others)
        deposit = min(want, left)
        least = min_deposit(params, price, policy.gpus)
        if deposit < least:
            due = [a for a in others if a.state in ("stopped", "closing") and a.committed > a.paid]
            if due:
                return self._wait(m, now, f"the budget has {self._tokens(m, max(0, left))} left and "
                                          f"the next deposit needs at least {self._tokens(m, least)}: "
                                          f"waiting for the refund of job {due[0].job} (closed "
                                          "once its settlement grace ends)")  # fmt: skip
            return self._give_up(now, f"the budget of {self._tokens(m, budget)} is spent "
                                      f"({self._tokens(m, max(0, left))} left, a deposit needs at "
                                      f"least {self._tokens(m, least)})")  # fmt: skip
        balance = self.world.balance()
        if balance < deposit:
            return self._wait(m, now, f"your wallet holds {self._tokens(m, balance)}; the next "
                                      f"deposit needs {self._tokens(m, deposit)}")  # fmt: skip
        prev = next((a for a in reversed(others) if a.idx < idx), None)
        try:
            committee, quorum = self._committee(prev, offer, params)
        except ValueError as e:
            return self._wait(m, now, str(e))
        try:
            spec = attempt_spec(m.template, bytes(p.worker_key), self.secrets,
                                checkpoint_credentials=self.checkpoint_credentials)  # fmt: skip
        except TemplateError as e:
            return self._wait(m, now, str(e))
        from .. import pda
        from ..workload import canonical_bytes, spec_hash

        job_id = attempt_job_id(m.uid, idx)
        job = pda.job_pda(_key(m.market), _key(m.user), job_id, _key(m.program_id))
        fields = {"job_id": job_id, "job": str(job), "provider": str(offer.provider),
                  "endpoint": p.endpoint, "gpu_model": offer.gpu_model, "price": price,
                  "deposit": deposit, "committee": [str(k) for k in committee], "quorum": quorum,
                  "spec": canonical_bytes(spec), "workload_hash": spec_hash(spec).hex()}  # fmt: skip
        short = "" if deposit == want else f" (the budget's rest; the hours need {self._tokens(m, want)})"
        text = (f"attempt {idx}: job {job} on provider {offer.provider} ({offer.gpu_model}, "
                f"{format_price_per_hour(price, m.decimals)} per GPU-hour, score "
                f"{offer.score:.2f}), deposit {self._tokens(m, deposit)}{short}; budget left "
                f"after it {self._tokens(m, left - deposit)}")  # fmt: skip
        phase = "starting" if idx == 0 else "migrating"
        managed: dict[str, Any] = {"phase": phase, "next_try_at": None, "backoff_s": 0,
                                   "migrate_to": None}  # fmt: skip
        if policy.budget is None:
            managed["policy"] = replace(policy, budget=budget).to_json()
        self._commit(now, new_attempt=(idx, fields), managed=managed,
                     events=[("decision", text)])  # fmt: skip
        return True

    def _final_checkpoint(self, m: ManagedJob, atts: list[Attempt], idx: int, now: int,
                          ) -> tuple[str, int] | None:  # fmt: skip
        """Why slot ``idx`` should wait and until when at most, or None. An attempt left on purpose (the user's
        migration) or whose container exited still has a live worker, which syncs the
        checkpoint once more when its job leaves Running: the successor waits for that sync
        (a checkpoint created after the old job ended) for up to ``FINAL_CHECKPOINT_WAIT_S``,
        so it resumes from the latest state. A store that fails is shown, never waited on."""
        from ..checkpoint import CheckpointError

        config = m.template.get("checkpoint")
        prev = next((a for a in atts if a.idx == idx - 1), None)
        if config is None or prev is None or prev.end_kind not in ("user_migrate", "exit") \
                or not prev.ended_at or self.checkpoint_credentials is None:
            return None
        deadline = prev.ended_at + FINAL_CHECKPOINT_WAIT_S
        try:
            latest = self.world.latest_checkpoint(config, self.checkpoint_credentials)
        except CheckpointError as e:
            self._warn(now, "checkpoint", f"the checkpoint store cannot be read ({e}); the "
                                          "successor restores what the store holds")  # fmt: skip
            return None
        waited = "final checkpoint" in (m.phase_reason or "")
        if latest is not None and latest >= prev.ended_at:
            if waited:
                self._commit(now, events=[("info", (f"the final checkpoint of job {prev.job} is "
                                                   f"stored ({when(latest, now)})"))])  # fmt: skip
            return None
        if now >= deadline:
            self._warn(now, f"final-late-{idx}", f"no checkpoint of job {prev.job} after it "
                                                 f"ended by {when(deadline, now)}; the successor "
                                                 "restores the newest one the store holds")  # fmt: skip
            return None
        return ((f"waiting for the final checkpoint of job {prev.job} (its worker writes it "
                f"when the container stops; at most until {when(deadline, now)})"), deadline)

    def _committee(self, prev: Attempt | None, offer: Any, params: Any) -> tuple[list[Pubkey], int]:
        """The previous attempt's committee members that are healthy Active validators (never
        the new provider's owner or worker key), topped up from the market's default committee
        when fewer than the quorum answer; its quorum where it still fits."""
        from ..committee import default_quorum

        exclude = {offer.owner, offer.worker_key}
        base = [_key(k) for k in prev.committee] if prev is not None else []
        members = [k for k in self.world.healthy_validators(base) if k not in exclude]
        min_quorum = max(1, params.min_quorum)
        want_quorum = prev.quorum if prev is not None else None
        if len(members) < max(min_quorum, want_quorum or 1):
            extra = self.world.default_committee(list(exclude | set(members)))
            members += [k for k in extra if k not in members and k not in exclude]
            members = members[:max(3, len(base))]
        if len(members) < min_quorum:
            raise ValueError(f"only {len(members)} committee validator(s) answer /health; the "
                             f"market's quorum needs {min_quorum}")  # fmt: skip
        quorum = default_quorum(len(members), min_quorum) if want_quorum is None else \
            max(min_quorum, min(want_quorum, len(members)))
        return members, quorum

    def _adopt_existing(self, m: ManagedJob, a: Attempt, now: int) -> bool:
        """A planned slot whose job is on chain after all (a create that landed late): take it
        as created (its provider from the chain). Whether it was there."""
        j = self.world.job(_key(a.job))
        if j is None:
            return False
        fields: dict[str, Any] = {"state": "created", "needs_offer": 0, "created_at": now,
                                  "deposited": j.deposited, "provider": str(j.provider)}  # fmt: skip
        events = [("info", f"job {a.job} is on chain already (created by an earlier run)")]
        if str(j.provider) != a.provider:
            p = self.world.provider(j.provider)
            fields["endpoint"] = p.endpoint if p is not None else ""
            events.append(("warning", (f"job {a.job} landed on provider {j.provider}, not the "
                                      f"{a.provider} planned last; its spec may not be deliverable: "
                                      "it is cancelled if it does not start")))  # fmt: skip
        self._commit(now, attempt=(a.idx, fields), events=events)  # type: ignore[arg-type]
        self.world.remember(_key(a.job), a.job_id, now)
        return True

    # ------------------------------------------------------------------ creating and starting

    def _create(self, m: ManagedJob, a: Attempt, now: int) -> bool:
        from ..errors import GpuMarketError, SdkError

        if self._adopt_existing(m, a, now):
            return True
        if self.world.tombstone(_key(a.job)):
            self._commit(now, attempt=(a.idx, {"state": "closed", "deposited": a.deposit,
                                               "end_reason": "closed outside the controller",
                                               "end_kind": "failure", "ended_at": now}),
                         events=[("warning", (f"job {a.job} was created and closed outside this "
                                             "controller; its deposit counts as spent"))])  # fmt: skip
            return True
        policy = self.policy(m)
        limit = policy.max_price_per_gpu_second or a.price
        try:
            sig = self.world.create_job(a.job_id, _key(a.provider), policy.gpus, a.deposit,
                                        [_key(k) for k in a.committee], a.quorum, limit,
                                        bytes.fromhex(a.workload_hash))  # fmt: skip
        except GpuMarketError as e:
            if e.name in ("AccountAlreadyInUse", "ConstraintSeeds") or "already in use" in str(e):
                return True  # it is there: the next step adopts it
            self.refused.setdefault(a.idx, set()).add(a.provider)
            self._commit(now, attempt=(a.idx, {"needs_offer": 1, "last_error": str(e)}),
                         events=[("warning", (f"provider {a.provider} could not take job {a.job} "
                                             f"({e.name}: {' '.join(str(e).split())}); nothing was "
                                             "charged: choosing another offer"))])  # fmt: skip
            return True
        except SdkError as e:
            self._warn(now, f"create-{a.idx}", f"sending the create of job {a.job} failed "
                                               f"({' '.join(str(e).split())}); retrying at the "
                                               "same address, so it is created at most once")  # fmt: skip
            return False
        self._clear(now, f"create-{a.idx}")
        self._commit(now, attempt=(a.idx, {"state": "created", "created_at": now,
                                           "deposited": a.deposit}),
                     events=[("info", (f"job {a.job} created on provider {a.provider}: deposit "
                                      f"{self._tokens(m, a.deposit)} (transaction {sig})"))])  # fmt: skip
        self.world.remember(_key(a.job), a.job_id, now)
        return True

    def _start_failed(self, m: ManagedJob, a: Attempt, now: int, why: str) -> bool:
        """A slot that never ran: stop it (an Open job is cancelled, a full refund) and count
        it as its provider's failure."""
        self._commit(now, attempt=(a.idx, {"state": "stopping", "end_reason": why,
                                           "end_kind": "failure"}),
                     managed={"phase": "migrating", "phase_reason": why},
                     events=[("decision", (f"attempt {a.idx} on provider {a.provider} did not "
                                          f"start: {why}; cancelling it and trying the next "
                                          "offer"))])  # fmt: skip
        return True

    def _deliver(self, m: ManagedJob, a: Attempt, now: int) -> bool:
        from ..workload import spec_from_json
        from ..workload_api import WorkerApiError

        j = self.world.job(_key(a.job))
        if j is None or j.status not in ("open", "running"):
            return self._start_failed(m, a, now, f"its job is {'closed' if j is None else j.status}")
        timeout = self.policy(m).start_timeout_s
        if now > (a.created_at or now) + timeout:
            return self._start_failed(m, a, now, f"its spec was not delivered within "
                                                 f"{format_span(timeout)}")  # fmt: skip
        try:
            self.world.deliver(a.endpoint, _key(a.job), spec_from_json(a.spec))
        except WorkerApiError as e:
            if e.status in (None, 404, 503):
                self._warn(now, f"deliver-{a.idx}", f"the worker of provider {a.provider} does not "
                                                    f"take the spec yet ({e}); retrying")  # fmt: skip
                return False
            return self._start_failed(m, a, now, f"its worker refused the spec: {e}")
        self._clear(now, f"deliver-{a.idx}")
        self._commit(now, attempt=(a.idx, {"state": "delivered"}),
                     events=[("info", (f"spec delivered to {a.endpoint}; waiting for provider "
                                      f"{a.provider} to accept job {a.job}"))])  # fmt: skip
        return True

    def _await_running(self, m: ManagedJob, a: Attempt, now: int) -> bool:
        from ..deployment import ports
        from ..workload_api import WorkerApiError

        j = self.world.job(_key(a.job))
        if j is None or j.status not in ("open", "running"):
            why = "closed" if j is None else ("declined by the provider" if j.status == "declined"
                                              else j.status)  # fmt: skip
            return self._start_failed(m, a, now, f"its job is {why}")
        timeout = self.policy(m).start_timeout_s
        late = now > (a.created_at or now) + timeout
        if j.status == "open":
            if late:
                return self._start_failed(m, a, now, f"not accepted within {format_span(timeout)}")
            return False
        self.window_seconds = j.terms.window_seconds
        try:
            s = self.world.workload_status(a.endpoint, _key(a.job), j.workload_hash)
        except WorkerApiError as e:
            s = {"error": str(e)}
        state = s.get("state")
        if state == "running" or state == "exited":
            endpoints = ports(s)[0]
            fixed = self.policy(m)
            managed: dict[str, Any] = {"phase": "running", "phase_reason": None,
                                       "health_since": None}  # fmt: skip
            if fixed.fixed_model is None:
                managed["policy"] = fixed.with_fixed_model(a.gpu_model).to_json()
            shown = ", ".join(endpoints) or "no published port"
            self._commit(now, attempt=(a.idx, {"state": "running", "started_at": j.started_at,
                                               "endpoints": endpoints}),
                         managed=managed,
                         events=[("decision" if a.idx else "info",
                                  (f"attempt {a.idx} runs on provider {a.provider} (job {a.job}): "
                                  f"{shown}"))])  # fmt: skip
            self.shown.clear()
            return True
        if late:
            why = s.get("error") or state or "no status"
            return self._start_failed(m, a, now, f"its container did not run within "
                                                 f"{format_span(timeout)} ({why})")  # fmt: skip
        return False

    # ------------------------------------------------------------------ watching

    def observe(self, a: Attempt, now: int) -> Observation:
        """One look at a running attempt: chain, provider, committee, worker."""
        from ..workload_api import WorkerApiError

        job = _key(a.job)
        j = self.world.job(job)
        if j is None:
            return Observation(now=now, status=None)
        self.window_seconds = j.terms.window_seconds
        p = self.world.provider(j.provider)
        cv = self.world.committee(job, j.committee)
        workload, error = None, None
        try:
            workload = self.world.workload_status(a.endpoint, job, j.workload_hash)
        except WorkerApiError as e:
            error = str(e)
        return Observation(now=now, status=j.status, started_at=j.started_at,
                           last_window_end=j.last_window_end,
                           window_seconds=j.terms.window_seconds,
                           booked_escrow=j.booked_escrow, rate_per_second=j.terms.rate_per_second,
                           provider_status=None if p is None else p.status, heads=cv.heads,
                           newest_accepted_end=cv.newest_accepted_end,
                           committee_answered=cv.answered, committee_errors=cv.errors,
                           workload=workload, workload_error=error)  # fmt: skip

    def _watch(self, m: ManagedJob, a: Attempt, now: int) -> bool:
        if m.migrate_requested_at:
            to = f" to provider {m.migrate_to}" if m.migrate_to else ""
            return self._decide(a, now, f"migration{to} asked by the user", "user_migrate",
                                {"migrate_requested_at": None})  # fmt: skip
        policy = self.policy(m)
        obs = self.observe(a, now)
        verdict = assess(obs, policy, health_since=m.health_since,
                         finish_on_exit=bool(m.template.get("finish_on_exit")))  # fmt: skip
        if verdict.health_since != m.health_since:
            healthy = verdict.health_since is None and verdict.failure is None
            self._commit(now, managed={"health_since": verdict.health_since},
                         events=[("info", f"attempt {a.idx}: the GPUs are healthy again")]
                         if healthy else [])  # fmt: skip
            self.shown.pop("health", None)
        if verdict.failure is not None:
            return self._decide(a, now, verdict.failure,
                                "failure" if verdict.failure_kind == "provider" else "exit")
        kinds = {k for k, _ in verdict.warnings}
        resolved = {"silence": "windows arrive again",
                    "worker_api": "the worker's API answers again" if obs.workload is not None else "",
                    "committee": "the committee answers again"}  # fmt: skip
        for kind in list(self.shown):
            if kind in resolved and kind not in kinds:
                self._clear(now, kind, resolved[kind])
        for kind, text in verdict.warnings:
            self._warn(now, kind, f"attempt {a.idx} on provider {a.provider}: {text}")
        if verdict.done is not None:
            self._commit(now, attempt=(a.idx, {"state": "stopping", "end_reason": verdict.done,
                                               "end_kind": "done"}),
                         managed={"phase": "done", "phase_reason": verdict.done},
                         events=[("decision", f"the managed job ended: {verdict.done}")])  # fmt: skip
            return True
        return False

    def _decide(self, a: Attempt, now: int, why: str, kind: str,
                managed: dict[str, Any] | None = None) -> bool:  # fmt: skip
        """Record the decision to leave attempt ``a`` (before anything is sent)."""
        self._commit(now, attempt=(a.idx, {"state": "stopping", "end_reason": why,
                                           "end_kind": kind}),
                     managed={"phase": "migrating", "phase_reason": why, "health_since": None,
                              **(managed or {})},
                     events=[("decision", (f"attempt {a.idx} on provider {a.provider} (job "
                                          f"{a.job}): {why}; stopping it and migrating"))])  # fmt: skip
        self.shown.clear()
        return True

    # ------------------------------------------------------------------ stopping and closing

    def _stop(self, m: ManagedJob, a: Attempt, now: int) -> bool:
        """End billing of attempt ``a`` (state stopping): finish a Running job, cancel an Open
        one, nothing for one already ended; then record what the chain shows."""
        from ..errors import GpuMarketError

        job = _key(a.job)
        j = self.world.job(job)
        if j is None:
            fields: dict[str, Any] = {"state": "closed", "ended_at": a.ended_at or now}
            self._commit(now, attempt=(a.idx, fields),
                         events=[("warning", (f"job {a.job} was closed outside the controller; its "
                                             "deposit counts as spent"))])  # fmt: skip
            return True
        action = ""
        try:
            if j.status == "running":
                self.world.finish_job(job)
                action = "finished: billing stopped"
            elif j.status == "open":
                self.world.cancel_job(job)
                action = "cancelled: its deposit refunded in full"
        except GpuMarketError:
            pass  # its status changed meanwhile: read it again
        j = self.world.job(job)
        if j is None or j.status in ("open", "running"):
            return False
        text = f"job {a.job} {action or f'is {j.status}'}"
        if j.status == "finishing":
            text += f"; closed once its settlement grace ends {when(j.grace_ends_at, now)}"
        self._commit(now, attempt=(a.idx, {"state": "stopped", "ended_at": j.ended_at or now,
                                           "deposited": j.deposited, "refunded": j.refunded,
                                           "paid": paid_total(j), "paid_seconds": j.paid_seconds}),
                     events=[("info", text)])  # fmt: skip
        return True

    def _stop_all(self, m: ManagedJob, atts: list[Attempt], now: int) -> bool:
        for a in atts:
            if a.state in ("created", "delivered", "running"):
                self._commit(now, attempt=(a.idx, {"state": "stopping", "end_kind": "user_stop",
                                                   "end_reason": "stopped by the user"}))  # fmt: skip
                return True
            if a.state == "planned":
                if self._adopt_existing(m, a, now):
                    return True
                self._commit(now, attempt=(a.idx, {"state": "abandoned",
                                                   "end_reason": "stopped before it was created"}))  # fmt: skip
                return True
        self._commit(now, managed={"phase": "done", "phase_reason": "stopped by the user"},
                     events=[("decision", "the managed job is stopped")])  # fmt: skip
        return True

    def _close_ended(self, now: int) -> None:
        """Close every stopped attempt whose settlement is over (intent first), keeping its
        receipt; a failure is shown and retried next round."""
        from ..errors import SdkError

        m = self.managed()
        for a in self.attempts():
            if a.state not in ("stopped", "closing"):
                continue
            job = _key(a.job)
            try:
                j = self.world.job(job)
                if a.state == "stopped":
                    if j is None:
                        self._commit(now, attempt=(a.idx, {"state": "closed"}),
                                     events=[("warning", (f"job {a.job} was closed outside the "
                                                         "controller"))])  # fmt: skip
                        continue
                    if not j.settlement_over(now):
                        continue
                    intent = {"deposited": j.deposited, "paid_provider": j.paid_provider,
                              "paid_validators": j.paid_validators,
                              "paid_treasury": j.paid_treasury, "burned": j.burned,
                              "refunded": j.refunded, "escrow": self.world.escrow(job),
                              "paid_seconds": j.paid_seconds}  # fmt: skip
                    self._commit(now, attempt=(a.idx, {"state": "closing", "close_intent": intent}))
                    a = self.store.attempt(self.id, a.idx)
                if j is None:
                    receipt, sig = _intended_receipt(a.close_intent or {}), "(sent by an earlier run)"
                else:
                    sig, receipt = self.world.close_job(job, j)
            except SdkError as e:
                self._warn(now, f"close-{a.idx}", f"closing job {a.job} failed "
                                                  f"({' '.join(str(e).split())}); retrying")  # fmt: skip
                continue
            self._clear(now, f"close-{a.idx}")
            m = self.managed()
            retry = {"next_try_at": now} if m.phase == "waiting" else None  # a refund came: retry
            paid_seconds = (a.close_intent or {}).get("paid_seconds", a.paid_seconds)
            self._commit(now, managed=retry, attempt=(a.idx, {"state": "closed", "receipt": receipt.as_dict(),
                                               "paid": receipt.paid, "refunded": receipt.refunded,
                                               "deposited": receipt.deposited,
                                               "paid_seconds": paid_seconds}),
                         events=[("info", (f"job {a.job} closed: paid {self._tokens(m, receipt.paid)} "
                                          f"for {paid_seconds} s (provider "
                                          f"{self._tokens(m, receipt.paid_provider)}, fees "
                                          f"{self._tokens(m, receipt.fees)}), refunded "
                                          f"{self._tokens(m, receipt.refunded)} (transaction {sig})"))])  # fmt: skip


def _intended_receipt(i: Mapping[str, int]) -> Any:
    """The receipt of a job closed by an earlier run, from the books recorded just before its
    close (nothing changes them once its settlement is over): the close refunded the escrow's
    whole balance."""
    from ..job_history import Receipt

    booked = (i["deposited"] - i["paid_provider"] - i["paid_validators"] - i["paid_treasury"]
              - i["burned"] - i["refunded"])  # fmt: skip
    return Receipt(deposited=i["deposited"], paid_provider=i["paid_provider"],
                   paid_validators=i["paid_validators"], paid_treasury=i["paid_treasury"],
                   burned=i["burned"], refunded=i["refunded"] + i["escrow"],
                   donations=max(0, i["escrow"] - booked))  # fmt: skip
