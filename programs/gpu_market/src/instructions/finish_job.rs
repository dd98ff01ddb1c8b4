use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobFinished};
use crate::state::{Job, JobStatus, Provider};

/// Stops billing of a Running job at `now` (Running -> Finishing). A final receipt with
/// `window_end <= ended_at` may still settle during the grace of two windows. Can only be signed
/// by the job's user or the provider's owner.
#[derive(Accounts)]
pub struct FinishJob<'info> {
    #[account(
        constraint = signer.key() == job.user || signer.key() == provider.owner
            @ GpuMarketError::NotJobParty,
    )]
    pub signer: Signer<'info>,
    pub provider: Box<Account<'info, Provider>>,
    #[account(mut, has_one = provider @ GpuMarketError::JobProviderMismatch)]
    pub job: Box<Account<'info, Job>>,
}

pub fn handler(ctx: Context<FinishJob>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let job = &mut ctx.accounts.job;
    require!(job.status == JobStatus::Running, GpuMarketError::InvalidJobStatus);
    job.status = JobStatus::Finishing;
    job.ended_at = now;
    emit_event(JobFinished {
        job: job.key(),
        by: ctx.accounts.signer.key(),
        ended_at: now,
    });
    Ok(())
}
