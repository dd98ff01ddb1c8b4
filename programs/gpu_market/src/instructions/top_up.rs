use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::checked;
use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobToppedUp};
use crate::ops;
use crate::seeds;
use crate::state::{Job, JobStatus, Market};

/// Adds `amount` to an Open or Running job's escrow from the user's own account. Allowed while
/// paused (it extends existing business). Can only be signed by the job's user.
#[derive(Accounts)]
pub struct TopUp<'info> {
    pub user: Signer<'info>,
    #[cfg_attr(feature = "idl-build", account(has_one = payment_mint))]
    pub market: Box<Account<'info, Market>>,
    #[account(
        mut,
        has_one = user @ GpuMarketError::NotJobUser,
        has_one = market @ GpuMarketError::JobMarketMismatch,
    )]
    pub job: Box<Account<'info, Job>>,
    #[account(mut, seeds = [seeds::ESCROW, job.key().as_ref()], bump = job.escrow_bump)]
    pub escrow: Box<Account<'info, TokenAccount>>,
    #[account(address = market.payment_mint @ GpuMarketError::InvalidMint)]
    pub payment_mint: Box<Account<'info, Mint>>,
    #[account(mut, constraint = user_payment_account.mint == market.payment_mint @ GpuMarketError::InvalidMint)]
    pub user_payment_account: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

pub fn handler(ctx: Context<TopUp>, amount: u64) -> Result<()> {
    require!(amount > 0, GpuMarketError::ZeroAmount);
    require!(
        matches!(ctx.accounts.job.status, JobStatus::Open | JobStatus::Running),
        GpuMarketError::InvalidJobStatus
    );
    ops::transfer_in(
        &ctx.accounts.token_program,
        &ctx.accounts.user_payment_account,
        &ctx.accounts.payment_mint,
        ctx.accounts.escrow.to_account_info(),
        ctx.accounts.user.to_account_info(),
        amount,
    )?;
    let job = &mut ctx.accounts.job;
    job.deposited = checked::add(job.deposited, amount)?;
    ctx.accounts.escrow.reload()?;
    ctx.accounts.job.invariant(ctx.accounts.escrow.amount)?;
    emit_event(JobToppedUp {
        job: ctx.accounts.job.key(),
        amount,
        deposited: ctx.accounts.job.deposited,
    });
    Ok(())
}
