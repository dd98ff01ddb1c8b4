"""Token amounts in UI units <-> base units (pure, exact: Decimal, never float)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

__all__ = ["AmountError", "format_ui_amount", "parse_ui_amount"]

U64_MAX = 2**64 - 1


class AmountError(ValueError):
    """An amount string that is not a valid token amount for the mint."""


def parse_ui_amount(text: str, decimals: int, *, allow_zero: bool = False) -> int:
    """``"1.25"`` with 6 decimals -> ``1250000``.

    Raises AmountError for non-numbers, negatives, zero (unless ``allow_zero``), more decimal
    places than the mint has, or a result above u64.
    """
    try:
        value = Decimal(text.strip().replace("_", ""))
    except (InvalidOperation, AttributeError):
        raise AmountError(f"{text!r} is not a number") from None
    if not value.is_finite():
        raise AmountError(f"{text!r} is not a finite number")
    if value < 0:
        raise AmountError(f"amount {text} is negative")
    scaled = value.scaleb(decimals)
    if scaled != scaled.to_integral_value():
        raise AmountError(
            f"amount {text} has more decimal places than the mint's {decimals} decimals"
        )
    base = int(scaled)
    if base == 0 and not allow_zero:
        raise AmountError("amount must be greater than zero")
    if base > U64_MAX:
        raise AmountError(f"amount {text} is too large")
    return base


def format_ui_amount(base: int, decimals: int) -> str:
    """``1250000`` with 6 decimals -> ``"1.25"`` (no trailing zeros, no exponent)."""
    q = Decimal(base).scaleb(-decimals)
    text = format(q, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text
