"""Offers (gpu_market.offers, gpum offers): the query language, the reputation score, which
providers are offers, filtering, ranking, best_offer, and the command's output (chain reads
answered locally)."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction

import pytest
from click.testing import CliRunner
from gpu_market import cli as cli_mod
from gpu_market.accounts import (
    GpuSpec,
    MarketParams,
    MarketTotals,
    MarketView,
    ProviderView,
    Reputation,
    Unbonding,
)
from gpu_market.offers import (
    FIELDS,
    Liveness,
    Offer,
    Query,
    QueryError,
    best_offer,
    filter_offers,
    offers_from_providers,
    parse_query,
    probe_liveness,
    probe_worker,
    rank_key,
    reputation_score,
    sort_offers,
    with_liveness,
)
from hypothesis import given
from hypothesis import strategies as st
from solders.pubkey import Pubkey

U64 = 2**64 - 1
U32 = 2**32 - 1
NOW = 1_700_000_000
DEC = {"payment_decimals": 6, "stake_decimals": 6}


def provider(n: int, *, model: str = "NVIDIA H100 80GB HBM3", gpus: int = 8, in_use: int = 0,
             vram_mib: int = 81920, region: str = "us-west", price: int = 1_000,
             status: str = "active", stake: int = 1_000_000_000, endpoint: str = "",
             reputation: Reputation | None = None, expires_at: int = 0) -> ProviderView:  # fmt: skip
    """A provider view with address ``Pubkey([n] * 32)`` (so address order is ``n`` order)."""
    key = Pubkey(bytes([n] * 32))
    return ProviderView(
        market=Pubkey(bytes([200] * 32)), owner=Pubkey(bytes([n + 100] * 32)),
        worker_key=Pubkey(bytes([n + 50] * 32)), worker_key_expires_at=expires_at,
        retired_keys=(), last_equivocation_slash_at=0,
        spec=GpuSpec(model, gpus, vram_mib, region), price_per_gpu_second=price, status=status,
        stake=stake, unbonding=Unbonding(0, 0), gpus_in_use=in_use,
        reputation=reputation or Reputation(0, 0, 0, 0, 0), bump=255, endpoint=endpoint,
        jailed_until=NOW + 100 if status == "jailed" else None, address=key,
    )  # fmt: skip


def offer(n: int = 1, **fields) -> Offer:
    base = Offer.from_provider(provider(n))
    return replace(base, **fields)


# ----------------------------------------------------------------------------- parser


@pytest.mark.parametrize("text, op, values", [
    ("gpus=2", "=", (2,)),
    ("gpus==2", "=", (2,)),
    ("gpus != 2", "!=", (2,)),
    ("gpus<2", "<", (2,)),
    ("gpus<=2", "<=", (2,)),
    ("gpus>2", ">", (2,)),
    ("gpus >= 2", ">=", (2,)),
    ("gpus in [1,2, 4]", "in", (1, 2, 4)),
    ("gpus notin 1,2", "notin", (1, 2)),
    ("GPUS IN [3]", "in", (3,)),
])  # fmt: skip
def test_every_operator(text, op, values):
    (clause,) = parse_query(text).clauses
    assert (clause.field, clause.op, clause.values) == ("gpus", op, tuple(map(Fraction, values)))


@pytest.mark.parametrize("text", [
    "region in [us-west,eu-west]", "region in [ us-west , eu-west ]", "region in us-west,eu-west",
    "region in us-west, eu-west", "region in ['us-west', \"eu-west\"]",
])  # fmt: skip
def test_list_forms(text):
    (clause,) = parse_query(text).clauses
    assert clause.values == ("us-west", "eu-west")
    assert str(clause) == "region in [us-west,eu-west]"


def test_clauses_from_command_line_words_and_quotes():
    q = parse_query(["gpu_model=H100", "gpus", ">=", "2", "region", "in", "us-west,eu-west",
                     'price<=2.5', 'gpu_model="RTX 4090"', "workloads=TRUE", "vram>=24.5"])  # fmt: skip
    assert [(c.field, c.op) for c in q.clauses] == [
        ("gpu_model", "="), ("gpus", ">="), ("region", "in"), ("price", "<="), ("gpu_model", "="),
        ("workloads", "="), ("vram", ">=")]  # fmt: skip
    assert q.clauses[3].values == (Fraction(5, 2),)
    assert q.clauses[4].values == ("rtx 4090",)
    assert q.clauses[5].values == (True,)
    assert q.clauses[6].values == (Fraction(49, 2),)


def test_canonical_text_reads_back():
    q = parse_query('gpu_model="rtx 4090" gpus>=2 region notin [a, b] price<0.25 workloads!=no')
    assert str(q) == 'gpu_model="rtx 4090" gpus>=2 region notin [a,b] price<0.25 workloads!=no'
    assert parse_query(str(q)) == q


def test_empty_query_matches_everything():
    assert parse_query("") == parse_query([]) == parse_query("   ") == Query()
    offers = [offer(1), offer(2)]
    assert filter_offers(offers, Query(), **DEC) == offers


@pytest.mark.parametrize("text, needles", [
    ("gpu=H100", ["unknown field 'gpu'", "did you mean gpus?", "known fields: gpu_model, gpus"]),
    ("colour=red", ["unknown field 'colour'", "known fields:"]),
    ("verified_hour>1", ["did you mean verified_hours?"]),
    ("gpus => 2", ["bad operator '=>' after 'gpus'", "= != < <= > >= in notin"]),
    ("gpus ~ 2", ["bad operator '~'"]),
    ("region inside [a]", ["bad operator 'inside'"]),
    ("gpus 2", ["'gpus' needs an operator before '2'"]),
    ("gpus", ["'gpus' needs an operator and a value, e.g. gpus>=2"]),
    ("gpus>=", ["'gpus>=' has no value"]),
    ("gpus>=two", ["bad value 'two' for gpus: expected a whole number"]),
    ("gpus>=1.5", ["bad value '1.5' for gpus"]),
    ("price<=cheap", ["bad value 'cheap' for price: expected a number", "per GPU-hour"]),
    ("price<=nan", ["bad value 'nan' for price"]),
    ("workloads=maybe", ["bad value 'maybe' for workloads: expected true or false"]),
    ("region<us", ["operator '<' does not fit region (text): use = != in notin"]),
    ("gpu_model>=H100", ["operator '>=' does not fit gpu_model"]),
    ("workloads in [true]", ["operator 'in' does not fit workloads (true/false): use = !="]),
    ("region in [a", ["no closing ']'"]),
    ("region in []", ["is empty"]),
    ("region in [a,,b]", ["empty item"]),
    ("gpu_model='H100", ["no closing '"]),
    ("price=1,2", ["compares with one value; a list needs in or notin, e.g. price in [1,2]"]),
    ("gpus=[1,2]", ["a list needs in or notin"]),
    ("=2", ["expected a field name at '=2'"]),
])  # fmt: skip
def test_errors_are_one_actionable_line(text, needles):
    with pytest.raises(QueryError) as e:
        parse_query(text)
    message = str(e.value)
    assert "\n" not in message
    for n in needles:
        assert n in message, message


def test_query_error_is_a_value_error():
    assert issubclass(QueryError, ValueError)


# ----------------------------------------------------------------------------- score


def rep(verified=0, missed=0, completed=0, failed=0, slashes=0) -> Reputation:
    return Reputation(verified, missed, completed, failed, slashes)


def test_score_examples():
    assert reputation_score(rep(), jailed=False) == 0.5  # neutral prior
    assert reputation_score(rep(completed=2), jailed=False) == pytest.approx(4 / 6)
    assert reputation_score(rep(failed=2), jailed=False) == pytest.approx(2 / 6)
    assert reputation_score(rep(slashes=1), jailed=False) == 0.25  # one slash halves
    assert reputation_score(rep(slashes=2), jailed=False) == pytest.approx(0.5 / 3)
    # one missed window per verified hour (with the 1-hour prior) keeps half
    assert reputation_score(rep(verified=3600, missed=2), jailed=False) == 0.25
    assert reputation_score(rep(completed=100), jailed=True) == 0.0


REPUTATIONS = st.builds(Reputation, st.integers(0, U64), st.integers(0, U64),
                        st.integers(0, U64 - 1), st.integers(0, U64 - 1), st.integers(0, U32 - 1))  # fmt: skip


@given(REPUTATIONS, st.booleans())
def test_score_is_in_unit_interval_and_zero_when_jailed(r, jailed):
    s = reputation_score(r, jailed=jailed)
    assert 0.0 <= s <= 1.0
    if jailed:
        assert s == 0.0
    else:
        assert s > 0.0


@given(REPUTATIONS, st.integers(1, 10**6))
def test_more_completed_jobs_never_lower_the_score(r, more):
    better = replace(r, jobs_completed=min(U64, r.jobs_completed + more))
    assert reputation_score(better, jailed=False) >= reputation_score(r, jailed=False)


@given(REPUTATIONS)
def test_a_slash_always_lowers_the_score(r):
    worse = replace(r, slashes=r.slashes + 1)
    assert reputation_score(worse, jailed=False) < reputation_score(r, jailed=False)


@given(REPUTATIONS)
def test_a_failure_or_a_missed_window_never_raises_the_score(r):
    s = reputation_score(r, jailed=False)
    assert reputation_score(replace(r, jobs_failed=r.jobs_failed + 1), jailed=False) <= s
    assert reputation_score(replace(r, windows_missed=min(U64, r.windows_missed + 1)),
                            jailed=False) <= s  # fmt: skip


@given(st.builds(Reputation, st.integers(0, 10**12), st.integers(0, 10**9), st.integers(0, 10**9),
                 st.integers(0, 10**9), st.integers(0, 10**6)))  # fmt: skip
def test_a_failure_or_a_missed_window_lowers_the_score_at_any_count_a_chain_reaches(r):
    s = reputation_score(r, jailed=False)
    assert reputation_score(replace(r, jobs_failed=r.jobs_failed + 1), jailed=False) < s
    assert reputation_score(replace(r, windows_missed=r.windows_missed + 1), jailed=False) < s


@given(REPUTATIONS, st.integers(1, 10**9))
def test_more_verified_hours_never_lower_the_score(r, more):
    better = replace(r, verified_seconds=min(U64, r.verified_seconds + more))
    assert reputation_score(better, jailed=False) >= reputation_score(r, jailed=False)


# ----------------------------------------------------------------------------- offers


def test_offer_from_provider_carries_the_chain_figures():
    p = provider(7, in_use=3, endpoint="http://10.0.0.1:8080",
                 reputation=rep(verified=5400, missed=1, completed=3, failed=1, slashes=0))  # fmt: skip
    o = Offer.from_provider(p)
    assert o.provider == p.address and o.owner == p.owner and o.worker_key == p.worker_key
    assert (o.gpu_model, o.gpus_free, o.gpus_total, o.vram_mib, o.region) == (
        "NVIDIA H100 80GB HBM3", 5, 8, 81920, "us-west")
    assert (o.price_per_gpu_second, o.price_per_gpu_hour(), o.stake) == (1_000, 3_600_000, 10**9)
    assert (o.verified_hours, o.jobs_completed, o.jobs_failed, o.slashes) == (1.5, 3, 1, 0)
    # No hardware verdict (3/4) and no ratings (4/5) on top of the record.
    assert o.score == pytest.approx(reputation_score(p.reputation, jailed=False) * 0.75 * 0.8)
    assert not o.jailed and (o.hardware, o.verified, o.badge, o.rating, o.ratings) == (
        "unverified", False, False, None, 0)
    assert o.endpoint == "http://10.0.0.1:8080" and o.runs_workloads


def test_which_providers_are_offers():
    providers = [
        provider(1),                                   # 8 free
        provider(2, status="paused"),
        provider(3, status="jailed"),
        provider(4, gpus=2, in_use=2),                 # full
        provider(5, stake=0),                          # nothing backed by stake
        provider(6, stake=350, in_use=1),              # 3 backed, 1 in use: 2 more
        provider(7, expires_at=NOW - 1),               # worker key expired
        provider(8, expires_at=NOW),                   # expires now: still signs
    ]  # fmt: skip
    got = offers_from_providers(providers, min_stake_per_gpu=100, now=NOW)
    assert {o.provider: o.gpus_free for o in got} == {
        providers[0].address: 8, providers[5].address: 2, providers[7].address: 8}
    full = offers_from_providers(providers, min_stake_per_gpu=100, now=NOW, include_full=True)
    assert {o.provider for o in full} == {providers[i].address for i in (0, 3, 4, 5, 7)}
    assert all(not o.jailed for o in full)
    # no stake rule: stake does not limit GPUs
    free = offers_from_providers(providers, min_stake_per_gpu=0, now=NOW)
    assert {o.provider: o.gpus_free for o in free}[providers[4].address] == 8
    assert got == sorted(got, key=rank_key)


# ----------------------------------------------------------------------------- filtering


OFFERS = [
    offer(1, gpu_model="NVIDIA H100 80GB HBM3", gpus_free=8, gpus_total=8, vram_mib=81920,
          region="us-west", price_per_gpu_second=1_000, stake=5_000_000_000, score=0.9,
          verified_hours=12.5, jobs_completed=9, endpoint="http://a"),
    offer(2, gpu_model="NVIDIA A100-SXM4-40GB", gpus_free=2, gpus_total=4, vram_mib=40960,
          region="eu-west", price_per_gpu_second=500, stake=250_000_000, score=0.5,
          verified_hours=0.0, jobs_failed=1, slashes=1),
    offer(3, gpu_model="GeForce RTX 4090", gpus_free=1, gpus_total=2, vram_mib=24564,
          region="US-East", price_per_gpu_second=250, stake=0, score=0.3, verified_hours=2.0),
]  # fmt: skip


def ids(offers) -> list[int]:
    return [bytes(o.provider)[0] for o in offers]


@pytest.mark.parametrize("text, expected", [
    ("gpu_model=h100", [1]),
    ("gpu_model=NVIDIA", [1, 2]),
    ("gpu_model=rtx_4090", [3]),
    ('gpu_model="RTX 4090"', [3]),
    ("gpu_model!=nvidia", [3]),
    ("gpu_model in [h100,4090]", [1, 3]),
    ("gpu_model notin [h100,4090]", [2]),
    ("region=us-east", [3]),
    ("region=us", []),
    ("region!=us-west", [2, 3]),
    ("region in us-west,eu-west", [1, 2]),
    ("region notin [us-west]", [2, 3]),
    ("gpus>=2", [1, 2]),
    ("gpus=1", [3]),
    ("gpus in [1,8]", [1, 3]),
    ("gpus notin [1,8]", [2]),
    ("gpus_total<4", [3]),
    ("vram>=40", [1, 2]),
    ("vram=40", [2]),
    ("vram<=24", [3]),  # a 24 GB card reporting 24564 MiB (23.99 GiB)
    ("price<=1.8", [2, 3]),  # 500 base units/s = 1.8 UI per hour
    ("price<1.8", [3]),
    ("price=3.6", [1]),
    ("price>0.9", [1, 2]),
    ("stake>=250", [1, 2]),
    ("stake>250", [1]),
    ("stake=0", [3]),
    ("score>=0.5", [1, 2]),
    ("score=0.3", [3]),
    ("score<0.9", [2, 3]),
    ("verified_hours>=2", [1, 3]),
    ("verified_hours=12.5", [1]),
    ("jobs_completed>=1", [1]),
    ("jobs_failed=0", [1, 3]),
    ("slashes=0", [1, 3]),
    ("workloads=true", [1]),
    ("workloads=no", [2, 3]),
    ("workloads!=true", [2, 3]),
    ("gpu_model=nvidia gpus>=2 price<=1.8", [2]),
])  # fmt: skip
def test_filter(text, expected):
    assert ids(filter_offers(OFFERS, text, **DEC)) == expected
    assert ids(filter_offers(OFFERS, parse_query(text), **DEC)) == expected


def test_filter_amounts_follow_the_mint_decimals():
    # 500 base units per second = 1_800_000 per hour: 1.8 with 6 decimals, 18000 with 2
    assert ids(filter_offers(OFFERS, "price=18000", payment_decimals=2, stake_decimals=6)) == [2]
    assert ids(filter_offers(OFFERS, "stake=2.5", payment_decimals=6, stake_decimals=8)) == [2]


def test_every_field_is_filterable():
    for name, field in FIELDS.items():
        filter_offers(OFFERS, field.example, **DEC)  # parses and evaluates
        assert field.example.startswith(name)


# ----------------------------------------------------------------------------- ranking


def test_cheaper_wins_at_equal_score():
    a, b = offer(1, price_per_gpu_second=100), offer(2, price_per_gpu_second=99)
    assert sort_offers([a, b]) == [b, a]
    assert best_offer([a, b], gpus=1) == b


def test_a_much_better_score_beats_a_slightly_lower_price():
    good = offer(1, price_per_gpu_second=100, score=0.9)  # effective 100 / 0.95 = 105.3
    cheap = offer(2, price_per_gpu_second=95, score=0.3)  # effective 95 / 0.65 = 146.2
    assert sort_offers([cheap, good]) == [good, cheap]
    # but a much lower price beats a better score
    cheaper = offer(3, price_per_gpu_second=60, score=0.3)  # effective 92.3
    assert sort_offers([good, cheaper]) == [cheaper, good]


def test_rank_ties_go_to_score_then_free_gpus_then_address():
    # same effective price 100: price 100 at score 1, 75 at score 0.5
    perfect = offer(5, price_per_gpu_second=100, score=1.0)
    new = offer(4, price_per_gpu_second=75, score=0.5)
    assert sort_offers([new, perfect]) == [perfect, new]
    small, big = offer(2, gpus_free=1), offer(3, gpus_free=4)
    assert sort_offers([small, big]) == [big, small]
    assert sort_offers([offer(9), offer(8)]) == [offer(8), offer(9)]


@given(st.lists(st.tuples(st.integers(0, 10**9), st.floats(0, 1), st.integers(1, 256)),
                min_size=1, max_size=12))  # fmt: skip
def test_rank_order_is_total_and_cheapest_effective_price_first(specs):
    offers = [offer(i + 1, price_per_gpu_second=p, score=s, gpus_free=g)
              for i, (p, s, g) in enumerate(specs)]  # fmt: skip
    ranked = sort_offers(offers)
    assert sort_offers(list(reversed(offers))) == ranked
    eff = [Fraction(o.price_per_gpu_second) / (Fraction(1, 2) + Fraction(o.score) / 2)
           for o in ranked]  # fmt: skip
    assert eff == sorted(eff)


def test_sort_by_field_ascending_descending_and_ties_in_rank_order():
    assert ids(sort_offers(OFFERS, "price")) == [3, 2, 1]
    assert ids(sort_offers(OFFERS, "price-")) == [1, 2, 3]
    assert ids(sort_offers(OFFERS, "score-")) == [1, 2, 3]
    assert ids(sort_offers(OFFERS, "region")) == [2, 3, 1]  # eu-west, us-east, us-west
    assert ids(sort_offers(OFFERS, "gpus-")) == [1, 2, 3]
    assert ids(sort_offers(OFFERS, "vram")) == [3, 2, 1]
    assert ids(sort_offers(OFFERS, "workloads-")) == [1] + ids(sort_offers(OFFERS[1:]))
    ranked = sort_offers(OFFERS)
    assert sort_offers(OFFERS, "rank") == ranked and sort_offers(OFFERS, "rank-") == ranked[::-1]
    # ties keep the rank order, whichever direction
    same = [offer(1, price_per_gpu_second=10), offer(2, price_per_gpu_second=20),
            offer(3, price_per_gpu_second=30)]  # fmt: skip
    assert ids(sort_offers(same, "gpus")) == ids(sort_offers(same, "gpus-")) == [1, 2, 3]


@pytest.mark.parametrize("sort, needles", [
    ("cost", ["cannot sort by 'cost'", "sort by one of rank, gpu_model"]),
    ("scores-", ["(did you mean score?)"]),
])  # fmt: skip
def test_unknown_sort_field(sort, needles):
    with pytest.raises(QueryError) as e:
        sort_offers([], sort)
    for n in needles:
        assert n in str(e.value)


def test_best_offer_respects_every_constraint():
    offers = [
        offer(1, gpu_model="NVIDIA H100", gpus_free=8, price_per_gpu_second=1_000,
              endpoint="http://a"),
        offer(2, gpu_model="NVIDIA A100", gpus_free=2, price_per_gpu_second=500),
        offer(3, gpu_model="RTX 4090", gpus_free=1, price_per_gpu_second=250),
        offer(4, gpu_model="RTX 4090", gpus_free=8, price_per_gpu_second=1, jailed=True, score=0.0),
    ]  # fmt: skip
    assert ids([best_offer(offers, gpus=1)]) == [3]
    assert ids([best_offer(offers, gpus=2)]) == [2]
    assert ids([best_offer(offers, gpus=3)]) == [1]
    assert best_offer(offers, gpus=9) is None
    assert ids([best_offer(offers, gpus=1, gpu_model="h100")]) == [1]
    assert ids([best_offer(offers, gpus=1, gpu_model="rtx_4090")]) == [3]
    assert best_offer(offers, gpus=2, gpu_model="4090") is None  # the jailed one never counts
    assert best_offer(offers, gpus=1, max_price_per_gpu_second=249) is None
    assert ids([best_offer(offers, gpus=2, max_price_per_gpu_second=999)]) == [2]
    assert ids([best_offer(offers, gpus=1, needs_workloads=True)]) == [1]
    assert best_offer([], gpus=1) is None
    with pytest.raises(ValueError, match="gpus must be at least 1"):
        best_offer(offers, gpus=0)


# ----------------------------------------------------------------------------- gpum offers


MARKET = Pubkey(bytes([200] * 32))
PARAMS = MarketParams(500, 5000, 100, 0, 60, 1, 10, 100, 5000, 1000, 0, 5, 95, 0, 1000)


def market_view(paused: bool = False) -> MarketView:
    k = Pubkey.new_unique()
    return MarketView(k, k, Pubkey.default(), 0, k, k, k, k, PARAMS, PARAMS, 0, paused,
                      MarketTotals(0, 0, 0, 0, 0, 0, 0, 0), 255, 255, k, 254)  # fmt: skip


CHAIN = [
    provider(1, price=1_000, endpoint="http://a:1", reputation=rep(completed=8)),
    provider(2, model="NVIDIA A100", gpus=4, in_use=2, region="eu-west", price=500),
    provider(3, model="RTX 4090", gpus=2, price=100, status="paused"),
    provider(4, model="L40S", gpus=4, price=200, stake=0),
]


@pytest.fixture
def chain(monkeypatch, tmp_path, idl_path):
    """The CLI's chain reads answered from ``state``; returns it."""
    from gpu_market.client import GpuMarketClient

    monkeypatch.setenv("GPU_MARKET_IDL", str(idl_path))
    monkeypatch.setenv("GPUM_SOLANA_CONFIG", str(tmp_path / "no-config.yml"))
    monkeypatch.delenv("GPUM_MARKET", raising=False)
    monkeypatch.delenv("GPUM_DEBUG", raising=False)
    state = {"market": market_view(), "providers": list(CHAIN), "calls": []}

    def program_accounts(self, kind, memcmp):
        state["calls"].append((kind, memcmp))
        return list(state["providers"])

    monkeypatch.setattr(GpuMarketClient, "fetch_market", lambda self, m: state["market"])
    monkeypatch.setattr(GpuMarketClient, "chain_time", lambda self: NOW)
    monkeypatch.setattr(GpuMarketClient, "mint_decimals", lambda self, m: 6)
    monkeypatch.setattr(GpuMarketClient, "_program_accounts", program_accounts)
    state["live"] = {}
    state["jobs"] = []

    def probe(offers):
        return {o.provider: state["live"].get(o.provider, Liveness(True if o.endpoint else None, NOW))
                for o in offers}

    from gpu_market.cli import offers as cli_offers

    monkeypatch.setattr(cli_offers, "_probe", probe)
    monkeypatch.setattr(GpuMarketClient, "list_jobs",
                        lambda self, provider=None, market=None, **kw: list(state["jobs"]))
    return state


