use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobCancelled};
use crate::ops;
use crate::seeds;
use crate::state::{Job, JobStatus, Market, Provider};

/// Accounts to cancel an Open job with a refund of its whole escrow to the user.
#[derive(Accounts)]
pub struct RefundJob<'info> {
    /// The job's user.
    pub signer: Signer<'info>,
    #[cfg_attr(feature = "idl-build", account(has_one = payment_mint))]
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
pub fn handler(ctx: Context<RefundJob>) -> Result<()> {
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
    accounts.job.end(&mut accounts.provider, JobStatus::Cancelled, now)?;
    accounts.provider.invariant()?;
    emit_event(JobCancelled {
        job: accounts.job.key(),
        refunded: refund.booked,
        surplus_returned: refund.surplus,
    });
    Ok(())
}
