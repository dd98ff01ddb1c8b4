"""Offers: the providers of a market a job can be created on now, how they rank, and a small
query language to filter them. Pure except :func:`list_providers` and
:func:`list_offers`, which read the chain through a :class:`~gpu_market.client.GpuMarketClient`.

An **offer** is a provider that is Active (neither Paused nor Jailed), whose current worker key
has not expired at chain time, and that has GPUs a new job can take: free GPUs (not held by
Open, Running or Finishing jobs) that its stake also backs (``create_job`` requires
``stake >= min_stake_per_gpu * gpus_in_use`` after the job is added). A provider with free GPUs
but too little stake is therefore not an offer. The market's own pause is not looked at:
``MarketView.paused`` refuses every ``create_job`` while set.

Reputation score
----------------
One number in [0, 1], :func:`gpu_market.reputation.offer_score` (formula there)::

    score = 0 if jailed, else record * hardware * rating

``record`` (:func:`reputation_score`) is the job success rate under a Beta(2, 2) prior, divided
by ``1 + slashes`` and by ``1 + windows_missed / (verified_hours + 1)``; ``hardware`` is 1 for a
provider whose hardware verdict holds, 3/4 without one, 1/2 when its last verdict failed;
``rating`` is ``(ratings_sum + 20) / (5 * (ratings_count + 5))``, the users' stars smoothed by
five 4-star prior ratings. A new provider scores 0.3. ``badge`` (the verified badge) is
:func:`gpu_market.reputation.badge`: verified hardware and ``verified_record_seconds`` without
a slash.

Ranking
-------
:func:`rank_key`: cheapest *effective* price first, where the effective price per GPU-second
is ``price / (0.5 + 0.5 * score)`` (a jailed or worthless provider pays double, a perfect one
its list price, a new one 4/3 of it); ties go to the higher score, then more free GPUs, then
the provider address (bytes), so the order is total and deterministic. Liveness comes first:
a provider whose worker did not answer its probe (``online`` False) ranks after every other,
whatever its price; offers never probed or without an endpoint rank as if online.

Liveness
--------
:func:`probe_liveness` asks each offer's worker ``GET {endpoint}/v1/health`` in parallel (at
most ``parallel`` at once), each probe within ``deadline`` seconds and all of them within
``total`` (a probe still running then counts as offline), through
:class:`~gpu_market.net.BoundedClient` (4 KiB answer cap). Online means HTTP 200 with
``{"ok": true}`` and, when the answer names its ``worker``, the provider's current worker key.
:func:`with_liveness` stamps the result on the offers: ``online``, ``checked_at`` and
``last_seen`` (unix seconds: the probe time when online; else the end of the last window the
committee settled for any of the provider's jobs still on chain, :func:`last_settled_window`,
or None when it never had one).

Query language
--------------
Space-separated clauses ``field op value``, all of which must hold (in the style of vast.ai):
``gpu_model=H100 gpus>=2 price<=2.5 region in [us-west,eu-west] workloads=true``.

Operators: ``=`` (also ``==``), ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``, ``notin``. A list
for ``in``/``notin`` is ``[a,b]`` or ``a,b``. Quote a value with spaces (``gpu_model="RTX
4090"``) or write ``_`` for a space; text compares case-insensitively with ``_`` and space
alike. Fields (see :data:`FIELDS`):

* ``gpu_model`` (text): ``=``/``in`` match a substring of the model, ``!=``/``notin`` its absence
* ``region`` (text): the whole region
* ``gpus`` (free GPUs a job can take), ``gpus_total``, ``jobs_completed``, ``jobs_failed``,
  ``slashes``: whole numbers
* ``vram`` (GB per GPU as the card is sold, ``units.nominal_vram_gb``: 80 for an H100 80GB
  reporting 81,559 MiB), ``price`` (payment-mint UI units per GPU-hour), ``stake``
  (stake-mint UI units), ``score``, ``verified_hours``: numbers, compared exactly
* ``workloads`` (true/false): whether the provider publishes a worker endpoint (runs
  containers); only ``=`` and ``!=``
* ``verified`` (true/false): the provider's last hardware verdict passed and still holds;
  ``badge`` (true/false): the verified badge (module "Reputation score")
* ``rating`` (the users' average stars, 1..5; a provider without ratings matches only ``!=``
  and ``notin``), ``ratings`` (how many): numbers
* ``online`` (true/false): whether the provider's worker answered ``GET /v1/health`` when the
  offers were probed (:func:`probe_liveness`); only ``=`` and ``!=``. A provider without a
  worker endpoint, or offers never probed, have no liveness and match neither ``online=true``
  nor ``online=false`` (``online!=true`` matches them)
* ``cluster`` (true/false): whether the provider's worker serves cluster nodes (its health
  answer names a mesh UDP port, ``"cluster": {"udp_port": ...}``); like ``online``, offers
  not probed or whose worker did not answer match neither value

A true/false field alone is ``field=true``: ``online workloads`` is ``online=true
workloads=true``.

Text fields take ``=``, ``!=``, ``in``, ``notin``; numbers take every operator. Every mistake
raises :class:`QueryError` (a ``ValueError``) with one line naming the clause and the fix.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from solders.pubkey import Pubkey

from .errors import AccountNotFound
from .reputation import badge, offer_score, reputation_score
from .units import nominal_vram_gb

if TYPE_CHECKING:  # the views pull in the codec (anchorpy): loaded only where used
    from .accounts import MarketParams, ProviderView

__all__ = [
    "FIELDS",
    "SORT_FIELDS",
    "Clause",
    "Liveness",
    "Offer",
    "Query",
    "QueryError",
    "best_offer",
    "filter_offers",
    "last_settled_window",
    "list_offers",
    "list_providers",
    "offers_from_providers",
    "parse_query",
    "probe_liveness",
    "probe_worker",
    "rank_key",
    "reputation_score",
    "serves_cluster_nodes",
    "sort_offers",
    "with_liveness",
]

SECONDS_PER_HOUR = 3600
MIB_PER_GIB = 1024

class QueryError(ValueError):
    """A query clause or sort order that cannot be parsed or does not fit its field; the
    message is one line naming the clause and what to write instead."""


# ----------------------------------------------------------------------------- offers


@dataclass(frozen=True)
class Offer:
    """A provider a job can be created on, as the chain shows it (see the module docstring).

    ``gpus_free``: GPUs one new job can take now: free and backed by stake. Amounts are base
    units of the market's mints (``price_per_gpu_second``: payment mint; ``stake``: stake mint).
    """

    provider: Pubkey
    """The Provider account (PDA): what ``create_job`` and ``gpum job create --provider`` take."""
    owner: Pubkey
    worker_key: Pubkey
    gpu_model: str
    gpus_free: int
    gpus_total: int
    vram_mib: int
    region: str
    price_per_gpu_second: int
    stake: int
    verified_hours: float
    jobs_completed: int
    jobs_failed: int
    slashes: int
    jailed: bool
    score: float
    """:func:`gpu_market.reputation.offer_score` of the provider, in [0, 1]."""
    endpoint: str
    """The worker's API URL; "" = the provider runs no workloads (rents bare GPUs only)."""
    hardware: str = "unverified"
    """The last hardware verdict: ``verified``, ``failed`` or ``unverified`` (none, or cleared)."""
    badge: bool = False
    """The verified badge (:func:`gpu_market.reputation.badge`); False when not computed."""
    rating: float | None = None
    """The users' average stars (1..5); None without ratings."""
    ratings: int = 0
    """How many users rated a job of the provider."""
    online: bool | None = None
    """Whether the worker answered its health probe; None: not probed, or no endpoint."""
    checked_at: int | None = None
    """Unix seconds of the probe; None: not probed."""
    last_seen: int | None = None
    """Unix seconds the provider was last seen alive (see "Liveness"); None: unknown."""
    liveness_error: str = ""
    """Why the probe failed ("" when online or not probed)."""
    cluster: bool | None = None
    """Whether the worker serves cluster nodes (its health names a mesh UDP port); None: not
    probed, or the worker did not answer."""

    def price_per_gpu_hour(self) -> int:
        """``price_per_gpu_second * 3600``, payment-mint base units."""
        return self.price_per_gpu_second * SECONDS_PER_HOUR

    @property
    def verified(self) -> bool:
        """The provider's last hardware verdict passed and still holds."""
        return self.hardware == "verified"

    @property
    def runs_workloads(self) -> bool:
        """Whether the provider publishes a worker endpoint (``gpum job create --image``)."""
        return self.endpoint != ""

    @classmethod
    def from_provider(cls, view: ProviderView, *, min_stake_per_gpu: int = 0,
                      params: MarketParams | None = None, now: int | None = None) -> Offer:  # fmt: skip
        """The offer ``view`` makes under a market's ``min_stake_per_gpu`` (base units), whatever
        its status (``gpus_free`` is 0 for a provider that cannot take a job for lack of GPUs or
        stake); ``badge`` is computed under ``params`` (in force) at ``now`` when both are
        given. ``view.address`` must be set (views read from chain have it)."""
        if view.address is None:
            raise ValueError("the provider view has no address; read it from chain")
        rep = view.reputation
        jailed = view.status == "jailed"
        return cls(
            provider=view.address,
            owner=view.owner,
            worker_key=view.worker_key,
            gpu_model=view.spec.gpu_model,
            gpus_free=_rentable_gpus(view, min_stake_per_gpu),
            gpus_total=view.spec.gpu_count,
            vram_mib=view.spec.vram_mib,
            region=view.spec.region,
            price_per_gpu_second=view.price_per_gpu_second,
            stake=view.stake,
            verified_hours=rep.verified_seconds / SECONDS_PER_HOUR,
            jobs_completed=rep.jobs_completed,
            jobs_failed=rep.jobs_failed,
            slashes=rep.slashes,
            jailed=jailed,
            score=offer_score(view),
            endpoint=view.endpoint,
            hardware=view.hardware.status,
            badge=params is not None and now is not None and badge(view, params, now),
            rating=view.ratings.average,
            ratings=view.ratings.count,
        )


