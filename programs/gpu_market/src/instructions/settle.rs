use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::checked::add;
use crate::errors::GpuMarketError;
use crate::events::{emit_event, Settled};
use crate::math;
use crate::ops::{self, JobSigner};
use crate::receipt::{attestation_message, preceding_ed25519_entries, Receipt};
use crate::seeds;
use crate::state::{Job, JobStatus, Market, Provider, Validator};

/// Pays the seconds a quorum of the job's committee approved, out of the job's escrow: provider
/// owner, fee vault (treasury share and validator rewards), burn.
///
/// Specification (all terms are the job's, fixed at `create_job`):
/// - the transaction signer is a validator of this market, Active or Exiting (an exiting member
///   still settles for the committees it is in, so one member's exit never stalls the pay for
///   seconds already proved; see `ValidatorStatus::settles`), and a member of the job's
///   committee; its transaction signature is its attestation;
/// - the instruction right before this one is an Ed25519-program instruction whose entry 0 is
///   the provider's worker key over exactly `Receipt::digest` (sha256 of the receipt message; current key unexpired at
///   `window_end`, else `WorkerKeyExpired`; or a retired key for a window that ended by its
///   retirement, within `window_seconds * max_missed_windows` of it), and whose entries
///   1..quorum are attestations over `attestation_message(digest, approved_seconds)` by
///   `quorum - 1` other distinct committee members, whose Validator accounts (Active or
///   Exiting, as for the signer) are passed as writable remaining accounts in the same order;
/// - the job is Running, or Finishing with `window_end <= ended_at` within the grace;
/// - `seq > last_seq`, `cumulative_seconds >= claimed_seconds`, `window_end > last_window_end`,
///   `window_end <= now + max_skew_seconds`;
/// - settlement is by totals: `paid_seconds <= approved_seconds <= cumulative_seconds` (a
///   committee pays no second the worker did not claim, and a second an earlier settle left
///   unapproved stays payable by any later one), and, absolutely, `approved_seconds <=
///   window_end - started_at + max_skew_seconds` and `<= ended_at - started_at` once the job
///   finished: seconds ever paid never exceed wall time;
/// - billed seconds (`approved - paid`) are capped by the escrow's booked balance (a donation
///   is never paid out); the fee is rounded up; `validator_reward_bps` of it is credited to the
///   attesting members in equal parts (the remainder to the submitter), claimable with
///   `claim_validator_rewards`; when the booked escrow can no longer pay one second the job is
///   Completed and its GPUs released.
///
/// Replaying a settled receipt fails with `StaleSequence`.
#[derive(Accounts)]
pub struct Settle<'info> {
    pub validator_authority: Signer<'info>,
    #[account(mut)]
    #[cfg_attr(feature = "idl-build", account(has_one = payment_mint))]
    pub market: Box<Account<'info, Market>>,
    #[account(
        mut,
        constraint = validator.authority == validator_authority.key() @ GpuMarketError::NotAValidator,
        constraint = validator.market == market.key() @ GpuMarketError::NotAValidator,
    )]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::VALIDATOR, market.key().as_ref(), validator_authority.key().as_ref()],
        bump = validator.bump,
    ))]
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
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::FEE_VAULT, market.key().as_ref()],
        bump = market.fee_vault_bump,
    ))]
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
    approved_seconds: u64,
) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let job = &ctx.accounts.job;
    let terms = job.terms;

    require!(ctx.accounts.validator.status.settles(), GpuMarketError::ValidatorNotActive);
    require!(
        job.member_index(&ctx.accounts.validator_authority.key()).is_some(),
        GpuMarketError::NotCommitteeMember
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
        receipt.cumulative_seconds >= job.claimed_seconds,
        GpuMarketError::CumulativeDecreased
    );
    require!(
        receipt.window_end > job.last_window_end,
        GpuMarketError::WindowNotAfterLast
    );
    let claimed = receipt
        .cumulative_seconds
        .checked_sub(job.claimed_seconds)
        .ok_or(GpuMarketError::MathOverflow)?;
    let approved = approved_seconds
        .checked_sub(job.paid_seconds)
        .ok_or(GpuMarketError::ApprovedDecreased)?;
    require!(
        approved_seconds <= receipt.cumulative_seconds,
        GpuMarketError::ApprovedExceedsClaim
    );
    require!(
        i128::from(approved_seconds) <= i128::from(wall_bound),
        GpuMarketError::BilledSecondsExceedWallTime
    );
    let latest_allowed = now
        .checked_add(i64::from(terms.max_skew_seconds))
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(
        receipt.window_end <= latest_allowed,
        GpuMarketError::WindowEndInFuture
    );

    let mut attesters = check_signatures(&ctx, &receipt, approved_seconds, now)?;

    // Money: escrow -> provider owner, fee vault (treasury share + rewards), burn.
    let job = &ctx.accounts.job;
    let p = math::payout(
        approved,
        terms.rate_per_second,
        job.booked_escrow()?,
        terms.fee_bps,
        terms.burn_bps,
        terms.validator_reward_bps,
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
        add(p.to_treasury, p.reward)?,
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
    job.claimed_seconds = receipt.cumulative_seconds;
    job.paid_seconds = add(job.paid_seconds, p.billed_seconds)?;
    job.paid_provider = add(job.paid_provider, p.to_provider)?;
    job.paid_validators = add(job.paid_validators, p.reward)?;
    job.paid_treasury = add(job.paid_treasury, p.to_treasury)?;
    job.burned = add(job.burned, p.burned)?;
    job.last_seq = receipt.seq;
    job.last_receipt_hash = receipt.proof_hash;
    job.last_window_end = receipt.window_end;
    provider.reputation.verified_seconds = add(provider.reputation.verified_seconds, p.billed_seconds)?;
    let escrow_remaining = job.booked_escrow()?;
    let exhausted = escrow_remaining < terms.rate_per_second;
    if exhausted {
        job.end(provider, JobStatus::Completed, now)?;
    }
    // Rewards: equal shares to every attester, the remainder to the submitter.
    let count = u64::try_from(attesters.len()).map_err(|_| GpuMarketError::MathOverflow)?;
    let (share, remainder) = math::reward_shares(p.reward, add(count, 1)?)
        .map_err(|_| GpuMarketError::MathOverflow)?;
    for other in attesters.iter_mut() {
        other.rewards_earned = add(other.rewards_earned, share)?;
        other.rewards_unclaimed = add(other.rewards_unclaimed, share)?;
        other.exit(ctx.program_id)?;
    }
    let own = add(share, remainder)?;
    let validator = &mut ctx.accounts.validator;
    validator.settlements = add(validator.settlements, 1)?;
    validator.rewards_earned = add(validator.rewards_earned, own)?;
    validator.rewards_unclaimed = add(validator.rewards_unclaimed, own)?;
    let market = &mut ctx.accounts.market;
    market.totals.fees = add(market.totals.fees, p.fee)?;
    market.totals.burned = add(market.totals.burned, p.burned)?;
    market.totals.rewards = add(market.totals.rewards, p.reward)?;
    market.totals.rewards_unclaimed = add(market.totals.rewards_unclaimed, p.reward)?;

    ctx.accounts.escrow.reload()?;
    ctx.accounts.job.invariant(ctx.accounts.escrow.amount)?;
    ctx.accounts.provider.invariant()?;
    ctx.accounts.fee_vault.reload()?;
    require!(
        ctx.accounts.fee_vault.amount >= ctx.accounts.market.totals.rewards_unclaimed,
        GpuMarketError::InvariantViolated
    );
    emit_event(Settled {
        job: ctx.accounts.job.key(),
        provider: ctx.accounts.provider.key(),
        validator: ctx.accounts.validator.key(),
        seq: receipt.seq,
        cumulative_seconds: receipt.cumulative_seconds,
        window_end: receipt.window_end,
        proof_hash: receipt.proof_hash,
        claimed_seconds: claimed,
        approved_seconds,
        billed_seconds: p.billed_seconds,
        rate_per_second: terms.rate_per_second,
        fee_bps: terms.fee_bps,
        burn_bps: terms.burn_bps,
        amount: p.amount,
        fee: p.fee,
        reward: p.reward,
        validator_reward_bps: terms.validator_reward_bps,
        attesters: u8::try_from(count.saturating_add(1)).unwrap_or(u8::MAX),
        burned: p.burned,
        to_provider: p.to_provider,
        to_treasury: p.to_treasury,
        escrow_remaining,
        exhausted,
    });
    Ok(())
}

