"""Dev-only helpers for the local chain (``gpum-localnet``); no real cluster has them.

``warp_time`` calls the localnet's ``gpum_warpTime`` JSON-RPC extension, which moves the
chain's clock (and slot) forward, so tests and demos can reach deadlines (a job's grace,
expiry, a parameter change, unbonding) without waiting for them.
"""

from __future__ import annotations

import itertools

import httpx

from .errors import RpcUnavailable, SdkError

__all__ = ["warp_time"]

_ids = itertools.count(1)


def warp_time(url: str, seconds: int, *, timeout: float = 10.0) -> tuple[int, int]:
    """Move the local chain's clock forward by ``seconds`` (>= 0); returns ``(slot,
    unix_timestamp)`` after the warp. SdkError if the node is not gpum-localnet."""
    if seconds < 0:
        raise ValueError("the clock only moves forward: seconds must be >= 0")
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": "gpum_warpTime", "params": [int(seconds)]}
    try:
        resp = httpx.post(url, json=body, timeout=timeout)
        payload = resp.json()
    except (httpx.HTTPError, ValueError) as e:
        raise RpcUnavailable(f"cannot reach the RPC endpoint {url} ({type(e).__name__}: {e})") from e
    if "error" in payload:
        raise SdkError(
            f"gpum_warpTime failed at {url}: {payload['error'].get('message')} "
            "(only gpum-localnet has this dev-only method)"
        )
    result = payload["result"]
    return int(result["slot"]), int(result["unixTimestamp"])