def gpum(*args: str) -> tuple[int, str, str]:
    runner = CliRunner()
    with runner.isolation() as (out, err, *_):
        code = cli_mod.main(["offers", "--market", str(MARKET), *args])
        return code, out.getvalue().decode(), err.getvalue().decode()


def test_json_lists_every_field_in_rank_order(chain):
    code, out, err = gpum("--output", "json")
    assert (code, err) == (0, "")
    rows = json.loads(out)
    assert chain["calls"] == [("Provider", {"market": bytes(MARKET)})]
    assert [r["provider"] for r in rows] == [str(CHAIN[1].address), str(CHAIN[0].address)]
    a100 = rows[0]
    assert a100 == {
        "provider": str(CHAIN[1].address), "owner": str(CHAIN[1].owner),
        "worker_key": str(CHAIN[1].worker_key), "gpu_model": "NVIDIA A100", "gpus_free": 2,
        "gpus_total": 4, "vram_mib": 81920, "vram_gib": 80.0, "region": "eu-west",
        "price_per_gpu_second": "0.0005", "price_per_gpu_hour": "1.8", "stake": "1000",
        "score": 0.3, "hardware": "unverified", "verified": False, "badge": False,
        "rating": None, "ratings": 0, "verified_hours": 0.0, "jobs_completed": 0, "jobs_failed": 0,
        "slashes": 0, "jailed": False, "workloads": False, "endpoint": "",
        "online": None, "cluster": None, "checked_at": NOW, "last_seen": None,
        "liveness_error": "",
    }  # fmt: skip
    assert set(rows[1]) == set(a100)
    assert rows[1]["workloads"] is True and rows[1]["score"] == pytest.approx(10 / 12 * 0.6)
    assert (rows[1]["online"], rows[1]["last_seen"]) == (True, NOW)


