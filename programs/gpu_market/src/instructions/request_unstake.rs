use anchor_lang::prelude::*;

use crate::checked;
use crate::errors::GpuMarketError;
use crate::events::{emit_event, UnstakeRequested};
use crate::state::{Market, Provider, Unbonding};

/// Moves `amount` of active stake into unbonding, released after `unbonding_seconds` (the
/// release time restarts for the whole unbonding amount). The remaining stake must still cover
/// `min_stake_per_gpu * gpus_in_use`; unbonding stake stays slashable. Allowed while paused.
/// Can only be signed by the provider's owner.
#[derive(Accounts)]
pub struct RequestUnstake<'info> {
    pub owner: Signer<'info>,
    pub market: Box<Account<'info, Market>>,
    #[account(
        mut,
        has_one = owner @ GpuMarketError::NotProviderSigner,
        has_one = market @ GpuMarketError::ProviderMarketMismatch,
    )]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::PROVIDER, market.key().as_ref(), owner.key().as_ref()],
        bump = provider.bump,
    ))]
    pub provider: Box<Account<'info, Provider>>,
}

pub fn handler(ctx: Context<RequestUnstake>, amount: u64) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let params = ctx.accounts.market.params_at(now);
    let provider = &mut ctx.accounts.provider;
    require!(amount > 0, GpuMarketError::ZeroAmount);
    require!(amount <= provider.stake, GpuMarketError::UnstakeExceedsStake);
    let remaining = checked::sub(provider.stake, amount)?;
    require!(
        remaining >= Provider::required_stake(params.min_stake_per_gpu, provider.gpus_in_use)?,
        GpuMarketError::InsufficientStake
    );
    let release_at = now
        .checked_add(params.unbonding_seconds)
        .ok_or(GpuMarketError::MathOverflow)?;
    provider.stake = remaining;
    provider.unbonding = Unbonding {
        amount: checked::add(provider.unbonding.amount, amount)?,
        release_at,
    };
    emit_event(UnstakeRequested {
        provider: provider.key(),
        amount,
        stake: provider.stake,
        unbonding: provider.unbonding.amount,
        release_at,
    });
    Ok(())
}
