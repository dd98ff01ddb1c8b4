use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobCancelled, JobExpired};
use crate::ops::{self, JobSigner};
use crate::seeds;
use crate::state::{Job, JobStatus, Market, Provider};

/// Accounts to end a job with a refund of its whole escrow to the user's payment account.
#[derive(Accounts)]
pub struct RefundJob<'info> {
    /// `cancel_job`: the job's user. `expire_job`: anyone.
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

/// Pays the whole escrow back to the user and books it. Returns the refund.
fn refund_all(accounts: &mut RefundJob) -> Result<u64> {
    let amount = accounts.escrow.amount;
    let signer = JobSigner::of(&accounts.job);
    ops::transfer_signed(
        &accounts.token_program,
        &accounts.escrow,
        &accounts.payment_mint,
        accounts.user_payment_account.to_account_info(),
        accounts.job.to_account_info(),
        &signer.seeds(),
        amount,
    )?;
    accounts.job.refunded = ops::add(accounts.job.refunded, amount)?;
    accounts.escrow.reload()?;
    accounts.job.invariant(accounts.escrow.amount)?;
    Ok(amount)
}

/// The user withdraws an Open job before the provider accepts it: full refund, GPUs freed,
/// Cancelled (then `close_job` at once). Allowed while paused. Can only be signed by the user.
pub fn cancel(ctx: Context<RefundJob>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let accounts = ctx.accounts;
    require_keys_eq!(accounts.signer.key(), accounts.job.user, GpuMarketError::NotJobUser);
    require!(accounts.job.status == JobStatus::Open, GpuMarketError::InvalidJobStatus);
    let refunded = refund_all(accounts)?;
    ops::end_job(&mut accounts.job, &mut accounts.provider, JobStatus::Cancelled, now)?;
    accounts.provider.invariant()?;
    emit_event(JobCancelled { job: accounts.job.key(), refunded });
    Ok(())
}

/// Anyone ends a Running job whose provider stopped proving: allowed once `last_window_end` is
/// more than `max_missed_windows` windows plus the 2-window grace in the past (strictly). The
/// rest of the escrow goes back to the user; no slash (that takes a validator quorum,
/// `slash_downtime`). The job is Failed and counted against the provider's reputation.
pub fn expire(ctx: Context<RefundJob>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let params = ctx.accounts.market.params;
    let accounts = ctx.accounts;
    require!(accounts.job.status == JobStatus::Running, GpuMarketError::InvalidJobStatus);
    let window = i64::from(params.window_seconds);
    let deadline = window
        .checked_mul(i64::from(params.max_missed_windows))
        .and_then(|d| d.checked_add(params.grace_seconds()))
        .and_then(|d| d.checked_add(accounts.job.last_window_end))
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(now > deadline, GpuMarketError::JobNotExpired);
    let missed = now
        .checked_sub(accounts.job.last_window_end)
        .and_then(|idle| idle.checked_div(window))
        .and_then(|m| u64::try_from(m).ok())
        .ok_or(GpuMarketError::MathOverflow)?;
    let refunded = refund_all(accounts)?;
    ops::end_job(&mut accounts.job, &mut accounts.provider, JobStatus::Failed, now)?;
    let reputation = &mut accounts.provider.reputation;
    reputation.jobs_failed = ops::add(reputation.jobs_failed, 1)?;
    reputation.windows_missed = ops::add(reputation.windows_missed, missed)?;
    accounts.provider.invariant()?;
    emit_event(JobExpired {
        job: accounts.job.key(),
        by: accounts.signer.key(),
        last_window_end: accounts.job.last_window_end,
        missed_windows: missed,
        refunded,
    });
    Ok(())
}
