"""The node's dashboard: a read-only JSON API and the web pages that render it.

JSON routes (``server.py`` dispatches them; every answer is ``(http_status, body)``):

* ``GET /v1/jobs/<job>/windows?limit=N`` (``Dashboard.windows``): the job's stored window
  proofs, decoded, oldest first: ``{"job", "windows": [{"seq", "window_start",
  "window_end", "billable_seconds", "approved_seconds", "decision", "workload_state",
  "gpus": [{"uuid", "util_gpu_avg_bp", "temp_max_c", "power_avg_mw",
  "mem_used_max_mib"}]}]}``. Read from the database only (no chain read).
* ``GET /v1/dashboard/market``, ``/offers``, ``/jobs/<job>``, ``/providers/<provider>``,
  ``/validator``, and the lists ``/jobs`` and ``/providers`` (``dashboard_lists.py``): what the pages show, figures read from the chain through the SDK client
  and from the database (a job's settlement history with its transaction signatures).

Guarantees:

* **Read-only and public.** Nothing here writes the chain or the database. Answers carry
  chain data, this node's public key and its settlement history, never a secret: no RPC
  URL (it may hold an API key), no file path, no key material and no stored error text
  (``last_error`` may quote the RPC URL). A chain read that fails answers 503
  ``chain_unavailable`` with a generic message; the detail goes to the log only.
* **Cheap.** Every answer is bounded (``MAX_WINDOWS`` windows, ``MAX_OFFERS`` offers,
  ``MAX_PROVIDER_JOBS`` jobs, ``MAX_SETTLEMENTS`` settlements) and costs at most a few chain
  reads, each cached for ``ttl`` seconds (default 5) in a bounded LRU shared by all
  requests: one read per key however many pages poll it (concurrent misses of one key wait
  for the first). A mint's decimals are read once. Every read a request causes (a cache
  miss) is charged to its source's ``reads`` budget (the intake's per-source
  ``chain.ReadBudget``, under ``gpum-validator run``): past it the answer is 429
  ``chain_read_budget`` (retryable) and nothing is read, so one source naming fresh
  addresses cannot spend the node's RPC quota.
* **Bounded probes.** Offers carry their worker's liveness (``online``, ``checked_at``,
  ``last_seen``) from ``dashboard_liveness.ProbeCache``: each worker probed at most once per
  30 s, in one background thread, a deadline per refresh; a request never probes itself.
* **This market only.** A job or provider of another market answers 404, so the node is
  not a general-purpose chain proxy.
* Errors are the node's usual body ``{"error", "message", "retry"}``: 400 ``bad_request``
  (bad address, bad ``limit``, unknown query parameter), 404 ``job_unknown`` (windows: no
  proof of the job is stored), ``job_not_found`` / ``provider_not_found``, 503
  ``chain_unavailable`` / ``store_unavailable`` (retryable).

Pages (``GET /dashboard/``, ``/dashboard/offers``, ``/dashboard/jobs``, ``/dashboard/providers``,
``/dashboard/job/<job>``, ``/dashboard/provider/<provider>``, ``/dashboard/validator``; a
malformed address gets a readable HTML error page, 400) are static HTML files of
``dashboard_assets/`` with one script and one style sheet served by the node itself
(``/dashboard/assets/...``); they load nothing from elsewhere (a Content-Security-Policy of
``'self'`` enforces it) and poll the JSON API every 5 s.
"""

from __future__ import annotations

import functools
import html
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qs

from gpu_market.accounts import effective_params
from gpu_market.offers import list_offers, sort_offers, with_liveness
from gpu_market.proof import WORKLOAD_STATE_NAMES, ProofDecodeError, decode_proof
from gpu_market.runway import runway_of
from solders.pubkey import Pubkey

from .chain import ReadBudget, read, read_refused
from .dashboard_lists import (
    ApiError,
    closed_receipt,
    jobs_list,
    parse_address,
    parse_filters,
    plain,
    providers_list,
)
from .dashboard_liveness import ProbeCache, liveness_json
from .errors import (
    UNAVAILABLE_RETRY_AFTER_SECONDS,
    ChainUnavailable,
    Rejection,
    StoreError,
    error_body,
)
from .records import Intent, Store, StoredProof
from .rewards import stored_rewards

log = logging.getLogger("gpum_validator.dashboard")

