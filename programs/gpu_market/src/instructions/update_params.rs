use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, ParamsAnnounced};
use crate::state::{Market, MarketParams, MIN_PARAMS_DELAY_SECONDS};

/// Announces new market parameters after checking every bound. They come into force
/// `max(unbonding_seconds, MIN_PARAMS_DELAY_SECONDS)` (of the parameters in force now) after the
/// announcement: every provider and validator who disagrees can unbond and leave before a change
/// touches its stake, and every user sees the change before it applies (a `create_job` signed
/// for other parameters fails with `MarketParamsChanged`). The minimum delay does not depend on
/// `unbonding_seconds`, so no parameter ever applies at once. A new announcement replaces a
/// pending one whose time has not come. Jobs already created keep their terms whatever changes.
/// Can only be signed by the market authority.
#[derive(Accounts)]
pub struct UpdateParams<'info> {
    pub authority: Signer<'info>,
    #[account(mut, has_one = authority @ GpuMarketError::NotMarketAuthority)]
    pub market: Box<Account<'info, Market>>,
}

pub fn handler(ctx: Context<UpdateParams>, params: MarketParams) -> Result<()> {
    params.validate()?;
    let now = Clock::get()?.unix_timestamp;
    let market = &mut ctx.accounts.market;
    market.promote_params(now);
    let delay = market.params.unbonding_seconds.max(MIN_PARAMS_DELAY_SECONDS);
    let effective_at = now.checked_add(delay).ok_or(GpuMarketError::MathOverflow)?;
    market.pending_params = params;
    market.params_effective_at = effective_at;
    emit_event(ParamsAnnounced {
        market: market.key(),
        current: market.params,
        pending: params,
        effective_at,
    });
    Ok(())
}
