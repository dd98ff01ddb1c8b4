use anchor_lang::prelude::*;
use anchor_spl::token::TokenAccount;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, TreasurySet};
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

pub fn handler(ctx: Context<SetTreasury>) -> Result<()> {
    let market = &mut ctx.accounts.market;
    let previous = market.treasury;
    market.treasury = ctx.accounts.treasury.key();
    emit_event(TreasurySet { market: market.key(), previous, treasury: market.treasury });
    Ok(())
}
