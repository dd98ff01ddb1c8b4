use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobCancelled, JobCompleted, JobDeclined, JobExpired};
use crate::ops;
use crate::seeds;
use crate::state::{Job, JobStatus, Market, Provider};

/// Accounts to cancel an Open job with a refund of its whole escrow to the user.
#[derive(Accounts)]
pub struct RefundJob<'info> {
    /// The job's user.
    pub signer: Signer<'info>,
    pub market: Box<Account<'info, Market>>,
    #[account(mut, has_one = market @ GpuMarketError::ProviderMarketMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(
        mut,
        has_one = market @ GpuMarketError::JobMarketMismatch,
        has_one = provider @ GpuMarketError::JobProviderMismatch,
    )]
    pub job: Box<Account<'info, Job>>,
    #[account(mut, seeds = [seeds::ESCROW, job.key().as_ref()], bump = job.escrow_bump)]
    pub escrow: Box<Account<'info, TokenAccount>>,
    #[account(address = market.payment_mint @ GpuMarketError::InvalidMint)]
    pub payment_mint: Box<Account<'info, Mint>>,
    #[account(
        mut,
        constraint = user_payment_account.owner == job.user @ GpuMarketError::NotJobUser,
        constraint = user_payment_account.mint == market.payment_mint @ GpuMarketError::InvalidMint,
    )]
    pub user_payment_account: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

/// The user withdraws an Open job before the provider accepts it: the whole escrow (donations
/// included) back to the user, GPUs freed, Cancelled (then `close_job` at once). Allowed while
/// paused. Can only be signed by the user.
pub fn cancel(ctx: Context<RefundJob>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let accounts = ctx.accounts;
    require_keys_eq!(accounts.signer.key(), accounts.job.user, GpuMarketError::NotJobUser);
    require!(accounts.job.status == JobStatus::Open, GpuMarketError::InvalidJobStatus);
    let job_info = accounts.job.to_account_info();
    let refund = ops::refund_escrow(
        &accounts.token_program,
        &mut accounts.escrow,
        &accounts.payment_mint,
        accounts.user_payment_account.to_account_info(),
        &mut accounts.job,
        job_info,
    )?;
    ops::end_job(&mut accounts.job, &mut accounts.provider, JobStatus::Cancelled, now)?;
    accounts.provider.invariant()?;
    emit_event(JobCancelled {
        job: accounts.job.key(),
        refunded: refund.booked,
        surplus_returned: refund.surplus,
    });
    Ok(())
}

/// Accounts to end a job without moving tokens: only the job and its provider's GPU count
/// change, so no account of the user (closed or frozen, say) can stop a job from ending. The
/// user's `close_job` refunds the escrow afterwards.
#[derive(Accounts)]
pub struct EndJob<'info> {
    pub signer: Signer<'info>,
    #[account(mut)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(mut, has_one = provider @ GpuMarketError::JobProviderMismatch)]
    pub job: Box<Account<'info, Job>>,
}

/// Anyone ends a Running job whose provider stopped proving: allowed once `last_window_end` is
/// more than `max_missed_windows` windows plus the job's grace in the past (strictly). No
/// tokens move and no stake is slashed (that takes a validator quorum, `slash_downtime`); the
/// job is Failed, counted against the provider's reputation, and the user's `close_job`
/// refunds the escrow at once.
pub fn expire(ctx: Context<EndJob>) -> Result<()> {
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
    ops::end_job(&mut accounts.job, &mut accounts.provider, JobStatus::Failed, now)?;
    let reputation = &mut accounts.provider.reputation;
    reputation.windows_missed = ops::add(reputation.windows_missed, missed)?;
    accounts.provider.invariant()?;
    emit_event(JobExpired {
        job: accounts.job.key(),
        by: accounts.signer.key(),
        last_window_end: accounts.job.last_window_end,
        missed_windows: missed,
    });
    Ok(())
}

/// The provider refuses an Open job: Open -> Declined, GPUs freed, no tokens move; the user's
/// `close_job` refunds the whole deposit at once. Allowed while paused. Can only be signed by
/// the provider's owner or its current (unexpired) worker key.
pub fn decline(ctx: Context<EndJob>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let accounts = ctx.accounts;
    let signer = accounts.signer.key();
    let provider = &accounts.provider;
    require!(
        signer == provider.owner || provider.current_key_valid_at(&signer, now),
        GpuMarketError::NotProviderSigner
    );
    require!(accounts.job.status == JobStatus::Open, GpuMarketError::InvalidJobStatus);
    ops::end_job(&mut accounts.job, &mut accounts.provider, JobStatus::Declined, now)?;
    accounts.provider.invariant()?;
    emit_event(JobDeclined { job: accounts.job.key(), provider: accounts.provider.key(), by: signer });
    Ok(())
}

/// Anyone completes a Finishing job whose grace is over (`now > ended_at + grace_seconds`):
/// Completed, GPUs freed, no tokens move. A user who finishes a job and never closes it cannot
/// keep the provider's GPUs and stake booked.
pub fn complete(ctx: Context<EndJob>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let accounts = ctx.accounts;
    require!(accounts.job.status == JobStatus::Finishing, GpuMarketError::InvalidJobStatus);
    require!(accounts.job.settlement_over(now)?, GpuMarketError::GracePeriodActive);
    ops::end_job(&mut accounts.job, &mut accounts.provider, JobStatus::Completed, now)?;
    accounts.provider.invariant()?;
    emit_event(JobCompleted {
        job: accounts.job.key(),
        by: accounts.signer.key(),
        paid_seconds: accounts.job.paid_seconds,
    });
    Ok(())
}
