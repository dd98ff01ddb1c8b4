use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, VaultSwept};
use crate::ops;
use crate::state::Market;

/// Permissionless: moves the stake vault's surplus (its balance above the booked stake and
/// bonds, i.e. tokens someone sent straight to it) to a stake-mint account owned by the owner
/// of the market's treasury account. Booked stake never moves here.
#[derive(Accounts)]
pub struct SweepVault<'info> {
    #[cfg_attr(feature = "idl-build", account(has_one = stake_mint, has_one = treasury))]
    pub market: Box<Account<'info, Market>>,
    #[account(address = market.stake_mint @ GpuMarketError::InvalidMint)]
    pub stake_mint: Box<Account<'info, Mint>>,
    #[account(mut, address = market.stake_vault @ GpuMarketError::InvalidStakeVault)]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::STAKE_VAULT, market.key().as_ref()],
        bump = market.stake_vault_bump,
    ))]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    #[account(address = market.treasury @ GpuMarketError::InvalidTreasury)]
    pub treasury: Box<Account<'info, TokenAccount>>,
    #[account(
        mut,
        constraint = destination.mint == market.stake_mint @ GpuMarketError::InvalidSweepDestination,
        constraint = destination.owner == treasury.owner @ GpuMarketError::InvalidSweepDestination,
    )]
    pub destination: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

pub fn handler(ctx: Context<SweepVault>) -> Result<()> {
    let booked = ctx.accounts.market.booked_stake()?;
    let surplus = ctx
        .accounts
        .stake_vault
        .amount
        .checked_sub(booked)
        .ok_or(GpuMarketError::InvariantViolated)?;
    require!(surplus > 0, GpuMarketError::NothingToSweep);
    ops::transfer_from_market(
        &ctx.accounts.token_program,
        &ctx.accounts.stake_vault,
        &ctx.accounts.stake_mint,
        ctx.accounts.destination.to_account_info(),
        &ctx.accounts.market,
        surplus,
    )?;
    ctx.accounts.stake_vault.reload()?;
    ctx.accounts.market.invariant(ctx.accounts.stake_vault.amount)?;
    emit_event(VaultSwept {
        market: ctx.accounts.market.key(),
        amount: surplus,
        destination: ctx.accounts.destination.key(),
    });
    Ok(())
}