def test_query_sort_and_limit(chain):
    _, out, _ = gpum("--output", "json", "gpu_model=nvidia", "price", "<=", "3.6", "--sort", "price-")
    assert [r["gpu_model"] for r in json.loads(out)] == ["NVIDIA H100 80GB HBM3", "NVIDIA A100"]
    _, out, _ = gpum("--output", "json", "--limit", "1", "--sort", "score-")
    assert [r["provider"] for r in json.loads(out)] == [str(CHAIN[0].address)]
    _, out, _ = gpum("--output", "json", "region", "in", "[us-west,", "eu-west]", "workloads=false")
    assert [r["region"] for r in json.loads(out)] == ["eu-west"]


def test_text_table(chain):
    code, out, err = gpum()
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["PROVIDER", "GPU", "MODEL", "FREE/TOTAL", "VRAM", "GiB", "REGION",
                                "PRICE/GPU-H", "STAKE", "SCORE", "VERIFIED", "RATING", "WORKLOADS",
                                "ONLINE", "CLUSTER", "LAST", "SEEN"]  # fmt: skip
    assert lines[1].split() == [str(CHAIN[1].address), "NVIDIA", "A100", "2/4", "80", "eu-west",
                                "1.8", "1000", "0.30", "no", "-", "no", "-", "-", "-"]  # fmt: skip
    assert lines[2].split()[-10:] == ["us-west", "3.6", "1000", "0.50", "no", "-", "yes", "yes",
                                      "-", "now"]  # fmt: skip
    assert len(lines) == 3
    _, out, _ = gpum("--limit", "1")
    assert out.splitlines()[-1] == "... 1 more offer(s): raise --limit (0 = all)"