DEFAULT_WINDOWS = 120
MAX_WINDOWS = 500
MAX_OFFERS = 200
MAX_PROVIDER_JOBS = 50
MAX_SETTLEMENTS = 50
MAX_RECENT_SETTLEMENTS = 20
DEFAULT_TTL_SECONDS = 5.0
CACHE_ENTRIES = 1024

Answer = tuple[int, dict[str, Any]]


# ----------------------------------------------------------------------------- cache


@dataclass
class _Entry:
    done: threading.Event
    expires: float = 0.0
    value: Any = None
    error: BaseException | None = None


class TTLCache:
    """``get(key, load)``: ``load()``'s value, kept ``ttl`` seconds (per call, or the
    default) in an LRU of at most ``max_entries``. Concurrent misses of one key run ``load``
    once; the others wait for it and get its value, or its exception. Exceptions are not
    cached. Thread-safe."""

    def __init__(self, ttl: float = DEFAULT_TTL_SECONDS, max_entries: int = CACHE_ENTRIES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.ttl = ttl
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[Any, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get(self, key: Any, load: Callable[[], Any], ttl: float | None = None) -> Any:
        with self._lock:
            e = self._entries.get(key)
            if e is not None and not e.done.is_set():
                waiting: _Entry | None = e
            elif e is not None and e.error is None and self.clock() < e.expires:
                self._entries.move_to_end(key)
                return e.value
            else:
                waiting = None
                mine = _Entry(threading.Event())
                self._entries[key] = mine
                self._entries.move_to_end(key)
        if waiting is not None:
            waiting.done.wait()
            if waiting.error is not None:
                raise waiting.error
            return waiting.value
        try:
            value = load()
        except BaseException as exc:
            with self._lock:
                if self._entries.get(key) is mine:
                    del self._entries[key]
                mine.error = exc
                mine.done.set()
            raise
        with self._lock:
            mine.value = value
            mine.expires = self.clock() + (self.ttl if ttl is None else ttl)
            mine.done.set()
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return value


# ----------------------------------------------------------------------------- pages

PAGES: Mapping[str, str] = MappingProxyType({
    "market": "index.html", "offers": "offers.html", "job": "job.html",
    "provider": "provider.html", "validator": "validator.html", "jobs": "jobs.html",
    "providers": "providers.html", "rent": "rent.html"})
"""Page -> its HTML file in ``dashboard_assets/`` (the page's own content; the frame every page
shares, head, navigation and footer, is ``layout.html``)."""
PAGE_TITLES: Mapping[str, str] = MappingProxyType({
    "market": "Market", "offers": "Offers", "job": "Job", "provider": "Provider",
    "validator": "Validator", "jobs": "Jobs", "providers": "Providers", "rent": "Rent"})
ASSETS: Mapping[str, str] = MappingProxyType({
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "rent.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml"})
"""The files served under ``/dashboard/assets/`` and their Content-Type (``rent.js`` is the rent
page's script, bundled from ``clients/js/web`` by ``make rent-bundle``; that page loads it in
place of ``dashboard.js``)."""
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; "
                           "img-src 'self'; connect-src 'self'; base-uri 'none'; "
                           "form-action 'none'; frame-ancestors 'none'")
"""Sent with every page: nothing but this node's own files may load or be fetched."""
RENT_CONTENT_SECURITY_POLICY = CONTENT_SECURITY_POLICY.replace(
    "script-src 'self'", "script-src 'self' 'wasm-unsafe-eval'")
"""The rent page's: the same, and its own script may compile WebAssembly (libsodium seals the
workload's secrets in the browser); JavaScript eval stays refused."""


@functools.lru_cache(maxsize=len(PAGES) + len(ASSETS))
def load_asset(name: str) -> bytes:
    """The bytes of a file of ``dashboard_assets/`` (read once), a page's file framed by
    ``layout.html``; KeyError for a name that is neither a page's file nor in ``ASSETS``."""
    if name not in ASSETS and name not in PAGES.values():
        raise KeyError(name)
    raw = (resources.files(__package__) / "dashboard_assets" / name).read_bytes()
    page = next((p for p, f in PAGES.items() if f == name), None)
    if page is None:
        return raw
    return _framed(PAGE_TITLES[page], page, raw)


def _framed(title: str, page: str, content: bytes) -> bytes:
    frame = (resources.files(__package__) / "dashboard_assets" / "layout.html").read_bytes()
    frame = frame[frame.index(b"<!doctype html>"):]  # without its own comment
    if page == "rent":
        frame = frame.replace(b"/dashboard/assets/dashboard.js", b"/dashboard/assets/rent.js")
    return (frame.replace(b"__TITLE__", title.encode())
            .replace(b"__PAGE__", page.encode()).replace(b"__CONTENT__", content))


def error_page(title: str, message: str) -> bytes:
    """A page saying what is wrong with the address asked for (``message`` is escaped), in
    the frame of every page, with a way back; its script loads nothing."""
    body = (f'<h1>{html.escape(title)}</h1>\n<p class="lead" data-role="page-error">'
            f'{html.escape(message)}</p>\n<p><a href="/dashboard/jobs">All jobs</a> · '
            '<a href="/dashboard/providers">All providers</a> · '
            '<a href="/dashboard/">The market</a></p>\n')
    return _framed(title, "error", body.encode())


# ----------------------------------------------------------------------------- pure parts


def parse_limit(query: str, default: int = DEFAULT_WINDOWS, maximum: int = MAX_WINDOWS) -> int:
    """``limit`` of a query string (``"limit=50"``): an integer in 1..``maximum``, ``default``
    when absent. ApiError 400 for anything else, or any other parameter."""
    try:
        params = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query),
                          max_num_fields=4)
    except ValueError:
        raise ApiError(400, "bad_request", f"cannot parse the query string {query[:80]!r}; "
                       "use ?limit=N") from None
    unknown = sorted(set(params) - {"limit"})
    if unknown:
        raise ApiError(400, "bad_request", f"unknown query parameter {unknown[0][:40]!r}; "
                       "the only one is limit")
    values = params.get("limit")
    if values is None:
        return default
    if len(values) != 1 or not values[0].isdigit() or not 1 <= int(values[0]) <= maximum:
        raise ApiError(400, "bad_request", f"limit must be one integer in 1..{maximum}")
    return int(values[0])


