"""A managed job's recovery policy and workload template (pure): parsing, validation, which
offers a successor may take, JSON round trips, attempt job ids, sealed secrets."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest
from gpu_market.managed.policy import PolicyError, RecoveryPolicy, parse_exit_codes
from gpu_market.managed.template import TemplateError, attempt_job_id, attempt_spec, make_template
from gpu_market.offers import Offer
from gpu_market.workload import open_secrets, spec_hash
from solders.keypair import Keypair
from solders.pubkey import Pubkey


def policy(**kw) -> RecoveryPolicy:
    base = {"gpu_model": "H100", "gpus": 2, "hours_seconds": Fraction(3600), "budget": 10**6}
    return RecoveryPolicy(**{**base, **kw})


def offer(**kw) -> Offer:
    base = dict(  # noqa: C408 - the fields by name, as the constructor takes them
        provider=Pubkey.new_unique(), owner=Pubkey.new_unique(),
                worker_key=Pubkey.new_unique(), gpu_model="NVIDIA H100 80GB HBM3", gpus_free=4,
                gpus_total=8, vram_mib=81920, region="eu-west", price_per_gpu_second=500,
                stake=10**9, verified_hours=1.0, jobs_completed=1, jobs_failed=0, slashes=0,
                jailed=False, score=0.8, endpoint="http://w:9000")
    return Offer(**{**base, **kw})


def test_exit_codes_parse_lists_and_ranges_and_refuse_the_rest() -> None:
    assert parse_exit_codes("1, 137,128-130") == {1, 128, 129, 130, 137}
    for bad, why in (("0", "0 is a clean exit"), ("256", "outside 1..255"), ("3-1", "backwards"),
                     ("x", "not a number"), (" , ", "names no exit code")):
        with pytest.raises(PolicyError, match=why):
            parse_exit_codes(bad)


@pytest.mark.parametrize(("kw", "why"), [
    ({"gpus": 0}, "GPU count"), ({"budget": 0}, "budget"), ({"max_restarts": -1}, "max restarts"),
    ({"min_score": 1.5}, "minimum score"), ({"missed_windows": 0}, "missed windows"),
    ({"start_timeout_s": 5}, "at least 10 s"), ({"hours_seconds": Fraction(0)}, "hours"),
    ({"max_price_per_gpu_second": 0}, "price cap"), ({"gpu_model": " "}, "GPU model")])
def test_a_policy_out_of_range_is_refused_naming_the_value(kw: dict, why: str) -> None:
    with pytest.raises(PolicyError, match=why):
        policy(**kw)


def test_offers_a_successor_may_take() -> None:
    p = policy(max_price_per_gpu_second=600, min_score=0.5, regions=("eu-west",))
    good = offer()
    assert p.offer_refusal(good) is None
    assert p.offer_refusal(good, excluded=frozenset({str(good.provider)})) == "failed this job before"
    assert p.offer_refusal(replace(good, price_per_gpu_second=601)) == "above the price cap"
    assert "score" in p.offer_refusal(replace(good, score=0.4))
    assert "region" in p.offer_refusal(replace(good, region="us-east"))
    assert "free GPU" in p.offer_refusal(replace(good, gpus_free=1))
    assert "no containers" in p.offer_refusal(replace(good, endpoint=""))
    assert p.offer_refusal(replace(good, gpu_model="A100")) is not None
    avoid = replace(p, avoid=(str(good.provider),))
    assert avoid.offer_refusal(good) == "on the avoid list"
    # Once the first attempt ran, successors need its exact model.
    fixed = p.with_fixed_model("NVIDIA H100 80GB HBM3")
    assert fixed.offer_refusal(good) is None
    assert fixed.offer_refusal(replace(good, gpu_model="NVIDIA H100 PCIe")) is not None


def test_the_policy_survives_its_json() -> None:
    p = policy(recover_exit_codes=frozenset({1, 137}), regions=("a", "b"), avoid=("x",),
               max_price_per_gpu_second=7, hours_seconds=Fraction(7, 3), budget=None)
    assert RecoveryPolicy.from_json(p.to_json()) == p


def test_attempt_job_ids_are_fixed_by_uid_and_slot() -> None:
    ids = {attempt_job_id(b"u" * 16, i) for i in range(100)}
    assert len(ids) == 100 and all(0 <= i < 2**64 for i in ids)
    assert attempt_job_id(b"u" * 16, 3) == attempt_job_id(b"u" * 16, 3)
    assert attempt_job_id(b"v" * 16, 3) != attempt_job_id(b"u" * 16, 3)


def test_a_template_keeps_secret_names_and_each_attempt_seals_them_to_its_worker() -> None:
    t = make_template("docker.io/library/busybox:1", command=["sh", "-c"], args=["echo hi"],
                      env={"A": "1"}, secrets=["TOKEN"], ports=["8080", "53/udp"])
    assert t["secrets"] == ["TOKEN"] and "hunter2" not in repr(t)
    w1, w2 = Keypair(), Keypair()
    s1 = attempt_spec(t, bytes(w1.pubkey()), {"TOKEN": "hunter2"})
    s2 = attempt_spec(t, bytes(w2.pubkey()), {"TOKEN": "hunter2"})
    assert open_secrets(w1.secret(), s1) == (("TOKEN", "hunter2"),)
    assert open_secrets(w2.secret(), s2) == (("TOKEN", "hunter2"),)
    assert spec_hash(s1) != spec_hash(s2) and s1.env == (("A", "1"),)
    with pytest.raises(TemplateError, match="TOKEN"):
        attempt_spec(t, bytes(w1.pubkey()), {})
    with pytest.raises(TemplateError, match="given both"):
        make_template("busybox", env={"T": "1"}, secrets=["T"])
    with pytest.raises(TemplateError, match="bad workload"):
        make_template("busybox", ports=["99999"])
