"""Where each job's proofs go: the endpoints of its committee, read from chain.

A job's committee (``job.committee``: validator authorities, chosen by the user at
``create_job``, changed by ``replace_committee_member``) and each member's ``endpoint``
(its Validator account, PDA ``["validator", market, authority]``, changed by
``update_validator``) are read on every poll, so a change is picked up within one poll.
The resulting *route* of a job (the members' base URLs) is stored in the outbox
(``Outbox.set_destinations``): every undelivered proof of the job is then owed to exactly
those destinations, and the heads check (``heads.py``) asks exactly those.

* A member whose Validator account does not exist, whose endpoint is empty, or is not an
  ``http(s)://host[:port][/path]`` URL gets nothing: it is logged and skipped, the others
  still get every proof. It still counts for the heads check (``Route.problems``): a worker
  without local state for a job does not sign for it while a member cannot be asked.
* When an account cannot be read (RPC error) the member's last known endpoint is used; if
  none is known yet the job's route is left as it was (the stored one keeps being served).
* A static validator list (``--validator``) overrides discovery: every job's proofs go to
  that list and nothing is read from chain for routing.

Which committees the provider serves at all is its ``CommitteePolicy`` (pure verdict:
``judge_committee``; reads: ``CommitteeGate``), applied before an Open job is accepted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .errors import JobSourceError
from .jobs import AssignedJob, ValidatorInfo
from .keys import b58encode

log = logging.getLogger("gpum_worker.committee")


@dataclass(frozen=True)
class Route:
    """Where a job's proofs go: base URLs (deduplicated, committee order), and one line per
    committee member that gets nothing (no account, no usable endpoint)."""

    destinations: tuple[str, ...]
    problems: tuple[str, ...] = ()


def endpoint_url(raw: str) -> tuple[str | None, str]:
    """(base URL without trailing '/', "") for a usable endpoint, else (None, why)."""
    text = raw.strip()
    if not text:
        return None, "has no endpoint"
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        return None, f"endpoint {text!r} contains whitespace or control characters"
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as e:
        return None, f"endpoint {text!r} is not a valid URL ({e})"
    if parts.scheme not in ("http", "https"):
        return None, f"endpoint {text!r} is not an http(s) URL"
    if not parts.hostname:
        return None, f"endpoint {text!r} has no host"
    if parts.query or parts.fragment or "@" in parts.netloc:
        return None, f"endpoint {text!r} must be a base URL (no credentials, query or fragment)"
    return text.rstrip("/"), ""


class CommitteeRouter:
    """Keeps each job's route; ``refresh`` once per poll (the main thread only)."""

    def __init__(self, static: Sequence[str] = ()) -> None:
        self.static = tuple(static)
        self._routes: dict[bytes, Route] = {}
        self._known: dict[tuple[bytes, bytes], tuple[str | None, str]] = {}
        """(market, authority) -> last endpoint read: (url, "") or (None, why not usable)."""
        self._noted: dict[bytes, str] = {}  # job -> last "cannot route" message logged

    @property
    def discovering(self) -> bool:
        return not self.static

    def route(self, job: bytes) -> Route | None:
        """The job's current route, or None while it is not known (not read yet)."""
        if self.static:
            return Route(self.static)
        return self._routes.get(job)

    def refresh(self, source: Any, jobs: Iterable[AssignedJob], outbox: Any) -> None:
        """Read each job's committee endpoints and store its route (see module docstring).

        ``source`` offers ``validator_endpoint(market, authority)`` (``JobSource``);
        ``outbox`` offers ``set_destinations(job, urls)``.
        """
        if self.static:
            return
        this_poll: dict[tuple[bytes, bytes], tuple[str | None, str] | JobSourceError] = {}
        for j in jobs:
            if j.committee is None:
                self._note(j.job, "has no committee on chain (an SDK from before committees?) "
                                  "and no --validator is configured: its proofs wait")
                continue
            urls: list[str] = []
            problems: list[str] = []
            unread: list[str] = []
            for member in j.committee:
                k = (j.market, member)
                if k not in this_poll:
                    try:
                        raw = source.validator_endpoint(j.market, member)
                        got = ((None, "has no Validator account") if raw is None
                               else endpoint_url(raw))
                        self._known[k] = got
                        this_poll[k] = got
                    except JobSourceError as e:
                        this_poll[k] = e
                got = this_poll[k]
                if isinstance(got, JobSourceError):
                    if k not in self._known:
                        unread.append(f"{b58encode(member)}: {got}")
                        continue
                    got = self._known[k]
                url, why = got
                if url is None:
                    problems.append(f"member {b58encode(member)} {why}")
                elif url not in urls:
                    urls.append(url)
            if unread:
                self._note(j.job, "committee endpoints cannot be read yet ("
                                  + "; ".join(unread) + "); delivery keeps its last route")
                continue
            self._noted.pop(j.job, None)
            self._set(j, Route(tuple(urls), tuple(problems)), outbox)

    def _set(self, j: AssignedJob, route: Route, outbox: Any) -> None:
        old = self._routes.get(j.job)
        self._routes[j.job] = route
        added, removed = outbox.set_destinations(j.job, route.destinations)
        if old is not None and old == route and not added and not removed:
            return
        if old is None and not added and not removed:  # restart: same as stored
            log.info("job %s: proofs go to its committee: %s", j.job_b58,
                     ", ".join(route.destinations) or "nobody")
        elif added or removed:
            log.info("job %s: committee destinations now %s (added: %s; removed: %s; "
                     "proofs still owed to removed ones are owed to the current ones)",
                     j.job_b58, ", ".join(route.destinations) or "none",
                     ", ".join(added) or "none", ", ".join(removed) or "none")
        if route.problems and (old is None or old.problems != route.problems):
            log.warning("job %s: skipping committee member(s) that cannot receive proofs: %s",
                        j.job_b58, "; ".join(route.problems))
        if not route.destinations:
            log.error("job %s: no committee member has a usable endpoint; its proofs are "
                      "kept until one has (update_validator / replace_committee_member)",
                      j.job_b58)

    def _note(self, job: bytes, message: str) -> None:
        if self._noted.get(job) != message:
            self._noted[job] = message
            log.warning("job %s %s", b58encode(job), message)


