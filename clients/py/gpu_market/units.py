"""Units a person types and reads (pure, exact: Decimal and Fraction, never float): token
amounts in UI units <-> base units, durations (``90s``, ``1h30m``, a bare number in a flag's
unit), Unix times as dates with their distance from now, GPU memory in GB as it is sold."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from fractions import Fraction

__all__ = [
    "AmountError",
    "DurationError",
    "format_price_per_hour",
    "format_span",
    "format_ui_amount",
    "nominal_vram_gb",
    "parse_duration",
    "parse_price_per_hour",
    "parse_seconds",
    "parse_ui_amount",
    "when",
]

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


# ----------------------------------------------------------------------------- prices

SECONDS_PER_HOUR = 3_600


def parse_price_per_hour(text: str, decimals: int) -> int:
    """A price a person types, in tokens per GPU-hour, as the chain holds it: base units per
    GPU-second (``"1.1988"`` with 6 decimals -> ``333``). Exact or refused: AmountError when the
    text is not a positive amount of the mint, or when its base units per hour are not a
    multiple of 3600 (the chain cannot hold that price), naming the two nearest exact prices."""
    per_hour = parse_ui_amount(text, decimals)
    per_second, rest = divmod(per_hour, SECONDS_PER_HOUR)
    if rest:
        lower, upper = per_second * SECONDS_PER_HOUR, (per_second + 1) * SECONDS_PER_HOUR
        exact = (Decimal(per_hour) / SECONDS_PER_HOUR).quantize(Decimal("0.01"))
        near = [format_ui_amount(v, decimals) for v in (lower, upper) if 0 < v <= U64_MAX]
        raise AmountError(
            f"{text.strip()} per GPU-hour is {exact} base units per second, which the chain "
            f"cannot hold exactly (it keeps whole base units per GPU-second); use "
            f"{' or '.join(near)}")
    return per_second


def format_price_per_hour(per_second: int, decimals: int) -> str:
    """A chain price (base units per GPU-second) in tokens per GPU-hour: ``333`` with 6 decimals
    -> ``"1.1988"``."""
    return format_ui_amount(int(per_second) * SECONDS_PER_HOUR, decimals)


# ----------------------------------------------------------------------------- durations

DURATION_UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_DURATION_PART = re.compile(r"(\d+)([dhms])")
_UNIT_NAMES = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


class DurationError(ValueError):
    """A duration string that is neither a number in the flag's unit nor ``1h30m`` form."""


def parse_duration(text: str, unit: str | None = None) -> Fraction:
    """Seconds (exact) of ``text``: ``"30s"``, ``"30m"``, ``"1h"``, ``"1h30m"``, ``"2d"`` (units
    d, h, m, s, whole numbers, each unit at most once and largest first; case and surrounding
    spaces ignored) or, when ``unit`` (one of d, h, m, s) is given, a bare non-negative number
    in that unit (``"1.5"`` with ``"h"`` -> 5400). DurationError (one line saying what to
    write) for anything else; without ``unit`` a bare number is refused, naming the units."""
    raw = str(text)
    s = raw.strip().lower()
    example = "write e.g. 90s, 15m, 2h, 1d or 1h30m"
    if unit is not None:
        example = f"write a number of {_UNIT_NAMES[unit]} or e.g. 90s, 15m, 2h, 1d, 1h30m"
    if not s:
        raise DurationError(f"empty duration; {example}")
    if s[0].isdigit() and not s[-1].isalpha():
        if unit is None:
            if s.isdigit():
                raise DurationError(f"duration {raw!r} has no unit; write {s}s, {s}m, {s}h or {s}d")
            raise DurationError(f"{raw!r} is not a duration; {example}")
        try:
            value = Decimal(s.replace("_", ""))
        except InvalidOperation:
            raise DurationError(f"{raw!r} is not a duration; {example}") from None
        return Fraction(value) * DURATION_UNITS[unit]
    pos, total, last = 0, 0, None
    order = list(DURATION_UNITS)
    for m in _DURATION_PART.finditer(s):
        if m.start() != pos:
            break
        part = m.group(2)
        if last is not None and order.index(part) <= order.index(last):
            raise DurationError(f"duration {raw!r} repeats a unit or is out of order; units go "
                                f"largest first, each once ({example})")
        total += int(m.group(1)) * DURATION_UNITS[part]
        last, pos = part, m.end()
    if pos != len(s) or last is None:
        raise DurationError(f"{raw!r} is not a duration; {example}")
    return Fraction(total)


