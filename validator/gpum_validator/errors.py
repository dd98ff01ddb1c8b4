"""Exception hierarchy of the validator node.

::

    ValidatorError                 base class; every message says what to do next
    ├── ConfigError                bad flag, key file, address, unreachable RPC, unwritable db
    ├── StoreError                 the database cannot be opened/migrated/written
    ├── ChainUnavailable           a chain read failed for a transport reason (retry later)
    └── Rejection                  a proof failed schema or verification; carries ``reason``
        └── Equivocation           a second, different signed proof for one (job, seq)

``Rejection.reason`` is a stable snake_case code (listed in validator/README.md); the
HTTP layer returns it as ``{"error": reason, "message": message}`` with ``http_status``.
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


class Rejection(ValidatorError):
    """A proof was refused. ``reason`` is a stable code, ``message`` a sentence for humans."""

    http_status = 422

    def __init__(self, reason: str, message: str, http_status: int | None = None) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        if http_status is not None:
            self.http_status = http_status


class Equivocation(Rejection):
    """Two different signed proofs for the same (job, seq): slashing evidence."""

    http_status = 409

    def __init__(self, message: str) -> None:
        super().__init__("equivocation", message, 409)