def test_cluster_says_whether_the_worker_serves_cluster_nodes(chain):
    chain["live"] = {CHAIN[0].address: Liveness(True, NOW, "", True)}
    _, out, _ = gpum("--output", "json", "cluster=true")
    assert [(r["provider"], r["cluster"]) for r in json.loads(out)] == [(str(CHAIN[0].address), True)]
    _, out, _ = gpum("cluster")
    assert len(out.splitlines()) == 2 and out.splitlines()[1].split()[-2:] == ["yes", "now"]
    _, out, _ = gpum("--output", "json", "cluster!=true")  # not probed: no answer either way
    assert [r["provider"] for r in json.loads(out)] == [str(CHAIN[1].address)]
    chain["live"] = {CHAIN[0].address: Liveness(True, NOW, "", False)}
    _, out, _ = gpum("--output", "json", "cluster=false")
    assert [r["provider"] for r in json.loads(out)] == [str(CHAIN[0].address)]
    _, out, _ = gpum("cluster=true")
    assert out.startswith("no offer matches `cluster=true`")


def test_no_offers_says_which_clause_removed_them(chain):
    code, out, _ = gpum("gpus>=4", "region=eu-west")
    assert code == 0
    assert out.strip() == ("no offer matches `gpus>=4 region=eu-west`: 2 offer(s) before "
                           "filtering; gpus>=4 keeps 1; region=eu-west keeps 1")  # fmt: skip
    _, out, _ = gpum("--output", "json", "gpus>=100")
    assert json.loads(out) == []


