"""PDAs: pinned vectors (cross-checked in Rust) and an independent sha256 re-derivation."""

from __future__ import annotations

import hashlib

import pytest
from gpu_market import pda
from gpu_market.constants import PROGRAM_ID
from solders.pubkey import Pubkey

AUTHORITY = Pubkey(bytes([1] * 32))
USER = Pubkey(bytes([2] * 32))
OWNER = Pubkey(bytes([3] * 32))

# Computed with Rust `solana_address::Address::find_program_address` (solana-address 2.9.0)
# over the seeds of programs/gpu_market/src/seeds.rs, market id 7, job id u64::MAX.
RUST_VECTORS = {
    "market": ("BwYeYhZq4cHScsGELt1Gnd9pek3kFuyvsisNkbEznhi6", 252),
    "stake_vault": ("2d6vAUzzwxZzUiRmF6hqyUffeC1WiEcdXs8RGEyYYZgm", 254),
    "provider": ("BPtgGZozF9iDSTi2XATe99U99y3R32TKyyjV98FwU5rb", 255),
    "job": ("8vqp6oWBzo3LrqvcRqbAp2ZmsWczCv54x8U6uuBXdGdK", 254),
    "escrow": ("E6xETujhZd1sL31Wafieu6Ss2TFby4zfAAwmJU4gEoeR", 255),
}


def create_program_address(seeds: list[bytes], bump: int, program_id: Pubkey) -> bytes:
    """Solana's PDA hash, written out: sha256(seeds || bump || program_id || marker)."""
    h = hashlib.sha256()
    for s in seeds:
        h.update(s)
    h.update(bytes([bump]))
    h.update(bytes(program_id))
    h.update(b"ProgramDerivedAddress")
    return h.digest()


def test_rust_vectors():
    market, bump = pda.market_pda_and_bump(AUTHORITY, 7)
    assert (str(market), bump) == RUST_VECTORS["market"]
    assert tuple(map(str, pda.stake_vault_pda_and_bump(market))) == tuple(
        map(str, RUST_VECTORS["stake_vault"])
    )
    assert (str(pda.provider_pda(market, OWNER)), pda.provider_pda_and_bump(market, OWNER)[1]) == (
        RUST_VECTORS["provider"]
    )
    job, jb = pda.job_pda_and_bump(market, USER, 2**64 - 1)
    assert (str(job), jb) == RUST_VECTORS["job"]
    assert (str(pda.escrow_pda(job)), pda.escrow_pda_and_bump(job)[1]) == RUST_VECTORS["escrow"]


@pytest.mark.parametrize(
    "fn, args, seeds",
    [
        (pda.market_pda_and_bump, (AUTHORITY, 7), [b"market", bytes(AUTHORITY), (7).to_bytes(8, "little")]),
        (pda.stake_vault_pda_and_bump, (OWNER,), [b"stake_vault", bytes(OWNER)]),
        (pda.fee_vault_pda_and_bump, (OWNER,), [b"fee_vault", bytes(OWNER)]),
        (pda.provider_pda_and_bump, (AUTHORITY, OWNER), [b"provider", bytes(AUTHORITY), bytes(OWNER)]),
        (pda.validator_pda_and_bump, (AUTHORITY, OWNER), [b"validator", bytes(AUTHORITY), bytes(OWNER)]),
        (pda.job_pda_and_bump, (AUTHORITY, USER, 300), [b"job", bytes(AUTHORITY), bytes(USER), (300).to_bytes(8, "little")]),
        (pda.escrow_pda_and_bump, (USER,), [b"escrow", bytes(USER)]),
    ],
)  # fmt: skip
def test_seed_layout_rederived(fn, args, seeds):
    address, bump = fn(*args)
    assert bytes(address) == create_program_address(seeds, bump, PROGRAM_ID)
    assert (address, bump) == Pubkey.find_program_address(seeds, PROGRAM_ID)
    assert fn(*args, program_id=Pubkey(bytes([9] * 32)))[0] != address


def test_plain_variants_match():
    market = pda.market_pda(AUTHORITY, 0)
    assert market == pda.market_pda_and_bump(AUTHORITY, 0)[0]
    assert pda.validator_pda(market, OWNER) == pda.validator_pda_and_bump(market, OWNER)[0]
    assert pda.stake_vault_pda(market) == pda.stake_vault_pda_and_bump(market)[0]
    assert pda.fee_vault_pda(market) == pda.fee_vault_pda_and_bump(market)[0]
    assert pda.fee_vault_pda(market) != pda.stake_vault_pda(market)
    assert pda.FEE_VAULT_SEED == b"fee_vault"  # programs/gpu_market/src/seeds.rs FEE_VAULT


@pytest.mark.parametrize("bad", [-1, 2**64, 1.0, True, "1"])
def test_u64_seeds_are_checked(bad):
    with pytest.raises(ValueError, match="market_id"):
        pda.market_pda(AUTHORITY, bad)
    with pytest.raises(ValueError, match="job_id"):
        pda.job_pda(AUTHORITY, USER, bad)
