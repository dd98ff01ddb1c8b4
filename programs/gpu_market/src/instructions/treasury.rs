use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, FeesWithdrawn, TreasurySet, VaultSwept};
use crate::ops::{self, MarketSigner};
use crate::state::Market;

/// Replaces the treasury token account that receives the unburned fee share, at once (a closed
/// or frozen treasury would otherwise block every settle). The new account must be an
/// initialized, unfrozen account of the payment mint. Fees only: it moves no escrow or stake.
/// Can only be signed by the market authority.
#[derive(Accounts)]
pub struct SetTreasury<'info> {
    pub authority: Signer<'info>,
    #[account(mut, has_one = authority @ GpuMarketError::NotMarketAuthority)]
    pub market: Box<Account<'info, Market>>,
    #[account(
        constraint = treasury.mint == market.payment_mint @ GpuMarketError::InvalidTreasury,
        constraint = !treasury.is_frozen() @ GpuMarketError::TreasuryNotUsable,
    )]
    pub treasury: Box<Account<'info, TokenAccount>>,
}

pub fn set_treasury(ctx: Context<SetTreasury>) -> Result<()> {
    let market = &mut ctx.accounts.market;
    let previous = market.treasury;
    market.treasury = ctx.accounts.treasury.key();
    emit_event(TreasurySet { market: market.key(), previous, treasury: market.treasury });
    Ok(())
}

/// Permissionless: moves the stake vault's surplus (its balance above the booked stake and
/// bonds, i.e. tokens someone sent straight to it) to a stake-mint account owned by the owner
/// of the market's treasury account. Booked stake never moves here.
#[derive(Accounts)]
pub struct SweepVault<'info> {
    pub market: Box<Account<'info, Market>>,
    #[account(address = market.stake_mint @ GpuMarketError::InvalidMint)]
    pub stake_mint: Box<Account<'info, Mint>>,
    #[account(mut, address = market.stake_vault @ GpuMarketError::InvalidStakeVault)]
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

pub fn sweep_vault(ctx: Context<SweepVault>) -> Result<()> {
    let booked = ctx.accounts.market.booked_stake()?;
    let surplus = ctx
        .accounts
        .stake_vault
        .amount
        .checked_sub(booked)
        .ok_or(GpuMarketError::InvariantViolated)?;
    require!(surplus > 0, GpuMarketError::NothingToSweep);
    let signer = MarketSigner::of(&ctx.accounts.market);
    ops::transfer_signed(
        &ctx.accounts.token_program,
        &ctx.accounts.stake_vault,
        &ctx.accounts.stake_mint,
        ctx.accounts.destination.to_account_info(),
        ctx.accounts.market.to_account_info(),
        &signer.seeds(),
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

/// Permissionless: moves the market's fee vault balance above the validators' unclaimed rewards
/// (the treasury share of every settlement, and any donation) to the market's treasury account. Settlement never depends
/// on the treasury account: if it is closed or frozen, only this waits for `set_treasury`.
#[derive(Accounts)]
pub struct WithdrawFees<'info> {
    pub market: Box<Account<'info, Market>>,
    #[account(address = market.payment_mint @ GpuMarketError::InvalidMint)]
    pub payment_mint: Box<Account<'info, Mint>>,
    #[account(mut, address = market.fee_vault @ GpuMarketError::InvalidFeeVault)]
    pub fee_vault: Box<Account<'info, TokenAccount>>,
    #[account(mut, address = market.treasury @ GpuMarketError::InvalidTreasury)]
    pub treasury: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

pub fn withdraw_fees(ctx: Context<WithdrawFees>) -> Result<()> {
    let amount = ctx
        .accounts
        .fee_vault
        .amount
        .checked_sub(ctx.accounts.market.totals.rewards_unclaimed)
        .ok_or(GpuMarketError::InvariantViolated)?;
    require!(amount > 0, GpuMarketError::NothingToWithdrawFees);
    let signer = MarketSigner::of(&ctx.accounts.market);
    ops::transfer_signed(
        &ctx.accounts.token_program,
        &ctx.accounts.fee_vault,
        &ctx.accounts.payment_mint,
        ctx.accounts.treasury.to_account_info(),
        ctx.accounts.market.to_account_info(),
        &signer.seeds(),
        amount,
    )?;
    emit_event(FeesWithdrawn {
        market: ctx.accounts.market.key(),
        treasury: ctx.accounts.treasury.key(),
        amount,
    });
    Ok(())
}
