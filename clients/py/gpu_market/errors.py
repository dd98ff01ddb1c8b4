"""Typed errors of the SDK, and parsing of chain errors into them (pure).

Exception hierarchy::

    SdkError                      every error the SDK raises on purpose
    ├── RpcUnavailable            the RPC endpoint cannot be reached or answers garbage
    ├── ChainError                the cluster rejected or failed a transaction (.message, .logs, .err)
    │   ├── GpuMarketError        a program returned a custom error code (.code, .name, .program)
    │   ├── InsufficientSol       its fee payer (.address) has no SOL or too little for the fee
    │   └── ConfirmationTimeout   sent, but not confirmed in time (it may still land)
    ├── AccountNotFound           an account the operation needs does not exist
    └── TransactionTooLarge       the transaction would exceed the 1232-byte packet limit

``GpuMarketError.name`` is the IDL error name for gpu_market codes (6000+), Anchor's
``ErrorCode`` name for framework codes (100..5999), the SPL Token ``TokenError`` name when the
failing program is the token program, the ``SystemError`` name (e.g. ``AccountAlreadyInUse``
when an ``init`` finds its account already there) when it is the System program, else
``"Custom"``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ._framework_errors import ANCHOR_ERRORS, SPL_TOKEN_ERRORS, SYSTEM_PROGRAM_ERRORS

__all__ = [
    "AccountNotFound",
    "ChainError",
    "ConfirmationTimeout",
    "GpuMarketError",
    "InsufficientSol",
    "RpcUnavailable",
    "SdkError",
    "TransactionTooLarge",
    "chain_error_from_rpc_error",
    "chain_error_from_transaction_err",
    "fee_payer_error",
    "program_error_table",
]

TOKEN_PROGRAM = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
SYSTEM_PROGRAM = "11111111111111111111111111111111"
_FAILED_RE = re.compile(r"^Program (\w+) failed: (.*)$")
_ANCHOR_LOG_RE = re.compile(
    r"Error Code: (\w+)\. Error Number: (\d+)\. Error Message: (.*?)\.?$"
)


class SdkError(Exception):
    """Base class of every error the gpu_market SDK raises on purpose."""


class RpcUnavailable(SdkError):
    """The RPC endpoint could not be reached (connection refused, timeout, bad HTTP)."""


class AccountNotFound(SdkError):
    """An account the operation needs does not exist on chain."""


class TransactionTooLarge(SdkError, ValueError):
    """The transaction would not fit in one 1232-byte packet."""


class ChainError(SdkError):
    """The cluster rejected or failed a transaction.

    ``err`` is the raw ``TransactionError`` JSON (e.g. ``{"InstructionError": [1, ...]}``) or
    None; ``logs`` the program logs (possibly empty).
    """

    def __init__(self, message: str, logs: Sequence[str] = (), err: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.logs = list(logs)
        self.err = err


class ConfirmationTimeout(ChainError):
    """The transaction was sent but not confirmed in time; it may still land."""


class GpuMarketError(ChainError):
    """A program (usually gpu_market) failed with custom error ``code``.

    Attributes: ``code`` (int), ``name`` (IDL error name, e.g. ``"StaleSequence"``),
    ``message`` (the ``#[msg]`` text), ``logs``, ``program`` (base58 id of the failing program
    when the logs say, else None) and ``instruction_index`` (index in the transaction).
    """

    def __init__(
        self,
        code: int,
        name: str,
        message: str,
        logs: Sequence[str] = (),
        *,
        program: str | None = None,
        instruction_index: int | None = None,
        err: Any = None,
    ) -> None:
        super().__init__(message, logs, err)
        self.code = code
        self.name = name
        self.program = program
        self.instruction_index = instruction_index

    def __str__(self) -> str:
        return f"{self.name} ({self.code}): {self.message}"


class InsufficientSol(ChainError):
    """The cluster refused a transaction because its fee payer ``address`` has no SOL (no
    account at all: ``AccountNotFound``) or too little for the fee or for the rent it would
    leave (``InsufficientFundsForFee``, ``InsufficientFundsForRent`` of account 0). The message
    says to fund ``address``."""

    def __init__(self, address: str, err: Any, logs: Sequence[str] = ()) -> None:
        has = "has no SOL" if err == "AccountNotFound" else "has too little SOL"
        super().__init__(
            f"fund {address} with SOL for fees: this transaction's fee payer {has} (e.g. "
            f"`solana transfer {address} 0.05` from a funded wallet, or `solana airdrop 1 "
            f"{address}` on devnet or a local chain); nothing was sent", logs, err)
        self.address = address


def fee_payer_error(error: ChainError, payer: Any) -> ChainError:
    """``error`` as :class:`InsufficientSol` naming ``payer`` (the fee payer, account 0 of the
    transaction) when the cluster refused the transaction for its fee payer's SOL; else
    ``error`` unchanged."""
    err = error.err
    rent = isinstance(err, Mapping) and err.get("InsufficientFundsForRent") in (
        {"account_index": 0}, [0], 0)
    if err in ("AccountNotFound", "InsufficientFundsForFee") or rent:
        return InsufficientSol(str(payer), err, error.logs)
    return error


def program_error_table(idl_json: Mapping[str, Any]) -> dict[int, tuple[str, str]]:
    """``{code: (name, msg)}`` of the program's errors from a new-spec (or legacy) IDL dict."""
    return {int(e["code"]): (e["name"], e.get("msg") or e["name"]) for e in idl_json.get("errors", [])}


