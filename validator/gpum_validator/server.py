"""The validator's HTTP routes: POST /v1/proofs, /v1/proofs/batch (the intake); the
committee member endpoints POST /v1/attestations/query, /v1/attestations/sign,
/v1/downtime/sign (``members.Member``), /v1/hardware/sign (``hardware_quorum``); GET
/v1/jobs/<job>/head, /v1/providers/<provider>/hardware (the latest hardware verdict here,
``challenger.hardware_answer``), /health, /metrics; the dashboard. The transport under them
(limits, JSON framing, handler plumbing) is ``transport``.

``GET /v1/jobs/<job base58>/head`` serves the stored proof with the highest seq of a job,
accepted or rejected, for a worker that lost its disk (it must never re-sign a seq it
signed). Only proofs that passed authentication, the job-assignment and the worker-key
checks are ever stored, so strangers cannot make it lie.

The dashboard (``dashboard.py``, read-only, public): ``GET /v1/jobs/<job>/windows?limit=N``
(the stored windows, decoded; served from the database alone), ``GET /v1/dashboard/market``,
``/offers``, ``/jobs`` and ``/providers`` (lists, filtered by query), ``/jobs/<job>``,
``/providers/<provider>``, ``/validator``, and the pages under ``/dashboard/`` with their assets
(a page for a malformed address is an HTML error page, 400) (sent with a Content-Security-Policy that allows nothing
but this node's own files). JSON answers carry ``Cache-Control: no-store``.

The rent page's relay (``rent_proxy.py``, with the dashboard): ``GET /v1/rent/config``,
``/v1/rent/committee``, ``POST /v1/rent/rpc``, ``GET /v1/rent/workers/<provider>/health`` and
``GET|POST /v1/rent/workers/<provider>/jobs/<job>/(workload|logs)``; their bodies are capped by
the relay's own limits (below the node's ``max_body``).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from gpu_market.httpfront import Request, Response, standard_body_check
from solders.pubkey import Pubkey

from .chain import ChainClient
from .challenger import hardware_answer
from .config import MAX_BATCH, MAX_BODY_BYTES
from .dashboard import (
    ASSETS,
    CONTENT_SECURITY_POLICY,
    PAGES,
    RENT_CONTENT_SECURITY_POLICY,
    ApiError,
    Dashboard,
    error_page,
    load_asset,
    parse_address,
    windows,
)
from .errors import (
    UNAVAILABLE_RETRY_AFTER_SECONDS,
    Rejection,
    StoreError,
    error_body,
)
from .intake import Intake
from .members import Member
from .records import Store
from .rent_proxy import RPC_BODY_MAX, WORKER_BODY_MAX, RentProxy
from .rewards import stored_rewards
from .schema import b58_pubkey
from .transport import (
    MAX_JSON_TOKENS,
    HttpLimits,
    JsonHttpServer,
    error_response,
    json_response,
)

log = logging.getLogger("gpum_validator.http")


WRITE_PROBE_S = 5.0
"""How often ``/health`` checks that the database takes a write."""


class HealthProbe:
    """Answers 'is the chain reachable' with a cached ``fetch_market`` (at most every ttl s)."""

    def __init__(self, client: ChainClient, market: bytes, ttl: float = 10.0) -> None:
        self.client = client
        self.market = Pubkey.from_bytes(market)
        self.ttl = ttl
        self._at = -1e18
        self._ok = False
        self._lock = threading.Lock()

    def chain_ok(self) -> bool:
        with self._lock:
            if time.monotonic() - self._at < self.ttl:
                return self._ok
            try:
                self._ok = self.client.fetch_market(self.market) is not None
            except Exception as e:  # noqa: BLE001 - reported as chain_ok false
                log.warning("health: chain unreachable: %s", e)
                self._ok = False
            self._at = time.monotonic()
            return self._ok


HEALTH_CACHE_S = 1.0
# ----------------------------------------------------------------------------- the server


class ValidatorHTTPServer(JsonHttpServer):
    """The validator's HTTP server on the shared front (``gpu_market.httpfront``).
    ``serve_forever()`` runs it on the calling thread until ``shutdown()``;
    ``server_close()`` releases the socket and the handler threads. The socket is bound in
    the constructor (``server_port`` is known at once; ``OSError`` if the address is
    taken)."""

    server_name = "gpum-validator"

    def __init__(self, addr: tuple[str, int], intake: Intake, store: Store,
                 probe: HealthProbe | Callable[[], bool],
                 max_body: int = MAX_BODY_BYTES, member: Member | None = None,
                 dashboard: Dashboard | None = None, limits: HttpLimits | None = None,
                 hardware: Any = None, rent: RentProxy | None = None) -> None:
        self.rent = rent
        """The rent page's relay (``/v1/rent/*``, ``/dashboard/rent``); None: 404."""
        self.intake = intake
        self.hardware = hardware
        """``hardware_quorum.HardwareQuorum`` behind ``POST /v1/hardware/sign`` (None: 404)."""
        self.store = store
        self.probe = probe
        self.max_body = max_body
        self.member = member
        self.dashboard = dashboard
        """The ``/v1/dashboard/*`` routes and the pages; None: they answer 404 (the windows
        route needs only the store and is always served)."""
        super().__init__(addr, limits or HttpLimits())
        self._health: tuple[float, tuple[int, dict[str, Any]] | None] = (0.0, None)
        self._health_lock = threading.Lock()
        self._write_probe: tuple[float, bool] = (float("-inf"), False)

    # ------------------------------------------------------------------ routes' data

    def chain_ok(self) -> bool:
        p = self.probe
        return p.chain_ok() if isinstance(p, HealthProbe) else bool(p())

    def health(self) -> tuple[int, dict[str, Any]]:
        """``GET /health``, computed at most once per ``HEALTH_CACHE_S`` (spam costs one
        database summary a second)."""
        with self._health_lock:
            at, cached = self._health
            if cached is not None and time.monotonic() - at < HEALTH_CACHE_S:
                return cached
            value = self._health_now()
            self._health = (time.monotonic(), value)
            return value

    def _health_now(self) -> tuple[int, dict[str, Any]]:
        db_ok = self.store.ping()
        db_writable = db_ok and self._writable()
        chain_ok = self.chain_ok()
        summary = self.store.summary() if db_ok else {}
        reason = ("database_unreachable" if not db_ok
                  else "database_refuses_writes" if not db_writable
                  else "chain_unreachable" if not chain_ok else None)
        body = {"ok": reason is None, "db_ok": db_ok, "db_writable": db_writable,
                "chain_ok": chain_ok, "reason": reason,
                "last_settlement_at": summary.get("last_settlement_at"),
                "pending_windows": summary.get("pending_windows"),
                "open_intents": (summary.get("intents") or {}).get("intended", 0)
                + (summary.get("intents") or {}).get("sent", 0) if db_ok else None}
        return (200 if body["ok"] else 503), body

    def _writable(self) -> bool:
        """Whether the database takes a durable write now (``Store.write_probe``, at most
        one probe per ``WRITE_PROBE_S``): a node that cannot store what it accepts or signs
        must not look healthy (the detail is logged, never served: it names the file)."""
        now = time.monotonic()
        at, ok = self._write_probe
        if now - at < WRITE_PROBE_S:
            return ok
        error = self.store.write_probe(time.time())
        if error is not None:
            log.error("health: the database refuses writes: %s", error)
        self._write_probe = (now, error is None)
        return error is None

    def head(self, job_b58: str) -> tuple[int, dict[str, Any]]:
        """``GET /v1/jobs/<job>/head``: 200 with the job's highest stored seq, 404
        ``job_unknown`` when nothing is stored, 400 for a bad address, 503 on a database
        failure (retryable)."""
        try:
            job = b58_pubkey(job_b58, "the job address")
            sp = self.store.head(job)
        except Rejection as r:
            return r.http_status, r.body()
        except StoreError as e:
            log.error("store error: %s", e)
            return 503, error_body("store_unavailable", f"{e}; retry later",
                                   UNAVAILABLE_RETRY_AFTER_SECONDS)
        if sp is None:
            return 404, error_body("job_unknown", f"no proof of job {job_b58} is stored here; "
                                   "this validator never accepted or kept one")
        return 200, {"job": job_b58, "seq": sp.seq,
                     "proof": base64.b64encode(sp.proof).decode(),
                     "proof_signature": base64.b64encode(sp.proof_signature).decode(),
                     "receipt_signature": base64.b64encode(sp.receipt_signature).decode(),
                     "worker_key": str(Pubkey.from_bytes(sp.worker_key)),
                     "decision": sp.decision}

    def metrics_text(self) -> str:
        def pending() -> float:
            return float(self.store.pending_windows()) if self.store.ping() else -1.0

        def last() -> float:
            v = self.store.summary().get("last_settlement_at") if self.store.ping() else None
            return float(v) if isinstance(v, (int, float)) else 0.0

        def earned() -> float:
            r = stored_rewards(self.store) if self.store.ping() else None
            return float(r["earned"]) if r and isinstance(r.get("earned"), int) else 0.0

        text = self.intake.metrics.render({
            "gpum_validator_rewards_earned": (
                ("Rewards ever credited to this validator (its Validator account, in payment "
                 "token base units; 0 until read)."), earned),
            "gpum_validator_pending_windows": (
                "Accepted windows not yet covered by a confirmed settlement.", pending),
            "gpum_validator_last_settlement_timestamp_seconds": (
                "Unix time of the last confirmed settlement (0: none).", last),
            "gpum_validator_chain_up": (
                "1 if the RPC answered the last probe.", lambda: float(self.chain_ok())),
            "gpum_validator_http_connections_open": (
                "Open HTTP connections.",
                lambda: float(sum(self.open_connections().values()))),
            "gpum_validator_http_requests_in_flight": (
                "Requests admitted (body being read, waiting for or in a handler).",
                lambda: float(self.in_flight())),
        })
        stats = dict(self.stats)
        out = [("# HELP gpum_validator_http_connections_closed_total Connections the server "
                "closed early, by why."),
               "# TYPE gpum_validator_http_connections_closed_total counter"]
        for why in ("refused_source_cap", "refused_global_cap", "evicted", "timeouts",
                    "bad_requests", "handler_errors"):
            out.append(f'gpum_validator_http_connections_closed_total{{why="{why}"}} '
                       f'{stats.get(why, 0)}')
        return text + "\n".join(out) + "\n"

    # ------------------------------------------------------------------ routes

    def post_routes(self) -> set[str]:
        routes = {"/v1/proofs", "/v1/proofs/batch"}
        if self.member is not None:
            routes |= {"/v1/attestations/query", "/v1/attestations/sign", "/v1/downtime/sign"}
        if self.hardware is not None:
            routes.add("/v1/hardware/sign")
        return routes

    def body_too_large(self) -> None:
        self.intake.metrics.proof("rejected", "body_too_large")

    def check_body(self, req: Request) -> Response | None:
        """The usual checks; a rent relay POST is held to the relay's own body limit."""
        path = urlsplit(req.path).path
        if self.rent is not None and req.method == "POST" and _rent_post(path):
            limit = RPC_BODY_MAX if path == "/v1/rent/rpc" else WORKER_BODY_MAX
            return standard_body_check(req, None, limit, error_response)
        return super().check_body(req)

    def route(self, req: Request) -> Response | None:
        ex = _Exchange(self, req)
        if req.method == "GET":
            ex.do_GET()
        else:
            ex.do_POST()
        return ex.response


