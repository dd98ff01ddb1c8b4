"""The score and the badge from the chain's facts (``gpu_market.reputation``), and the offer
fields and query clauses built on them (``verified``, ``badge``, ``rating``, ``ratings``)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest
from gpu_market.accounts import (
    DEFAULT_MARKET_PARAMS,
    HardwareVerdict,
    MarketParams,
    Ratings,
    Reputation,
)
from gpu_market.offers import (
    Offer,
    QueryError,
    filter_offers,
    offers_from_providers,
    parse_query,
    sort_offers,
)
from gpu_market.reputation import (
    badge,
    hardware_factor,
    offer_score,
    rating_factor,
    reputation_score,
    smoothed_rating,
)
from hypothesis import given
from hypothesis import strategies as st
from test_offers import DEC, NOW, provider

PARAMS = MarketParams(**DEFAULT_MARKET_PARAMS)
RECORD = PARAMS.verified_record_seconds
VERIFIED = HardwareVerdict(verified=True, passed=True, gpu_model="NVIDIA H100 80GB HBM3",
                           gpu_count=8, vram_mib=81920, challenged_at=NOW - 10)  # fmt: skip
FAILED = HardwareVerdict(passed=False, challenged_at=NOW - 10)
NONE = HardwareVerdict()
UNRATED = Ratings()
U32 = 2**32 - 1


def view(n: int = 1, *, hardware: HardwareVerdict = NONE, ratings: Ratings = UNRATED,
         registered_at: int = NOW - RECORD, last_slash_at: int = 0, **kw):
    return replace(provider(n, **kw), hardware=hardware, ratings=ratings,
                   registered_at=registered_at, last_slash_at=last_slash_at)


# ----------------------------------------------------------------------------- score


def test_score_examples() -> None:
    assert offer_score(view()) == pytest.approx(0.5 * 0.75 * 0.8)  # new: 0.3
    assert offer_score(view(hardware=VERIFIED)) == pytest.approx(0.4)
    assert offer_score(view(hardware=FAILED)) == pytest.approx(0.2)
    assert offer_score(view(ratings=Ratings(1, 5))) == pytest.approx(0.5 * 0.75 * 25 / 30)
    assert offer_score(view(hardware=VERIFIED, status="jailed")) == 0.0
    record = Reputation(7_200, 1, 3, 1, 0)
    assert offer_score(view(hardware=VERIFIED, ratings=Ratings(4, 18), reputation=record)) == pytest.approx(
        reputation_score(record, jailed=False) * 1 * (18 + 20) / (5 * 9))


def test_one_five_star_rating_never_beats_a_long_record() -> None:
    assert smoothed_rating(Ratings()) == 4
    one = rating_factor(Ratings(1, 5))
    long_record = rating_factor(Ratings(100, 450))  # a hundred ratings averaging 4.5
    assert one == Fraction(25, 30) < long_record == Fraction(470, 525)
    assert rating_factor(Ratings(1, 1)) == Fraction(21, 30)  # one bad rating costs little too


def test_hardware_factors() -> None:
    assert [hardware_factor(h) for h in (VERIFIED, NONE, FAILED)] == [1, Fraction(3, 4), Fraction(1, 2)]
    cleared = replace(VERIFIED, verified=False)
    assert cleared.status == "unverified" and hardware_factor(cleared) == Fraction(3, 4)


RATINGS = st.integers(0, 10**6).flatmap(lambda n: st.tuples(st.just(n), st.integers(n, 5 * n)))


@given(RATINGS, st.integers(1, 5))
def test_rating_factor_is_in_range_and_moves_with_the_stars(r: tuple[int, int], stars: int) -> None:
    count, total = r
    before = rating_factor(Ratings(count, total))
    assert Fraction(1, 5) < before <= 1
    after = rating_factor(Ratings(count + 1, total + stars))
    # a rating above the smoothed mean raises it, one below lowers it, one at it keeps it
    mean = smoothed_rating(Ratings(count, total))
    assert (after > before) == (stars > mean) and (after < before) == (stars < mean)


@given(RATINGS)
def test_verification_never_lowers_the_score_and_a_failure_never_raises_it(r: tuple[int, int]) -> None:
    ratings = Ratings(*r)
    plain = offer_score(view(ratings=ratings))
    assert offer_score(view(hardware=FAILED, ratings=ratings)) < plain < offer_score(view(hardware=VERIFIED, ratings=ratings))


# ----------------------------------------------------------------------------- badge


@pytest.mark.parametrize("offset, expected", [(-1, False), (0, True), (1, True)])
def test_badge_after_exactly_the_record(offset: int, expected: bool) -> None:
    v = view(hardware=VERIFIED, registered_at=NOW - RECORD - offset)
    assert badge(v, PARAMS, NOW) is expected
    slashed = view(hardware=VERIFIED, registered_at=0, last_slash_at=NOW - RECORD - offset)
    assert badge(slashed, PARAMS, NOW) is expected, "a slash restarts the record"


def test_badge_needs_verified_hardware_and_little_downtime() -> None:
    assert not badge(view(), PARAMS, NOW)
    assert not badge(view(hardware=FAILED), PARAMS, NOW)
    # 10 missed 60 s windows = 600 s: at most 1 % of the verified time
    ok = view(hardware=VERIFIED, reputation=Reputation(60_000, 10, 5, 0, 0))
    assert badge(ok, PARAMS, NOW)
    assert not badge(replace(ok, reputation=Reputation(59_999, 10, 5, 0, 0)), PARAMS, NOW)
    assert badge(view(hardware=VERIFIED), replace(PARAMS, verified_record_seconds=0), NOW - RECORD)


# ----------------------------------------------------------------------------- offers


def offers() -> list[Offer]:
    providers = [
        view(1, hardware=VERIFIED, ratings=Ratings(3, 14)),                     # badge
        view(2, hardware=VERIFIED, ratings=Ratings(1, 2), registered_at=NOW),  # verified, new
        view(3, hardware=FAILED),
        view(4),
    ]  # fmt: skip
    return offers_from_providers(providers, min_stake_per_gpu=0, now=NOW, params=PARAMS)


def test_offers_carry_verification_badge_and_ratings() -> None:
    by_id = {bytes(o.provider)[0]: o for o in offers()}
    assert [(by_id[i].hardware, by_id[i].verified, by_id[i].badge) for i in (1, 2, 3, 4)] == [
        ("verified", True, True), ("verified", True, False), ("failed", False, False),
        ("unverified", False, False)]  # fmt: skip
    assert (by_id[1].rating, by_id[1].ratings) == (pytest.approx(14 / 3), 3)
    assert (by_id[4].rating, by_id[4].ratings) == (None, 0)
    assert by_id[1].score == pytest.approx(offer_score(view(1, hardware=VERIFIED, ratings=Ratings(3, 14))))
    # without the market parameters no badge is computed
    plain = offers_from_providers([view(1, hardware=VERIFIED)], min_stake_per_gpu=0, now=NOW)
    assert plain[0].verified and not plain[0].badge


@pytest.mark.parametrize("text, expected", [
    ("verified", [1, 2]),
    ("verified=false", [3, 4]),
    ("badge", [1]),
    ("badge=false verified", [2]),
    ("rating>=4", [1]),
    ("rating<3", [2]),
    ("rating!=2", [1, 3, 4]),   # the unrated match != and notin only
    ("rating notin [2]", [1, 3, 4]),
    ("rating=2", [2]),
    ("ratings>=1", [1, 2]),
    ("ratings=0", [3, 4]),
])  # fmt: skip
def test_query_on_verification_and_ratings(text: str, expected: list[int]) -> None:
    got = filter_offers(offers(), text, **DEC)
    assert sorted(bytes(o.provider)[0] for o in got) == expected


def test_query_mistakes_on_the_new_fields() -> None:
    with pytest.raises(QueryError, match="expected true or false"):
        parse_query("verified=maybe")
    with pytest.raises(QueryError, match="does not fit verified"):
        parse_query("verified>true")
    with pytest.raises(QueryError, match="whole number"):
        parse_query("ratings>=1.5")
    with pytest.raises(QueryError, match="did you mean rating"):
        parse_query("ratng>=4")


def test_sort_by_rating_puts_the_unrated_last_descending() -> None:
    ids = [bytes(o.provider)[0] for o in sort_offers(offers(), "rating-")]
    assert ids[:2] == [1, 2] and set(ids[2:]) == {3, 4}
    assert next(bytes(o.provider)[0] for o in sort_offers(offers(), "badge-")) == 1