def _rentable_gpus(view: ProviderView, min_stake_per_gpu: int) -> int:
    """GPUs one new job can take: free ones, no more than the stake backs beyond those in use
    (``create_job``: ``stake >= min_stake_per_gpu * (gpus_in_use + gpu_count)``)."""
    free = view.free_gpus
    if min_stake_per_gpu <= 0:
        return free
    backed = view.stake // min_stake_per_gpu - view.gpus_in_use
    return max(0, min(free, backed))


def list_providers(client: Any, market: Pubkey) -> list[ProviderView]:
    """Every Provider account of ``market``, whatever its status, sorted by address (one
    getProgramAccounts call filtered by discriminator and market)."""
    views = client._program_accounts("Provider", {"market": bytes(market)})
    return sorted(views, key=lambda p: bytes(p.address))


def offers_from_providers(providers: Iterable[ProviderView], *, min_stake_per_gpu: int, now: int,
                          include_full: bool = False,
                          params: MarketParams | None = None) -> list[Offer]:  # fmt: skip
    """The offers among ``providers`` at unix time ``now`` (chain time) under the market's
    ``min_stake_per_gpu``: Active ones whose worker key has not expired and that have GPUs a
    job can take (``include_full``: also those with none), sorted by :func:`rank_key`;
    ``params`` (in force at ``now``) gives each its badge."""
    out = []
    for p in providers:
        if p.status != "active":
            continue
        if p.worker_key_expires_at != 0 and now > p.worker_key_expires_at:
            continue
        offer = Offer.from_provider(p, min_stake_per_gpu=min_stake_per_gpu, params=params, now=now)
        if offer.gpus_free > 0 or include_full:
            out.append(offer)
    return sorted(out, key=rank_key)


