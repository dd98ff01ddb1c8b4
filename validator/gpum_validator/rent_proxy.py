"""The node's routes for the rent page (``/dashboard/rent``): a narrow JSON-RPC relay to the
node's own RPC and a relay to the market's providers' workers, so a browser wallet can rent
through this node alone (the page's Content-Security-Policy allows nothing else). Every
signature is the wallet's: the node holds no key of the user and signs nothing here.

Routes (``server.py`` dispatches them; every answer is ``(http_status, body)`` or a
``Response``):

* ``GET /v1/rent/config``: ``{"chain": "solana:localnet" | "solana:devnet" | "solana:testnet"
  | "solana:mainnet", "market", "program", "mint", "decimals", "node_validator"}``; the chain
  is named from the RPC's genesis hash (any unknown one is ``solana:localnet``).
* ``GET /v1/rent/committee?provider=<b58>``: the CLI's default committee for a job on that
  provider (up to 3 Active validators by bond whose endpoint answers ``/health``, never the
  provider's owner or worker key) and its default quorum.
* ``POST /v1/rent/rpc``: one JSON-RPC 2.0 request (no batches) of a method in
  ``RPC_METHODS``, forwarded to the node's RPC; its answer relayed as is.
  ``sendTransaction`` and ``simulateTransaction`` carry one base64 wire transaction of at
  most ``TX_MAX_BYTES`` whose every instruction calls this market's program or a program in
  ``HELPER_PROGRAMS`` (System, SPL Token, Associated Token, Compute Budget, Ed25519), at least
  one of them this market's program, and with no address lookup table: the node relays the
  market's transactions, not anyone's.
* ``GET /v1/rent/workers/<provider>/health``: a fresh probe of the provider's worker
  (``GET /v1/health``, ``PROBE_DEADLINE_S``), ``{"provider", "online", "error",
  "checked_at"}``.
* ``GET|POST /v1/rent/workers/<provider>/jobs/<job>/workload`` and ``GET
  .../jobs/<job>/logs?tail=N``: forwarded to the endpoint in the provider's on-chain account
  with the ``X-Gpum-Signer``/``-Timestamp``/``-Signature`` headers the wallet made (the
  worker checks them); the worker's status and body relayed (``Retry-After`` too). A
  delivery the worker answers 503, or 404 with ``Retry-After`` (it has not seen the new job
  yet), is retried here within the deadline (the request is idempotent and its signature
  stays valid for minutes). Logs are
  never followed: a tail of at most ``LOGS_TAIL_MAX`` lines and ``LOGS_MAX_BYTES``.

Guarantees:

* **Bounded.** A request body is at most ``RPC_BODY_MAX`` (rpc) or ``WORKER_BODY_MAX``
  (a workload spec) bytes; every upstream call has a total deadline (``RPC_DEADLINE_S``,
  ``WORKER_DEADLINE_S``) and an answer cap; each forwarded call, probe and account read
  costs one read of the source's ``ReadBudget`` (past it: 429 ``chain_read_budget``).
* **Nothing secret leaves.** The RPC URL (it may hold an API key) is never in an answer:
  a failed upstream call answers 502 ``rpc_unavailable`` / 504 ``rpc_timeout`` with a
  generic message.
* **This market's providers only.** A provider of another market, or no provider at the
  address, answers 404 ``provider_not_found``; a worker endpoint on a loopback, private or
  link-local IP literal (or ``localhost``) is refused (403 ``worker_address_refused``)
  unless the chain is ``solana:localnet`` (hostnames are not resolved for this check).
* Errors are the node's usual body ``{"error", "message", "retry"}``.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

from gpu_market.httpfront import Response
from gpu_market.net import BoundedClient, DeadlineExceeded, NetError, ResponseTooLarge
from gpu_market.offers import PROBE_DEADLINE_S, probe_liveness
from gpu_market.workload import MAX_SPEC_BYTES
from gpu_market.workload_api import WorkerApiError, normalize_endpoint
from solders.pubkey import Pubkey

from .chain import ReadBudget, read, read_refused
from .dashboard import TTLCache, answer
from .dashboard_lists import ApiError, parse_address
from .errors import error_body
from .transport import json_response

log = logging.getLogger("gpum_validator.rent")

Answer = tuple[int, dict[str, Any]]

RPC_METHODS = frozenset({
    "getLatestBlockhash", "sendTransaction", "simulateTransaction", "getSignatureStatuses",
    "getAccountInfo", "getMultipleAccounts", "getBalance", "getTokenAccountBalance",
    "getMinimumBalanceForRentExemption", "getEpochInfo"})
"""What the page may ask the node's RPC (no ``getProgramAccounts``: the lists it needs are
the dashboard's)."""
TX_METHODS = frozenset({"sendTransaction", "simulateTransaction"})
HELPER_PROGRAMS = frozenset(Pubkey.from_string(k) for k in (
    "11111111111111111111111111111111",  # System
    "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA",  # SPL Token
    "ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL",  # Associated Token Account
    "ComputeBudget111111111111111111111111111111",  # Compute Budget
    "Ed25519SigVerify111111111111111111111111111"))  # Ed25519 precompile
