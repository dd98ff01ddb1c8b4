use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, PausedSet};
use crate::state::Market;

/// Pauses or resumes new business (registrations, new jobs). A pause never blocks settlement,
/// refunds, unstaking, exits or withdrawals. Can only be signed by the market authority.
#[derive(Accounts)]
pub struct SetPaused<'info> {
    pub authority: Signer<'info>,
    #[account(mut, has_one = authority @ GpuMarketError::NotMarketAuthority)]
    pub market: Box<Account<'info, Market>>,
}

pub fn handler(ctx: Context<SetPaused>, paused: bool) -> Result<()> {
    let market = &mut ctx.accounts.market;
    market.paused = paused;
    emit_event(PausedSet { market: market.key(), paused });
    Ok(())
}
