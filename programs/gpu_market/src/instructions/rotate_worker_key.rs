use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, WorkerKeyRotated};
use crate::state::{Market, Provider};

/// Replaces the worker key now. Receipts the previous key signed for windows that ended by now
/// stay settleable for `window_seconds * max_missed_windows` (they may still be in a
/// validator's queue); it signs nothing after now. Can only be signed by the provider's owner.
#[derive(Accounts)]
pub struct RotateWorkerKey<'info> {
    pub owner: Signer<'info>,
    pub market: Box<Account<'info, Market>>,
    #[account(
        mut,
        has_one = owner @ GpuMarketError::NotProviderSigner,
        has_one = market @ GpuMarketError::ProviderMarketMismatch,
    )]
    pub provider: Box<Account<'info, Provider>>,
}

pub fn handler(ctx: Context<RotateWorkerKey>, new_worker_key: Pubkey, expires_at: i64) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let params = ctx.accounts.market.params;
    let provider = &mut ctx.accounts.provider;
    require!(
        new_worker_key != Pubkey::default() && new_worker_key != provider.worker_key,
        GpuMarketError::InvalidWorkerKey
    );
    require!(expires_at == 0 || expires_at > now, GpuMarketError::InvalidWorkerKey);
    let grace = now
        .checked_add(params.key_rotation_grace_seconds())
        .ok_or(GpuMarketError::MathOverflow)?;
    provider.previous_worker_key = provider.worker_key;
    provider.previous_key_retired_at = now;
    provider.worker_key = new_worker_key;
    provider.worker_key_expires_at = expires_at;
    emit_event(WorkerKeyRotated {
        provider: provider.key(),
        previous: provider.previous_worker_key,
        current: new_worker_key,
        expires_at,
        previous_valid_until: grace,
    });
    Ok(())
}
