use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobDeclined};
use crate::instructions::end_job_accounts::EndJob;
use crate::state::JobStatus;

/// The provider refuses an Open job: Open -> Declined, GPUs freed, no tokens move; the user's
/// `close_job` refunds the whole deposit at once. Allowed while paused. Can only be signed by
/// the provider's owner or its current (unexpired) worker key.
pub fn handler(ctx: Context<EndJob>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let accounts = ctx.accounts;
    let signer = accounts.signer.key();
    let provider = &accounts.provider;
    require!(
        signer == provider.owner || provider.current_key_valid_at(&signer, now),
        GpuMarketError::NotProviderSigner
    );
    require!(accounts.job.status == JobStatus::Open, GpuMarketError::InvalidJobStatus);
    accounts.job.end(&mut accounts.provider, JobStatus::Declined, now)?;
    accounts.provider.invariant()?;
    emit_event(JobDeclined { job: accounts.job.key(), provider: accounts.provider.key(), by: signer });
    Ok(())
}
