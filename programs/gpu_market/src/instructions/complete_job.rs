use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobCompleted};
use crate::instructions::end_job_accounts::EndJob;
use crate::state::JobStatus;

/// Anyone completes a Finishing job whose grace is over (`now > ended_at + grace_seconds`):
/// Completed, GPUs freed, no tokens move. A user who finishes a job and never closes it cannot
/// keep the provider's GPUs and stake booked.
pub fn handler(ctx: Context<EndJob>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let accounts = ctx.accounts;
    require!(accounts.job.status == JobStatus::Finishing, GpuMarketError::InvalidJobStatus);
    require!(accounts.job.settlement_over(now)?, GpuMarketError::GracePeriodActive);
    accounts.job.end(&mut accounts.provider, JobStatus::Completed, now)?;
    accounts.provider.invariant()?;
    emit_event(JobCompleted {
        job: accounts.job.key(),
        by: accounts.signer.key(),
        paid_seconds: accounts.job.paid_seconds,
    });
    Ok(())
}
