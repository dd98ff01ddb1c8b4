use anchor_lang::prelude::*;

use crate::checked;
use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobExpired};
use crate::instructions::end_job_accounts::EndJob;
use crate::state::JobStatus;

/// Anyone ends a Running job whose provider stopped proving: allowed once `last_window_end` is
/// more than `max_missed_windows` windows plus the job's grace in the past (strictly). No
/// tokens move and no stake is slashed (that takes a validator quorum, `slash_downtime`); the
/// job is Failed, counted against the provider's reputation, and the user's `close_job`
/// refunds the escrow at once.
pub fn handler(ctx: Context<EndJob>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let accounts = ctx.accounts;
    let job = &accounts.job;
    require!(job.status == JobStatus::Running, GpuMarketError::InvalidJobStatus);
    let terms = job.terms;
    let deadline = terms
        .missed_windows_seconds()
        .checked_add(terms.grace_seconds)
        .and_then(|d| d.checked_add(job.last_window_end))
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(now > deadline, GpuMarketError::JobNotExpired);
    let missed = now
        .checked_sub(job.last_window_end)
        .and_then(|idle| idle.checked_div(i64::from(terms.window_seconds)))
        .and_then(|m| u64::try_from(m).ok())
        .ok_or(GpuMarketError::MathOverflow)?;
    accounts.job.end(&mut accounts.provider, JobStatus::Failed, now)?;
    let reputation = &mut accounts.provider.reputation;
    reputation.windows_missed = checked::add(reputation.windows_missed, missed)?;
    accounts.provider.invariant()?;
    emit_event(JobExpired {
        job: accounts.job.key(),
        by: accounts.signer.key(),
        last_window_end: accounts.job.last_window_end,
        missed_windows: missed,
    });
    Ok(())
}