def window_json(sp: StoredProof) -> dict[str, Any]:
    """One stored proof as the windows API shows it (StoreError-free: the bytes were
    decoded when stored; a row that no longer decodes raises ``ProofDecodeError``)."""
    p = decode_proof(sp.proof)
    state = p.workload.state
    return {
        "seq": p.seq,
        "window_start": p.window_start,
        "window_end": p.window_end,
        "billable_seconds": p.billable_seconds,
        "approved_seconds": int(sp.approved_seconds or 0) if sp.decision == "accepted" else 0,
        "decision": sp.decision,
        "workload_state": (WORKLOAD_STATE_NAMES[state] if 0 <= state < len(WORKLOAD_STATE_NAMES)
                           else str(state)),
        "gpus": [{"uuid": g.uuid, "util_gpu_avg_bp": g.util_gpu_avg_bp,
                  "temp_max_c": g.temp_max_c, "power_avg_mw": g.power_avg_mw,
                  "mem_used_max_mib": g.mem_used_max_mib} for g in p.gpus],
    }


def settlement_json(i: Intent) -> dict[str, Any]:
    """A settlement intent without its attestations or error text (``last_error`` may quote
    the RPC URL): what was settled, how it ended and the transaction signature."""
    return {"seq": i.seq_to, "cumulative_seconds": i.cumulative_seconds,
            "approved_seconds": i.approved_seconds, "window_end": i.window_end,
            "status": i.status, "signature": i.signature, "attempts": i.attempts,
            "created_at": i.created_at, "updated_at": i.updated_at}


def _b58(key: Any) -> str:
    return str(key if isinstance(key, Pubkey) else Pubkey.from_bytes(bytes(key)))


OFFER_FIELDS = ("provider", "owner", "gpu_model", "gpus_free", "gpus_total", "vram_mib",
                "region", "price_per_gpu_second", "stake", "verified_hours", "jobs_completed",
                "jobs_failed", "slashes", "jailed", "score", "endpoint")
RUNWAY_FIELDS = ("rate_per_second", "spend_per_hour", "booked_escrow", "unsettled_seconds",
                 "available", "runway_seconds", "settled_seconds", "running_seconds")


def offer_json(offer: Any, rank: int) -> dict[str, Any]:
    """An SDK ``Offer`` (``gpu_market.offers``) with its 1-based ``rank``."""
    out = {name: plain(getattr(offer, name)) for name in OFFER_FIELDS}
    out["price_per_gpu_hour"] = plain(offer.price_per_gpu_hour())
    out["rank"] = rank
    out.update(liveness_json(offer))
    return out


