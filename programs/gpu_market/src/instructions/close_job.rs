use anchor_lang::prelude::*;
use anchor_spl::token::{self, CloseAccount, Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobClosed};
use crate::ops::{self, JobSigner};
use crate::seeds;
use crate::state::{Job, JobStatus, Market, Provider};

/// Ends a job for good: refunds everything left in escrow to the user (donations included),
/// closes the escrow and the job, and returns their rent to the user. Can only be signed by the
/// job's user, and only once no settlement is possible any more: the job is Completed,
/// Cancelled, Declined or Failed, or Finishing past its grace (`terms.grace_seconds` after
/// `ended_at`), so seconds the worker signed before the end are never refunded from under the
/// provider. A Finishing job becomes Completed and frees its GPUs.
#[derive(Accounts)]
pub struct CloseJob<'info> {
    #[account(mut)]
    pub user: Signer<'info>,
    pub market: Box<Account<'info, Market>>,
    #[account(mut, has_one = market @ GpuMarketError::ProviderMarketMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(
        mut,
        close = user,
        has_one = user @ GpuMarketError::NotJobUser,
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
        constraint = user_payment_account.owner == user.key() @ GpuMarketError::NotJobUser,
        constraint = user_payment_account.mint == market.payment_mint @ GpuMarketError::InvalidMint,
    )]
    pub user_payment_account: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

pub fn handler(ctx: Context<CloseJob>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let job = &mut ctx.accounts.job;
    require!(
        !matches!(job.status, JobStatus::Open | JobStatus::Running),
        GpuMarketError::InvalidJobStatus
    );
    require!(job.settlement_over(now)?, GpuMarketError::GracePeriodActive);
    if job.status == JobStatus::Finishing {
        let provider = &mut ctx.accounts.provider;
        ops::end_job(job, provider, JobStatus::Completed, now)?;
        provider.invariant()?;
    }

    let accounts = &mut *ctx.accounts;
    let refund = ops::refund_escrow(
        &accounts.token_program,
        &mut accounts.escrow,
        &accounts.payment_mint,
        accounts.user_payment_account.to_account_info(),
        &mut accounts.job,
    )?;
    let job_signer = JobSigner::of(&accounts.job);
    let signer: &[&[&[u8]]] = &[&job_signer.seeds()];
    token::close_account(CpiContext::new_with_signer(
        accounts.token_program.key(),
        CloseAccount {
            account: accounts.escrow.to_account_info(),
            destination: accounts.user.to_account_info(),
            authority: accounts.job.to_account_info(),
        },
        signer,
    ))?;
    let job = &accounts.job;
    require!(job.booked_escrow()? == 0, GpuMarketError::InvariantViolated);
    emit_event(JobClosed {
        job: job.key(),
        user: job.user,
        refunded: refund.booked,
        surplus_returned: refund.surplus,
        deposited: job.deposited,
        paid_provider: job.paid_provider,
        paid_treasury: job.paid_treasury,
        burned: job.burned,
    });
    Ok(())
}
