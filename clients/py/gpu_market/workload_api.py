"""The job user's HTTP client for a provider's worker API (docs/protocol.md, "Workloads").

Every request is signed by the user's wallet (:func:`gpu_market.workload.sign_request`,
timestamped now and signed afresh for every attempt)::

    POST {endpoint}/v1/jobs/{job_b58}/workload            action "deliver"
        body: canonical_bytes(spec); workload_hash = spec_hash(spec)
        200 {"job", "workload_hash": hex, "state"}
    GET  {endpoint}/v1/jobs/{job_b58}/workload            action "status"
        200 {"job", "workload_hash", "state", "exit_code", "error", "runtime", "ports"}
    GET  {endpoint}/v1/jobs/{job_b58}/logs?tail=N&follow=0|1   action "logs"
        200 text/plain, streamed (chunked) while following

An error answer is ``{"error": "message"}`` with 400 (bad spec), 401/403 (auth), 404 (job
unknown to this provider), 409 (spec hash differs from the job's on-chain
``workload_hash``), 410 (job ended) or 503 (retry later).

Errors: everything raises :class:`WorkerApiError`; ``status`` is the HTTP status, or None
when no answer came (unreachable worker, timeout, malformed endpoint). A deliver or status
call has one total deadline (``timeout``: connecting, sending and the whole answer, so a
worker that trickles its answer cannot hold it) and refuses answers over 1 MiB. Its message
names the endpoint, carries the server's error text and says what to do next. Only
:func:`deliver_workload` retries (it is idempotent: the worker accepts one spec per job),
and only after connection errors and 503, honouring ``Retry-After`` up to 30 s.

An endpoint is ``http[s]://host[:port][/prefix]`` or ``host:port`` (taken as ``http://``);
trailing slashes are dropped and other schemes are refused.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
from solders.pubkey import Pubkey

from .net import BoundedClient, BoundedResponse, DeadlineExceeded, NetError, ResponseTooLarge
from .workload import WorkloadSpec, canonical_bytes, sign_request, spec_hash

__all__ = [
    "WorkerApiError",
    "deliver_workload",
    "normalize_endpoint",
    "stream_logs",
    "workload_status",
]

_MAX_RETRY_AFTER_S = 30.0
LOGS_DEADLINE_S = 120.0
"""Without ``follow``, the whole log answer arrives within this (``stream_logs``)."""
_MAX_ERROR_BYTES = 64 << 10
_MAX_ANSWER_BYTES = 1 << 20
"""A deliver or status answer larger than this is refused (a worker's is a few hundred bytes)."""
_BACKOFF_S = 0.5
_ERROR_TEXT_CHARS = 500
_sleep = time.sleep  # tests replace it

_HINTS = {
    400: "the worker rejected the spec",
    401: "check this machine's clock and that the request is signed by a Solana keypair",
    403: "sign with the wallet that created the job",
    404: "this provider does not know the job; check the job address and the provider",
    409: "the spec's hash differs from the job's on-chain workload_hash; deliver the exact "
    "spec the job was created with",
    410: "the job has ended",
    503: "the worker is busy; retry later",
}


class WorkerApiError(Exception):
    """A worker API call failed. ``status``: the HTTP status, or None when no answer came;
    ``endpoint``: the normalized endpoint; ``server_error``: the worker's ``error`` text
    (None if it sent none)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        endpoint: str | None = None,
        server_error: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.endpoint = endpoint
        self.server_error = server_error


def normalize_endpoint(endpoint: str) -> str:
    """``"http://h:p/"`` -> ``"http://h:p"``; ``"h:p"`` -> ``"http://h:p"``; WorkerApiError
    (status None) for other schemes, a missing host, a query or a fragment."""
    text = str(endpoint).strip()
    if not text:
        raise WorkerApiError("the provider has no worker endpoint (empty)")
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme.lower() not in ("http", "https"):
        raise WorkerApiError(
            f"worker endpoint {endpoint!r} uses the scheme {parts.scheme!r}; only http:// and "
            "https:// are supported"
        )
    if not parts.hostname or parts.query or parts.fragment or any(c.isspace() for c in text):
        raise WorkerApiError(
            f"worker endpoint {endpoint!r} is not http[s]://host[:port][/path] or host:port"
        )
    try:
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError:
        raise WorkerApiError(f"worker endpoint {endpoint!r} has an invalid port") from None
    return text.rstrip("/")


def _job_b58(job: object) -> str:
    if isinstance(job, Pubkey):
        return str(job)
    raw = bytes(job) if isinstance(job, (bytes, bytearray, memoryview)) else None
    if raw is None or len(raw) != 32:
        raise ValueError("job must be 32 bytes or a Pubkey (the job account address)")
    return str(Pubkey.from_bytes(raw))


def _server_error(response: httpx.Response | BoundedResponse) -> str | None:
    if isinstance(response, BoundedResponse):
        body: Any = response.json_object()
        text = response.body.decode("utf-8", "replace").strip()
    else:
        try:
            body = response.json()
        except (ValueError, UnicodeDecodeError):
            body = None
        text = response.text.strip()
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return body["error"][:_ERROR_TEXT_CHARS]
    return None if isinstance(body, dict) else (text[:_ERROR_TEXT_CHARS] or None)


def _http_error(endpoint: str, what: str,
                response: httpx.Response | BoundedResponse) -> WorkerApiError:
    status = response.status if isinstance(response, BoundedResponse) else response.status_code
    server = _server_error(response)
    hint = _HINTS.get(status)
    message = f"the provider's worker at {endpoint} refused to {what}: HTTP {status}"
    if server:
        message += f": {server}"
    if hint:
        message += f" ({hint})"
    return WorkerApiError(message, status=status, endpoint=endpoint, server_error=server)


def _unreachable(endpoint: str, error: httpx.TransportError | NetError) -> WorkerApiError:
    """No (complete) answer: not reachable, past the call's deadline, or over the size cap."""
    if isinstance(error, httpx.TimeoutException):
        why = f"timed out ({type(error).__name__})"
    elif isinstance(error, DeadlineExceeded):
        why = "timed out (no complete answer within the deadline)"
    elif isinstance(error, ResponseTooLarge):
        why = f"its answer is over {_MAX_ANSWER_BYTES} bytes"
    else:
        why = str(error) or type(error).__name__
    return WorkerApiError(
        f"cannot reach the provider's worker at {endpoint}: {why} (is the worker running and "
        "its endpoint reachable from here?)",
        endpoint=endpoint,
    )


def _json_answer(endpoint: str, response: BoundedResponse) -> dict[str, Any]:
    body = response.json_object()
    if body is None:
        raise WorkerApiError(
            f"the provider's worker at {endpoint} answered HTTP {response.status} "
            "without a JSON object",
            status=response.status,
            endpoint=endpoint,
        )
    return body


def _retry_after(response: BoundedResponse | None, attempt: int) -> float:
    if response is not None:
        try:
            return min(max(float(response.headers["retry-after"]), 0.0), _MAX_RETRY_AFTER_S)
        except (KeyError, ValueError):
            pass
    return min(_BACKOFF_S * 2**attempt, _MAX_RETRY_AFTER_S)


def deliver_workload(
    endpoint: str,
    job: bytes,
    spec: WorkloadSpec,
    signer_secret: bytes,
    *,
    timeout: float = 10.0,
    retries: int = 3,
) -> dict[str, Any]:
    """Post ``spec`` for ``job`` to the worker at ``endpoint`` as the wallet
    ``signer_secret`` (64-byte keypair) and return the worker's JSON answer
    (``{"job", "workload_hash", "state"}``).

    Tries once plus up to ``retries`` times after a connection error, a 503, or a 404 that
    carries ``Retry-After`` (the worker has not seen a job created moments ago yet), waiting
    ``Retry-After`` (at most 30 s) or 0.5, 1, 2, ... s. Raises WorkerApiError for any other
    answer than 2xx; WorkloadSpecError (before any I/O) if ``spec`` is invalid.
    """
    base = normalize_endpoint(endpoint)
    url = f"{base}/v1/jobs/{_job_b58(job)}/workload"
    body = canonical_bytes(spec)
    workload_hash = spec_hash(spec)
    attempt = 0
    with BoundedClient(timeout, _MAX_ANSWER_BYTES) as client:
        while True:
            headers = sign_request(signer_secret, "deliver", job, workload_hash, int(time.time()))
            headers["Content-Type"] = "application/json"
            response: BoundedResponse | None = None
            try:
                response = client.post(url, content=body, headers=headers)
            except NetError as e:
                error = _unreachable(base, e)
            else:
                if 200 <= response.status < 300:
                    return _json_answer(base, response)
                error = _http_error(base, "accept the workload", response)
                not_seen_yet = (response.status == 404
                                and "retry-after" in response.headers)
                if response.status != 503 and not not_seen_yet:
                    raise error
            if attempt >= retries:
                raise error
            _sleep(_retry_after(response, attempt))
            attempt += 1


def workload_status(
    endpoint: str,
    job: bytes,
    workload_hash: bytes,
    signer_secret: bytes,
    *,
    timeout: float = 10.0,
) -> dict[str, Any]:
    """The worker's view of ``job``'s workload (``state``, ``exit_code``, ``error``,
    ``runtime``, ``ports``: see the module docstring); ``workload_hash`` is the job's
    on-chain one. One attempt; WorkerApiError on failure."""
    base = normalize_endpoint(endpoint)
    url = f"{base}/v1/jobs/{_job_b58(job)}/workload"
    headers = sign_request(signer_secret, "status", job, workload_hash, int(time.time()))
    try:
        with BoundedClient(timeout, _MAX_ANSWER_BYTES) as client:
            response = client.get(url, headers=headers)
    except NetError as e:
        raise _unreachable(base, e) from None
    if not 200 <= response.status < 300:
        raise _http_error(base, "report the workload status", response)
    return _json_answer(base, response)


def stream_logs(
    endpoint: str,
    job: bytes,
    workload_hash: bytes,
    signer_secret: bytes,
    *,
    tail: int | None = None,
    follow: bool = False,
    timeout: float = 10.0,
    deadline: float = LOGS_DEADLINE_S,
) -> Iterator[bytes]:
    """Yield the workload's log output as the worker sends it (bytes chunks, stdout and
    stderr as the worker merges them). ``tail``: only the last N lines; ``follow``: keep
    streaming until the worker ends the response (the container stopped) or the caller
    stops iterating; ``timeout`` then bounds connecting, not waiting for output. Without
    ``follow`` the whole answer must arrive within ``deadline`` seconds (a worker that
    trickles it cannot hold the caller). An error answer is read up to 64 KiB.

    A generator: the request is made, and WorkerApiError raised, on the first ``next()``.
    Closing the generator closes the connection.
    """
    base = normalize_endpoint(endpoint)
    if tail is not None and (isinstance(tail, bool) or not isinstance(tail, int) or tail < 0):
        raise ValueError(f"tail must be a non-negative int or None, got {tail!r}")
    url = f"{base}/v1/jobs/{_job_b58(job)}/logs"
    params = {"follow": "1" if follow else "0"}
    if tail is not None:
        params["tail"] = str(tail)
    headers = sign_request(signer_secret, "logs", job, workload_hash, int(time.time()))
    limits = httpx.Timeout(timeout, read=None) if follow else httpx.Timeout(timeout)
    streaming = False
    try:
        with (
            httpx.Client(timeout=limits) as client,
            client.stream("GET", url, params=params, headers=headers) as response,
        ):
            if not response.is_success:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > _MAX_ERROR_BYTES:
                        break
                raise _http_error(base, "serve the logs", BoundedResponse(
                    response.status_code, bytes(body[:_MAX_ERROR_BYTES]),
                    {k.lower(): v for k, v in response.headers.items()}))
            streaming = True
            end = None if follow else time.monotonic() + deadline
            for chunk in response.iter_bytes():
                if end is not None and time.monotonic() > end:
                    raise WorkerApiError(
                        f"the provider's worker at {base} did not send the logs within "
                        f"{deadline:g} s (it answers too slowly); ask for fewer lines "
                        "(--tail) or try again later", endpoint=base)
                yield chunk
    except httpx.TransportError as e:
        if not streaming:
            raise _unreachable(base, e) from None
        raise WorkerApiError(
            f"the log stream from the provider's worker at {base} broke: "
            f"{str(e) or type(e).__name__} (run the command again to resume)",
            endpoint=base,
        ) from None
