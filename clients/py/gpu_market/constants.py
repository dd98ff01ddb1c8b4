"""Well-known addresses and limits (pure constants)."""

from __future__ import annotations

from solders.pubkey import Pubkey

__all__ = [
    "ASSOCIATED_TOKEN_PROGRAM_ID",
    "ED25519_PROGRAM_ID",
    "INSTRUCTIONS_SYSVAR_ID",
    "PACKET_DATA_SIZE",
    "PROGRAM_ID",
    "SYSTEM_PROGRAM_ID",
    "TOKEN_PROGRAM_ID",
]

PROGRAM_ID = Pubkey.from_string("9mfnJ96kQ4APyqVvPKsBwVLCnwWwrSrGtkXZMyDspnkg")
"""gpu_market's program id (``declare_id!`` in ``programs/gpu_market/src/lib.rs``)."""

TOKEN_PROGRAM_ID = Pubkey.from_string("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA")
ASSOCIATED_TOKEN_PROGRAM_ID = Pubkey.from_string("ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL")
SYSTEM_PROGRAM_ID = Pubkey.from_string("11111111111111111111111111111111")
ED25519_PROGRAM_ID = Pubkey.from_string("Ed25519SigVerify111111111111111111111111111")
INSTRUCTIONS_SYSVAR_ID = Pubkey.from_string("Sysvar1nstructions1111111111111111111111111")

PACKET_DATA_SIZE = 1232
"""Largest serialized transaction a cluster accepts (bytes): 1280 IPv6 MTU - 48 header bytes."""
