use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::checked;
use crate::errors::GpuMarketError;
use crate::events::{emit_event, ValidatorBondWithdrawn};
use crate::ops;
use crate::state::{Market, Validator, ValidatorStatus};

/// Pays an exiting validator's bond back once released and closes its account (rent to the
/// authority). Its settlement rewards must be claimed first (`claim_validator_rewards`, in the
/// same transaction if it likes; else `RewardsUnclaimed`): a closed account could never claim
/// them, and the market's books would owe them for good. Allowed while paused. Can only be
/// signed by the validator's authority.
#[derive(Accounts)]
pub struct WithdrawValidatorBond<'info> {
    #[account(mut)]
    pub authority: Signer<'info>,
    #[account(mut)]
    #[cfg_attr(feature = "idl-build", account(has_one = stake_mint))]
    pub market: Box<Account<'info, Market>>,
    #[account(
        mut,
        close = authority,
        has_one = authority @ GpuMarketError::NotAValidator,
        has_one = market @ GpuMarketError::NotAValidator,
    )]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::VALIDATOR, market.key().as_ref(), authority.key().as_ref()],
        bump = validator.bump,
    ))]
    pub validator: Box<Account<'info, Validator>>,
    #[account(address = market.stake_mint @ GpuMarketError::InvalidMint)]
    pub stake_mint: Box<Account<'info, Mint>>,
    #[account(mut, address = market.stake_vault @ GpuMarketError::InvalidStakeVault)]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::STAKE_VAULT, market.key().as_ref()],
        bump = market.stake_vault_bump,
    ))]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    #[account(
        mut,
        constraint = authority_stake_account.mint == market.stake_mint @ GpuMarketError::InvalidMint,
        constraint = authority_stake_account.owner == authority.key() @ GpuMarketError::NotAValidator,
    )]
    pub authority_stake_account: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

pub fn handler(ctx: Context<WithdrawValidatorBond>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let validator = &ctx.accounts.validator;
    require!(validator.status == ValidatorStatus::Exiting, GpuMarketError::ValidatorNotExiting);
    require!(now >= validator.unbonding.release_at, GpuMarketError::UnbondingNotReleased);
    require!(validator.rewards_unclaimed == 0, GpuMarketError::RewardsUnclaimed);
    let amount = validator.unbonding.amount;
    ops::transfer_from_market(
        &ctx.accounts.token_program,
        &ctx.accounts.stake_vault,
        &ctx.accounts.stake_mint,
        ctx.accounts.authority_stake_account.to_account_info(),
        &ctx.accounts.market,
        amount,
    )?;
    let market = &mut ctx.accounts.market;
    market.totals.bonded = checked::sub(market.totals.bonded, amount)?;
    ctx.accounts.validator.unbonding.amount = 0;
    ctx.accounts.stake_vault.reload()?;
    ctx.accounts.market.invariant(ctx.accounts.stake_vault.amount)?;
    emit_event(ValidatorBondWithdrawn { validator: ctx.accounts.validator.key(), amount });
    Ok(())
}