# ---------------------------------------------------------------------- acceptance policy


@dataclass(frozen=True)
class CommitteePolicy:
    """Which committees this provider serves (``[committee]`` / ``--committee-*``).

    The default is the safe one: every member Active, bonded at least the market's
    ``validator_min_bond``, with a usable endpoint that answers ``GET /health`` with 200
    within ``health_timeout_s``. A committee decides whether the provider is paid and
    whether it is slashed for downtime, so a job whose committee a provider cannot trust is
    declined before it costs anything (``decline_job``: the user is refunded).
    """

    allow: frozenset[bytes] = frozenset()
    """Validator authorities allowed; empty: any (subject to the other rules)."""
    deny: frozenset[bytes] = frozenset()
    """Validator authorities never served (a job naming one is declined)."""
    min_bond: int | None = None
    """Smallest bond of any member; None: the market's ``validator_min_bond``. A value below
    the market's is raised to it."""
    require_health: bool = True
    health_timeout_s: float = 3.0
    """Total deadline of one ``GET /health`` to a member."""
    health_grace_s: float = 60.0
    """How long an Open job waits for a silent member to answer ``/health`` before it is
    declined (its GPUs are booked meanwhile)."""


@dataclass(frozen=True)
class Verdict:
    """``accept``; else ``final`` (decline now) or not (wait and look again)."""

    accept: bool
    reasons: tuple[str, ...] = ()
    final: bool = False

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


ACCEPT = Verdict(True)


def judge_committee(policy: CommitteePolicy, committee: Sequence[bytes],
                    infos: dict[bytes, ValidatorInfo | None], market_min_bond: int,
                    healthy: dict[bytes, str]) -> Verdict:
    """The policy applied to a committee (pure). ``infos``: each member's Validator account
    (None: none exists); ``healthy``: for each member probed, "" when ``/health`` answered
    200, else why not. Rules that the chain alone decides are final; a silent ``/health``
    is not (the member may be restarting)."""
    final: list[str] = []
    waiting: list[str] = []
    floor = max(market_min_bond, policy.min_bond or 0)
    if not committee:
        final.append("the job has an empty committee")
    for m in committee:
        name = b58encode(m)
        if m in policy.deny:
            final.append(f"member {name} is on the deny list")
            continue
        if policy.allow and m not in policy.allow:
            final.append(f"member {name} is not on the allow list")
            continue
        info = infos.get(m)
        if info is None:
            final.append(f"member {name} has no Validator account")
            continue
        if info.status != "active":
            final.append(f"member {name} is {info.status}, not active")
        if info.bond < floor:
            final.append(f"member {name} bonds {info.bond}, below the minimum {floor}")
        url, why = endpoint_url(info.endpoint)
        if url is None:
            final.append(f"member {name} {why}")
        elif policy.require_health and healthy.get(m, "not probed"):
            waiting.append(f"member {name} at {url}: /health: "
                           f"{healthy.get(m, 'not probed')}")
    if final:
        return Verdict(False, tuple(final), final=True)
    if waiting:
        return Verdict(False, tuple(waiting), final=False)
    return ACCEPT


class CommitteeGate:
    """Reads what ``judge_committee`` needs (I/O): each member's Validator account and the
    market's minimum bond from chain (``source``), and each member's ``GET /health``
    through ``client`` (``gpu_market.net.BoundedClient``), all members at once, each within
    ``policy.health_timeout_s``. Runs off the main loop (the agent's background checks)."""

    def __init__(self, source: Any, policy: CommitteePolicy, client: Any) -> None:
        self.source = source
        self.policy = policy
        self.client = client

    def check(self, j: AssignedJob) -> Verdict:
        """The verdict on ``j``'s committee; ``JobSourceError`` when the chain cannot tell."""
        if j.committee is None:  # no committee on chain: a static --validator list serves it
            return ACCEPT
        market_min = int(self.source.market_min_bond(j.market))
        infos = {m: self.source.validator_info(j.market, m) for m in j.committee}
        urls = {}
        for m, info in infos.items():
            if info is not None:
                url, _ = endpoint_url(info.endpoint)
                if url is not None:
                    urls[m] = url
        healthy: dict[bytes, str] = {}
        if self.policy.require_health:
            threads = []
            for m, url in urls.items():
                t = threading.Thread(target=self._probe, args=(m, url, healthy), daemon=True,
                                     name="committee health")
                t.start()
                threads.append(t)
            for t in threads:
                t.join(self.policy.health_timeout_s + 5)
        return judge_committee(self.policy, j.committee, infos, market_min, healthy)

    def _probe(self, m: bytes, url: str, out: dict[bytes, str]) -> None:
        from gpu_market.net import NetError

        try:
            r = self.client.get(url + "/health", deadline=self.policy.health_timeout_s,
                                max_bytes=64 * 1024)
            out[m] = "" if r.status == 200 else f"HTTP {r.status}"
        except NetError as e:
            out[m] = str(e)
