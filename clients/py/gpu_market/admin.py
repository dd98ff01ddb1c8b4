"""Market administration and upkeep: typed calls mixed into :class:`GpuMarketClient`.

Authority-only: ``initialize_market`` (the creator), ``update_params`` (announces parameters,
in force ``unbonding_seconds`` later), ``set_paused``, ``propose_authority`` /
``accept_authority``, ``set_treasury``. Permissionless: ``withdraw_fees`` (the fee vault's
balance above the validators' unclaimed rewards, i.e. the treasury share of every settlement,
to the treasury account) and
``sweep_vault`` (the stake vault's surplus over the booked stake, i.e. donations, to a
stake-mint account of the treasury's owner).

Settlement never pays the treasury account directly: ``settle`` pays the market's fee vault
``["fee_vault", market]`` (``MarketView.fee_vault``), so a closed or frozen treasury account
only holds up ``withdraw_fees`` until the authority names another with ``set_treasury``.

The :class:`MarketAdmin` methods read what they need from chain, check it, build with the pure
builders of :mod:`gpu_market.instructions` (``market``, ``treasury``), send and confirm,
returning the signature. This module does not import ``gpu_market.client`` (the client
inherits from it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from . import tokens
from .accounts import DEFAULT_MARKET_PARAMS, MarketParams, MarketView, announced_params
from .codec import Codec
from .errors import AccountNotFound
from .instructions import (
    accept_authority_ix,
    initialize_market_ix,
    propose_authority_ix,
    set_paused_ix,
    set_treasury_ix,
    sweep_vault_ix,
    update_params_ix,
    withdraw_fees_ix,
)

__all__ = ["MarketAdmin", "params_args"]


def params_args(params: Mapping[str, int] | MarketParams | None, base: Mapping[str, int]) -> dict[str, int]:
    """``params`` (a partial mapping or a full MarketParams) merged onto ``base``, as the
    ``MarketParams`` instruction argument; ValueError names unknown keys."""
    p = asdict(params) if isinstance(params, MarketParams) else dict(params or {})
    unknown = set(p) - set(DEFAULT_MARKET_PARAMS)
    if unknown:
        raise ValueError(f"unknown market params {sorted(unknown)}; known: {list(DEFAULT_MARKET_PARAMS)}")
    return {**base, **{k: int(v) for k, v in p.items()}}


class MarketAdmin:
    """Market governance and upkeep calls of :class:`gpu_market.client.GpuMarketClient`."""

    codec: Codec
    program_id: Pubkey

    if TYPE_CHECKING:  # provided by GpuMarketClient

        def _require(self, key: Pubkey, kind: str) -> Any: ...

        def send(self, instructions: Sequence[Instruction], signers: Sequence[Keypair]) -> Signature: ...

        def account_info(self, key: Pubkey) -> tuple[Pubkey, bytes] | None: ...

        def token_balance(self, account: Pubkey) -> int: ...

    def initialize_market(
        self,
        authority: Keypair,
        market_id: int,
        stake_mint: Pubkey,
        payment_mint: Pubkey,
        treasury: Pubkey,
        params: Mapping[str, int] | MarketParams | None = None,
    ) -> Signature:
        """Create market ``market_id`` of ``authority``, its stake vault and its fee vault
        (``pda.stake_vault_pda(market)``, ``pda.fee_vault_pda(market)``). ``treasury`` (a
        payment-mint token account) is where :meth:`withdraw_fees` moves the fees.

        ``params`` keys missing from the mapping take DEFAULT_MARKET_PARAMS values; unknown
        keys raise ValueError. The market address is ``pda.market_pda(authority, market_id)``.
        """
        merged = params_args(params, DEFAULT_MARKET_PARAMS)
        ix = initialize_market_ix(
            self.codec, authority.pubkey(), market_id, stake_mint, payment_mint, treasury, merged
        )
        return self.send([ix], [authority])

    def update_params(
        self,
        authority: Keypair,
        market: Pubkey,
        params: Mapping[str, int] | MarketParams,
    ) -> Signature:
        """Announce new parameters for ``market`` (market authority only).

        They come into force ``max(unbonding_seconds, MIN_PARAMS_DELAY_SECONDS)`` (of the
        parameters in force now; :data:`gpu_market.constants.MIN_PARAMS_DELAY_SECONDS`, never
        at once) after the announcement; read ``fetch_market(market).params_effective_at``
        afterwards, and :func:`gpu_market.accounts.effective_params` for what is in force at a
        given time. Jobs already created keep their terms. ``params`` is merged onto the most
        recently announced parameters (:func:`gpu_market.accounts.announced_params`), so a
        partial mapping changes only the keys it names and never undoes a pending change;
        unknown keys raise ValueError. The program checks the bounds (e.g. ``FeeTooHigh``).
        """
        m = self._require(market, "Market")
        merged = params_args(params, asdict(announced_params(m)))
        ix = update_params_ix(self.codec, authority.pubkey(), market, merged)
        return self.send([ix], [authority])

    def set_paused(self, authority: Keypair, market: Pubkey, paused: bool) -> Signature:
        """Pause (True) or resume (False) new business in ``market`` (market authority only)."""
        ix = set_paused_ix(self.codec, authority.pubkey(), market, paused)
        return self.send([ix], [authority])

    def propose_authority(
        self, authority: Keypair, market: Pubkey, new_authority: Pubkey
    ) -> Signature:
        """Name ``new_authority`` as the next market authority (``Pubkey.default()`` cancels);
        nothing changes until it calls :meth:`accept_authority`."""
        ix = propose_authority_ix(self.codec, authority.pubkey(), market, new_authority)
        return self.send([ix], [authority])

    def accept_authority(self, new_authority: Keypair, market: Pubkey) -> Signature:
        """The proposed authority takes over ``market``."""
        ix = accept_authority_ix(self.codec, new_authority.pubkey(), market)
        return self.send([ix], [new_authority])

    def set_treasury(self, authority: Keypair, market: Pubkey, treasury: Pubkey) -> Signature:
        """Make ``treasury`` (an initialized, unfrozen token account of the payment mint) the
        account to which :meth:`withdraw_fees` moves the unburned fee share, at once (market
        authority only). Moves no tokens. The program refuses another mint (``InvalidTreasury``) or a frozen
        account (``TreasuryNotUsable``)."""
        ix = set_treasury_ix(self.codec, authority.pubkey(), market, treasury)
        return self.send([ix], [authority])

    def treasury_owner(self, market: Pubkey | MarketView) -> Pubkey:
        """The owner of ``market``'s treasury token account (where ``sweep_vault`` pays)."""
        m = market if isinstance(market, MarketView) else self._require(market, "Market")
        info = self.account_info(m.treasury)
        if info is None:
            raise AccountNotFound(
                f"the treasury token account {m.treasury} does not exist; the market authority "
                "can name a new one with set_treasury (`gpum market set-treasury`)"
            )
        return tokens.parse_token_account(info[1]).owner

    def fees_to_withdraw(self, market: Pubkey | MarketView) -> int:
        """The fee vault's balance above the validators' unclaimed rewards
        (``totals.rewards_unclaimed``), in base units: what :meth:`withdraw_fees` would move
        now."""
        m = market if isinstance(market, MarketView) else self._require(market, "Market")
        return max(0, self.token_balance(m.fee_vault) - m.totals.rewards_unclaimed)

    def withdraw_fees(self, caller: Keypair, market: Pubkey) -> Signature:
        """Move the fee vault's balance above the validators' unclaimed rewards to the market's
        treasury account (anyone may call; the instruction names no signer: ``caller`` pays the transaction fee unless the
        client has a ``payer``). Event ``FeesWithdrawn {market, treasury, amount}``.

        AccountNotFound, before anything is sent, if the treasury token account does not
        exist (closed): the market authority names a new one with :meth:`set_treasury`. The
        program fails with ``NothingToWithdrawFees`` when there is nothing above the rewards (see
        :meth:`fees_to_withdraw`).
        """
        m = self._require(market, "Market")
        if self.account_info(m.treasury) is None:
            raise AccountNotFound(
                f"the treasury token account {m.treasury} does not exist; the market authority "
                "can name a new one with set_treasury (`gpum market set-treasury`)"
            )
        return self.send([withdraw_fees_ix(self.codec, m)], [caller])

    def vault_surplus(self, market: Pubkey) -> int:
        """Stake-vault balance above the booked stake and bonds (donations), in base units:
        what :meth:`sweep_vault` would move now (0 if nothing)."""
        m = self._require(market, "Market")
        return max(0, self.token_balance(m.stake_vault) - m.booked_stake)

    def sweep_vault(
        self, caller: Keypair, market: Pubkey, destination: Pubkey | None = None
    ) -> Signature:
        """Move the stake vault's surplus over the booked stake (anyone may call).

        ``destination`` must be a stake-mint account owned by the owner of the market's
        treasury account; by default that owner's stake-mint ATA, created (``caller`` pays)
        in the same transaction if missing. The program fails with ``NothingToSweep`` when
        there is no surplus (see :meth:`vault_surplus`).
        """
        m = self._require(market, "Market")
        ixs: list[Instruction] = []
        if destination is None:
            owner = self.treasury_owner(m)
            destination = tokens.ata(owner, m.stake_mint)
            ixs.append(tokens.create_ata_idempotent_ix(caller.pubkey(), owner, m.stake_mint))
        ixs.append(sweep_vault_ix(self.codec, m, destination))
        return self.send(ixs, [caller])