class _Exchange:
    """The routes of one request (on a handler thread); the answer goes to ``response``."""

    def __init__(self, server: ValidatorHTTPServer, req: Request) -> None:
        self.server = server
        self.path = req.path
        self.headers = req.headers
        self.body = req.body
        self.source = req.source or "unknown"
        """Who sent it (``source_of``; behind a trusted proxy, the client it names)."""
        self.response: Response | None = None

    def _send(self, status: int, body: bytes, ctype: str, close: bool = False,
              headers: dict[str, str] | None = None) -> None:
        self.response = Response(status, body, ctype, list((headers or {}).items()), close)

    def _json(self, status: int, obj: dict[str, Any], close: bool = False,
              headers: dict[str, str] | None = None) -> None:
        self.response = json_response(status, obj, close, headers)

    def _error(self, status: int, code: str, message: str, close: bool = False) -> None:
        self._json(status, error_body(code, message), close)

    def do_GET(self) -> None:  # stdlib name
        url = urlsplit(self.path)
        path = url.path
        parts = path.split("/")
        if len(parts) == 5 and parts[:3] == ["", "v1", "jobs"] and parts[4] == "head":
            self._json(*self.server.head(parts[3]))
        elif len(parts) == 5 and parts[:3] == ["", "v1", "jobs"] and parts[4] == "windows":
            self._json(*windows(self.server.store, parts[3], url.query), headers=_NO_STORE)
        elif len(parts) == 5 and parts[:3] == ["", "v1", "providers"] and parts[4] == "hardware":
            self._json(*hardware_answer(self.server.store, parts[3]), headers=_NO_STORE)
        elif path == "/health":
            status, body = self.server.health()
            self._json(status, body)
        elif path == "/metrics":
            self._send(200, self.server.metrics_text().encode(),
                       "text/plain; version=0.0.4; charset=utf-8")
        elif self.server.rent is not None and path.startswith("/v1/rent/"):
            self._rent(self.server.rent, "GET", path, parts, url.query)
        elif self.server.dashboard is not None and (
                path == "/dashboard" or path.startswith(("/dashboard/", "/v1/dashboard/"))):
            with self.server.dashboard.as_source(self.source):
                self._dashboard(self.server.dashboard, path, parts, url.query)
        else:
            self._error(404, "not_found", f"no route GET {self.path[:200]}")

    def _dashboard(self, d: Dashboard, path: str, parts: list[str], query: str = "") -> None:
        """The dashboard's JSON routes, its pages and their assets (GET only)."""
        api = {"/v1/dashboard/market": d.market_summary, "/v1/dashboard/offers": lambda: d.offers(query),
               "/v1/dashboard/validator": lambda: d.validator(self.server.chain_ok()),
               "/v1/dashboard/jobs": lambda: d.jobs(query),
               "/v1/dashboard/providers": lambda: d.providers(query)}
        if path in api:
            self._json(*api[path](), headers=_NO_STORE)
        elif len(parts) == 5 and parts[:3] == ["", "v1", "dashboard"] and parts[3] == "jobs":
            self._json(*d.job(parts[4]), headers=_NO_STORE)
        elif (len(parts) == 5 and parts[:3] == ["", "v1", "dashboard"]
              and parts[3] == "providers"):
            self._json(*d.provider(parts[4]), headers=_NO_STORE)
        elif path == "/dashboard":
            self._send(308, b"", "text/plain", headers={"Location": "/dashboard/"})
        elif path == "/dashboard/":
            self._page("market")
        elif path in ("/dashboard/offers", "/dashboard/validator", "/dashboard/jobs",
                      "/dashboard/providers"):
            self._page(parts[2])
        elif path == "/dashboard/rent":  # without the relay its script says renting is off here
            self._page("rent")
        elif len(parts) == 4 and parts[2] in ("job", "provider"):
            try:
                parse_address(parts[3], f"the {parts[2]} address")
            except ApiError:
                self._page_error(400, "Not an address", f"not an address: {unquote(parts[3])[:100]} "
                                 f"(a {parts[2]} address is 32 to 44 base58 characters)")
                return
            self._page(parts[2])
        elif len(parts) == 4 and parts[2] == "assets" and parts[3] in ASSETS:
            self._send(200, load_asset(parts[3]), ASSETS[parts[3]],
                       headers={"Cache-Control": "no-cache", **_STATIC_HEADERS})
        else:
            self._error(404, "not_found", f"no route GET {path[:200]}")

    def _page(self, name: str) -> None:
        headers = _PAGE_HEADERS if name != "rent" else {
            **_PAGE_HEADERS, "Content-Security-Policy": RENT_CONTENT_SECURITY_POLICY}
        self._send(200, load_asset(PAGES[name]), "text/html; charset=utf-8", headers=headers)

    def _page_error(self, status: int, title: str, message: str) -> None:
        self._send(status, error_page(title, message), "text/html; charset=utf-8",
                   headers=_PAGE_HEADERS)

    def _rent(self, rent: RentProxy, method: str, path: str, parts: list[str],
              query: str) -> None:
        """The rent relay's routes (``rent_proxy``)."""
        if method == "GET" and path == "/v1/rent/config":
            self._json(*rent.config(self.source), headers=_NO_STORE)
        elif method == "GET" and path == "/v1/rent/committee":
            self._json(*rent.committee(query, self.source), headers=_NO_STORE)
        elif method == "POST" and path == "/v1/rent/rpc":
            self._json(*rent.rpc(self.body, self.source), headers=_NO_STORE)
        elif method == "GET" and len(parts) == 6 and parts[3] == "workers" and parts[5] == "health":
            self._json(*rent.health(parts[4], self.source), headers=_NO_STORE)
        elif len(parts) == 8 and parts[3] == "workers" and parts[5] == "jobs":
            self.response = rent.worker(method, parts[4], parts[6], parts[7], query,
                                        self.headers, self.body, self.source)
        else:
            self._error(404, "not_found", f"no route {method} {path[:200]}",
                        close=method == "POST")

    def do_POST(self) -> None:  # stdlib name
        url = urlsplit(self.path)
        if self.server.rent is not None and _rent_post(url.path):
            self._rent(self.server.rent, "POST", url.path, url.path.split("/"), url.query)
            return
        routes = {"/v1/proofs": self.server.intake.submit,
                  "/v1/proofs/batch": self.server.intake.submit_batch}
        member = self.server.member
        if member is not None:
            routes.update({"/v1/attestations/query": member.query,
                           "/v1/attestations/sign": member.sign,
                           "/v1/downtime/sign": member.downtime_sign})
        if self.server.hardware is not None:
            routes["/v1/hardware/sign"] = self.server.hardware.sign
        handler = routes.get(self.path)
        if handler is None:
            self._error(404, "not_found", f"no route POST {self.path}", close=True)
            return
        obj = self._read_json()
        if obj is _NO_BODY:
            return
        status, body = handler(obj, source=self.source)  # job reads paid by the source
        self._json(status, body)

    def _read_json(self) -> Any:
        """The body as JSON (the event loop already applied 411 and 413)."""
        ctype = (self.headers.get("content-type") or "application/json").split(";")[0].strip()
        if ctype.lower() != "application/json":
            self._error(415, "unsupported_media_type", "send Content-Type: application/json")
            return _NO_BODY
        tokens = sum(self.body.count(c) for c in _JSON_STRUCTURE)
        if tokens > MAX_JSON_TOKENS:  # a C-speed count, before any parsing
            self.server.intake.metrics.proof("rejected", "bad_json")
            self._error(400, "bad_json", f"the body has {tokens} JSON separators and brackets, "
                        f"more than {MAX_JSON_TOKENS} (a batch of {MAX_BATCH} proofs needs a "
                        "few hundred); huge or deeply nested JSON is refused unparsed")
            return _NO_BODY
        try:
            return json.loads(self.body.decode("utf-8"))
        except RecursionError:
            self.server.intake.metrics.proof("rejected", "bad_json")
            self._error(400, "bad_json", "the body is nested too deeply; a request is a flat "
                        "JSON object")
        except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError too
            self.server.intake.metrics.proof("rejected", "bad_json")
            self._error(400, "bad_json", f"the body is not UTF-8 JSON: {e}")
        return _NO_BODY


_NO_BODY = object()


def _rent_post(path: str) -> bool:
    """Whether ``path`` is one of the rent relay's POST routes."""
    parts = path.split("/")
    return path == "/v1/rent/rpc" or (len(parts) == 8 and parts[:4] == ["", "v1", "rent", "workers"]
                                      and parts[5] == "jobs" and parts[7] == "workload")
_JSON_STRUCTURE = (b",", b":", b"[", b"{")
_NO_STORE = {"Cache-Control": "no-store"}
_STATIC_HEADERS = {"X-Content-Type-Options": "nosniff"}
_PAGE_HEADERS = {"Cache-Control": "no-cache", "Content-Security-Policy": CONTENT_SECURITY_POLICY,
                 "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer", **_STATIC_HEADERS}