def list_offers(client: Any, market: Pubkey, *, include_full: bool = False,
                probe: bool = False) -> list[Offer]:  # fmt: skip
    """The offers of ``market`` now (Active providers, not jailed, worker key unexpired, with
    GPUs a job can take; ``include_full``: also those with none), sorted by :func:`rank_key`.
    The stake rule uses the parameters in force at chain time. ``probe``: also probe every
    worker (:func:`probe_liveness`, at most ``PROBE_TOTAL_S``) and stamp the liveness on, an
    offline provider's ``last_seen`` from :func:`last_settled_window` (offline ones rank
    last). AccountNotFound if there is no market at ``market``."""
    from .accounts import effective_params

    m = client.fetch_market(market)
    if m is None:
        raise AccountNotFound(f"market {market} does not exist on {client.url}; check the market "
                              "address and the RPC URL")  # fmt: skip
    now = client.chain_time()
    params = effective_params(m, now)
    offers = offers_from_providers(list_providers(client, market), now=now,
                                   min_stake_per_gpu=params.min_stake_per_gpu,
                                   include_full=include_full, params=params)  # fmt: skip
    if not probe:
        return offers
    return with_liveness(offers, probe_liveness(offers),
                         last_seen=lambda o: last_settled_window(client, o.provider, market))


# ----------------------------------------------------------------------------- liveness

HEALTH_PATH = "/v1/health"
HEALTH_MAX_BYTES = 4096
PROBE_DEADLINE_S = 3.0
"""Total deadline of one worker health probe."""
PROBE_TOTAL_S = 5.0
"""Cap on the time all the probes of one listing take together."""
PROBE_PARALLEL = 16