def _failing_program(logs: Sequence[str]) -> str | None:
    # The first "failed" line is the innermost program (CPI callee) that failed.
    for line in logs:
        m = _FAILED_RE.match(line)
        if m:
            return m.group(1)
    return None


def _anchor_log(logs: Sequence[str], code: int) -> tuple[str, str] | None:
    for line in logs:
        m = _ANCHOR_LOG_RE.search(line)
        if m and int(m.group(2)) == code:
            return m.group(1), m.group(3)
    return None


def chain_error_from_transaction_err(
    err: Any,
    logs: Sequence[str] = (),
    program_errors: Mapping[int, tuple[str, str]] | None = None,
    program_id: str | None = None,
    context: str = "transaction failed",
) -> ChainError:
    """Turn a ``TransactionError`` JSON value (and logs) into a typed error.

    ``{"InstructionError": [i, {"Custom": n}]}`` becomes GpuMarketError with the name and
    message resolved as described in the module docstring; anything else a ChainError whose
    message names the error (e.g. ``InsufficientFundsForFee``).
    """
    logs = list(logs or [])
    if isinstance(err, dict) and "InstructionError" in err:
        index, inner = err["InstructionError"]
        if isinstance(inner, dict) and "Custom" in inner:
            code = int(inner["Custom"])
            program = _failing_program(logs)
            name, message = "Custom", f"custom program error {code} (0x{code:x})"
            if program == TOKEN_PROGRAM and code in SPL_TOKEN_ERRORS:
                name, message = SPL_TOKEN_ERRORS[code]
                message = f"SPL Token: {message}"
            elif program == SYSTEM_PROGRAM and code in SYSTEM_PROGRAM_ERRORS:
                name, message = SYSTEM_PROGRAM_ERRORS[code]
                message = f"System program: {message}"
            elif program_errors and code in program_errors and (
                program is None or program_id is None or program == program_id
            ):
                name, message = program_errors[code]
            elif code in ANCHOR_ERRORS:
                name, message = ANCHOR_ERRORS[code]
                logged = _anchor_log(logs, code)
                if logged:
                    message = logged[1]
            else:
                logged = _anchor_log(logs, code)
                if logged:
                    name, message = logged
            return GpuMarketError(
                code, name, message, logs, program=program, instruction_index=index, err=err
            )
        detail = inner if isinstance(inner, str) else next(iter(inner), str(inner))
        return ChainError(f"{context}: instruction {index}: {detail}", logs, err)
    detail = err if isinstance(err, str) else next(iter(err), str(err)) if err else "unknown"
    return ChainError(f"{context}: {detail}", logs, err)


def chain_error_from_rpc_error(
    error: Mapping[str, Any],
    program_errors: Mapping[int, tuple[str, str]] | None = None,
    program_id: str | None = None,
) -> ChainError:
    """Turn a JSON-RPC error object (``{"code", "message", "data"}``) into a typed error.

    For -32002 (preflight simulation failed) ``data`` carries ``err`` and ``logs`` and the
    result is as :func:`chain_error_from_transaction_err`; other codes give a ChainError with
    the node's message.
    """
    data = error.get("data") or {}
    message = str(error.get("message", "RPC error"))
    if isinstance(data, Mapping) and data.get("err") is not None:
        return chain_error_from_transaction_err(
            data["err"],
            data.get("logs") or [],
            program_errors,
            program_id,
            context=message.split(":")[0] if message else "transaction failed",
        )
    logs = data.get("logs") or [] if isinstance(data, Mapping) else []
    return ChainError(message, logs, None)
