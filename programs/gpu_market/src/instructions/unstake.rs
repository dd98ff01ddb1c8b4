use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, StakeWithdrawn, UnstakeRequested};
use crate::ops::{self, MarketSigner};
use crate::state::{Market, Provider, Unbonding};

/// Moves `amount` of active stake into unbonding, released after `unbonding_seconds` (the
/// release time restarts for the whole unbonding amount). The remaining stake must still cover
/// `min_stake_per_gpu * gpus_in_use`; unbonding stake stays slashable. Allowed while paused.
/// Can only be signed by the provider's owner.
#[derive(Accounts)]
pub struct RequestUnstake<'info> {
    pub owner: Signer<'info>,
    pub market: Box<Account<'info, Market>>,
    #[account(
        mut,
        has_one = owner @ GpuMarketError::NotProviderSigner,
        has_one = market @ GpuMarketError::ProviderMarketMismatch,
    )]
    pub provider: Box<Account<'info, Provider>>,
}

pub fn request(ctx: Context<RequestUnstake>, amount: u64) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let params = ctx.accounts.market.params_at(now);
    let provider = &mut ctx.accounts.provider;
    require!(amount > 0, GpuMarketError::ZeroAmount);
    require!(amount <= provider.stake, GpuMarketError::UnstakeExceedsStake);
    let remaining = ops::sub(provider.stake, amount)?;
    require!(
        remaining >= Provider::required_stake(params.min_stake_per_gpu, provider.gpus_in_use)?,
        GpuMarketError::InsufficientStake
    );
    let release_at = now
        .checked_add(params.unbonding_seconds)
        .ok_or(GpuMarketError::MathOverflow)?;
    provider.stake = remaining;
    provider.unbonding = Unbonding {
        amount: ops::add(provider.unbonding.amount, amount)?,
        release_at,
    };
    emit_event(UnstakeRequested {
        provider: provider.key(),
        amount,
        stake: provider.stake,
        unbonding: provider.unbonding.amount,
        release_at,
    });
    Ok(())
}

/// Pays the released unbonding stake back to the owner. Allowed while paused. Can only be
/// signed by the provider's owner, once `release_at` has passed.
#[derive(Accounts)]
pub struct WithdrawUnstaked<'info> {
    pub owner: Signer<'info>,
    #[account(mut)]
    pub market: Box<Account<'info, Market>>,
    #[account(
        mut,
        has_one = owner @ GpuMarketError::NotProviderSigner,
        has_one = market @ GpuMarketError::ProviderMarketMismatch,
    )]
    pub provider: Box<Account<'info, Provider>>,
    #[account(address = market.stake_mint @ GpuMarketError::InvalidMint)]
    pub stake_mint: Box<Account<'info, Mint>>,
    #[account(mut, address = market.stake_vault @ GpuMarketError::InvalidStakeVault)]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    #[account(
        mut,
        constraint = owner_stake_account.mint == market.stake_mint @ GpuMarketError::InvalidMint,
        constraint = owner_stake_account.owner == owner.key() @ GpuMarketError::NotProviderSigner,
    )]
    pub owner_stake_account: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

pub fn withdraw(ctx: Context<WithdrawUnstaked>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let unbonding = ctx.accounts.provider.unbonding;
    require!(unbonding.amount > 0, GpuMarketError::NothingToWithdraw);
    require!(now >= unbonding.release_at, GpuMarketError::UnbondingNotReleased);
    let signer = MarketSigner::of(&ctx.accounts.market);
    ops::transfer_signed(
        &ctx.accounts.token_program,
        &ctx.accounts.stake_vault,
        &ctx.accounts.stake_mint,
        ctx.accounts.owner_stake_account.to_account_info(),
        ctx.accounts.market.to_account_info(),
        &signer.seeds(),
        unbonding.amount,
    )?;
    ctx.accounts.provider.unbonding = Unbonding::default();
    let market = &mut ctx.accounts.market;
    market.totals.staked = ops::sub(market.totals.staked, unbonding.amount)?;
    ctx.accounts.stake_vault.reload()?;
    ctx.accounts.market.invariant(ctx.accounts.stake_vault.amount)?;
    emit_event(StakeWithdrawn { provider: ctx.accounts.provider.key(), amount: unbonding.amount });
    Ok(())
}
