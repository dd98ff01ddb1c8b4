"""The dashboard's lists and a closed job's receipt (the parts of ``dashboard.py`` that read
many accounts or a transaction's history).

* ``GET /v1/dashboard/jobs?state=S&provider=P&user=U`` (``jobs_list``): the market's jobs on
  chain (closed jobs leave no account), newest first, filtered by every given parameter
  (``state``: open / running / finishing / completed / failed / cancelled; ``provider``: the
  Provider account; ``user``: the user's wallet), at most ``MAX_JOBS`` (``count`` is all the
  matches, ``truncated`` says when more exist). Each row: state, provider, user, GPUs, spent
  (what left the escrow), escrow left, created.
* ``GET /v1/dashboard/providers?model=M&region=R&status=S&online=true|false``
  (``providers_list``): every Provider account of the market whatever its status (the offers
  page shows only rentable ones), filtered by a case-insensitive substring of the GPU model
  or region, the status (active / jailed / ...) and liveness. ``online`` is the provider's
  worker's answer to the dashboard's health probe (``dashboard_liveness``: cached 30 s,
  probed off the request path), ``last_seen`` / ``checked_at`` unix seconds; null
  ("unknown") for a provider that is not rentable, has no worker endpoint or is not probed
  yet: ``online=true`` / ``online=false`` match neither.
* A closed job's receipt (``closed_receipt``): ``close_job`` leaves a ``ClosedJob`` tombstone
  (its ``closed_at``) and emits ``JobClosed`` (deposited, paid to the provider and the
  treasury, burned, refunded now, surplus returned). The receipt is read from the newest
  ``RECEIPT_SIGNATURES`` transactions of the job's address (``getSignaturesForAddress``, then
  each transaction's logs through ``gpu_market.codec``; every RPC call is charged to the
  asking source's read budget) and kept for good once found (it never changes). Paid to
  validators = deposited - provider - treasury - burned - refunded.

Every filter value is checked (an address is base58, a state is one of the job statuses);
anything else, or an unknown parameter, is 400 ``bad_request``.
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import parse_qs

from solders.pubkey import Pubkey

from .errors import Rejection, ValidatorError
from .schema import b58_pubkey

Dashboard = Any
"""``dashboard.Dashboard`` (not imported: that module imports this one)."""


class ApiError(ValidatorError):
    """A request the dashboard refuses: ``status``, a stable ``reason`` code, a message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


def parse_address(text: str, what: str) -> Pubkey:
    """A base58 account address; ApiError 400 naming ``what`` otherwise."""
    try:
        return Pubkey.from_bytes(b58_pubkey(text, what))
    except Rejection as r:
        raise ApiError(400, "bad_request", r.message) from None


def plain(value: Any) -> Any:
    """JSON-safe: keys as base58, byte strings as hex, non-finite floats as None."""
    if isinstance(value, Pubkey):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


MAX_JOBS = 200
MAX_PROVIDERS = 200
RECEIPT_SIGNATURES = 8
JOB_STATES = ("open", "running", "finishing", "completed", "failed", "cancelled")
PROVIDER_STATUSES = ("active", "paused", "jailed")


def parse_filters(query: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """The query string's parameters (each at most once, non-empty values kept), only names
    of ``allowed``; ApiError 400 otherwise."""
    try:
        params = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query),
                          max_num_fields=len(allowed) + 1)
    except ValueError:
        raise ApiError(400, "bad_request", f"cannot parse the query string {query[:80]!r}; "
                       f"use {'&'.join(f'{a}=...' for a in allowed)}") from None
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ApiError(400, "bad_request", f"unknown filter {unknown[0][:40]!r}; the filters "
                       f"are {', '.join(allowed)}")
    out = {}
    for name, values in params.items():
        if len(values) != 1:
            raise ApiError(400, "bad_request", f"give {name} at most once")
        if values[0].strip():
            out[name] = values[0].strip()[:64]
    return out


def _b58(key: Any) -> str:
    return str(key if isinstance(key, Pubkey) else Pubkey.from_bytes(bytes(key)))


def job_row(j: Any) -> dict[str, Any]:
    """One job of the list."""
    spent = j.paid_provider + j.paid_validators + j.paid_treasury + j.burned
    return {"job": _b58(j.address), "status": j.status, "provider": _b58(j.provider),
            "user": _b58(j.user), "gpu_count": j.gpu_count, "spent": spent,
            "escrow": j.booked_escrow, "deposited": j.deposited,
            "paid_seconds": j.paid_seconds, "created_at": j.created_at}


def jobs_list(d: Dashboard, query: str) -> dict[str, Any]:
    f = parse_filters(query, ("state", "provider", "user"))
    state = f.get("state", "").lower()
    if state and state not in JOB_STATES:
        raise ApiError(400, "bad_request", f"state must be one of {', '.join(JOB_STATES)}")
    provider = parse_address(f["provider"], "the provider filter") if "provider" in f else None
    user = parse_address(f["user"], "the user filter") if "user" in f else None
    jobs = d._read(("market_jobs",), "the market's jobs",
                   lambda: d.client.list_jobs(market=d.market)) or []
    rows = [j for j in jobs if (not state or j.status == state)
            and (provider is None or j.provider == provider)
            and (user is None or j.user == user)]
    rows.sort(key=lambda j: (j.created_at, bytes(j.address)), reverse=True)
    m = d._market_view()
    return {"market": str(d.market), "read_at": d._now(), "decimals": d._decimals(m),
            "filters": {"state": state or None, "provider": str(provider) if provider else None,
                        "user": str(user) if user else None},
            "states": list(JOB_STATES), "count": len(rows), "total": len(jobs),
            "truncated": len(rows) > MAX_JOBS, "jobs": [job_row(j) for j in rows[:MAX_JOBS]]}


