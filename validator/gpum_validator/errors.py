"""Exception hierarchy of the validator node.

::

    ValidatorError                 base class; every message says what to do next
    ├── ConfigError                bad flag, key file, address, unreachable RPC, unwritable db
    ├── StoreError                 the database cannot be opened/migrated/written
    ├── ChainUnavailable           a chain read failed for a transport reason (retry later)
    └── Rejection                  a proof failed schema or verification; carries ``reason``
        └── Equivocation           a second, different signed proof for one (job, seq)

``Rejection.reason`` is a stable snake_case code (listed in validator/README.md); the
HTTP layer returns it as ``{"error": reason, "message": message, "retry": bool}`` with
``http_status``. A rejection is either *final* (the same bytes will be refused again; 4xx
other than 425) or *retryable* (``retry_after`` set: a state that can heal, such as a job
not yet Running on this validator's RPC or a window a few seconds early; HTTP 425 with
``"retry": true``, ``"retry_after"`` and a ``Retry-After`` header). ``ChainUnavailable`` and
``StoreError`` are answered 503, retryable, and decide nothing.
"""

from __future__ import annotations


class ValidatorError(Exception):
    """Base class of all validator errors."""


class ConfigError(ValidatorError):
    """Configuration cannot be used; the message names the flag or file to fix."""


class StoreError(ValidatorError):
    """The database cannot be used (permissions, corruption, newer schema)."""


class ChainUnavailable(ValidatorError):
    """The chain could not be read (RPC down or timing out); the caller should retry."""


UNAVAILABLE_RETRY_AFTER_SECONDS = 5
"""Retry-After of a 503 (chain or database unavailable)."""


class Rejection(ValidatorError):
    """A proof was refused. ``reason`` is a stable code, ``message`` a sentence for humans.

    ``retry_after`` (seconds) marks a retryable rejection: the refusal may heal without the
    worker changing anything, so it should resend the same bytes after that delay (HTTP 425
    unless ``http_status`` says otherwise). ``None`` means final.
    """

    http_status = 422

    def __init__(self, reason: str, message: str, http_status: int | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.retry_after = None if retry_after is None else max(1, int(retry_after))
        if http_status is not None:
            self.http_status = http_status
        elif self.retry_after is not None:
            self.http_status = 425

    @property
    def retryable(self) -> bool:
        return self.retry_after is not None

    def body(self) -> dict[str, object]:
        """The JSON error body: ``error``, ``message``, ``retry`` (+ ``retry_after``)."""
        return error_body(self.reason, self.message, self.retry_after)


def error_body(reason: str, message: str, retry_after: int | None = None) -> dict[str, object]:
    """``{"error", "message", "retry"}``, plus ``"retry_after"`` (seconds) when retryable."""
    body: dict[str, object] = {"error": reason, "message": message,
                               "retry": retry_after is not None}
    if retry_after is not None:
        body["retry_after"] = retry_after
    return body


class Equivocation(Rejection):
    """Two different signed proofs for the same (job, seq): slashing evidence."""

    http_status = 409

    def __init__(self, message: str) -> None:
        super().__init__("equivocation", message, 409)
