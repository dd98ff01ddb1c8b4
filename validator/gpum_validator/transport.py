"""The validator's HTTP transport, on the front shared with the worker API
(``gpu_market.httpfront``): the listen address rule, the limits, JSON answers and the plumbing
between the event loop and the routes (``server.ValidatorHTTPServer``). The routes themselves
live in ``server``.

Limits: bodies over ``MAX_BODY_BYTES`` get 413 without being read; a body without
Content-Length gets 411; a Content-Type other than JSON gets 415; bodies that are not
UTF-8 JSON get 400 (also a number of thousands of digits, or arrays nested 100,000 deep).
Every error body is ``{"error", "message", "retry"}``; a retryable single-proof answer (425,
503) also carries ``"retry_after"`` and a ``Retry-After`` header. Binding to a non-loopback
address needs ``allow_remote=True``.

Hardened against hostile traffic by the front (``gpu_market.httpfront``, whose docstring
states each limit): one event-loop thread owns every socket and hands only complete requests
to at most ``MAX_CONCURRENT`` handler threads, which run the routes (the intake, the member
endpoints and the dashboard are synchronous: SQLite, chain reads), so an idle or slow
connection costs a socket, never a thread. The front's limits are ``HttpLimits`` (the flags of
``gpum-validator run``: ``--max-connections``, ``--max-connections-per-source``,
``--max-in-flight-per-source``, ``--trusted-proxy``); this module adds:

* a request body holds at most ``MAX_JSON_TOKENS`` commas, colons and brackets, counted
  before parsing: 100,000 numbers or nested arrays are a 400 that costs no parse (nesting
  under that count but past the interpreter's recursion limit is a 400 as well);
* responses go out in one write with ``TCP_NODELAY``; ``/health`` is computed at most once
  per ``server.HEALTH_CACHE_S`` (1 s) however often it is asked.

The per-source defaults are set for honest workers behind one NAT: a worker sends one proof
per window on one connection, so 256 connections are thousands of workers, and a source over
its in-flight share is slowed to its turn, never refused. Behind the TLS proxy every
connection comes from the proxy, hence no connection cap for it and the per-client count by
its ``X-Forwarded-For`` (the proxy itself should cap connections per client).
"""

from __future__ import annotations

import ipaddress
import json
import logging
from dataclasses import dataclass
from typing import Any

from gpu_market import httpfront
from gpu_market.httpfront import HttpServer, Request, Response, standard_body_check

from .errors import ConfigError, error_body

log = logging.getLogger("gpum_validator.http")


def parse_listen(listen: str, allow_remote: bool = False) -> tuple[str, int]:
    """``host:port`` -> (host, port); ConfigError unless loopback or ``allow_remote``."""
    host, sep, port_s = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise ConfigError(f"--listen {listen!r} must be HOST:PORT, e.g. 127.0.0.1:8787")
    if host != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            raise ConfigError(f"--listen host {host!r} must be an IP address or localhost") \
                from None
        if not loopback and not allow_remote:
            raise ConfigError(f"--listen {listen} is not a loopback address; put the validator "
                              "behind a TLS proxy, or pass --allow-remote to bind it anyway")
    return host, int(port_s)


MAX_JSON_TOKENS = 4096
"""Commas, colons and brackets a request body may hold (counted before parsing, none of them
occur in base64 or base58): every request is a flat object or a batch of at most
``MAX_BATCH`` of them, a few hundred; junk of 100,000 numbers or nested arrays costs no
parse."""


@dataclass(frozen=True)
class HttpLimits(httpfront.HttpLimits):
    """The transport's limits (``gpu_market.httpfront``); ``gpum-validator run`` flags."""

    def validate(self) -> None:
        try:
            super().validate()
        except httpfront.LimitsError as e:
            raise ConfigError(str(e)) from None


def json_response(status: int, obj: dict[str, Any], close: bool = False,
                  headers: dict[str, str] | None = None) -> Response:
    """``obj`` as JSON; a non-200 answer whose body says ``retry`` also gets Retry-After."""
    ra = obj.get("retry_after") if status != 200 and obj.get("retry") is True else None
    extra = [("Retry-After", str(ra))] if isinstance(ra, int) else []
    extra += list((headers or {}).items())
    return Response(status, json.dumps(obj, separators=(",", ":")).encode(), "application/json",
                    extra, close)


def error_response(status: int, code: str, message: str, close: bool = False) -> Response:
    return json_response(status, error_body(code, message), close)


class JsonHttpServer(HttpServer):
    """Hands each complete request to the routes (``route``, on a handler thread) and answers
    with JSON what the routes do not: a body refused before it is read (``check_body``), a
    route that fails (500, logged). A subclass names its POST routes (``post_routes``), its
    body limit (``max_body``), what a body over it counts (``body_too_large``) and answers
    (``route``)."""

    max_body: int

    def post_routes(self) -> set[str]:
        raise NotImplementedError

    def body_too_large(self) -> None:
        """Count a body refused with 413 (nothing by default)."""

    def route(self, req: Request) -> Response | None:
        """The routes' answer to a complete request (None: the route gave none, a bug)."""
        raise NotImplementedError

    def check_body(self, req: Request) -> Response | None:
        """The answers given before any byte of the body is read: 404 for an unknown POST
        route, 411 without Content-Length (or chunked), 413 over the limit."""
        return standard_body_check(req, self.post_routes(), self.max_body, error_response,
                                   on_too_large=self.body_too_large)

    def error_response(self, status: int, code: str, message: str,
                       close: bool = False) -> Response:
        return error_response(status, code, message, close)

    def respond(self, req: Request) -> Response:
        """Run the routes for a complete request (on a handler thread); never raises."""
        try:
            response = self.route(req)
            if response is None:
                raise RuntimeError("the route gave no answer")
            return response
        except Exception:  # a bug: answered 500, logged with its traceback
            self.stats["handler_errors"] += 1
            log.exception("error handling %s %s", req.method, req.path[:200])
            return error_response(500, "internal_error", "the validator failed on this "
                                  "request; retry later, and report it if it persists",
                                  close=True)
