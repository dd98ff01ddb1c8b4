use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::checked;
use crate::errors::GpuMarketError;
use crate::events::{emit_event, StakeWithdrawn};
use crate::ops;
use crate::state::{Market, Provider, Unbonding};

/// Pays the released unbonding stake back to the owner. Allowed while paused. Can only be
/// signed by the provider's owner, once `release_at` has passed.
#[derive(Accounts)]
pub struct WithdrawUnstaked<'info> {
    pub owner: Signer<'info>,
    #[account(mut)]
    #[cfg_attr(feature = "idl-build", account(has_one = stake_mint))]
    pub market: Box<Account<'info, Market>>,
    #[account(
        mut,
        has_one = owner @ GpuMarketError::NotProviderSigner,
        has_one = market @ GpuMarketError::ProviderMarketMismatch,
    )]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::PROVIDER, market.key().as_ref(), owner.key().as_ref()],
        bump = provider.bump,
    ))]
    pub provider: Box<Account<'info, Provider>>,
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
        constraint = owner_stake_account.mint == market.stake_mint @ GpuMarketError::InvalidMint,
        constraint = owner_stake_account.owner == owner.key() @ GpuMarketError::NotProviderSigner,
    )]
    pub owner_stake_account: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

pub fn handler(ctx: Context<WithdrawUnstaked>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let unbonding = ctx.accounts.provider.unbonding;
    require!(unbonding.amount > 0, GpuMarketError::NothingToWithdraw);
    require!(now >= unbonding.release_at, GpuMarketError::UnbondingNotReleased);
    ops::transfer_from_market(
        &ctx.accounts.token_program,
        &ctx.accounts.stake_vault,
        &ctx.accounts.stake_mint,
        ctx.accounts.owner_stake_account.to_account_info(),
        &ctx.accounts.market,
        unbonding.amount,
    )?;
    ctx.accounts.provider.unbonding = Unbonding::default();
    let market = &mut ctx.accounts.market;
    market.totals.staked = checked::sub(market.totals.staked, unbonding.amount)?;
    ctx.accounts.stake_vault.reload()?;
    ctx.accounts.market.invariant(ctx.accounts.stake_vault.amount)?;
    emit_event(StakeWithdrawn { provider: ctx.accounts.provider.key(), amount: unbonding.amount });
    Ok(())
}