def test_no_offers_says_what_the_chain_lacks(chain):
    chain["providers"] = CHAIN[2:]
    _, out, _ = gpum()
    assert out.strip() == (f"no offers in market {MARKET}: 2 provider(s) registered: 1 paused, "
                           "1 with no GPU a job can take (all in use or not backed by stake)")  # fmt: skip
    chain["providers"] = []
    _, out, _ = gpum()
    assert out.strip() == f"no offers in market {MARKET}: no provider is registered"


def test_paused_market_is_noted(chain):
    chain["market"] = market_view(paused=True)
    code, out, err = gpum()
    assert code == 0 and len(out.splitlines()) == 3
    assert "is paused" in err and "gpum market unpause" in err


@pytest.mark.parametrize("args, needles", [
    (["gpu=H100"], ["'QUERY'", "unknown field 'gpu'", "did you mean gpus?"]),
    (["gpus", "=>", "2"], ["'QUERY'", "bad operator '=>'"]),
    (["--sort", "cost"], ["'--sort'", "cannot sort by 'cost'"]),
    (["--limit", "-1"], ["'--limit'"]),
])  # fmt: skip
def test_bad_input_is_one_line_before_any_chain_read(chain, args, needles):
    code, out, err = gpum(*args)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]
    assert chain["calls"] == []


