"""A provider's reputation from the facts the chain stores (pure: no I/O, no clock).

The chain keeps facts only: the record (``Reputation``: jobs completed and failed, slashes,
missed windows, verified seconds), the last hardware verdict (``HardwareVerdict``), users'
ratings (``Ratings``), ``registered_at`` and ``last_slash_at``. This module turns them into
the numbers ``gpum offers`` shows and ranks by, in one place:

**Score**, one number in [0, 1] (:func:`offer_score`)::

    score  = 0                                          if the provider is jailed, else
    score  = record * hardware * rating
    record = (jobs_completed + 2) / (jobs_completed + jobs_failed + 4)      job success rate
           / (1 + slashes)                                                  slash penalty
           / (1 + windows_missed / (verified_hours + 1))                    downtime penalty
    hardware = 1    the last hardware verdict passed and still holds (``verified``)
             = 3/4  no verdict (never challenged, or a pass cleared by a spec change, a
                    worker-key rotation or a wrong-answer slash)
             = 1/2  the last verdict failed
    rating = (ratings_sum + 4 * 5) / (5 * (ratings_count + 5))

``record`` (:func:`reputation_score`) is the mean of a Beta(2, 2) prior updated with the
provider's jobs (0.5 for a new provider); each slash divides what is left; missed windows
count per verified hour of work with one hour of prior. ``rating`` is the Bayesian mean of
the stars with a prior of five 4-star ratings, over 5: a provider without ratings gets 0.8,
one 5-star rating 25/30 = 0.83, a hundred ratings averaging 4.5 get 0.90, so one rating never
beats a long record. A new provider scores 0.5 * 3/4 * 0.8 = 0.3, a verified one 0.4. Every
factor is exact (rationals) and the product is rounded once to a float.

**Badge** (:func:`badge`): the hardware verdict holds, and the provider has a clean record
of at least ``verified_record_seconds`` (a market parameter): ``now - max(registered_at,
last_slash_at) >= verified_record_seconds``, and its missed windows are at most 1 % of its
verified time (``windows_missed * window_seconds * 100 <= verified_seconds``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the views pull in the codec (anchorpy): loaded only where used
    from .accounts import HardwareVerdict, MarketParams, ProviderView, Ratings, Reputation

__all__ = [
    "BADGE_MAX_MISSED_PERCENT",
    "PRIOR_RATINGS",
    "PRIOR_STARS",
    "badge",
    "hardware_factor",
    "offer_score",
    "rating_factor",
    "reputation_score",
    "smoothed_rating",
]

SECONDS_PER_HOUR = 3600
PRIOR_COMPLETED = 2
"""Beta prior of the job success rate: a provider without jobs scores as if it had completed
2 and failed 2 (0.5)."""
PRIOR_FAILED = 2
PRIOR_VERIFIED_HOURS = 1
"""Hours of verified work assumed before any, so missed windows of a new provider count."""
PRIOR_RATINGS = 5
PRIOR_STARS = 4
"""The rating prior: five ratings of four stars."""
MAX_STARS = 5
BADGE_MAX_MISSED_PERCENT = 1
"""The badge allows missed windows worth at most 1 % of the verified time."""
HARDWARE_FACTORS = {"verified": Fraction(1), "unverified": Fraction(3, 4), "failed": Fraction(1, 2)}


def reputation_score(reputation: Reputation, *, jailed: bool) -> float:
    """The record part of the score (module docstring), in [0, 1]: 0 when jailed, else > 0;
    0.5 for a provider with no history; never raised by a failed job or a missed window,
    always lowered by a slash, never lowered by a completed job or verified hours."""
    if jailed:
        return 0.0
    return float(_record(reputation))


def _record(r: Reputation) -> Fraction:
    success = Fraction(r.jobs_completed + PRIOR_COMPLETED,
                       r.jobs_completed + r.jobs_failed + PRIOR_COMPLETED + PRIOR_FAILED)  # fmt: skip
    slash_penalty = Fraction(1, 1 + r.slashes)
    hours = Fraction(r.verified_seconds, SECONDS_PER_HOUR) + PRIOR_VERIFIED_HOURS
    downtime_penalty = 1 / (1 + r.windows_missed / hours)
    return success * slash_penalty * downtime_penalty


def smoothed_rating(ratings: Ratings) -> Fraction:
    """The Bayesian mean of the stars, 1..5: ``(sum + 4 * 5) / (count + 5)``."""
    return Fraction(ratings.sum + PRIOR_STARS * PRIOR_RATINGS, ratings.count + PRIOR_RATINGS)


def rating_factor(ratings: Ratings) -> Fraction:
    """``smoothed_rating / 5``, in (0, 1]."""
    return smoothed_rating(ratings) / MAX_STARS


def hardware_factor(hardware: HardwareVerdict) -> Fraction:
    """1 verified, 3/4 no verdict (or a cleared one), 1/2 the last verdict failed."""
    return HARDWARE_FACTORS[hardware.status]


def offer_score(provider: ProviderView) -> float:
    """The score of the module docstring: record * hardware * rating, 0 when jailed."""
    if provider.status == "jailed":
        return 0.0
    exact = _record(provider.reputation) * hardware_factor(provider.hardware)
    return float(exact * rating_factor(provider.ratings))


def badge(provider: ProviderView, params: MarketParams, now: int) -> bool:
    """Whether ``provider`` shows the verified badge at unix time ``now`` under the market
    parameters ``params`` (those in force, :func:`gpu_market.accounts.effective_params`): its
    hardware verdict holds, no slash (nor its registration) in the last
    ``verified_record_seconds``, and missed windows worth at most 1 % of its verified time."""
    if not provider.hardware.verified:
        return False
    since = max(provider.registered_at, provider.last_slash_at)
    if now - since < params.verified_record_seconds:
        return False
    r = provider.reputation
    missed_seconds = r.windows_missed * params.window_seconds
    return missed_seconds * 100 <= BADGE_MAX_MISSED_PERCENT * r.verified_seconds
