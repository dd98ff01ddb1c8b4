"""``vram`` in the offers query language is GPU memory in GB as cards are sold: ``vram>=80``
matches an H100 80GB whose driver reports 81,559 MiB (79.6 GiB)."""

from __future__ import annotations

import pytest
from gpu_market.offers import filter_offers
from gpu_market.units import nominal_vram_gb
from test_offers import DEC, ids, offer


@pytest.mark.parametrize("mib, model, gb", [
    (81_559, "NVIDIA H100 80GB HBM3", 80),  # the name says it
    (81_559, "NVIDIA H100", 80),            # 79.6 GiB: 0.5 % short of 80
    (143_771, "NVIDIA H200", 141),          # 140.4 GiB
    (23_034, "NVIDIA L4", 24),              # 22.5 GiB: ECC reserves 1/16
    (46_068, "NVIDIA L40S", 48),
    (15_360, "Tesla T4", 16),
    (24_564, "GeForce RTX 4090", 24),
    (40_960, "NVIDIA A100-SXM4-40GB", 40),
    (95_830, "NVIDIA H100 NVL", 94),
    (81_920, "", 80),
    (3_000, "", 3),                         # no standard size near: whole GiB, rounded
])  # fmt: skip
def test_nominal_vram_gb(mib: int, model: str, gb: int) -> None:
    assert nominal_vram_gb(mib, model) == gb


OFFERS = [
    offer(1, gpu_model="NVIDIA H100 80GB HBM3", vram_mib=81_559),
    offer(2, gpu_model="NVIDIA H100", vram_mib=81_559),
    offer(3, gpu_model="NVIDIA L4", vram_mib=23_034),
    offer(4, gpu_model="NVIDIA A100-SXM4-40GB", vram_mib=40_536),
]


@pytest.mark.parametrize("query, expected", [
    ("vram>=80", [1, 2]),
    ("vram=80", [1, 2]),
    ("vram>=24", [1, 2, 3, 4]),
    ("vram=24", [3]),
    ("vram>=40 vram<80", [4]),
])  # fmt: skip
def test_vram_queries_are_in_sold_gb(query: str, expected: list[int]) -> None:
    assert ids(filter_offers(OFFERS, query, **DEC)) == expected
