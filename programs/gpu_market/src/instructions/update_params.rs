use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, ParamsUpdated};
use crate::state::{Market, MarketParams};

/// Replaces the market parameters after checking every bound. Can only be signed by the market
/// authority. Jobs keep their locked rate; fee and timing changes apply from the next
/// instruction on.
#[derive(Accounts)]
pub struct UpdateParams<'info> {
    pub authority: Signer<'info>,
    #[account(mut, has_one = authority @ GpuMarketError::NotMarketAuthority)]
    pub market: Box<Account<'info, Market>>,
}

pub fn handler(ctx: Context<UpdateParams>, params: MarketParams) -> Result<()> {
    params.validate()?;
    let market = &mut ctx.accounts.market;
    let old = market.params;
    market.params = params;
    emit_event(ParamsUpdated { market: market.key(), old, new: params });
    Ok(())
}
