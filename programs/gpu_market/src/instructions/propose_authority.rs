use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, AuthorityProposed};
use crate::state::Market;

/// Step one of a two-step authority transfer: the current authority names its successor
/// (`Pubkey::default()` cancels). Nothing changes until the successor accepts.
#[derive(Accounts)]
pub struct ProposeAuthority<'info> {
    pub authority: Signer<'info>,
    #[account(mut, has_one = authority @ GpuMarketError::NotMarketAuthority)]
    pub market: Box<Account<'info, Market>>,
}

pub fn handler(ctx: Context<ProposeAuthority>, new_authority: Pubkey) -> Result<()> {
    let market = &mut ctx.accounts.market;
    market.pending_authority = new_authority;
    emit_event(AuthorityProposed { market: market.key(), current: market.authority, proposed: new_authority });
    Ok(())
}