@dataclass(frozen=True)
class Liveness:
    """One provider's liveness as a probe saw it (see "Liveness" in the module docstring)."""

    online: bool | None
    """True: the worker answered; False: it did not (``error`` says why); None: no endpoint."""
    checked_at: int
    """Unix seconds of the probe."""
    error: str = ""
    cluster: bool | None = None
    """Whether the worker serves cluster nodes (None: it did not answer, or no endpoint)."""


def serves_cluster_nodes(health: dict[str, Any]) -> bool:
    """Whether a worker's health answer says it serves cluster nodes: its ``cluster`` names
    the mesh's UDP port."""
    c = health.get("cluster")
    port = c.get("udp_port") if isinstance(c, dict) else None
    return isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535


def _probe(http: Any, endpoint: str, worker_key: Pubkey | None,
           deadline: float) -> tuple[str, dict[str, Any] | None]:  # fmt: skip
    """(:func:`probe_worker`'s answer, the health object when healthy)."""
    from .net import NetError
    from .workload_api import WorkerApiError, normalize_endpoint

    try:
        url = normalize_endpoint(endpoint) + HEALTH_PATH
    except WorkerApiError as e:
        return str(e), None
    try:
        r = http.get(url, deadline=deadline, max_bytes=HEALTH_MAX_BYTES)
    except NetError as e:
        return f"no answer from {url}: {e}", None
    if r.status != 200:
        return f"{url} answered HTTP {r.status}", None
    body = r.json_object()
    if body is None or body.get("ok") is not True:
        return f"{url} did not answer {{\"ok\": true}}", None
    named = body.get("worker")
    if worker_key is not None and isinstance(named, str) and named != str(worker_key):
        return (f"{url} is the worker {named}, not the provider's current worker key "
                f"{worker_key}"), None
    return "", body


def probe_worker(http: Any, endpoint: str, worker_key: Pubkey | None = None, *,
                 deadline: float = PROBE_DEADLINE_S) -> str:  # fmt: skip
    """Why the worker at ``endpoint`` is not healthy, "" when it is: ``GET /v1/health`` through
    the BoundedClient ``http`` within ``deadline`` seconds answered 200 ``{"ok": true}`` naming
    ``worker_key`` (when given and the answer names a worker). Never raises for the network."""
    return _probe(http, endpoint, worker_key, deadline)[0]


def probe_liveness(offers: Iterable[Offer], *, deadline: float = PROBE_DEADLINE_S,
                   total: float = PROBE_TOTAL_S, parallel: int = PROBE_PARALLEL,
                   http: Any = None, clock: Callable[[], float] | None = None,
                   ) -> dict[Pubkey, Liveness]:  # fmt: skip
    """The liveness of every offer's worker (by provider), probed in parallel (at most
    ``parallel`` at once), each probe within ``deadline`` s, all within ``total`` s of the
    call: a probe that has not answered by then counts as offline. Offers without an endpoint
    get ``online`` None. ``http``: a :class:`~gpu_market.net.BoundedClient` (default: a new
    one, closed at the end)."""
    import time
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures import wait as wait_all

    from .net import BoundedClient

    clock = clock or time.time
    start = time.monotonic()
    checked_at = int(clock())
    todo = [o for o in offers if o.endpoint]
    out = {o.provider: Liveness(None, checked_at) for o in offers if not o.endpoint}
    if not todo:
        return out
    own = http is None
    client = BoundedClient(deadline=deadline, max_bytes=HEALTH_MAX_BYTES) if own else http
    pool = ThreadPoolExecutor(max_workers=max(1, min(parallel, len(todo))),
                              thread_name_prefix="gpum-probe")  # fmt: skip
    try:
        futures = {
            o.provider: pool.submit(
                lambda o=o: _probe(client, o.endpoint, o.worker_key,
                                   min(deadline, max(0.001, total - (time.monotonic() - start)))))
            for o in todo
        }  # fmt: skip
        wait_all(futures.values(), timeout=max(0.0, total - (time.monotonic() - start)))
        for provider, f in futures.items():
            health = None
            if f.done() and f.exception() is None:
                why, health = f.result()
            elif f.done():
                why = f"probe failed: {f.exception()}"
            else:
                why = f"no answer within {total:g} s"
            cluster = None if health is None else serves_cluster_nodes(health)
            out[provider] = Liveness(why == "", checked_at, why, cluster)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        if own:
            client.close()
    return out


def last_settled_window(client: Any, provider: Pubkey, market: Pubkey | None = None) -> int | None:
    """The end (unix seconds) of the last window the committee settled for any of
    ``provider``'s jobs still on chain, or None when none has one."""
    jobs = client.list_jobs(provider=provider, market=market)
    ends = [j.last_window_end for j in jobs if j.last_window_end]
    return max(ends, default=None)


