use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, WorkerKeyRotated};
use crate::state::{Market, Provider};

/// Replaces the worker key now. The replaced key joins the provider's retired keys: receipts it
/// signed for windows that ended by now stay settleable for `window_seconds *
/// max_missed_windows` of the job's terms (they may still sit in a validator's queue), and stay
/// evidence for `slash_equivocation`; it signs nothing after now. At most `RETIRED_KEYS`
/// retired keys are kept, and one is dropped only once it retired `unbonding_seconds` ago
/// (`RotationTooSoon` otherwise), so rotating cannot erase evidence. The hardware verdict was
/// about the machine holding the old key: `hardware.verified` is cleared until a challenge of
/// the new key passes. Can only be signed by the provider's owner.
#[derive(Accounts)]
pub struct RotateWorkerKey<'info> {
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

pub fn handler(ctx: Context<RotateWorkerKey>, new_worker_key: Pubkey, expires_at: i64) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let params = ctx.accounts.market.params_at(now);
    let provider = &mut ctx.accounts.provider;
    require!(
        new_worker_key != Pubkey::default() && new_worker_key != provider.worker_key,
        GpuMarketError::InvalidWorkerKey
    );
    require!(expires_at == 0 || expires_at > now, GpuMarketError::InvalidWorkerKey);
    let previous = provider.worker_key;
    provider.rotate_key(new_worker_key, expires_at, now, params.unbonding_seconds)?;
    provider.clear_verified();
    emit_event(WorkerKeyRotated {
        provider: provider.key(),
        previous,
        current: new_worker_key,
        expires_at,
        retired_at: now,
    });
    Ok(())
}
