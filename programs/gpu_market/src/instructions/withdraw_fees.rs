use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, FeesWithdrawn};
use crate::ops;
use crate::state::Market;

/// Permissionless: moves the market's fee vault balance above the validators' unclaimed rewards
/// (the treasury share of every settlement, and any donation) to the market's treasury account. Settlement never depends
/// on the treasury account: if it is closed or frozen, only this waits for `set_treasury`.
#[derive(Accounts)]
pub struct WithdrawFees<'info> {
    #[cfg_attr(feature = "idl-build", account(has_one = payment_mint, has_one = treasury))]
    pub market: Box<Account<'info, Market>>,
    #[account(address = market.payment_mint @ GpuMarketError::InvalidMint)]
    pub payment_mint: Box<Account<'info, Mint>>,
    #[account(mut, address = market.fee_vault @ GpuMarketError::InvalidFeeVault)]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::FEE_VAULT, market.key().as_ref()],
        bump = market.fee_vault_bump,
    ))]
    pub fee_vault: Box<Account<'info, TokenAccount>>,
    #[account(mut, address = market.treasury @ GpuMarketError::InvalidTreasury)]
    pub treasury: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

pub fn handler(ctx: Context<WithdrawFees>) -> Result<()> {
    let amount = ctx
        .accounts
        .fee_vault
        .amount
        .checked_sub(ctx.accounts.market.totals.rewards_unclaimed)
        .ok_or(GpuMarketError::InvariantViolated)?;
    require!(amount > 0, GpuMarketError::NothingToWithdrawFees);
    ops::transfer_from_market(
        &ctx.accounts.token_program,
        &ctx.accounts.fee_vault,
        &ctx.accounts.payment_mint,
        ctx.accounts.treasury.to_account_info(),
        &ctx.accounts.market,
        amount,
    )?;
    emit_event(FeesWithdrawn {
        market: ctx.accounts.market.key(),
        treasury: ctx.accounts.treasury.key(),
        amount,
    });
    Ok(())
}
