use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, AuthorityAccepted, AuthorityProposed};
use crate::state::Market;

/// Step one of a two-step authority transfer: the current authority names its successor
/// (`Pubkey::default()` cancels). Nothing changes until the successor accepts.
#[derive(Accounts)]
pub struct ProposeAuthority<'info> {
    pub authority: Signer<'info>,
    #[account(mut, has_one = authority @ GpuMarketError::NotMarketAuthority)]
    pub market: Box<Account<'info, Market>>,
}

pub fn propose(ctx: Context<ProposeAuthority>, new_authority: Pubkey) -> Result<()> {
    let market = &mut ctx.accounts.market;
    market.pending_authority = new_authority;
    emit_event(AuthorityProposed { market: market.key(), current: market.authority, proposed: new_authority });
    Ok(())
}

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

pub fn accept(ctx: Context<AcceptAuthority>) -> Result<()> {
    let market = &mut ctx.accounts.market;
    let previous = market.authority;
    market.authority = market.pending_authority;
    market.pending_authority = Pubkey::default();
    emit_event(AuthorityAccepted { market: market.key(), previous, authority: market.authority });
    Ok(())
}
