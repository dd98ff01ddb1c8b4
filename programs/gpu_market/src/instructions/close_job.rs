use anchor_lang::prelude::*;
use anchor_spl::token::{self, CloseAccount, Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobClosed};
use crate::ops::{self, JobSigner};
use crate::seeds;
use crate::state::{Job, JobStatus, Market, Provider};

/// Ends a job for good: refunds everything left in escrow to the user, closes the escrow and the
/// job, and returns their rent to the user. Can only be signed by the job's user, once the job is
/// Cancelled or Failed, or Finishing/Completed and its settlement grace (two windows after
/// `ended_at`) has passed. A Finishing job becomes Completed and frees its GPUs.
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
    let grace = ctx.accounts.market.params.grace_seconds();
    let job = &mut ctx.accounts.job;
    match job.status {
        JobStatus::Finishing | JobStatus::Completed => {
            let grace_end = job
                .ended_at
                .checked_add(grace)
                .ok_or(GpuMarketError::MathOverflow)?;
            require!(now > grace_end, GpuMarketError::GracePeriodActive);
        }
        JobStatus::Cancelled | JobStatus::Failed => {}
        JobStatus::Open | JobStatus::Running => return err!(GpuMarketError::InvalidJobStatus),
    }
    if job.status == JobStatus::Finishing {
        let provider = &mut ctx.accounts.provider;
        ops::end_job(job, provider, JobStatus::Completed, now)?;
        provider.reputation.jobs_completed = ops::add(provider.reputation.jobs_completed, 1)?;
        provider.invariant()?;
    }

    let refund = ctx.accounts.escrow.amount;
    let job_signer = JobSigner::of(&ctx.accounts.job);
    let signer: &[&[&[u8]]] = &[&job_signer.seeds()];
    ops::transfer_signed(
        &ctx.accounts.token_program,
        &ctx.accounts.escrow,
        &ctx.accounts.payment_mint,
        ctx.accounts.user_payment_account.to_account_info(),
        ctx.accounts.job.to_account_info(),
        &job_signer.seeds(),
        refund,
    )?;
    token::close_account(CpiContext::new_with_signer(
        ctx.accounts.token_program.key(),
        CloseAccount {
            account: ctx.accounts.escrow.to_account_info(),
            destination: ctx.accounts.user.to_account_info(),
            authority: ctx.accounts.job.to_account_info(),
        },
        signer,
    ))?;
    let job = &mut ctx.accounts.job;
    job.refunded = ops::add(job.refunded, refund)?;
    job.invariant(0)?;
    emit_event(JobClosed {
        job: job.key(),
        user: job.user,
        refunded: refund,
        deposited: job.deposited,
        paid_provider: job.paid_provider,
        paid_treasury: job.paid_treasury,
        burned: job.burned,
    });
    Ok(())
}
