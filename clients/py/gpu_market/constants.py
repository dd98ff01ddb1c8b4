"""Well-known addresses and limits (pure constants)."""

from __future__ import annotations

from solders.pubkey import Pubkey

__all__ = [
    "ASSOCIATED_TOKEN_PROGRAM_ID",
    "CLOCK_SYSVAR_ID",
    "ED25519_PROGRAM_ID",
    "ENDPOINT_LEN",
    "INSTRUCTIONS_SYSVAR_ID",
    "MAX_BPS",
    "MAX_COMMITTEE",
    "MAX_ECC_UNCORRECTED",
    "MAX_FEE_BPS",
    "MAX_MISSED_WINDOWS",
    "MAX_QUORUM",
    "MAX_REPORTER_REWARD_BPS",
    "MAX_SKEW_SECONDS",
    "MAX_UNBONDING_SECONDS",
    "MAX_WINDOW_SECONDS",
    "MIN_PARAMS_DELAY_SECONDS",
    "PACKET_DATA_SIZE",
    "PROGRAM_ID",
    "SYSTEM_PROGRAM_ID",
    "TEMP_CRITICAL_RANGE_C",
    "TOKEN_PROGRAM_ID",
]

PROGRAM_ID = Pubkey.from_string("9mfnJ96kQ4APyqVvPKsBwVLCnwWwrSrGtkXZMyDspnkg")
"""gpu_market's program id (``declare_id!`` in ``programs/gpu_market/src/lib.rs``)."""

TOKEN_PROGRAM_ID = Pubkey.from_string("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA")
ASSOCIATED_TOKEN_PROGRAM_ID = Pubkey.from_string("ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL")
SYSTEM_PROGRAM_ID = Pubkey.from_string("11111111111111111111111111111111")
ED25519_PROGRAM_ID = Pubkey.from_string("Ed25519SigVerify111111111111111111111111111")
INSTRUCTIONS_SYSVAR_ID = Pubkey.from_string("Sysvar1nstructions1111111111111111111111111")
CLOCK_SYSVAR_ID = Pubkey.from_string("SysvarC1ock11111111111111111111111111111111")

# Bounds of MarketParams, checked by the program on every write (state/market.rs).
MAX_FEE_BPS = 2_500
MAX_WINDOW_SECONDS = 3_600
MAX_UNBONDING_SECONDS = 365 * 24 * 3_600
MIN_PARAMS_DELAY_SECONDS = 3_600
"""The shortest delay between ``update_params`` and the new parameters coming into force,
whatever ``unbonding_seconds`` is (``state/market.rs``)."""
MAX_SKEW_SECONDS = 300
"""Also the margin after an equivocation slash within which evidence counts as the same
incident (``slash_equivocation``)."""
MAX_QUORUM = 3
"""Largest ``min_quorum`` of a market and ``quorum`` of a job: a quorum-3 settle (worker + two
attestations over one shared message copy) is the largest that fits one packet."""
MAX_COMMITTEE = 5
"""Most validators a job's committee names (``state/job.rs``)."""
ENDPOINT_LEN = 96
"""Bytes of a validator's endpoint URL on chain (UTF-8, zero-padded; ``state/validator.rs``)."""
MAX_BPS = 10_000
MAX_MISSED_WINDOWS = 1_440
MAX_REPORTER_REWARD_BPS = 5_000
TEMP_CRITICAL_RANGE_C = (50, 150)
"""Inclusive bounds of ``temp_critical_c``."""
MAX_ECC_UNCORRECTED = 1_000_000

PACKET_DATA_SIZE = 1232
"""Largest serialized transaction a cluster accepts (bytes): 1280 IPv6 MTU - 48 header bytes."""