def test_missing_market_is_one_line(chain):
    chain["market"] = None
    code, _, err = gpum()
    assert code == 1
    assert err.startswith("error: market ") and "does not exist" in err


# ----------------------------------------------------------------------------- liveness


def test_offline_providers_rank_last_whatever_their_price():
    cheap_down = offer(1, price_per_gpu_second=1, online=False)
    dear_up = offer(2, price_per_gpu_second=9_000, online=True)
    unknown = offer(3, price_per_gpu_second=5_000)
    assert [o.provider for o in sorted([cheap_down, dear_up, unknown], key=rank_key)] == [
        unknown.provider, dear_up.provider, cheap_down.provider]
    assert sort_offers([cheap_down, dear_up], "online-")[0] is dear_up


@pytest.mark.parametrize("text, expected", [
    ("online", [True]), ("online=true", [True]), ("online = false", [False]),
    ("online!=true", [False, None]), ("online gpus>=1", [True]), ("workloads online", []),
])  # fmt: skip
def test_the_query_filters_on_liveness(text, expected):
    offers = [offer(1, online=True), offer(2, online=False), offer(3)]
    assert [o.online for o in filter_offers(offers, text, **DEC)] == expected
    assert str(parse_query("online")) == "online=true"
    assert parse_query(str(parse_query(text))) == parse_query(text)