RPC_BODY_MAX = 16 * 1024
RPC_ANSWER_MAX = 1024 * 1024
RPC_DEADLINE_S = 10.0
TX_MAX_BYTES = 1232
"""A Solana packet: the largest transaction the cluster takes."""
WORKER_BODY_MAX = MAX_SPEC_BYTES
WORKER_ANSWER_MAX = 64 * 1024
WORKER_DEADLINE_S = 15.0
DELIVER_RETRY_WAIT_S = 1.0
LOGS_TAIL_DEFAULT = 200
LOGS_TAIL_MAX = 2000
LOGS_MAX_BYTES = 256 * 1024
COMMITTEE_TTL_S = 30.0
PROVIDER_TTL_S = 5.0
AUTH_HEADERS = ("x-gpum-signer", "x-gpum-timestamp", "x-gpum-signature")
GENESIS = {"5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d": "solana:mainnet",
           "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG": "solana:devnet",
           "4uhcVJyU9pJkvQyS88uRDiswHXSCkY3zQawwpjk2NsNY": "solana:testnet"}


# ----------------------------------------------------------------------------- pure parts


class TxRefused(ValueError):
    """A transaction the node does not relay; the message says why."""


def _compact_u16(raw: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(3):
        if at + i >= len(raw):
            raise TxRefused("the transaction is truncated")
        b = raw[at + i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, at + i + 1
        shift += 7
    raise TxRefused("the transaction has a malformed length")


def _take(raw: bytes, at: int, n: int) -> tuple[bytes, int]:
    if n < 0 or at + n > len(raw):
        raise TxRefused("the transaction is truncated")
    return raw[at:at + n], at + n


def transaction_programs(raw: bytes) -> list[Pubkey]:
    """The program of each instruction of a wire transaction (legacy or v0), in order;
    TxRefused when it does not parse, uses an address lookup table or has trailing bytes."""
    count, at = _compact_u16(raw, 0)
    _, at = _take(raw, at, 64 * count)
    if at >= len(raw):
        raise TxRefused("the transaction has no message")
    versioned = raw[at] & 0x80
    if versioned:
        if raw[at] & 0x7F != 0:
            raise TxRefused(f"transaction version {raw[at] & 0x7F} is not supported")
        at += 1
    _, at = _take(raw, at, 3)  # header
    n_keys, at = _compact_u16(raw, at)
    keys_raw, at = _take(raw, at, 32 * n_keys)
    keys = [Pubkey.from_bytes(keys_raw[i:i + 32]) for i in range(0, len(keys_raw), 32)]
    _, at = _take(raw, at, 32)  # recent blockhash
    n_ix, at = _compact_u16(raw, at)
    programs = []
    for _ in range(n_ix):
        index_b, at = _take(raw, at, 1)
        if index_b[0] >= len(keys):
            raise TxRefused("an instruction names a program outside the account list")
        programs.append(keys[index_b[0]])
        n_acc, at = _compact_u16(raw, at)
        _, at = _take(raw, at, n_acc)
        n_data, at = _compact_u16(raw, at)
        _, at = _take(raw, at, n_data)
    if versioned:
        n_lookups, at = _compact_u16(raw, at)
        if n_lookups:
            raise TxRefused("address lookup tables are not relayed")
    if at != len(raw):
        raise TxRefused("the transaction has trailing bytes")
    return programs


def check_transaction(encoded: Any, program_id: Pubkey) -> None:
    """TxRefused unless ``encoded`` (base64) is a transaction this node relays (see the
    module's doc)."""
    if not isinstance(encoded, str) or len(encoded) > 4 * (TX_MAX_BYTES // 3 + 1):
        raise TxRefused(f"send one base64 transaction of at most {TX_MAX_BYTES} bytes")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except ValueError:
        raise TxRefused("the transaction is not base64 (set encoding: base64)") from None
    if len(raw) > TX_MAX_BYTES:
        raise TxRefused(f"the transaction is {len(raw)} bytes; at most {TX_MAX_BYTES}")
    programs = transaction_programs(raw)
    allowed = HELPER_PROGRAMS | {program_id}
    other = next((p for p in programs if p not in allowed), None)
    if other is not None:
        raise TxRefused(f"the transaction calls program {other}; this node relays only "
                        "transactions of its market's program (with System, SPL Token, "
                        "Associated Token, Compute Budget and Ed25519 instructions)")
    if program_id not in programs:
        raise TxRefused(f"the transaction does not call the market's program {program_id}; "
                        "this node relays only the market's transactions")


def check_rpc_request(obj: Any, program_id: Pubkey) -> None:
    """ApiError unless ``obj`` is one JSON-RPC request the node forwards."""
    if isinstance(obj, list):
        raise ApiError(400, "bad_request", "send one JSON-RPC request per call, not a batch")
    if not isinstance(obj, dict) or obj.get("jsonrpc") != "2.0" or "method" not in obj:
        raise ApiError(400, "bad_request", "the body is not a JSON-RPC 2.0 request")
    method = obj.get("method")
    if method not in RPC_METHODS:
        shown = method[:60] if isinstance(method, str) else type(method).__name__
        raise ApiError(403, "method_not_allowed", f"this node does not forward {shown!r}; "
                       f"it forwards {', '.join(sorted(RPC_METHODS))}")
    unknown = set(obj) - {"jsonrpc", "id", "method", "params"}
    if unknown:
        raise ApiError(400, "bad_request", f"unknown member {min(unknown)[:40]!r}")
    if method in TX_METHODS:
        params = obj.get("params")
        if not isinstance(params, list) or not 1 <= len(params) <= 2:
            raise ApiError(400, "bad_request", f"{method} takes [transaction, config]")
        config = params[1] if len(params) == 2 else {}
        if not isinstance(config, dict) or config.get("encoding") != "base64":
            raise ApiError(400, "bad_request", f"{method}: set the config's encoding to base64")
        try:
            check_transaction(params[0], program_id)
        except TxRefused as e:
            raise ApiError(403, "transaction_refused", str(e)) from None


def private_host(endpoint: str) -> bool:
    """Whether a worker endpoint's host is ``localhost`` or a loopback, private, link-local,
    reserved or unspecified IP literal."""
    host = (urlsplit(endpoint).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_reserved
            or ip.is_unspecified or ip.is_multicast)


def parse_tail(query: str) -> int:
    """``tail`` of the logs route's query: 0..``LOGS_TAIL_MAX``, ``LOGS_TAIL_DEFAULT`` when
    absent; ApiError 400 otherwise or for any other parameter."""
    try:
        params = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query),
                          max_num_fields=4)
    except ValueError:
        raise ApiError(400, "bad_request", "cannot parse the query string; use ?tail=N") from None
    if set(params) - {"tail"}:
        raise ApiError(400, "bad_request", "the only query parameter is tail")
    values = params.get("tail", [str(LOGS_TAIL_DEFAULT)])
    if len(values) != 1 or not values[0].isdigit() or int(values[0]) > LOGS_TAIL_MAX:
        raise ApiError(400, "bad_request", f"tail must be one integer in 0..{LOGS_TAIL_MAX}")
    return int(values[0])


# ----------------------------------------------------------------------------- the relay


class RentProxy:
    """The rent routes of one node: ``client`` (the SDK's ``GpuMarketClient``, or a stand-in
    with ``fetch_provider``, ``fetch_market``, ``mint_decimals``, ``default_committee`` and
    ``program_id``) for account reads, ``rpc_url`` the RPC forwarded to (never shown),
    ``reads`` the per-source budget every forwarded call is charged to. ``chain``: the
    chain's name (default: from the RPC's genesis hash); ``allow_private_workers``: relay to
    workers on private addresses (default: on ``solana:localnet`` only). Thread-safe."""

    def __init__(self, client: Any, rpc_url: str, market: bytes, authority: bytes, *,
                 reads: ReadBudget | None = None, chain: str | None = None,
                 allow_private_workers: bool | None = None,
                 rpc_deadline: float = RPC_DEADLINE_S,
                 worker_deadline: float = WORKER_DEADLINE_S,
                 probe_deadline: float = PROBE_DEADLINE_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self._rpc_url = rpc_url
        self.market = Pubkey.from_bytes(bytes(market))
        self.authority = Pubkey.from_bytes(bytes(authority))
        self.program_id = Pubkey.from_bytes(bytes(client.program_id))
        self.reads = reads
        self._chain = chain
        self._allow_private = allow_private_workers
        self.rpc_deadline, self.worker_deadline = rpc_deadline, worker_deadline
        self.probe_deadline = probe_deadline
        self.clock = clock
        self.cache = TTLCache(PROVIDER_TTL_S)
        self.http = BoundedClient(deadline=max(rpc_deadline, worker_deadline))
        self._lock = threading.Lock()

    def close(self) -> None:
        self.http.close()

    # -- plumbing ---------------------------------------------------------------------

    def charge(self, source: str) -> None:
        """One read of ``source``'s budget; ``Rejection`` 429 past it."""
        if self.reads is not None and source and not self.reads.take(source):
            raise read_refused(self.reads)

    def _rpc(self, method: str, params: list[Any]) -> Any:
        """The result of one RPC call made by the node itself (ChainUnavailable on failure)."""
        def call() -> Any:
            r = self.http.request("POST", self._rpc_url, deadline=self.rpc_deadline,
                                  max_bytes=RPC_ANSWER_MAX,
                                  json={"jsonrpc": "2.0", "id": 1, "method": method,
                                        "params": params})
            body = r.json_object()
            if r.status != 200 or body is None or "result" not in body:
                raise NetError(f"{method} answered HTTP {r.status}")
            return body["result"]
        return read(method, call)

    def chain(self, source: str = "") -> str:
        """The chain's name (read once)."""
        with self._lock:
            if self._chain is None:
                self.charge(source)
                self._chain = GENESIS.get(str(self._rpc("getGenesisHash", [])),
                                          "solana:localnet")
            return self._chain

    def allow_private(self, source: str) -> bool:
        if self._allow_private is None:
            return self.chain(source) == "solana:localnet"
        return self._allow_private

    def _provider(self, provider_b58: str, source: str) -> Any:
        key = parse_address(provider_b58, "the provider address")

        def load() -> Any:
            self.charge(source)
            return read("the provider account", lambda: self.client.fetch_provider(key))
        p = self.cache.get(("provider", bytes(key)), load)
        if p is None or p.market != self.market:
            raise ApiError(404, "provider_not_found",
                           f"no provider of market {self.market} at {key}")
        return p

    def _endpoint(self, p: Any, source: str) -> str:
        if not p.endpoint:
            raise ApiError(409, "no_worker_endpoint", f"provider {p.address} publishes no "
                           "worker endpoint, so it runs no containers; choose another")
        try:
            endpoint = normalize_endpoint(p.endpoint)
        except WorkerApiError as e:
            raise ApiError(502, "bad_worker_endpoint", str(e)) from None
        if private_host(endpoint) and not self.allow_private(source):
            raise ApiError(403, "worker_address_refused", f"provider {p.address}'s worker "
                           f"endpoint {endpoint} is a private address; this node relays "
                           "only to public ones")
        return endpoint

    # -- routes -------------------------------------------------------------------------

    def config(self, source: str) -> Answer:
        """``GET /v1/rent/config``."""
        def body() -> dict[str, Any]:
            def market() -> Any:
                self.charge(source)
                return read("the market account", lambda: self.client.fetch_market(self.market))
            m = self.cache.get(("market",), market, COMMITTEE_TTL_S)
            if m is None:
                raise ApiError(503, "chain_unavailable", "this node cannot read its market")
            decimals = self.cache.get(("decimals",), lambda: read(
                "a mint", lambda: self.client.mint_decimals(m.payment_mint)), float("inf"))
            return {"chain": self.chain(source), "market": str(self.market),
                    "program": str(self.program_id), "mint": str(m.payment_mint),
                    "decimals": int(decimals), "node_validator": str(self.authority)}
        return answer(body)

    def committee(self, query: str, source: str) -> Answer:
        """``GET /v1/rent/committee?provider=<b58>``: ``{"committee": [authority...],
        "quorum", "min_quorum"}`` (the CLI's default choice, cached ``COMMITTEE_TTL_S``)."""
        def body() -> dict[str, Any]:
            from gpu_market.accounts import effective_params
            from gpu_market.committee import default_quorum

            params = parse_qs(query, max_num_fields=2)
            values = params.get("provider")
            if set(params) != {"provider"} or not values or len(values) != 1:
                raise ApiError(400, "bad_request", "name the provider: ?provider=<address>")
            p = self._provider(values[0], source)
            exclude = [k for k in (p.owner, p.worker_key) if k]

            def load() -> tuple[list[str], int]:
                self.charge(source)
                m = read("the market account", lambda: self.client.fetch_market(self.market))
                members = read("the validators", lambda: self.client.default_committee(
                    self.market, size=3, exclude=exclude))
                return [str(k) for k in members], effective_params(
                    m, int(self.clock())).min_quorum
            members, min_quorum = self.cache.get(("committee", bytes(p.address)), load,
                                                 COMMITTEE_TTL_S)
            if not members:
                raise ApiError(409, "no_committee", f"no Active validator of market "
                               f"{self.market} answers /health; name the committee yourself")
            try:
                quorum = default_quorum(len(members), min_quorum)
            except ValueError as e:
                raise ApiError(409, "no_committee", f"{e}") from None
            return {"provider": str(p.address), "committee": members, "quorum": quorum,
                    "min_quorum": min_quorum}
        return answer(body)

    def rpc(self, body: bytes, source: str) -> Answer:
        """``POST /v1/rent/rpc``: the RPC's JSON answer (200), or the node's error."""
        if len(body) > RPC_BODY_MAX:
            return 413, error_body("body_too_large", f"the body is {len(body)} bytes; a "
                                   f"JSON-RPC request here is at most {RPC_BODY_MAX}")
        try:
            obj = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            return 400, error_body("bad_json", "the body is not UTF-8 JSON")

        def admit() -> dict[str, Any]:
            check_rpc_request(obj, self.program_id)
            self.charge(source)
            return {}
        refused = answer(admit)
        if refused[0] != 200:
            return refused
        try:
            r = self.http.request("POST", self._rpc_url, json=obj, deadline=self.rpc_deadline,
                                  max_bytes=RPC_ANSWER_MAX)
        except DeadlineExceeded as e:
            log.warning("rent rpc %s: %s", obj["method"], e)
            return 504, error_body("rpc_timeout", f"the node's RPC did not answer "
                                   f"{obj['method']} within {self.rpc_deadline:g} s; retry",
                                   1)
        except ResponseTooLarge as e:
            log.warning("rent rpc %s: %s", obj["method"], e)
            return 502, error_body("rpc_answer_too_large", f"the RPC's answer to "
                                   f"{obj['method']} is over {RPC_ANSWER_MAX} bytes")
        except NetError as e:
            log.warning("rent rpc %s: %s", obj["method"], e)
            return 502, error_body("rpc_unavailable", "this node cannot reach its RPC right "
                                   "now; retry later", 5)
        answer_obj = r.json_object()
        if r.status != 200 or answer_obj is None:
            log.warning("rent rpc %s: HTTP %d", obj["method"], r.status)
            return 502, error_body("rpc_unavailable", f"the node's RPC answered HTTP "
                                   f"{r.status} to {obj['method']}; retry later", 5)
        return 200, answer_obj

    def health(self, provider_b58: str, source: str) -> Answer:
        """``GET /v1/rent/workers/<provider>/health``: a fresh probe (charged one read)."""
        def body() -> dict[str, Any]:
            p = self._provider(provider_b58, source)
            endpoint = self._endpoint(p, source)
            self.charge(source)
            offer = SimpleNamespace(provider=p.address, endpoint=endpoint,
                                    worker_key=p.worker_key)
            live = probe_liveness([offer], deadline=self.probe_deadline,
                                  total=self.probe_deadline + 0.5).get(p.address)
            online = bool(live is not None and live.online)
            return {"provider": str(p.address), "online": online,
                    "error": "" if online else (live.error if live else "not probed"),
                    "checked_at": live.checked_at if live else int(self.clock())}
        return answer(body)

    def worker(self, method: str, provider_b58: str, job_b58: str, what: str, query: str,
               headers: dict[str, str], body: bytes, source: str) -> Response:
        """``GET|POST /v1/rent/workers/<provider>/jobs/<job>/(workload|logs)``: the worker's
        answer relayed (status, body, ``Retry-After``), or the node's error."""
        target: dict[str, Any] = {}

        def admit() -> dict[str, Any]:
            if (method, what) not in (("GET", "workload"), ("POST", "workload"),
                                      ("GET", "logs")):
                raise ApiError(405, "method_not_allowed", f"{method} {what} is not relayed")
            job = parse_address(job_b58, "the job address")
            tail = parse_tail(query) if what == "logs" else None
            if method == "POST" and len(body) > WORKER_BODY_MAX:
                raise ApiError(413, "body_too_large", f"the spec is {len(body)} bytes; at "
                               f"most {WORKER_BODY_MAX}")
            p = self._provider(provider_b58, source)
            target.update(job=job, tail=tail, provider=p, endpoint=self._endpoint(p, source))
            self.charge(source)
            return {}
        status, refused = answer(admit)
        if status != 200:
            return json_response(status, refused)
        job, tail, p, endpoint = (target[k] for k in ("job", "tail", "provider", "endpoint"))
        sent = {k: headers[k] for k in AUTH_HEADERS if k in headers}
        url = f"{endpoint}/v1/jobs/{job}/{what}"
        if tail is not None:
            url += f"?follow=0&tail={tail}"
        if method == "POST":
            sent["content-type"] = "application/json"
        cap = LOGS_MAX_BYTES if what == "logs" else WORKER_ANSWER_MAX
        try:
            r = self._call_worker(method, url, body, sent, cap)
        except DeadlineExceeded:
            return json_response(504, error_body(
                "worker_timeout", f"provider {p.address}'s worker at {endpoint} did not "
                f"answer within {self.worker_deadline:g} s; retry, or stop the job", 5))
        except ResponseTooLarge:
            return json_response(502, error_body(
                "worker_answer_too_large", f"provider {p.address}'s worker answered more "
                f"than {cap} bytes" + ("; ask for fewer lines" if what == "logs" else "")))
        except NetError as e:
            return json_response(502, error_body(
                "worker_unreachable", f"cannot reach provider {p.address}'s worker at "
                f"{endpoint}: {e}; it may be offline", 5))
        ctype = r.headers.get("content-type", "application/octet-stream")
        if not ctype.startswith(("application/json", "text/plain")):
            ctype = "application/octet-stream"
        extra = [("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff")]
        retry = r.headers.get("retry-after")
        if retry is not None and retry.isdigit():
            extra.append(("Retry-After", retry))
        return Response(r.status, r.body, ctype, extra)

    def _call_worker(self, method: str, url: str, body: bytes, headers: dict[str, str],
                     cap: int) -> Any:
        """One worker call; a delivery the worker answers 503, or 404 with ``Retry-After``
        (it has not seen a job created moments ago yet), is tried again after at most
        ``DELIVER_RETRY_WAIT_S`` while ``worker_deadline`` lasts (the whole call's bound)."""
        end = time.monotonic() + self.worker_deadline
        while True:
            r = self.http.request(method, url, content=body if method == "POST" else None,
                                  headers=headers, deadline=max(0.1, end - time.monotonic()),
                                  max_bytes=cap)
            retry = r.headers.get("retry-after", "")
            again = method == "POST" and (r.status == 503 or (r.status == 404 and retry))
            wait = min(DELIVER_RETRY_WAIT_S, float(retry) if retry.isdigit() else 1.0)
            if not again or time.monotonic() + wait >= end - 1.0:
                return r
            time.sleep(wait)
