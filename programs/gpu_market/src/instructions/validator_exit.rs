use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, ValidatorBondWithdrawn, ValidatorExitRequested};
use crate::ops::{self, MarketSigner};
use crate::state::{Market, Unbonding, Validator, ValidatorStatus};

/// An Active validator leaves: its whole bond unbonds for `unbonding_seconds` (slashable for
/// equivocation until `withdraw_validator_bond`); it joins no new committee and reports no
/// downtime, and the users of its jobs may replace it. Until its account closes it still
/// attests and settles for the committees it is in (`ValidatorStatus::settles`), so its exit
/// never stalls the pay for seconds a worker proved. Allowed while paused. Can only be signed
/// by the validator's authority.
#[derive(Accounts)]
pub struct RequestValidatorExit<'info> {
    pub authority: Signer<'info>,
    pub market: Box<Account<'info, Market>>,
    #[account(
        mut,
        has_one = authority @ GpuMarketError::NotAValidator,
        has_one = market @ GpuMarketError::NotAValidator,
    )]
    pub validator: Box<Account<'info, Validator>>,
}

pub fn request(ctx: Context<RequestValidatorExit>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let unbonding_seconds = ctx.accounts.market.params_at(now).unbonding_seconds;
    let validator = &mut ctx.accounts.validator;
    require!(validator.status == ValidatorStatus::Active, GpuMarketError::ValidatorNotActive);
    let release_at = now.checked_add(unbonding_seconds).ok_or(GpuMarketError::MathOverflow)?;
    validator.unbonding = Unbonding { amount: validator.bond, release_at };
    validator.bond = 0;
    validator.status = ValidatorStatus::Exiting;
    emit_event(ValidatorExitRequested {
        validator: validator.key(),
        amount: validator.unbonding.amount,
        release_at,
    });
    Ok(())
}

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
    pub market: Box<Account<'info, Market>>,
    #[account(
        mut,
        close = authority,
        has_one = authority @ GpuMarketError::NotAValidator,
        has_one = market @ GpuMarketError::NotAValidator,
    )]
    pub validator: Box<Account<'info, Validator>>,
    #[account(address = market.stake_mint @ GpuMarketError::InvalidMint)]
    pub stake_mint: Box<Account<'info, Mint>>,
    #[account(mut, address = market.stake_vault @ GpuMarketError::InvalidStakeVault)]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    #[account(
        mut,
        constraint = authority_stake_account.mint == market.stake_mint @ GpuMarketError::InvalidMint,
        constraint = authority_stake_account.owner == authority.key() @ GpuMarketError::NotAValidator,
    )]
    pub authority_stake_account: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

pub fn withdraw(ctx: Context<WithdrawValidatorBond>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let validator = &ctx.accounts.validator;
    require!(validator.status == ValidatorStatus::Exiting, GpuMarketError::ValidatorNotExiting);
    require!(now >= validator.unbonding.release_at, GpuMarketError::UnbondingNotReleased);
    require!(validator.rewards_unclaimed == 0, GpuMarketError::RewardsUnclaimed);
    let amount = validator.unbonding.amount;
    let signer = MarketSigner::of(&ctx.accounts.market);
    ops::transfer_signed(
        &ctx.accounts.token_program,
        &ctx.accounts.stake_vault,
        &ctx.accounts.stake_mint,
        ctx.accounts.authority_stake_account.to_account_info(),
        ctx.accounts.market.to_account_info(),
        &signer.seeds(),
        amount,
    )?;
    let market = &mut ctx.accounts.market;
    market.totals.bonded = ops::sub(market.totals.bonded, amount)?;
    ctx.accounts.validator.unbonding.amount = 0;
    ctx.accounts.stake_vault.reload()?;
    ctx.accounts.market.invariant(ctx.accounts.stake_vault.amount)?;
    emit_event(ValidatorBondWithdrawn { validator: ctx.accounts.validator.key(), amount });
    Ok(())
}
