use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};
use solana_instructions_sysvar::{load_current_index_checked, load_instruction_at_checked};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, Settled};
use crate::math;
use crate::ops::{self, add, JobSigner};
use crate::receipt::{ed25519_signers, Receipt};
use crate::seeds;
use crate::state::{Job, JobStatus, Market, Provider, Validator, ValidatorStatus};

/// Pays one window receipt from the job's escrow: provider owner, fee vault, burn.
///
/// Specification (all terms are the job's, fixed at `create_job`):
/// - the transaction signer is an Active validator of this market (`validator`);
/// - the instruction right before this one is an Ed25519-program instruction over exactly
///   `Receipt::message` whose first signature is the provider's worker key (current, unexpired
///   at `window_end`, else `WorkerKeyExpired`; or a retired key for a window that ended by its
///   retirement, within `window_seconds * max_missed_windows` of it); with `settle_quorum =
///   q > 1` it carries `q - 1` more signatures over the same message bytes, by the `q - 1`
///   distinct Active validators passed as remaining accounts, in the same order;
/// - the job is Running, or Finishing with `window_end <= ended_at` within the grace;
/// - `seq > last_seq`, `cumulative_seconds >= settled_seconds`, `window_end > last_window_end`,
///   `window_end <= now + max_skew_seconds`;
/// - wall time bounds billing in total, not per step: `cumulative_seconds <= window_end -
///   started_at + max_skew_seconds`, and `<= ended_at - started_at` once the job finished; since
///   paid seconds never exceed the cumulative claim, seconds ever paid obey the same bound;
/// - billed seconds are capped by the escrow's booked balance (a donation is never paid out);
///   money moves only to the provider owner's payment account, the market's fee vault (the
///   treasury share, which `withdraw_fees` forwards; no account of the authority is touched,
///   so the authority cannot stall settlement) and the burn; the
///   fee is rounded up; when the booked escrow can no longer pay one second the job is
///   Completed and its GPUs released.
///
/// Replaying a settled receipt fails with `StaleSequence`.
#[derive(Accounts)]
pub struct Settle<'info> {
    pub validator_authority: Signer<'info>,
    #[account(mut)]
    pub market: Box<Account<'info, Market>>,
    #[account(
        mut,
        constraint = validator.authority == validator_authority.key() @ GpuMarketError::NotAValidator,
        constraint = validator.market == market.key() @ GpuMarketError::NotAValidator,
    )]
    pub validator: Box<Account<'info, Validator>>,
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
    #[account(
        mut,
        constraint = provider_payment_account.owner == provider.owner
            @ GpuMarketError::InvalidProviderPaymentAccount,
        constraint = provider_payment_account.mint == market.payment_mint @ GpuMarketError::InvalidMint,
    )]
    pub provider_payment_account: Box<Account<'info, TokenAccount>>,
    #[account(mut, address = market.fee_vault @ GpuMarketError::InvalidFeeVault)]
    pub fee_vault: Box<Account<'info, TokenAccount>>,
    #[account(mut, address = market.payment_mint @ GpuMarketError::InvalidMint)]
    pub payment_mint: Box<Account<'info, Mint>>,
    /// CHECK: the address is the Instructions sysvar; it is read with the checked loaders.
    #[account(address = solana_sdk_ids::sysvar::instructions::ID @ GpuMarketError::InvalidInstructionsSysvar)]
    pub instructions: UncheckedAccount<'info>,
    pub token_program: Program<'info, Token>,
}