def with_liveness(offers: Iterable[Offer], liveness: dict[Pubkey, Liveness],
                  last_seen: Callable[[Offer], int | None] | None = None) -> list[Offer]:
    """``offers`` with their liveness stamped on (offers missing from ``liveness`` are left as
    they are), sorted by :func:`rank_key` (offline last). ``last_seen(offer)`` gives the last
    time an offline provider was seen alive (e.g. :func:`last_settled_window`); an online one
    was seen at its probe."""
    from dataclasses import replace

    out = []
    for o in offers:
        live = liveness.get(o.provider)
        if live is None:
            out.append(o)
            continue
        seen = live.checked_at if live.online else None
        if live.online is False and last_seen is not None:
            seen = last_seen(o)
        out.append(replace(o, online=live.online, checked_at=live.checked_at, last_seen=seen,
                           liveness_error=live.error, cluster=live.cluster))  # fmt: skip
    return sorted(out, key=rank_key)


# ----------------------------------------------------------------------------- ranking


def _effective_price(offer: Offer) -> Fraction:
    return Fraction(offer.price_per_gpu_second) / (Fraction(1, 2) + Fraction(offer.score) / 2)


def rank_key(offer: Offer) -> tuple:
    """Sort key of the default order: offline providers (``online`` False) last, then
    effective price per GPU-second ``price / (0.5 + 0.5 * score)`` ascending (exact), then
    higher score, more free GPUs, and the provider address (bytes) ascending."""
    return (offer.online is False, _effective_price(offer), -offer.score, -offer.gpus_free,
            bytes(offer.provider))


def _norm(text: str) -> str:
    """Text as the query compares it: case-insensitive, ``_`` and space alike, trimmed."""
    return text.replace("_", " ").strip().casefold()


def best_offer(offers: Iterable[Offer], *, gpus: int, gpu_model: str | None = None,
               max_price_per_gpu_second: int | None = None,
               needs_workloads: bool = False) -> Offer | None:  # fmt: skip
    """The first offer by :func:`rank_key` that is not jailed and has at least ``gpus`` GPUs a
    job can take, whose model contains ``gpu_model`` (case-insensitive, ``_`` = space) if
    given, whose price per GPU-second (base units) is at most ``max_price_per_gpu_second`` if
    given, and that runs workloads if ``needs_workloads``; None when none qualifies. ValueError
    if ``gpus`` < 1."""
    if gpus < 1:
        raise ValueError(f"gpus must be at least 1, got {gpus}")
    model = None if gpu_model is None else _norm(gpu_model)
    fits = [
        o for o in offers
        if not o.jailed and o.gpus_free >= gpus
        and (model is None or model in _norm(o.gpu_model))
        and (max_price_per_gpu_second is None or o.price_per_gpu_second <= max_price_per_gpu_second)
        and (not needs_workloads or o.runs_workloads)
    ]  # fmt: skip
    return min(fits, key=rank_key, default=None)


# ----------------------------------------------------------------------------- fields


@dataclass(frozen=True)
class _Field:
    kind: str  # "text", "int", "number", "real", "bool"
    help: str
    example: str


FIELDS: dict[str, _Field] = {
    "gpu_model": _Field("text", "GPU model; = matches a substring", "gpu_model=H100"),
    "gpus": _Field("int", "free GPUs a job can take", "gpus>=2"),
    "gpus_total": _Field("int", "GPUs of the provider", "gpus_total>=8"),
    "vram": _Field("number", "GB per GPU as the card is sold (80 for an H100 80GB)", "vram>=80"),
    "region": _Field("text", "region", "region in [us-west,eu-west]"),
    "price": _Field("number", "payment-mint UI units per GPU-hour", "price<=2.5"),
    "stake": _Field("number", "stake-mint UI units", "stake>=1000"),
    "score": _Field("real", "reputation score in [0, 1]", "score>=0.5"),
    "verified_hours": _Field("real", "hours of verified work", "verified_hours>=10"),
    "jobs_completed": _Field("int", "jobs completed", "jobs_completed>=1"),
    "jobs_failed": _Field("int", "jobs failed", "jobs_failed=0"),
    "slashes": _Field("int", "times slashed", "slashes=0"),
    "workloads": _Field("bool", "runs workloads (publishes a worker endpoint)", "workloads=true"),
    "online": _Field("bool", "the worker answered its health probe", "online=true"),
    "cluster": _Field("bool", "the worker serves cluster nodes (a mesh UDP port)", "cluster=true"),
    "verified": _Field("bool", "hardware verified by a quorum of validators", "verified=true"),
    "badge": _Field("bool", "verified hardware and a long clean record", "badge=true"),
    "rating": _Field("real", "users' average stars, 1..5", "rating>=4"),
    "ratings": _Field("int", "how many users rated a job", "ratings>=3"),
}
"""Query fields: name -> kind, meaning and an example clause."""

