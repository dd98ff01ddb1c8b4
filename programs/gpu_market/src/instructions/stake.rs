use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, Staked};
use crate::ops;
use crate::state::{Market, Provider};

/// Moves `amount` stake tokens from the owner into the market's stake vault and credits the
/// provider. Can only be signed by the provider's owner. Allowed while paused (it only adds
/// security).
#[derive(Accounts)]
pub struct Stake<'info> {
    pub owner: Signer<'info>,
    #[account(mut)]
    #[cfg_attr(feature = "idl-build", account(has_one = stake_mint))]
    pub market: Box<Account<'info, Market>>,
    #[account(
        mut,
        has_one = market @ GpuMarketError::ProviderMarketMismatch,
        has_one = owner @ GpuMarketError::NotProviderSigner,
    )]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::PROVIDER, market.key().as_ref(), owner.key().as_ref()],
        bump = provider.bump,
    ))]
    pub provider: Box<Account<'info, Provider>>,
    #[account(address = market.stake_mint @ GpuMarketError::InvalidMint)]
    pub stake_mint: Box<Account<'info, Mint>>,
    #[account(mut, constraint = owner_stake_account.mint == stake_mint.key() @ GpuMarketError::InvalidMint)]
    pub owner_stake_account: Box<Account<'info, TokenAccount>>,
    #[account(mut, address = market.stake_vault @ GpuMarketError::InvalidStakeVault)]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::STAKE_VAULT, market.key().as_ref()],
        bump = market.stake_vault_bump,
    ))]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

pub fn handler(ctx: Context<Stake>, amount: u64) -> Result<()> {
    require!(amount > 0, GpuMarketError::ZeroAmount);
    ops::transfer_in(
        &ctx.accounts.token_program,
        &ctx.accounts.owner_stake_account,
        &ctx.accounts.stake_mint,
        ctx.accounts.stake_vault.to_account_info(),
        ctx.accounts.owner.to_account_info(),
        amount,
    )?;
    let provider = &mut ctx.accounts.provider;
    provider.stake = provider
        .stake
        .checked_add(amount)
        .ok_or(GpuMarketError::MathOverflow)?;
    let market = &mut ctx.accounts.market;
    market.totals.staked = market
        .totals
        .staked
        .checked_add(amount)
        .ok_or(GpuMarketError::MathOverflow)?;
    ctx.accounts.stake_vault.reload()?;
    ctx.accounts.market.invariant(ctx.accounts.stake_vault.amount)?;
    emit_event(Staked {
        provider: ctx.accounts.provider.key(),
        amount,
        stake: ctx.accounts.provider.stake,
    });
    Ok(())
}