pub fn handler<'info>(
    ctx: Context<'info, Settle<'info>>,
    receipt: Receipt,
) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let job = &ctx.accounts.job;
    let terms = job.terms;

    require!(
        ctx.accounts.validator.status == ValidatorStatus::Active,
        GpuMarketError::ValidatorNotActive
    );
    let window_end_bound = receipt
        .window_end
        .checked_sub(job.started_at)
        .and_then(|d| d.checked_add(i64::from(terms.max_skew_seconds)))
        .ok_or(GpuMarketError::MathOverflow)?;
    let wall_bound = match job.status {
        JobStatus::Running => window_end_bound,
        JobStatus::Finishing => {
            require!(
                receipt.window_end <= job.ended_at,
                GpuMarketError::WindowAfterJobEnd
            );
            require!(!job.settlement_over(now)?, GpuMarketError::SettlementGraceOver);
            let ran = job
                .ended_at
                .checked_sub(job.started_at)
                .ok_or(GpuMarketError::MathOverflow)?;
            window_end_bound.min(ran)
        }
        _ => return err!(GpuMarketError::InvalidJobStatus),
    };
    require!(receipt.seq > job.last_seq, GpuMarketError::StaleSequence);
    require!(
        receipt.cumulative_seconds >= job.settled_seconds,
        GpuMarketError::CumulativeDecreased
    );
    require!(
        receipt.window_end > job.last_window_end,
        GpuMarketError::WindowNotAfterLast
    );
    let claimed = receipt
        .cumulative_seconds
        .checked_sub(job.settled_seconds)
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(
        i128::from(receipt.cumulative_seconds) <= i128::from(wall_bound),
        GpuMarketError::BilledSecondsExceedWallTime
    );
    let latest_allowed = now
        .checked_add(i64::from(terms.max_skew_seconds))
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(
        receipt.window_end <= latest_allowed,
        GpuMarketError::WindowEndInFuture
    );

    check_signatures(&ctx, &receipt, now)?;

    // Money: escrow -> provider owner, fee vault (treasury share), burn.
    let p = math::payout(
        claimed,
        terms.rate_per_second,
        job.booked_escrow()?,
        terms.fee_bps,
        terms.burn_bps,
    )
    .map_err(|_| GpuMarketError::MathOverflow)?;
    let job_signer = JobSigner::of(job);
    let seeds = job_signer.seeds();
    let accounts = &ctx.accounts;
    ops::transfer_signed(
        &accounts.token_program,
        &accounts.escrow,
        &accounts.payment_mint,
        accounts.provider_payment_account.to_account_info(),
        accounts.job.to_account_info(),
        &seeds,
        p.to_provider,
    )?;
    ops::transfer_signed(
        &accounts.token_program,
        &accounts.escrow,
        &accounts.payment_mint,
        accounts.fee_vault.to_account_info(),
        accounts.job.to_account_info(),
        &seeds,
        p.to_treasury,
    )?;
    ops::burn_signed(
        &accounts.token_program,
        &accounts.escrow,
        &accounts.payment_mint,
        accounts.job.to_account_info(),
        &seeds,
        p.burned,
    )?;
    let job = &mut ctx.accounts.job;
    let provider = &mut ctx.accounts.provider;
    job.settled_seconds = job
        .settled_seconds
        .checked_add(p.billed_seconds)
        .ok_or(GpuMarketError::MathOverflow)?;
    job.paid_provider = add(job.paid_provider, p.to_provider)?;
    job.paid_treasury = add(job.paid_treasury, p.to_treasury)?;
    job.burned = add(job.burned, p.burned)?;
    job.last_seq = receipt.seq;
    job.last_receipt_hash = receipt.proof_hash;
    job.last_window_end = receipt.window_end;
    provider.reputation.verified_seconds = add(provider.reputation.verified_seconds, p.billed_seconds)?;
    let escrow_remaining = job.booked_escrow()?;
    let exhausted = escrow_remaining < terms.rate_per_second;
    if exhausted {
        ops::end_job(job, provider, JobStatus::Completed, now)?;
    }
    let validator = &mut ctx.accounts.validator;
    validator.settlements = add(validator.settlements, 1)?;
    let market = &mut ctx.accounts.market;
    market.totals.fees = add(market.totals.fees, p.fee)?;
    market.totals.burned = add(market.totals.burned, p.burned)?;

    ctx.accounts.escrow.reload()?;
    ctx.accounts.job.invariant(ctx.accounts.escrow.amount)?;
    ctx.accounts.provider.invariant()?;
    emit_event(Settled {
        job: ctx.accounts.job.key(),
        provider: ctx.accounts.provider.key(),
        validator: ctx.accounts.validator.key(),
        seq: receipt.seq,
        cumulative_seconds: receipt.cumulative_seconds,
        window_end: receipt.window_end,
        proof_hash: receipt.proof_hash,
        claimed_seconds: claimed,
        billed_seconds: p.billed_seconds,
        rate_per_second: terms.rate_per_second,
        fee_bps: terms.fee_bps,
        burn_bps: terms.burn_bps,
        amount: p.amount,
        fee: p.fee,
        burned: p.burned,
        to_provider: p.to_provider,
        to_treasury: p.to_treasury,
        escrow_remaining,
        exhausted,
    });
    Ok(())
}

/// The Ed25519 instruction right before `settle`: the worker's signature, then one attestation
/// per extra validator (remaining accounts, same order), all over the same receipt message.
fn check_signatures<'info>(
    ctx: &Context<'info, Settle<'info>>,
    receipt: &Receipt,
    now: i64,
) -> Result<()> {
    let accounts = &ctx.accounts;
    let sysvar = accounts.instructions.to_account_info();
    let message = receipt.message(ctx.program_id, &accounts.market.key(), &accounts.job.key());
    let current = load_current_index_checked(&sysvar)?;
    let index = current
        .checked_sub(1)
        .ok_or(GpuMarketError::MissingEd25519Instruction)?;
    let ix = load_instruction_at_checked(usize::from(index), &sysvar)?;
    let signers = ed25519_signers(&ix, index, &message)?;
    let terms = accounts.job.terms;
    let provider = &accounts.provider;
    if signers[0] == provider.worker_key && provider.current_key_expired_at(receipt.window_end) {
        return err!(GpuMarketError::WorkerKeyExpired);
    }
    require!(
        provider.receipt_key_valid(
            &signers[0],
            receipt.window_end,
            now,
            terms.key_rotation_grace_seconds(),
        ),
        GpuMarketError::WrongReceiptSigner
    );

    let extra = usize::from(terms.settle_quorum.saturating_sub(1));
    require!(
        ctx.remaining_accounts.len() == extra && signers.len() == 1 + extra,
        GpuMarketError::QuorumNotMet
    );
    let mut seen: Vec<Pubkey> = vec![accounts.validator_authority.key()];
    for (info, attester) in ctx.remaining_accounts.iter().zip(&signers[1..]) {
        let other: Account<Validator> = Account::try_from(info)?;
        require_keys_eq!(other.market, accounts.market.key(), GpuMarketError::NotAValidator);
        require!(
            other.status == ValidatorStatus::Active,
            GpuMarketError::ValidatorNotActive
        );
        require!(
            !seen.contains(&other.authority),
            GpuMarketError::DuplicateValidator
        );
        require_keys_eq!(*attester, other.authority, GpuMarketError::NotAValidator);
        seen.push(other.authority);
    }
    Ok(())
}
