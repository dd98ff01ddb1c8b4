"""Where each job's proofs go: the endpoints of its committee, read from chain (issue 8).

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
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .errors import JobSourceError
from .jobs import AssignedJob
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