def _job_chain_json(j: Any) -> dict[str, Any]:
    t = j.terms
    moved = j.paid_provider + j.paid_validators + j.paid_treasury + j.burned
    return {
        "status": j.status, "user": _b58(j.user), "provider": _b58(j.provider),
        "job_id": j.job_id, "gpu_count": j.gpu_count,
        "committee": [_b58(m) for m in j.committee], "quorum": t.quorum,
        "rate_per_second": t.rate_per_second, "window_seconds": t.window_seconds,
        "fee_bps": t.fee_bps, "burn_bps": t.burn_bps,
        "validator_reward_bps": t.validator_reward_bps,
        "deposited": j.deposited, "escrow": j.booked_escrow, "cost": moved,
        "claimed_seconds": j.claimed_seconds, "paid_seconds": j.paid_seconds,
        "paid_provider": j.paid_provider, "paid_validators": j.paid_validators,
        "paid_treasury": j.paid_treasury, "burned": j.burned, "refunded": j.refunded,
        "created_at": j.created_at, "started_at": j.started_at, "ended_at": j.ended_at,
        "last_seq": j.last_seq, "last_window_end": j.last_window_end,
        "grace_ends_at": j.grace_ends_at, "expirable_after": j.expirable_after,
        "workload": any(j.workload_hash),
    }


# ----------------------------------------------------------------------------- the API


def answer(fn: Callable[[], dict[str, Any]]) -> Answer:
    """Run one request: 200 with ``fn()``'s body, or the error answer. Chain and database
    failures are logged with their detail and answered 503 with a generic message (the
    detail may quote the RPC URL); anything unexpected is logged and answered 500."""
    try:
        return 200, fn()
    except ApiError as e:
        return e.status, error_body(e.reason, e.message)
    except Rejection as r:
        return r.http_status, r.body()
    except ChainUnavailable as e:
        log.warning("dashboard: %s", e)
        return 503, error_body("chain_unavailable", "this node cannot read the chain "
                               "right now; retry later", UNAVAILABLE_RETRY_AFTER_SECONDS)
    except StoreError as e:
        log.error("dashboard: %s", e)
        return 503, error_body("store_unavailable", "this node cannot read its database "
                               "right now; retry later", UNAVAILABLE_RETRY_AFTER_SECONDS)
    except Exception:  # a bug: answered, logged with its traceback, never shown
        log.exception("dashboard: internal error")
        return 500, error_body("internal_error", "the dashboard failed to answer; the "
                               "node's log has the details")


def windows(store: Store, job_b58: str, query: str = "") -> Answer:
    """``GET /v1/jobs/<job>/windows?limit=N``: the newest N (default ``DEFAULT_WINDOWS``, at
    most ``MAX_WINDOWS``) stored windows of the job, oldest first, one per seq (the accepted
    proof at an equivocated seq); a rejected window approves 0 seconds. Database only.
    404 ``job_unknown`` when nothing of the job is stored."""
    def body() -> dict[str, Any]:
        job = parse_address(job_b58, "the job address")
        limit = parse_limit(query)
        rows = store.recent_windows(bytes(job), limit)
        if not rows:
            raise ApiError(404, "job_unknown", f"no window of job {job} is stored here; this "
                           "node is not on its committee or got no proof of it yet")
        out = []
        for sp in rows:
            try:
                out.append(window_json(sp))
            except ProofDecodeError as e:  # stored bytes decoded once: the row is damaged
                log.error("stored proof of job %s seq %d does not decode: %s", job, sp.seq, e)
        return {"job": str(job), "windows": out}
    return answer(body)


class _Source:
    def __init__(self, local: threading.local, name: str) -> None:
        self.local, self.name = local, name

    def __enter__(self) -> None:
        self.previous = getattr(self.local, "name", "")
        self.local.name = self.name

    def __exit__(self, *exc: object) -> None:
        self.local.name = self.previous


