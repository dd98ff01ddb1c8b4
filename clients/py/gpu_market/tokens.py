"""SPL Token helpers for tests, demos and the CLI (classic Token program only).

Instruction builders (``*_ix``) and account parsers are pure; ``create_mint``, ``create_ata``
and ``mint_to`` send a transaction through any :class:`TransactionSender` (a
:class:`gpu_market.client.GpuMarketClient` is one; this module does not import the client).
ATAs are created through the real Associated Token Account program
(``CreateIdempotent``), so creating one that exists is a no-op.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Protocol

from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.system_program import CreateAccountParams, create_account

from .constants import ASSOCIATED_TOKEN_PROGRAM_ID, SYSTEM_PROGRAM_ID, TOKEN_PROGRAM_ID

__all__ = [
    "MINT_LEN",
    "TOKEN_ACCOUNT_LEN",
    "TokenAccountInfo",
    "TransactionSender",
    "ata",
    "create_ata",
    "create_ata_idempotent_ix",
    "create_mint",
    "initialize_mint2_ix",
    "mint_to",
    "mint_to_ix",
    "parse_mint",
    "parse_token_account",
]

MINT_LEN = 82
TOKEN_ACCOUNT_LEN = 165


class TransactionSender(Protocol):
    """What the sending helpers need: a solana-py ``Client`` as ``rpc`` and ``send``."""

    rpc: Any

    def send(self, instructions: Sequence[Instruction], signers: Sequence[Keypair]) -> Signature: ...


def ata(owner: Pubkey, mint: Pubkey) -> Pubkey:
    """The associated token account of ``owner`` for ``mint`` (classic Token program)."""
    return Pubkey.find_program_address(
        [bytes(owner), bytes(TOKEN_PROGRAM_ID), bytes(mint)], ASSOCIATED_TOKEN_PROGRAM_ID
    )[0]


def create_ata_idempotent_ix(payer: Pubkey, owner: Pubkey, mint: Pubkey) -> Instruction:
    """ATA program ``CreateIdempotent`` (tag 1): creates ``ata(owner, mint)`` unless it exists."""
    return Instruction(
        ASSOCIATED_TOKEN_PROGRAM_ID,
        bytes([1]),
        [
            AccountMeta(payer, True, True),
            AccountMeta(ata(owner, mint), False, True),
            AccountMeta(owner, False, False),
            AccountMeta(mint, False, False),
            AccountMeta(SYSTEM_PROGRAM_ID, False, False),
            AccountMeta(TOKEN_PROGRAM_ID, False, False),
        ],
    )


def initialize_mint2_ix(
    mint: Pubkey, decimals: int, mint_authority: Pubkey, freeze_authority: Pubkey | None = None
) -> Instruction:
    """Token ``InitializeMint2`` (tag 20; needs no rent sysvar)."""
    if not 0 <= decimals <= 255:
        raise ValueError("decimals must be in [0, 255]")
    freeze = b"\x01" + bytes(freeze_authority) if freeze_authority else b"\x00" + bytes(32)
    data = bytes([20, decimals]) + bytes(mint_authority) + freeze
    return Instruction(TOKEN_PROGRAM_ID, data, [AccountMeta(mint, False, True)])


def mint_to_ix(mint: Pubkey, destination: Pubkey, authority: Pubkey, amount: int) -> Instruction:
    """Token ``MintTo`` (tag 7) of ``amount`` base units."""
    return Instruction(
        TOKEN_PROGRAM_ID,
        bytes([7]) + struct.pack("<Q", amount),
        [
            AccountMeta(mint, False, True),
            AccountMeta(destination, False, True),
            AccountMeta(authority, True, False),
        ],
    )


class TokenAccountInfo:
    """``mint``, ``owner`` and ``amount`` of a token account."""

    __slots__ = ("amount", "mint", "owner")

    def __init__(self, mint: Pubkey, owner: Pubkey, amount: int) -> None:
        self.mint, self.owner, self.amount = mint, owner, amount

    def __repr__(self) -> str:
        return f"TokenAccountInfo(mint={self.mint}, owner={self.owner}, amount={self.amount})"


def parse_token_account(data: bytes) -> TokenAccountInfo:
    """Parse classic Token account data; ValueError if it is too short."""
    if len(data) < TOKEN_ACCOUNT_LEN:
        raise ValueError(f"not a token account ({len(data)} bytes)")
    return TokenAccountInfo(
        Pubkey(bytes(data[0:32])), Pubkey(bytes(data[32:64])), struct.unpack_from("<Q", data, 64)[0]
    )


def parse_mint(data: bytes) -> tuple[int, int]:
    """``(supply, decimals)`` of classic Token mint data; ValueError if not a mint."""
    if len(data) < MINT_LEN or data[45] != 1:
        raise ValueError("not an initialized mint")
    return struct.unpack_from("<Q", data, 36)[0], data[44]


def create_mint(
    client: TransactionSender,
    authority: Keypair,
    decimals: int,
    mint: Keypair | None = None,
    freeze_authority: Pubkey | None = None,
) -> Pubkey:
    """Create and initialize a mint (``authority`` pays and is mint authority); returns it."""
    mint = mint or Keypair()
    lamports = client.rpc.get_minimum_balance_for_rent_exemption(MINT_LEN).value
    ixs = [
        create_account(
            CreateAccountParams(
                from_pubkey=authority.pubkey(),
                to_pubkey=mint.pubkey(),
                lamports=lamports,
                space=MINT_LEN,
                owner=TOKEN_PROGRAM_ID,
            )
        ),
        initialize_mint2_ix(mint.pubkey(), decimals, authority.pubkey(), freeze_authority),
    ]
    client.send(ixs, [authority, mint])
    return mint.pubkey()


def create_ata(client: TransactionSender, payer: Keypair, owner: Pubkey, mint: Pubkey) -> Pubkey:
    """Create ``ata(owner, mint)`` if missing (no-op if it exists); returns its address."""
    client.send([create_ata_idempotent_ix(payer.pubkey(), owner, mint)], [payer])
    return ata(owner, mint)


def mint_to(
    client: TransactionSender, mint: Pubkey, destination: Pubkey, authority: Keypair, amount: int
) -> Signature:
    """Mint ``amount`` base units to the token account ``destination``."""
    return client.send([mint_to_ix(mint, destination, authority.pubkey(), amount)], [authority])