/// The Ed25519 instruction right before `settle`: entry 0 the worker's signature over the
/// receipt digest, then one attestation per extra committee member (remaining accounts, same
/// order) over the attestation message. Returns those members' Validator accounts.
fn check_signatures<'info>(
    ctx: &Context<'info, Settle<'info>>,
    receipt: &Receipt,
    approved_seconds: u64,
    now: i64,
) -> Result<Vec<Account<'info, Validator>>> {
    let accounts = &ctx.accounts;
    let sysvar = accounts.instructions.to_account_info();
    let digest = receipt.digest(ctx.program_id, &accounts.market.key(), &accounts.job.key());
    let attestation = attestation_message(&digest, approved_seconds);
    let entries = preceding_ed25519_entries(&sysvar)?;
    require!(entries[0].message == digest, GpuMarketError::ReceiptMessageMismatch);
    let worker = entries[0].signer;
    let job = &accounts.job;
    let provider = &accounts.provider;
    if worker == provider.worker_key && provider.current_key_expired_at(receipt.window_end) {
        return err!(GpuMarketError::WorkerKeyExpired);
    }
    require!(
        provider.receipt_key_valid(
            &worker,
            receipt.window_end,
            now,
            job.terms.key_rotation_grace_seconds(),
        ),
        GpuMarketError::WrongReceiptSigner
    );

    let extra = usize::from(job.terms.quorum.saturating_sub(1));
    require!(
        ctx.remaining_accounts.len() == extra && entries.len() == extra.saturating_add(1),
        GpuMarketError::QuorumNotMet
    );
    let mut seen: Vec<Pubkey> = vec![accounts.validator_authority.key()];
    let mut attesters = Vec::with_capacity(extra);
    for (info, entry) in ctx.remaining_accounts.iter().zip(&entries[1..]) {
        require!(entry.message == attestation.as_slice(), GpuMarketError::ReceiptMessageMismatch);
        let other: Account<Validator> = Account::try_from(info)?;
        require!(info.is_writable, GpuMarketError::QuorumNotMet);
        require_keys_eq!(other.market, accounts.market.key(), GpuMarketError::NotAValidator);
        require_keys_eq!(entry.signer, other.authority, GpuMarketError::NotAValidator);
        require!(
            job.member_index(&other.authority).is_some(),
            GpuMarketError::NotCommitteeMember
        );
        require!(other.status.settles(), GpuMarketError::ValidatorNotActive);
        require!(
            !seen.contains(&other.authority),
            GpuMarketError::DuplicateValidator
        );
        seen.push(other.authority);
        attesters.push(other);
    }
    Ok(attesters)
}