def test_a_bare_non_bool_field_still_needs_an_operator():
    with pytest.raises(QueryError, match="needs an operator"):
        parse_query("gpus")


def mock_http(handler):
    import httpx
    from gpu_market.net import BoundedClient

    return BoundedClient(deadline=2, transport=httpx.MockTransport(handler))


def test_probe_worker_says_what_failed():
    import httpx

    key = Pubkey(bytes([9] * 32))
    answers = {
        "ok": httpx.Response(200, json={"ok": True, "worker": str(key)}),
        "other": httpx.Response(200, json={"ok": True, "worker": str(Pubkey(bytes([8] * 32)))}),
        "sick": httpx.Response(503, json={"error": "busy"}),
        "junk": httpx.Response(200, text="hello"),
    }

    def handler(request):
        if request.url.host == "dead":
            raise httpx.ConnectError("connection refused")
        assert request.url.path == "/v1/health"
        return answers[request.url.host]

    with mock_http(handler) as http:
        assert probe_worker(http, "http://ok:1", key) == ""
        assert "not the provider's current worker key" in probe_worker(http, "http://other:1", key)
        assert "HTTP 503" in probe_worker(http, "http://sick:1", key)
        assert '{"ok": true}' in probe_worker(http, "http://junk:1", key)
        assert "connection refused" in probe_worker(http, "http://dead:1", key)
        assert "scheme" in probe_worker(http, "ftp://x", key)


