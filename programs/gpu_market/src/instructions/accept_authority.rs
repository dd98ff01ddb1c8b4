use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, AuthorityAccepted};
use crate::state::Market;

/// Step two: can only be signed by the proposed authority, which then becomes the authority.
#[derive(Accounts)]
pub struct AcceptAuthority<'info> {
    pub new_authority: Signer<'info>,
    #[account(
        mut,
        constraint = market.pending_authority != Pubkey::default()
            && market.pending_authority == new_authority.key() @ GpuMarketError::NotPendingAuthority,
    )]
    pub market: Box<Account<'info, Market>>,
}

pub fn handler(ctx: Context<AcceptAuthority>) -> Result<()> {
    let market = &mut ctx.accounts.market;
    let previous = market.authority;
    market.authority = market.pending_authority;
    market.pending_authority = Pubkey::default();
    emit_event(AuthorityAccepted { market: market.key(), previous, authority: market.authority });
    Ok(())
}