def providers_list(d: Dashboard, query: str) -> dict[str, Any]:
    from gpu_market.offers import list_providers

    f = parse_filters(query, ("model", "region", "status", "online"))
    status = f.get("status", "").lower()
    if status and status not in PROVIDER_STATUSES:
        raise ApiError(400, "bad_request",
                       f"status must be one of {', '.join(PROVIDER_STATUSES)}")
    online = f.get("online", "").lower()
    if online and online not in ("true", "false"):
        raise ApiError(400, "bad_request", "online must be true or false")
    providers = d._read(("providers",), "the market's providers",
                        lambda: list_providers(d.client, d.market)) or []
    offers = {_b58(o.provider): o for o in d._live_offers()}
    now = d._now()
    rows = []
    for p in providers:
        key = _b58(p.address)
        o = offers.get(key)
        live = getattr(o, "online", None) if o is not None else None
        rows.append({
            "provider": key, "status": p.status, "gpu_model": p.spec.gpu_model,
            "gpus_total": p.spec.gpu_count, "gpus_free": p.free_gpus,
            "vram_mib": p.spec.vram_mib, "region": p.spec.region,
            "price_per_gpu_hour": p.price_per_gpu_second * 3600, "stake": p.stake,
            "online": live, "last_seen": getattr(o, "last_seen", None) if o else None,
            "checked_at": getattr(o, "checked_at", None) if o else None,
            "rentable": o is not None,
            "score": plain(o.score) if o is not None else None,
            "jobs_completed": p.reputation.jobs_completed,
            "slashes": p.reputation.slashes})
    model, region = f.get("model", "").lower(), f.get("region", "").lower()
    picked = [r for r in rows if model in r["gpu_model"].lower()
              and region in r["region"].lower()
              and (not status or r["status"] == status)
              and (not online or r["online"] is (online == "true"))]
    picked.sort(key=lambda r: (not r["rentable"], r["online"] is False,
                               -(r["score"] or 0), r["provider"]))
    m = d._market_view()
    return {"market": str(d.market), "read_at": now, "decimals": d._decimals(m),
            "filters": {"model": model or None, "region": region or None,
                        "status": status or None, "online": online or None},
            "models": sorted({r["gpu_model"] for r in rows}),
            "regions": sorted({r["region"] for r in rows}),
            "count": len(picked), "total": len(rows), "truncated": len(picked) > MAX_PROVIDERS,
            "providers": picked[:MAX_PROVIDERS]}


class _NoEvent(Exception):
    """The close transaction is not among the address's newest ones."""


def _close_event(d: Dashboard, key: Pubkey) -> dict[str, Any] | None:
    """The ``JobClosed`` event of ``key``'s close transaction with its signature (and the
    refunds of any ``JobCancelled`` before it), from the newest ``RECEIPT_SIGNATURES``
    transactions of the address; None when none of them holds it."""
    client = d.client
    what = "the job's transactions"
    sigs = d._charged(what, lambda: client._call(client.rpc.get_signatures_for_address, key,
                                                 limit=RECEIPT_SIGNATURES).value) or []
    closed, cancelled = None, 0
    for s in sigs:
        if s.err is not None:
            continue
        # Each transaction read is charged to the asking source.
        for name, fields in d._charged(what, lambda s=s: client.events(s.signature)) or []:
            if _b58(fields.get("job")) != str(key):
                continue
            if name == "JobClosed" and closed is None:
                closed = {**fields, "signature": str(s.signature)}
            elif name == "JobCancelled":
                cancelled += int(fields.get("refunded") or 0)
    return None if closed is None else {**closed, "refunded_before": cancelled}


def closed_receipt(d: Dashboard, key: Pubkey) -> dict[str, Any] | None:
    """The receipt of a closed job (see the module's doc); None when ``key`` holds no
    ``ClosedJob`` tombstone. The figures are null when the close transaction is no longer in
    the RPC node's history (only ``closed_at`` is then known)."""
    tomb = d._read(("closed_job", bytes(key)), "the job's tombstone",
                   lambda: d.client.fetch_closed_job(key))
    if tomb is None:
        return None
    def found() -> dict[str, Any]:
        ev = _close_event(d, key)
        if ev is None:
            raise _NoEvent  # not cached: looked for again on the next request
        return ev
    try:  # kept for good once found: a closed job's receipt never changes
        ev: dict[str, Any] | None = d.cache.get(("closed_receipt", bytes(key)), found,
                                                math.inf)
    except _NoEvent:
        ev = None
    out: dict[str, Any] = {"closed_at": int(tomb.closed_at), "signature": None,
                           "deposited": None, "paid_provider": None, "paid_treasury": None,
                           "paid_validators": None, "burned": None, "refunded": None,
                           "surplus_returned": None, "fees": None, "paid": None,
                           "user": None}
    if ev is None:
        return out
    dep, prov, tre, burn, ref = (int(ev[k]) for k in ("deposited", "paid_provider",
                                                       "paid_treasury", "burned", "refunded"))
    # Everything deposited left the escrow: to the provider, the treasury, the validators,
    # burned, or back to the user (at close, or earlier by a cancel).
    ref += int(ev.get("refunded_before") or 0)
    vals = max(0, dep - prov - tre - burn - ref)
    out.update({"signature": ev["signature"], "deposited": dep, "paid_provider": prov,
                "paid_treasury": tre, "paid_validators": vals, "burned": burn,
                "refunded": ref, "surplus_returned": int(ev.get("surplus_returned") or 0),
                "fees": tre + vals, "paid": prov + tre + vals + burn,
                "user": _b58(ev["user"]) if ev.get("user") is not None else None})
    return out