def parse_seconds(text: str, unit: str = "s", *, whole: bool = True,
                  low: float | None = None, high: float | None = None) -> Fraction:
    """:func:`parse_duration` with a bare number in ``unit``, checked: whole seconds when
    ``whole``, at least ``low`` and at most ``high`` seconds (DurationError naming the bound
    in the flag's unit and in seconds)."""
    seconds = parse_duration(text, unit)
    if whole and seconds.denominator != 1:
        raise DurationError(f"{text!r} is not a whole number of seconds")
    size = DURATION_UNITS[unit]
    lo, hi = (None if b is None else Fraction(Decimal(str(b))) for b in (low, high))  # 0.1 exactly
    for bound, bad, word in ((lo, lo is not None and seconds < lo, "at least"),
                             (hi, hi is not None and seconds > hi, "at most")):
        if bad:
            n = bound / size
            name = _UNIT_NAMES[unit][:-1] if n == 1 else _UNIT_NAMES[unit]
            in_unit = "" if unit == "s" else f" ({_fmt(n)} {name})"
            raise DurationError(f"{text!r} must be {word} {_fmt(bound)} s{in_unit}")
    return seconds


def _fmt(x: Fraction) -> str:
    if x.denominator == 1:
        return str(x.numerator)
    return format(Decimal(x.numerator) / Decimal(x.denominator), "f").rstrip("0")


# ----------------------------------------------------------------------------- times

def format_span(seconds: int) -> str:
    """``21`` -> ``"21 s"``, ``330`` -> ``"5 min 30 s"``, ``9000`` -> ``"2 h 30 min"``,
    ``97200`` -> ``"1 d 3 h"``: the two largest units, for a person to read."""
    left = abs(int(seconds))
    parts = []
    for name, size in (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1)):
        n, left = divmod(left, size)
        if n or parts:
            parts.append((n, name))
    shown = [f"{n} {name}" for n, name in parts[:2] if n] or ["0 s"]
    return " ".join(shown)


def when(ts: int, now: int) -> str:
    """Unix time ``ts`` as a UTC date with its distance from ``now`` (both Unix seconds, e.g.
    the chain's clock): ``"2026-11-27 14:03:10 UTC (in 21 s)"``, ``"... (21 s ago)"``,
    ``"... (now)"``."""
    date = datetime.fromtimestamp(int(ts), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    delta = int(ts) - int(now)
    if delta == 0:
        return f"{date} (now)"
    rel = f"in {format_span(delta)}" if delta > 0 else f"{format_span(delta)} ago"
    return f"{date} ({rel})"


# ----------------------------------------------------------------------------- GPU memory

STANDARD_VRAM_GB = (4, 6, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 128, 141,
                    180, 192, 256, 288)
"""Memory sizes GPUs are sold with, in GB as their names say it (``H100 80GB``)."""
_VRAM_IN_NAME = re.compile(r"(\d+)\s*gb\b", re.IGNORECASE)


def nominal_vram_gb(vram_mib: int, gpu_model: str = "") -> int:
    """A GPU's memory as it is sold: the ``NNGB`` in its model name when there is one
    (``"NVIDIA H100 80GB HBM3"`` -> 80), else the standard size its reported MiB fall short
    of by at most 8 % (drivers report less than the sold size: an H100 80GB 81,559 MiB,
    an L4 24GB 23,034 MiB), else the reported size in whole GiB, rounded."""
    named = _VRAM_IN_NAME.search(gpu_model or "")
    if named:
        return int(named.group(1))
    gib = Fraction(int(vram_mib), 1024)
    for size in STANDARD_VRAM_GB:
        if gib <= size and gib >= Fraction(92, 100) * size:
            return size
    return round(gib)
