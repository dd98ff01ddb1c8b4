"""One pure builder per gpu_market instruction: codec, keys, views and arguments in, a
``solders.instruction.Instruction`` out; no RPC, no signing, no reads.

Convention: the builder of instruction ``<name>`` is ``<name>_ix(codec, <signer>, ...)``;
its first argument is the :class:`~gpu_market.codec.Codec` (which gives the program id for
PDAs), then the signer's pubkey, then the accounts and arguments. Where an instruction needs
several accounts a Market or Job account holds (vaults, mints, provider, committee), the
builder takes that view (``MarketView``/``JobView`` with its ``address``) rather than each
key; ValueError when the view has no address. Account metas come out in the IDL's order with
its signer/writable flags (:meth:`Codec.instruction`).

``GpuMarketClient`` methods read what a builder needs, check what the program would refuse,
call the builder and send (solana-py's ``spl.token.core`` keeps building apart from sending
the same way). Instructions of other programs that go in the same transactions (Ed25519
evidence, associated token accounts, address lookup tables) are built in
:mod:`gpu_market.settle`, :mod:`gpu_market.tokens` and :mod:`gpu_market.lookup_tables`.

One module per instruction family of the program:

==============  ==============================================================================
module          instructions
==============  ==============================================================================
``market``      initialize_market, update_params, set_paused, propose_authority,
                accept_authority
``treasury``    set_treasury, withdraw_fees, sweep_vault
``provider``    register_provider, update_provider, rotate_worker_key, stake,
                request_unstake, withdraw_unstaked
``validator``   register_validator, update_validator, claim_validator_rewards,
                request_validator_exit, withdraw_validator_bond
``job``         create_job, accept_job, finish_job, top_up, cancel_job, close_job,
                decline_job, expire_job, complete_job, replace_committee_member, rate_job
``settle``      settle
``slash``       slash_equivocation, slash_downtime, slash_validator_equivocation
``hardware``    attest_hardware, slash_wrong_answer
==============  ==============================================================================

``tests/test_instruction_builders.py`` checks that every instruction of the IDL has exactly
one builder here and that it emits the IDL's accounts and discriminator.
"""

from __future__ import annotations

from .hardware import attest_hardware_ix, slash_wrong_answer_ix
from .job import (
    accept_job_ix,
    cancel_job_ix,
    close_job_ix,
    complete_job_ix,
    create_job_ix,
    decline_job_ix,
    expire_job_ix,
    finish_job_ix,
    rate_job_ix,
    replace_committee_member_ix,
    top_up_ix,
)
from .market import (
    accept_authority_ix,
    initialize_market_ix,
    propose_authority_ix,
    set_paused_ix,
    update_params_ix,
)
from .provider import (
    register_provider_ix,
    request_unstake_ix,
    rotate_worker_key_ix,
    stake_ix,
    update_provider_ix,
    withdraw_unstaked_ix,
)
from .settle import settle_ix
from .slash import slash_downtime_ix, slash_equivocation_ix, slash_validator_equivocation_ix
from .treasury import set_treasury_ix, sweep_vault_ix, withdraw_fees_ix
from .validator import (
    claim_validator_rewards_ix,
    register_validator_ix,
    request_validator_exit_ix,
    update_validator_ix,
    withdraw_validator_bond_ix,
)

__all__ = [
    "accept_authority_ix",
    "accept_job_ix",
    "attest_hardware_ix",
    "cancel_job_ix",
    "claim_validator_rewards_ix",
    "close_job_ix",
    "complete_job_ix",
    "create_job_ix",
    "decline_job_ix",
    "expire_job_ix",
    "finish_job_ix",
    "initialize_market_ix",
    "propose_authority_ix",
    "rate_job_ix",
    "register_provider_ix",
    "register_validator_ix",
    "replace_committee_member_ix",
    "request_unstake_ix",
    "request_validator_exit_ix",
    "rotate_worker_key_ix",
    "set_paused_ix",
    "set_treasury_ix",
    "settle_ix",
    "slash_downtime_ix",
    "slash_equivocation_ix",
    "slash_validator_equivocation_ix",
    "slash_wrong_answer_ix",
    "stake_ix",
    "sweep_vault_ix",
    "top_up_ix",
    "update_params_ix",
    "update_provider_ix",
    "update_validator_ix",
    "withdraw_fees_ix",
    "withdraw_unstaked_ix",
    "withdraw_validator_bond_ix",
]
