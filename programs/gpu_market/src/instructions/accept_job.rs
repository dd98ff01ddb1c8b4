use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobAccepted};
use crate::state::{Job, JobStatus, Provider, ProviderStatus};

/// The provider starts an Open job: Open -> Running, billing starts now. Can only be signed by the
/// provider's current (unexpired) worker key or its owner.
#[derive(Accounts)]
pub struct AcceptJob<'info> {
    pub signer: Signer<'info>,
    #[account(
        constraint = signer.key() == provider.owner || signer.key() == provider.worker_key
            @ GpuMarketError::NotProviderSigner,
    )]
    pub provider: Box<Account<'info, Provider>>,
    #[account(mut, has_one = provider @ GpuMarketError::JobProviderMismatch)]
    pub job: Box<Account<'info, Job>>,
}

pub fn handler(ctx: Context<AcceptJob>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let provider = &ctx.accounts.provider;
    require!(
        ctx.accounts.signer.key() == provider.owner || !provider.current_key_expired_at(now),
        GpuMarketError::WorkerKeyExpired
    );
    require!(
        ctx.accounts.provider.status == ProviderStatus::Active,
        GpuMarketError::ProviderNotActive
    );
    let job = &mut ctx.accounts.job;
    require!(job.status == JobStatus::Open, GpuMarketError::InvalidJobStatus);
    job.status = JobStatus::Running;
    job.started_at = now;
    job.last_window_end = now;
    emit_event(JobAccepted {
        job: job.key(),
        provider: job.provider,
        signer: ctx.accounts.signer.key(),
        started_at: now,
    });
    Ok(())
}
