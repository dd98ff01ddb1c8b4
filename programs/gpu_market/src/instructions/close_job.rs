use anchor_lang::prelude::*;
use anchor_lang::Discriminator;
use anchor_spl::token::{self, CloseAccount, Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobClosed};
use crate::ops::{self, JobSigner};
use crate::seeds;
use crate::state::{ClosedJob, Job, JobStatus, Market, Provider};

/// Ends a job for good: refunds everything left in escrow to the user (donations included),
/// closes the escrow, and shrinks the job account to a `ClosedJob` tombstone, returning the rest
/// of the rent (and the escrow's) to the user. Can only be signed by the job's user, and only
/// once no settlement is possible any more: the job is Completed, Cancelled, Declined or Failed,
/// or Finishing past its grace (`terms.grace_seconds` after `ended_at`), so seconds the worker
/// signed before the end are never refunded from under the provider. A Finishing job becomes
/// Completed and frees its GPUs.
///
/// A job address is used once: the tombstone stays program-owned with data for good, so
/// `create_job` can never initialize the address again (the System program refuses to allocate
/// it, also when someone sends it lamports), and no instruction reads it as a Job. Receipts,
/// attestations and evidence name the job address, so they always belong to one incarnation.
#[derive(Accounts)]
pub struct CloseJob<'info> {
    #[account(mut)]
    pub user: Signer<'info>,
    #[cfg_attr(feature = "idl-build", account(has_one = payment_mint))]
    pub market: Box<Account<'info, Market>>,
    #[account(mut, has_one = market @ GpuMarketError::ProviderMarketMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    /// CHECK: the handler checks it is this user's Job and leaves a `ClosedJob` tombstone.
    #[account(mut)]
    pub job: UncheckedAccount<'info>,
    #[account(mut, seeds = [seeds::ESCROW, job.key().as_ref()], bump)]
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
    let job_info = ctx.accounts.job.to_account_info();
    let mut job = load_job(&job_info, ctx.program_id)?;
    require_keys_eq!(job.user, ctx.accounts.user.key(), GpuMarketError::NotJobUser);
    require_keys_eq!(job.market, ctx.accounts.market.key(), GpuMarketError::JobMarketMismatch);
    require_keys_eq!(job.provider, ctx.accounts.provider.key(), GpuMarketError::JobProviderMismatch);
    require!(
        !matches!(job.status, JobStatus::Open | JobStatus::Running),
        GpuMarketError::InvalidJobStatus
    );
    require!(job.settlement_over(now)?, GpuMarketError::GracePeriodActive);
    if job.status == JobStatus::Finishing {
        let provider = &mut ctx.accounts.provider;
        job.end(provider, JobStatus::Completed, now)?;
        provider.invariant()?;
    }

    let accounts = &mut *ctx.accounts;
    let refund = ops::refund_escrow(
        &accounts.token_program,
        &mut accounts.escrow,
        &accounts.payment_mint,
        accounts.user_payment_account.to_account_info(),
        &mut job,
        job_info.clone(),
    )?;
    let job_signer = JobSigner::of(&job);
    let signer: &[&[&[u8]]] = &[&job_signer.seeds()];
    token::close_account(CpiContext::new_with_signer(
        accounts.token_program.key(),
        CloseAccount {
            account: accounts.escrow.to_account_info(),
            destination: accounts.user.to_account_info(),
            authority: job_info.clone(),
        },
        signer,
    ))?;
    require!(job.booked_escrow()? == 0, GpuMarketError::InvariantViolated);
    leave_tombstone(&job_info, &accounts.user.to_account_info(), ClosedJob::of(&job, now))?;
    emit_event(JobClosed {
        job: job_info.key(),
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

/// The Job at `info`: owned by this program, with the Job discriminator (the checks Anchor's
/// `Account<Job>` makes, with its errors). A `ClosedJob` tombstone is not one. Boxed, like
/// every large account here, so the SBF stack frame stays small.
fn load_job(info: &AccountInfo, program_id: &Pubkey) -> Result<Box<Job>> {
    if info.owner != program_id {
        return Err(Error::from(ErrorCode::AccountOwnedByWrongProgram)
            .with_account_name("job")
            .with_pubkeys((*info.owner, *program_id)));
    }
    let data = info.try_borrow_data()?;
    Job::try_deserialize(&mut &data[..])
        .map(Box::new)
        .map_err(|e| e.with_account_name("job"))
}

/// Shrinks the job account to a `ClosedJob` and moves every lamport above its rent exemption
/// to `user`. The account stays owned by this program, with data, for good.
fn leave_tombstone(job: &AccountInfo, user: &AccountInfo, tombstone: ClosedJob) -> Result<()> {
    let space = ClosedJob::DISCRIMINATOR.len().saturating_add(ClosedJob::INIT_SPACE);
    job.resize(space)?;
    {
        let mut data = job.try_borrow_mut_data()?;
        tombstone.try_serialize(&mut &mut data[..])?;
    }
    let keep = Rent::get()?.minimum_balance(space);
    let excess = job.lamports().checked_sub(keep).ok_or(GpuMarketError::MathOverflow)?;
    let left = job.lamports().checked_sub(excess).ok_or(GpuMarketError::MathOverflow)?;
    let credited = user.lamports().checked_add(excess).ok_or(GpuMarketError::MathOverflow)?;
    **job.try_borrow_mut_lamports()? = left;
    **user.try_borrow_mut_lamports()? = credited;
    Ok(())
}
