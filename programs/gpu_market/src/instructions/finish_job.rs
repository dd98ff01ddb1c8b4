use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobFinished};
use crate::state::{Job, JobStatus, Provider};

/// Stops billing of a Running job at `now` (Running -> Finishing). A final receipt with
/// `window_end <= ended_at` may still settle during the grace. Can only be signed by the job's
/// user, the provider's owner, or the provider's current worker key (unexpired): the worker
/// ends a `finish_on_exit` workload's billing when its container exits (docs/protocol.md,
/// "Workloads"). Finishing only ever stops billing early, so the worker key gains nothing by
/// misusing it.
#[derive(Accounts)]
pub struct FinishJob<'info> {
    #[account(
        constraint = signer.key() == job.user
            || signer.key() == provider.owner
            || provider.current_key_valid_at(&signer.key(), Clock::get()?.unix_timestamp)
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