_OPS_BY_KIND = {
    "text": ("=", "!=", "in", "notin"),
    "bool": ("=", "!="),
    "int": ("=", "!=", "<", "<=", ">", ">=", "in", "notin"),
    "number": ("=", "!=", "<", "<=", ">", ">=", "in", "notin"),
    "real": ("=", "!=", "<", "<=", ">", ">=", "in", "notin"),
}
_KIND_WORDS = {"text": "text", "bool": "true/false", "int": "a whole number",
               "number": "a number", "real": "a number"}  # fmt: skip
OPERATORS = ("=", "!=", "<", "<=", ">", ">=", "in", "notin")
_ALIASES = {"==": "="}
_TRUE = {"true", "yes", "1"}
_FALSE = {"false", "no", "0"}


def _unknown_field(name: str, clause: str) -> QueryError:
    close = difflib.get_close_matches(name, list(FIELDS), n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return QueryError(f"unknown field {name!r} in {clause!r}{hint}; known fields: "
                      f"{', '.join(FIELDS)}")  # fmt: skip


def _parse_value(name: str, field: _Field, raw: str) -> Any:
    """The typed value of ``raw`` for ``field``; QueryError saying what is expected."""
    kind = field.kind
    if kind == "text":
        return _norm(raw)
    if kind == "bool":
        low = raw.strip().lower()
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
        raise QueryError(f"bad value {raw!r} for {name}: expected true or false, e.g. "
                         f"{field.example}")  # fmt: skip
    text = raw.strip()
    if kind == "int":
        if not re.fullmatch(r"[+-]?\d+", text):
            raise QueryError(f"bad value {raw!r} for {name}: expected a whole number, e.g. "
                             f"{field.example}")  # fmt: skip
        return Fraction(int(text))
    try:
        value = Decimal(text)
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite():
        raise QueryError(f"bad value {raw!r} for {name}: expected a number ({field.help}), e.g. "
                         f"{field.example}")  # fmt: skip
    return Fraction(value)


# ----------------------------------------------------------------------------- query


@dataclass(frozen=True)
class Clause:
    """One ``field op value`` condition. ``values``: the typed values (one, or the list of
    ``in``/``notin``): normalized text, bool, or Fraction; ``raw``: as written."""

    field: str
    op: str
    values: tuple[Any, ...]
    raw: tuple[str, ...]

    def __str__(self) -> str:
        def show(v: str) -> str:
            return f'"{v}"' if (not v or any(c in v for c in ' ,[]"')) else v

        if self.op in ("in", "notin"):
            return f"{self.field} {self.op} [{','.join(show(v) for v in self.raw)}]"
        return f"{self.field}{self.op}{show(self.raw[0])}"

    def matches(self, offer: Offer, *, payment_decimals: int, stake_decimals: int) -> bool:
        """Whether ``offer`` satisfies this clause (amounts in UI units of the given decimals)."""
        actual = _value_of(self.field, offer, payment_decimals, stake_decimals)
        kind = FIELDS[self.field].kind
        if kind == "text":
            if self.field == "gpu_model":
                hit = any(v in actual for v in self.values)
            else:
                hit = any(v == actual for v in self.values)
            return hit if self.op in ("=", "in") else not hit
        if actual is None:  # no value (a provider without ratings): only != and notin hold
            return self.op in ("!=", "notin")
        if kind == "real":
            values = [float(v) for v in self.values]
        else:
            values = list(self.values)
        if self.op in ("=", "in"):
            return any(actual == v for v in values)
        if self.op in ("!=", "notin"):
            return all(actual != v for v in values)
        return _COMPARE[self.op](actual, values[0])


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _value_of(name: str, o: Offer, payment_decimals: int, stake_decimals: int) -> Any:
    """The offer's value of query field ``name``: normalized text, bool, float (score,
    verified_hours) or an exact Fraction."""
    if name == "gpu_model":
        return _norm(o.gpu_model)
    if name == "region":
        return _norm(o.region)
    if name == "workloads":
        return o.runs_workloads
    if name in ("online", "cluster"):
        return getattr(o, name)
    if name in ("verified", "badge", "rating"):
        return getattr(o, name)
    if name == "score":
        return o.score
    if name == "verified_hours":
        return o.verified_hours
    if name == "price":
        return Fraction(o.price_per_gpu_hour(), 10**payment_decimals)
    if name == "stake":
        return Fraction(o.stake, 10**stake_decimals)
    if name == "vram":
        return Fraction(nominal_vram_gb(o.vram_mib, o.gpu_model))
    attr = {"gpus": "gpus_free"}.get(name, name)
    return Fraction(getattr(o, attr))


@dataclass(frozen=True)
class Query:
    """Clauses that must all hold; no clauses matches every offer. ``str()`` gives the
    canonical text, which :func:`parse_query` reads back to an equal query."""

    clauses: tuple[Clause, ...] = ()

    def __str__(self) -> str:
        return " ".join(str(c) for c in self.clauses)

    def matches(self, offer: Offer, *, payment_decimals: int, stake_decimals: int) -> bool:
        return all(c.matches(offer, payment_decimals=payment_decimals,
                             stake_decimals=stake_decimals) for c in self.clauses)  # fmt: skip


_FIELD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SYMBOL_RE = re.compile(r"[!<>=~]+")
_WORD_RE = re.compile(r"[A-Za-z_]+")
_TOKEN_RE = re.compile(r"\S+")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def skip_ws(self) -> bool:
        """Skip whitespace; whether anything is left."""
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1
        return self.pos < len(self.text)

    def rest_word(self) -> str:
        """The clause text from here to the next whitespace (for messages)."""
        return self.text[self.pos:].split(None, 1)[0] if self.skip_ws() else ""

    def _operator_next(self, more: bool) -> bool:
        """Whether an operator (symbol, ``in`` or ``notin``) follows at the cursor."""
        if not more:
            return False
        if _SYMBOL_RE.match(self.text, self.pos):
            return True
        m = _WORD_RE.match(self.text, self.pos)
        return m is not None and m.group().lower() in OPERATORS

    def clause(self) -> Clause:
        start = self.pos
        m = _FIELD_RE.match(self.text, self.pos)
        if m is None:
            raise QueryError(f"expected a field name at {self.rest_word()!r}; a clause is "
                             "`field op value`, e.g. gpus>=2")  # fmt: skip
        name = m.group().lower()
        self.pos = m.end()
        if name not in FIELDS:
            raise _unknown_field(name, self.text[start:].split(None, 1)[0])
        field = FIELDS[name]
        more = self.skip_ws()
        if field.kind == "bool" and not self._operator_next(more):
            return Clause(name, "=", (True,), ("true",))  # a bare flag: field=true
        if not more:
            raise QueryError(f"{name!r} needs an operator and a value, e.g. {field.example}")
        m = _SYMBOL_RE.match(self.text, self.pos) or _WORD_RE.match(self.text, self.pos)
        if m is None:
            raise QueryError(f"{name!r} needs an operator before {self.rest_word()!r}; use one of "
                             f"{' '.join(OPERATORS)}, e.g. {field.example}")  # fmt: skip
        op = _ALIASES.get(m.group().lower(), m.group().lower())
        self.pos = m.end()
        if op not in OPERATORS:
            raise QueryError(f"bad operator {m.group()!r} after {name!r}; use one of "
                             f"{' '.join(OPERATORS)}, e.g. {field.example}")  # fmt: skip
        allowed = _OPS_BY_KIND[field.kind]
        if op not in allowed:
            raise QueryError(f"operator {op!r} does not fit {name} ({_KIND_WORDS[field.kind]}): use "
                             f"{' '.join(allowed)}, e.g. {field.example}")  # fmt: skip
        if not self.skip_ws():
            raise QueryError(f"'{name}{op}' has no value, e.g. {field.example}")
        raw, is_list = self.value(name, op)
        clause_text = self.text[start:self.pos].strip()
        if is_list and op not in ("in", "notin"):
            raise QueryError(f"{clause_text!r} compares with one value; a list needs in or notin, "
                             f"e.g. {name} in [{','.join(raw)}]")  # fmt: skip
        if op not in ("in", "notin") and len(raw) != 1:
            raise QueryError(f"{clause_text!r} has {len(raw)} values; {op} takes one")
        values = tuple(_parse_value(name, field, r) for r in raw)
        return Clause(name, op, values, tuple(raw))

    def value(self, name: str, op: str) -> tuple[list[str], bool]:
        """``(raw values, written as a list)`` at the cursor."""
        text = self.text
        ch = text[self.pos]
        if ch == "[":
            end = text.find("]", self.pos)
            if end < 0:
                raise QueryError(f"the list after '{name} {op}' has no closing ']'")
            inner = text[self.pos + 1:end]
            self.pos = end + 1
            items = [_unquote(i.strip(), name) for i in inner.split(",")]
            if items == [""]:
                raise QueryError(f"the list after '{name} {op}' is empty; name at least one value")
            if any(i == "" for i in items):
                raise QueryError(f"the list after '{name} {op}' has an empty item: [{inner}]")
            return items, True
        if ch in "\"'":
            end = text.find(ch, self.pos + 1)
            if end < 0:
                raise QueryError(f"the value after '{name}{op}' has no closing {ch}")
            value = text[self.pos + 1:end]
            self.pos = end + 1
            return [value], False
        m = _TOKEN_RE.match(text, self.pos)
        assert m is not None  # skip_ws found a non-space character
        token = m.group()
        self.pos = m.end()
        if op in ("in", "notin"):
            while token.endswith(",") and self.skip_ws():
                m2 = _TOKEN_RE.match(text, self.pos)
                assert m2 is not None
                token += m2.group()
                self.pos = m2.end()
        if "," in token:
            items = [_unquote(i.strip(), name) for i in token.split(",")]
            if any(i == "" for i in items):
                raise QueryError(f"the list {token!r} after '{name} {op}' has an empty item")
            return items, True
        return [token], False


def _unquote(item: str, name: str) -> str:
    if len(item) >= 2 and item[0] == item[-1] and item[0] in "\"'":
        return item[1:-1]
    return item


def parse_query(text: str | Sequence[str]) -> Query:
    """The query of ``text`` (a string, or command-line words joined by spaces); an empty text
    is the query matching everything. QueryError (one line) for an unknown field (naming the
    closest and every known one), a missing or bad operator, an operator that does not fit the
    field, or a value of the wrong type."""
    if not isinstance(text, str):
        text = " ".join(text)
    parser = _Parser(text)
    clauses = []
    while parser.skip_ws():
        clauses.append(parser.clause())
    return Query(tuple(clauses))


def filter_offers(offers: Iterable[Offer], query: Query | str | Sequence[str], *,
                  payment_decimals: int, stake_decimals: int) -> list[Offer]:  # fmt: skip
    """The offers satisfying every clause of ``query`` (parsed if not a Query), in their order.
    ``payment_decimals`` / ``stake_decimals``: the market's mints, for ``price`` and ``stake``
    in UI units."""
    if not isinstance(query, Query):
        query = parse_query(query)
    return [o for o in offers
            if query.matches(o, payment_decimals=payment_decimals, stake_decimals=stake_decimals)]


# ----------------------------------------------------------------------------- sorting

_SORT_KEYS: dict[str, Callable[[Offer], Any]] = {
    "gpu_model": lambda o: _norm(o.gpu_model),
    "gpus": lambda o: o.gpus_free,
    "gpus_total": lambda o: o.gpus_total,
    "vram": lambda o: o.vram_mib,
    "region": lambda o: _norm(o.region),
    "price": lambda o: o.price_per_gpu_second,
    "stake": lambda o: o.stake,
    "score": lambda o: o.score,
    "verified_hours": lambda o: o.verified_hours,
    "jobs_completed": lambda o: o.jobs_completed,
    "jobs_failed": lambda o: o.jobs_failed,
    "slashes": lambda o: o.slashes,
    "workloads": lambda o: o.runs_workloads,
    "online": lambda o: (o.online is not None, o.online is True),
    "verified": lambda o: o.verified,
    "badge": lambda o: o.badge,
    "rating": lambda o: (o.rating is not None, o.rating or 0.0),
    "ratings": lambda o: o.ratings,
}
SORT_FIELDS = ("rank", *_SORT_KEYS)
"""What ``sort_offers`` sorts by; a trailing ``-`` sorts descending."""


def sort_offers(offers: Iterable[Offer], sort: str = "rank") -> list[Offer]:
    """``offers`` sorted by ``sort``: ``"rank"`` (:func:`rank_key`, the default) or a query
    field, ascending, or descending with a trailing ``-`` (``"price"``, ``"score-"``); ties keep
    the rank order. QueryError for an unknown field (naming the closest), even with no offers."""
    spec = sort.strip().lower()
    descending = spec.endswith("-")
    name = spec[:-1].strip() if descending else spec
    if name not in SORT_FIELDS:
        close = difflib.get_close_matches(name, SORT_FIELDS, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise QueryError(f"cannot sort by {sort!r}{hint}; sort by one of {', '.join(SORT_FIELDS)}, "
                         "with a trailing - for descending (e.g. score-)")  # fmt: skip
    ranked = sorted(offers, key=rank_key, reverse=descending and name == "rank")
    if name == "rank":
        return ranked
    return sorted(ranked, key=_SORT_KEYS[name], reverse=descending)
