"""A managed job's recovery policy (pure): what the controller may do when the job's provider
fails, and how long it waits before it calls a failure one.

The policy is fixed when the managed job is created and kept, as JSON, in the controller's
database (:mod:`gpu_market.managed.store`); amounts are payment-mint base units and times
seconds. What it bounds:

* ``max_restarts``: successor jobs the controller may create (the first attempt is not one);
* ``budget`` (default: ``max_restarts + 1`` times the first attempt's deposit): the most the
  managed job may ever hold out of the wallet, over every attempt:
  ``sum(deposited - refunded)`` (a closed attempt counts what it paid, a live one its whole
  deposit) never exceeds it; a successor's deposit is ``min(deposit for hours, budget left)``;
* ``max_price_per_gpu_second``, ``min_score``, ``regions``, ``avoid``: which offers a
  successor may take; the GPU model (``gpu_model``, fixed to the first attempt's provider's
  model once it runs) and ``gpus`` never change;
* ``recover_exit_codes``: container exit codes that count as a failure to recover from
  (any other exit ends the managed job);
* ``missed_windows``: a job whose newest window accepted by its committee ended this many
  windows ago has failed;
* ``health_grace_s``: GPUs reported unhealthy (critical temperature, uncorrected ECC errors,
  a lost GPU, or windows billing nothing for health) are warned about at once and migrated
  away from after this long (io.net's rule: 10 minutes);
* ``start_timeout_s``: a successor not accepted, or whose container does not run, within this
  long is cancelled (a full refund) and the next offer tried.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from typing import Any

__all__ = ["DEFAULT_HEALTH_GRACE_S", "DEFAULT_MAX_RESTARTS", "DEFAULT_MISSED_WINDOWS",
           "DEFAULT_START_TIMEOUT_S", "PolicyError", "RecoveryPolicy", "parse_exit_codes"]  # fmt: skip

DEFAULT_MAX_RESTARTS = 3
DEFAULT_MISSED_WINDOWS = 3
DEFAULT_HEALTH_GRACE_S = 600
DEFAULT_START_TIMEOUT_S = 600
MAX_EXIT_CODE = 255
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class PolicyError(ValueError):
    """A policy value that cannot be used; the message names it and what to write instead."""


def parse_exit_codes(text: str) -> frozenset[int]:
    """``"1,137"`` or ``"1,128-143"`` -> the exit codes, 1..255 (0 is success, never a failure).
    PolicyError otherwise."""
    codes: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        m = _RANGE.match(part)
        if m is None:
            raise PolicyError(f"exit code {part!r} is not a number or a range such as 128-143")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if lo > hi:
            raise PolicyError(f"exit code range {part!r} runs backwards; write {hi}-{lo}")
        if lo < 1 or hi > MAX_EXIT_CODE:
            raise PolicyError(f"exit code {part!r} is outside 1..{MAX_EXIT_CODE} (0 is a "
                              "clean exit, never one to recover from)")  # fmt: skip
        codes.update(range(lo, hi + 1))
    if not codes:
        raise PolicyError(f"{text!r} names no exit code; write e.g. 1,137 or 128-143")
    return frozenset(codes)


@dataclass(frozen=True)
class RecoveryPolicy:
    """See the module docstring. ``gpu_model`` is the model asked for (a case-insensitive
    substring of a provider's) until the first attempt runs; then ``fixed_model`` holds that
    provider's exact model and every successor must have it."""

    gpu_model: str
    gpus: int
    hours_seconds: Fraction
    """Time each attempt prepays: its deposit is the price for this long (at least one window)."""
    budget: int | None = None
    """None until the first attempt is planned: then ``(max_restarts + 1)`` times its deposit."""
    max_restarts: int = DEFAULT_MAX_RESTARTS
    max_price_per_gpu_second: int | None = None
    min_score: float = 0.0
    regions: tuple[str, ...] = ()
    avoid: tuple[str, ...] = ()
    """Provider accounts (base58) never chosen."""
    recover_exit_codes: frozenset[int] = field(default_factory=frozenset)
    missed_windows: int = DEFAULT_MISSED_WINDOWS
    health_grace_s: int = DEFAULT_HEALTH_GRACE_S
    start_timeout_s: int = DEFAULT_START_TIMEOUT_S
    fixed_model: str | None = None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """PolicyError naming the first value out of range."""
        if not isinstance(self.gpu_model, str) or not self.gpu_model.strip():
            raise PolicyError("the GPU model is empty; write e.g. H100:1")
        if not isinstance(self.gpus, int) or not 1 <= self.gpus <= 256:
            raise PolicyError(f"the GPU count {self.gpus!r} must be 1..256")
        if not isinstance(self.hours_seconds, Fraction) or self.hours_seconds <= 0:
            raise PolicyError("the hours each attempt prepays must be positive")
        if self.budget is not None and (not isinstance(self.budget, int) or self.budget <= 0):
            raise PolicyError("the budget must be more than 0 tokens")
        if not isinstance(self.max_restarts, int) or not 0 <= self.max_restarts <= 100:
            raise PolicyError(f"max restarts {self.max_restarts!r} must be 0..100")
        if self.max_price_per_gpu_second is not None and self.max_price_per_gpu_second <= 0:
            raise PolicyError("the price cap per GPU-hour must be more than 0")
        if not 0.0 <= float(self.min_score) <= 1.0:
            raise PolicyError(f"the minimum score {self.min_score!r} must be between 0 and 1 "
                              "(see the score column of `gpum offers`)")  # fmt: skip
        if not isinstance(self.missed_windows, int) or not 1 <= self.missed_windows <= 1000:
            raise PolicyError(f"missed windows {self.missed_windows!r} must be 1..1000")
        for name in ("health_grace_s", "start_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise PolicyError(f"{name.removesuffix('_s').replace('_', ' ')} must be a "
                                  "duration of 0 s or more")  # fmt: skip
        if self.start_timeout_s < 10:
            raise PolicyError("the start timeout must be at least 10 s (the worker must see the "
                              "job, pull the image and start it)")  # fmt: skip
        if any(c < 1 or c > MAX_EXIT_CODE for c in self.recover_exit_codes):
            raise PolicyError(f"recover-on exit codes must be 1..{MAX_EXIT_CODE}")

    # ------------------------------------------------------------------ offers

    @property
    def model(self) -> str:
        """The model successors must have: the first attempt's once fixed, else the one asked."""
        return self.fixed_model or self.gpu_model

    def model_matches(self, offer_model: str) -> bool:
        """Whether a provider's GPU model fits: equal to the fixed model, or (before the first
        attempt runs) containing the one asked (case-insensitive, ``_`` = space)."""
        have = _norm(offer_model)
        if self.fixed_model is not None:
            return have == _norm(self.fixed_model)
        return _norm(self.gpu_model) in have

    def offer_refusal(self, offer: Any, *, excluded: frozenset[str] = frozenset()) -> str | None:
        """Why ``offer`` (a :class:`gpu_market.offers.Offer`) does not fit the policy, None when
        it does (liveness is not looked at here). ``excluded``: providers (base58) this managed
        job left for a failure."""
        provider = str(offer.provider)
        if provider in self.avoid:
            return "on the avoid list"
        if provider in excluded:
            return "failed this job before"
        if not self.model_matches(offer.gpu_model):
            return f"its GPU model {offer.gpu_model!r} is not {self.model!r}"
        if offer.gpus_free < self.gpus:
            return f"{offer.gpus_free} free GPU(s), {self.gpus} needed"
        if not offer.runs_workloads:
            return "it runs no containers (no worker endpoint)"
        if self.max_price_per_gpu_second is not None and \
                offer.price_per_gpu_second > self.max_price_per_gpu_second:
            return "above the price cap"
        if offer.score < self.min_score:
            return f"score {offer.score:.2f} below {self.min_score:g}"
        if self.regions and _norm(offer.region) not in {_norm(r) for r in self.regions}:
            return f"region {offer.region!r} not in {', '.join(self.regions)}"
        return None

    def with_fixed_model(self, model: str) -> RecoveryPolicy:
        return replace(self, fixed_model=model)

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> str:
        d = asdict(self)
        d["hours_seconds"] = [self.hours_seconds.numerator, self.hours_seconds.denominator]
        d["regions"], d["avoid"] = list(self.regions), list(self.avoid)
        d["recover_exit_codes"] = sorted(self.recover_exit_codes)
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RecoveryPolicy:
        d = json.loads(text)
        num, den = d.pop("hours_seconds")
        return cls(hours_seconds=Fraction(num, den), regions=tuple(d.pop("regions")),
                   avoid=tuple(d.pop("avoid")),
                   recover_exit_codes=frozenset(d.pop("recover_exit_codes")), **d)  # fmt: skip


def _norm(text: str) -> str:
    return " ".join(str(text).replace("_", " ").lower().split())