class Dashboard:
    """The dashboard's JSON answers for one node (``market``, ``authority``): chain reads
    through ``client`` (the SDK's ``GpuMarketClient``, or a stand-in with the same reads)
    cached ``ttl`` seconds, history from ``store``. Offers are the SDK's
    (``gpu_market.offers``, full providers included, best rank first), runways too
    (``gpu_market.runway``, at chain time). Thread-safe."""

    def __init__(self, client: Any, store: Store, market: bytes, authority: bytes, *,
                 ttl: float = DEFAULT_TTL_SECONDS, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic,
                 reads: ReadBudget | None = None, probe: bool = True,
                 liveness: ProbeCache | None = None) -> None:
        self.client = client
        self.liveness = liveness or (ProbeCache(clock=clock) if probe else None)
        """The workers' health probes (``dashboard_liveness``); None: never probed, every
        provider's ``online`` is null."""
        self.reads = reads
        """Chain reads each request source may cause (None: unlimited)."""
        self._source = threading.local()
        self.store = store
        self.market = Pubkey.from_bytes(bytes(market))
        self.authority = Pubkey.from_bytes(bytes(authority))
        self.cache = TTLCache(ttl, CACHE_ENTRIES, monotonic)
        self.clock = clock

    # -- plumbing ---------------------------------------------------------------------

    def _read(self, key: tuple[Any, ...], what: str, fn: Callable[[], Any],
              ttl: float | None = None, required: bool = False) -> Any:
        """``fn()`` through the cache; a transport failure is ChainUnavailable (``read``),
        and so is None when ``required`` (an account this node's market cannot lack)."""
        value = self.cache.get(key, lambda: self._charged(what, fn), ttl)
        if value is None and required:
            raise ChainUnavailable(f"cannot read {what}: the chain returned nothing")
        return value

    def _charged(self, what: str, fn: Callable[[], Any]) -> Any:
        """One chain read, paid by the source of the request running on this thread."""
        source = getattr(self._source, "name", "")
        if self.reads is not None and source and not self.reads.take(source):
            raise read_refused(self.reads)
        return read(what, fn)

    def as_source(self, source: str) -> _Source:
        """``with dashboard.as_source(source): ...``: the chain reads of the answers built
        inside are charged to ``source`` (``server.source_of``)."""
        return _Source(self._source, source)

    def _now(self) -> int:
        """The chain's clock (``unix_timestamp``), cached like every read."""
        return int(self._read(("clock",), "the chain clock", self.client.chain_time,
                              required=True))

    def _market_view(self) -> Any:
        return self._read(("market",), "the market account",
                          lambda: self.client.fetch_market(self.market), required=True)

    def _decimals(self, m: Any) -> dict[str, int]:
        """Decimals of the payment and stake mints (read once: they never change)."""
        def one(mint: Pubkey) -> int:
            return int(self._read(("decimals", bytes(mint)), "a mint",
                                  lambda: self.client.mint_decimals(mint), math.inf,
                                  required=True))
        return {"payment": one(m.payment_mint), "stake": one(m.stake_mint)}

    def _offer_list(self) -> list[Any]:
        return self._read(("offers",), "the providers' offers",
                          lambda: sort_offers(list_offers(self.client, self.market,
                                                          include_full=True), "rank")) or []

    def _live_offers(self) -> list[Any]:
        """``_offer_list`` with each worker's liveness stamped on (the probes' cached
        answers, ``dashboard_liveness``), offline providers last; an offline one's
        ``last_seen`` is its newest online probe here or the end of the last window settled
        for its jobs on chain (one cached read of the market's jobs)."""
        offers = self._offer_list()
        if self.liveness is None or not offers:
            return offers
        live = self.liveness.lookup(offers)
        ends: dict[bytes, int] | None = None

        def last_seen(o: Any) -> int | None:
            nonlocal ends
            if ends is None:
                ends = {}
                try:
                    jobs = self._read(("market_jobs",), "the market's jobs",
                                      lambda: self.client.list_jobs(market=self.market)) or []
                except ChainUnavailable as e:
                    log.warning("dashboard: %s", e)
                    jobs = []
                for j in jobs:
                    if j.last_window_end:
                        k = bytes(j.provider)
                        ends[k] = max(ends.get(k, 0), int(j.last_window_end))
            probes = self.liveness
            seen = [t for t in (probes.seen_online(o.provider) if probes else None,
                                ends.get(bytes(o.provider))) if t]
            return max(seen, default=None)
        return with_liveness(offers, live, last_seen=last_seen)

    # -- windows --------------------------------------------------------------------

    def windows(self, job_b58: str, query: str = "") -> Answer:
        """``windows(self.store, ...)``."""
        return windows(self.store, job_b58, query)

    # -- market, offers ----------------------------------------------------------------

    def market_summary(self) -> Answer:
        """``GET /v1/dashboard/market``: the market's totals (staked, bonded, fees, burned,
        slashed, jobs, validator rewards), the parameters in force, and counts of
        providers, GPUs and active validators."""
        def body() -> dict[str, Any]:
            m = self._market_view()
            now = self._now()
            offers = self._offer_list()
            validators = self._read(("validators",), "the validators",
                                    lambda: self.client.list_validators(
                                        self.market, statuses=["active"])) or []
            params = effective_params(m, now)
            t = m.totals
            return {
                "market": str(self.market), "read_at": now, "paused": bool(m.paused),
                "authority": str(m.authority), "payment_mint": str(m.payment_mint),
                "stake_mint": str(m.stake_mint), "decimals": self._decimals(m),
                "totals": {"staked": t.staked, "bonded": t.bonded, "fees": t.fees,
                           "burned": t.burned, "slashed": t.slashed, "jobs": t.jobs,
                           "rewards": t.rewards, "rewards_unclaimed": t.rewards_unclaimed},
                "params": {k: int(v) for k, v in vars(params).items()},
                "params_change_at": m.params_effective_at or None,
                "providers": len(offers),  # Active, worker key unexpired
                "gpus_total": sum(int(o.gpus_total) for o in offers),
                "gpus_free": sum(int(o.gpus_free) for o in offers),
                "validators_active": len(validators),
            }
        return answer(body)

    def offers(self, query: str = "") -> Answer:
        """``GET /v1/dashboard/offers?all=true``: the offers of the market's Active providers
        (``gpu_market.offers``, those with no GPU free included), best rank first, each with
        its worker's liveness (``online``: true / false / null = no endpoint or not probed
        yet, ``checked_at``, ``last_seen``). Offline providers rank last and are left out
        unless ``all=true`` (``offline`` counts them). At most ``MAX_OFFERS``
        (``truncated`` says when there are more; ``count`` is all those matching)."""
        def body() -> dict[str, Any]:
            show_all = parse_filters(query, ("all",)).get("all", "false").lower()
            if show_all not in ("true", "false"):
                raise ApiError(400, "bad_request", "all must be true or false")
            m = self._market_view()
            ranked = self._live_offers()
            offers = [o for o in ranked if show_all == "true" or o.online is not False]
            shown = offers[:MAX_OFFERS]
            return {"market": str(self.market), "read_at": self._now(),
                    "decimals": self._decimals(m), "count": len(offers),
                    "offline": sum(1 for o in ranked if o.online is False),
                    "all": show_all == "true", "probing": self.liveness is not None,
                    "truncated": len(offers) > len(shown),
                    "offers": [offer_json(o, i) for i, o in enumerate(shown, start=1)]}
        return answer(body)

    # -- job ------------------------------------------------------------------------------

    def job(self, job_b58: str) -> Answer:
        """``GET /v1/dashboard/jobs/<job>``: the job on chain (status, escrow, cost so far =
        what left the escrow, paid and claimed seconds, terms, committee), its runway
        (``gpu_market.runway``), what this node holds of it (``node``: its last accepted
        seq and approved total) and its settlements by this node, newest first, with their
        transaction signatures, and ``container``: the workload's state in the newest window
        proof this node holds (the worker's own status needs the user's signature; the
        spec, and so the ports, is private: only its hash is on chain). A closed job (a
        ``ClosedJob`` tombstone, or windows held here) answers with ``on_chain`` false and
        ``closed``: its receipt (``dashboard_lists.closed_receipt``: closed_at, paid,
        fees, burned, refunded, the close signature); 404 ``job_not_found`` when neither knows it or the
        job is of another market."""
        def body() -> dict[str, Any]:
            key = parse_address(job_b58, "the job address")
            j = self._read(("job", bytes(key)), "the job account",
                           lambda: self.client.fetch_job(key))
            if j is not None and j.market != self.market:
                raise ApiError(404, "job_not_found", f"no job at {key} on this market "
                               f"({self.market})")
            state = self.store.job_state(bytes(key))
            receipt = closed_receipt(self, key) if j is None else None
            if j is None and state is None and receipt is None:
                raise ApiError(404, "job_not_found", f"no job at {key} on this market")
            m = self._market_view()
            now = self._now()
            runway = None
            if j is not None:
                r = runway_of(j, now)
                runway = {name: plain(getattr(r, name)) for name in RUNWAY_FIELDS}
            node = None
            if state is not None:
                node = {"last_seq": state.last_seq, "claimed_seconds": state.cumulative_seconds,
                        "approved_total": state.approved_total,
                        "last_window_end": state.last_window_end}
            intents = self.store.recent_intents(bytes(key), MAX_SETTLEMENTS)
            newest = self.store.newest_accepted(bytes(key))
            container = None
            if newest is not None:
                w = window_json(newest)
                container = {"state": w["workload_state"], "window_end": w["window_end"],
                             "seq": w["seq"], "source": "window proof"}
            return {"job": str(key), "read_at": now, "on_chain": j is not None,
                    "closed": receipt, "container": container,
                    "decimals": self._decimals(m),
                    "chain": _job_chain_json(j) if j is not None else None,
                    "in_committee": (self.authority in j.committee) if j is not None else None,
                    "runway": runway, "node": node,
                    "settlements": [settlement_json(i) for i in intents]}
        return answer(body)

    # -- lists ------------------------------------------------------------------------

    def jobs(self, query: str = "") -> Answer:
        """``GET /v1/dashboard/jobs?state=&provider=&user=`` (``dashboard_lists``)."""
        return answer(lambda: jobs_list(self, query))

    def providers(self, query: str = "") -> Answer:
        """``GET /v1/dashboard/providers?model=&region=&status=&online=``
        (``dashboard_lists``)."""
        return answer(lambda: providers_list(self, query))

    # -- provider ---------------------------------------------------------------------

    def provider(self, provider_b58: str) -> Answer:
        """``GET /v1/dashboard/providers/<provider>`` (the Provider account, not its owner):
        status, stake and unbonding, price, GPUs, reputation, its offer's score and rank,
        and its jobs still on chain (newest ``MAX_PROVIDER_JOBS``) with what they paid it.
        404 ``provider_not_found`` when there is no such provider in this market."""
        def body() -> dict[str, Any]:
            key = parse_address(provider_b58, "the provider address")
            p = self._read(("provider", bytes(key)), "the provider account",
                           lambda: self.client.fetch_provider(key))
            if p is None or p.market != self.market:
                raise ApiError(404, "provider_not_found", f"no provider of market "
                               f"{self.market} at {key}")
            m = self._market_view()
            jobs = self._read(("provider_jobs", bytes(key)), "the provider's jobs",
                              lambda: self.client.list_jobs(provider=key,
                                                            market=self.market)) or []
            jobs = sorted(jobs, key=lambda j: (j.created_at, bytes(j.address)), reverse=True)
            offers = self._live_offers()
            rank = next((i for i, o in enumerate(offers, start=1)
                         if _b58(o.provider) == str(key)), None)
            rep = p.reputation
            return {
                "provider": str(key), "read_at": self._now(), "decimals": self._decimals(m),
                "owner": str(p.owner), "status": p.status, "jailed_until": p.jailed_until,
                "gpu_model": p.spec.gpu_model, "gpus_total": p.spec.gpu_count,
                "gpus_in_use": p.gpus_in_use, "gpus_free": p.free_gpus,
                "vram_mib": p.spec.vram_mib, "region": p.spec.region,
                "price_per_gpu_second": p.price_per_gpu_second,
                "price_per_gpu_hour": p.price_per_gpu_second * 3600,
                "stake": p.stake,
                "unbonding": {"amount": p.unbonding.amount,
                              "release_at": p.unbonding.release_at},
                "reputation": {"verified_seconds": rep.verified_seconds,
                               "windows_missed": rep.windows_missed,
                               "jobs_completed": rep.jobs_completed,
                               "jobs_failed": rep.jobs_failed, "slashes": rep.slashes},
                "worker_key": str(p.worker_key),
                "worker_key_expires_at": p.worker_key_expires_at,
                "endpoint": p.endpoint,
                "rank": rank, "offers_count": len(offers),
                "score": plain(offers[rank - 1].score) if rank else None,
                **(liveness_json(offers[rank - 1]) if rank else
                   {"online": None, "checked_at": None, "last_seen": None}),
                "jobs_listed": len(jobs),
                "hardware": hardware_summary(self.store, bytes(key)),
                "paid_provider_listed": sum(j.paid_provider for j in jobs),
                "jobs": [{"job": str(j.address), "status": j.status, "gpu_count": j.gpu_count,
                          "deposited": j.deposited, "paid_seconds": j.paid_seconds,
                          "paid_provider": j.paid_provider, "created_at": j.created_at}
                         for j in jobs[:MAX_PROVIDER_JOBS]],
            }
        return answer(body)

    # -- validator --------------------------------------------------------------------

    def validator(self, chain_ok: bool) -> Answer:
        """``GET /v1/dashboard/validator``: this node's health, always 200 so the page can
        show what is down: ``chain_ok`` (the server's probe), ``db_ok``, proofs stored,
        pending windows, settlement intents by status (``settled_here``: receipts landed in a
        transaction this node sent, what the account's ``settlements`` counts, less any the
        database pruned or held before a reset; ``settled_by_others``: confirmed because
        another member settled them first), the last and the recent settlements
        (with transaction signatures), evidence counts, its Validator account as read now
        (``account``, null when the chain cannot be read or it is not registered) and the
        rewards reading the node stored (``rewards``)."""
        def body() -> dict[str, Any]:
            out: dict[str, Any] = {"authority": str(self.authority),
                                   "market": str(self.market), "read_at": int(self.clock()),
                                   "chain_ok": bool(chain_ok)}
            try:
                s = self.cache.get(("summary",), self.store.summary)
                landed = int(self.cache.get(("landed",), lambda: self.store._q(
                    "SELECT COUNT(*) FROM intents WHERE status='confirmed' "
                    "AND signature IS NOT NULL")[0][0]))
                recent = self.store.recent_intents(None, MAX_RECENT_SETTLEMENTS)
                rewards = stored_rewards(self.store)
                db_ok = True
            except StoreError as e:
                log.error("dashboard: %s", e)
                s, recent, rewards, db_ok, landed = {}, [], None, False, 0
            proofs = s.get("proofs") or {}
            intents = s.get("intents") or {}
            last = next((i for i in recent if i.status == "confirmed"), None)
            out.update({
                "db_ok": db_ok, "ok": db_ok and bool(chain_ok),
                "jobs": s.get("jobs"),
                "proofs": {"accepted": int(proofs.get("accepted", 0)),
                           "rejected": int(proofs.get("rejected", 0))} if db_ok else None,
                "pending_windows": s.get("pending_windows"),
                "intents": dict(intents) if db_ok else None,
                # Receipts are counted like the Validator account's ``settlements`` counts
                # them: one per receipt landed in a transaction this node sent. A receipt
                # another member settled first is confirmed here without a transaction.
                "settled_here": landed if db_ok else None,
                "settled_by_others": (max(0, int(intents.get("confirmed", 0)) - landed)
                                      if db_ok else None),
                "open_intents": (int(intents.get("intended", 0)) + int(intents.get("sent", 0))
                                 if db_ok else None),
                "last_settlement_at": s.get("last_settlement_at"),
                "last_settlement": ({"job": _b58(last.job), **settlement_json(last)}
                                    if last else None),
                "recent_settlements": [{"job": _b58(i.job), **settlement_json(i)}
                                       for i in recent],
                "equivocations": s.get("equivocations"),
                "downtime_reports": s.get("downtime_reports"),
                "attestations_signed": s.get("attestations_signed"),
                "rewards": rewards,
            })
            account, decimals = None, None
            try:
                v = self._read(("validator",), "this validator's account",
                               lambda: self.client.fetch_validator_by_authority(
                                   self.market, self.authority))
                decimals = self._decimals(self._market_view())
            except ChainUnavailable as e:
                log.warning("dashboard: %s", e)
                v = None
            if v is not None:
                account = {"status": v.status, "bond": v.bond,
                           "unbonding": {"amount": v.unbonding.amount,
                                         "release_at": v.unbonding.release_at},
                           "settlements": v.settlements, "endpoint": v.endpoint,
                           "rewards_earned": v.rewards_earned,
                           "rewards_unclaimed": v.rewards_unclaimed, "slashes": v.slashes}
            out["account"] = account
            out["decimals"] = decimals
            return out
        return answer(body)


def hardware_summary(store: Any, provider: bytes) -> dict[str, Any]:
    """This node's latest hardware verdict on ``provider``, for its page: ``result``
    ("passed", "failed" or "not checked"), why, when, what ran (``challenger``)."""
    latest = getattr(store, "latest_hardware_verdict", None)
    v = latest(provider) if latest is not None else None
    if v is None:
        return {"result": "not checked", "reasons": "", "challenged_at": None,
                "backend": None}
    return {"result": "passed" if v.passed else "failed",
            "reasons": "; ".join(v.reasons) or "none", "challenged_at": v.challenged_at,
            "backend": v.detail.get("backend"), "why": v.detail.get("why"),
            "attestations": len(v.attestations)}