def test_probe_liveness_runs_in_parallel_within_its_total_deadline():
    import threading
    import time

    import httpx

    release = threading.Event()

    def handler(request):
        if request.url.host.startswith("slow"):
            release.wait(5)  # a worker that never answers in time
        if request.url.host == "mesh":
            return httpx.Response(200, json={"ok": True, "cluster": {"udp_port": 51820}})
        return httpx.Response(200, json={"ok": True, "cluster": None})

    offers = ([offer(n, endpoint=f"http://slow{n}:1") for n in range(1, 5)]
              + [offer(9, endpoint="http://fast:1"), offer(10), offer(11, endpoint="http://mesh:1")])
    with mock_http(handler) as http:
        start = time.monotonic()
        live = probe_liveness(offers, deadline=0.3, total=0.5, parallel=8, http=http,
                              clock=lambda: NOW)
        took = time.monotonic() - start
        release.set()
    assert took < 1.5, took  # four stuck probes in parallel, capped by total, not 4 x deadline
    assert live[offers[4].provider] == Liveness(True, NOW, "", cluster=False)
    assert live[offers[5].provider] == Liveness(None, NOW)
    assert live[offers[6].provider] == Liveness(True, NOW, "", cluster=True)
    stuck = live[offers[0].provider]
    assert stuck.online is False and "no answer within 0.5 s" in stuck.error
    assert stuck.cluster is None  # not known: no answer
    ranked = with_liveness(offers, live, last_seen=lambda o: NOW - 600)
    assert [o.online for o in ranked] == [True, None, True, False, False, False, False]
    assert [o.cluster for o in ranked][:3] == [False, None, True]
    assert ranked[0].last_seen == NOW and ranked[-1].last_seen == NOW - 600


def test_offline_providers_are_hidden_unless_all(chain):
    from types import SimpleNamespace

    chain["live"] = {CHAIN[0].address: Liveness(False, NOW, "no answer from http://a:1/v1/health")}
    chain["jobs"] = [SimpleNamespace(last_window_end=NOW - 720), SimpleNamespace(last_window_end=0)]
    code, out, _ = gpum()
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 3 and str(CHAIN[0].address) not in out
    assert lines[-1] == "1 offline provider(s) hidden (their worker does not answer /v1/health): --all shows them"
    _, out, _ = gpum("--all")
    last = out.splitlines()[2]
    assert last.startswith(str(CHAIN[0].address)) and " no " in last and "UTC (" in last
    _, out, _ = gpum("--output", "json", "--all", "online=false")
    (row,) = json.loads(out)
    assert (row["online"], row["last_seen"], row["checked_at"]) == (False, NOW - 720, NOW)
    assert "no answer" in row["liveness_error"]
    _, out, _ = gpum("--output", "json", "online")
    assert json.loads(out) == []


def test_list_offers_probes_only_when_asked(chain, monkeypatch):
    from types import SimpleNamespace

    from gpu_market import offers as offers_mod
    from gpu_market.client import GpuMarketClient
    from gpu_market.offers import list_offers

    probed = []

    def probe(offers):
        probed.append([o.provider for o in offers])
        return {o.provider: Liveness(False if o.endpoint else None, NOW, "down") for o in offers}

    monkeypatch.setattr(offers_mod, "probe_liveness", probe)
    chain["jobs"] = [SimpleNamespace(last_window_end=NOW - 60)]
    client = GpuMarketClient("http://127.0.0.1:9")
    plain = list_offers(client, MARKET)
    assert probed == [] and [o.online for o in plain] == [None, None]
    live = list_offers(client, MARKET, probe=True)
    assert [(o.provider, o.online, o.last_seen) for o in live] == [
        (CHAIN[1].address, None, None), (CHAIN[0].address, False, NOW - 60)]
