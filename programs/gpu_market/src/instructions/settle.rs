use anchor_lang::prelude::*;
use anchor_spl::token::{self, Burn, Mint, Token, TokenAccount, TransferChecked};
use solana_instructions_sysvar::{load_current_index_checked, load_instruction_at_checked};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, Settled};
use crate::math;
use crate::receipt::{ed25519_signer, Receipt};
use crate::seeds;
use crate::state::{Job, JobStatus, Market, Provider, Validator, ValidatorStatus};

/// Pays one window receipt from the job's escrow: provider owner, treasury, burn.
///
/// Specification:
/// - the transaction signer is an Active validator of this market (`validator`);
/// - the instruction right before this one is an Ed25519-program instruction by the provider's
///   worker key (current, unexpired at `window_end`, or previous within its grace) over exactly
///   `Receipt::message`; with `settle_quorum = q > 1`, the `q - 1` instructions before that are
///   Ed25519 attestations of the same message by the `q - 1` distinct Active validators passed
///   as remaining accounts, in the same order (nearest first);
/// - the job is Running, or Finishing with `window_end <= ended_at` within the grace;
/// - `seq > last_seq`, `cumulative_seconds >= settled_seconds`, `window_end > last_window_end`,
///   new seconds `<= window_end - last_window_end + max_skew_seconds`,
///   `window_end <= now + max_skew_seconds`;
/// - billed seconds are capped by what the escrow covers; money moves only to the provider
///   owner's payment account, the treasury and the burn; when the escrow can no longer pay one
///   second the job is Completed and its GPUs released.
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
    #[account(mut, address = market.treasury @ GpuMarketError::InvalidTreasury)]
    pub treasury: Box<Account<'info, TokenAccount>>,
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
    let params = ctx.accounts.market.params;
    let job = &ctx.accounts.job;

    require!(
        ctx.accounts.validator.status == ValidatorStatus::Active,
        GpuMarketError::ValidatorNotActive
    );
    match job.status {
        JobStatus::Running => {}
        JobStatus::Finishing => {
            require!(
                receipt.window_end <= job.ended_at,
                GpuMarketError::WindowAfterJobEnd
            );
            let grace_end = job
                .ended_at
                .checked_add(params.grace_seconds())
                .ok_or(GpuMarketError::MathOverflow)?;
            require!(now <= grace_end, GpuMarketError::SettlementGraceOver);
        }
        _ => return err!(GpuMarketError::InvalidJobStatus),
    }
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
    let wall_allowance = receipt
        .window_end
        .checked_sub(job.last_window_end)
        .and_then(|d| d.checked_add(i64::from(params.max_skew_seconds)))
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(
        claimed <= u64::try_from(wall_allowance).map_err(|_| GpuMarketError::MathOverflow)?,
        GpuMarketError::BilledSecondsExceedWallTime
    );
    let latest_allowed = now
        .checked_add(i64::from(params.max_skew_seconds))
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(
        receipt.window_end <= latest_allowed,
        GpuMarketError::WindowEndInFuture
    );

    check_signatures(&ctx, &receipt)?;

    // Money: escrow -> provider owner, treasury, burn.
    let p = math::payout(
        claimed,
        job.rate_per_second,
        ctx.accounts.escrow.amount,
        params.fee_bps,
        params.burn_bps,
    )
    .map_err(|_| GpuMarketError::MathOverflow)?;
    let market_key = ctx.accounts.market.key();
    let user_key = job.user;
    let job_id = job.job_id.to_le_bytes();
    let bump = [job.bump];
    let job_seeds: &[&[u8]] = &[
        seeds::JOB,
        market_key.as_ref(),
        user_key.as_ref(),
        &job_id,
        &bump,
    ];
    let signer: &[&[&[u8]]] = &[job_seeds];
    let decimals = ctx.accounts.payment_mint.decimals;
    for (to, amount) in [
        (ctx.accounts.provider_payment_account.to_account_info(), p.to_provider),
        (ctx.accounts.treasury.to_account_info(), p.to_treasury),
    ] {
        if amount > 0 {
            token::transfer_checked(
                CpiContext::new_with_signer(
                    ctx.accounts.token_program.key(),
                    TransferChecked {
                        from: ctx.accounts.escrow.to_account_info(),
                        mint: ctx.accounts.payment_mint.to_account_info(),
                        to,
                        authority: ctx.accounts.job.to_account_info(),
                    },
                    signer,
                ),
                amount,
                decimals,
            )?;
        }
    }
    if p.burned > 0 {
        token::burn(
            CpiContext::new_with_signer(
                ctx.accounts.token_program.key(),
                Burn {
                    mint: ctx.accounts.payment_mint.to_account_info(),
                    from: ctx.accounts.escrow.to_account_info(),
                    authority: ctx.accounts.job.to_account_info(),
                },
                signer,
            ),
            p.burned,
        )?;
    }
    ctx.accounts.escrow.reload()?;
    let escrow_remaining = ctx.accounts.escrow.amount;
    let exhausted = escrow_remaining < ctx.accounts.job.rate_per_second;

    let job = &mut ctx.accounts.job;
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
    let provider = &mut ctx.accounts.provider;
    provider.reputation.verified_seconds = add(provider.reputation.verified_seconds, p.billed_seconds)?;
    if exhausted {
        if job.status == JobStatus::Running {
            job.ended_at = now;
        }
        job.status = JobStatus::Completed;
        provider.gpus_in_use = provider
            .gpus_in_use
            .checked_sub(job.gpu_count)
            .ok_or(GpuMarketError::MathOverflow)?;
        provider.reputation.jobs_completed = add(provider.reputation.jobs_completed, 1)?;
    }
    let validator = &mut ctx.accounts.validator;
    validator.settlements = add(validator.settlements, 1)?;
    let market = &mut ctx.accounts.market;
    market.totals.fees = add(market.totals.fees, p.fee)?;
    market.totals.burned = add(market.totals.burned, p.burned)?;

    ctx.accounts.job.invariant(escrow_remaining)?;
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
        rate_per_second: ctx.accounts.job.rate_per_second,
        fee_bps: params.fee_bps,
        burn_bps: params.burn_bps,
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

fn add(a: u64, b: u64) -> Result<u64> {
    a.checked_add(b)
        .ok_or_else(|| GpuMarketError::MathOverflow.into())
}

/// The worker's signature right before `settle`, then one attestation per extra validator.
fn check_signatures<'info>(ctx: &Context<'info, Settle<'info>>, receipt: &Receipt) -> Result<()> {
    let accounts = &ctx.accounts;
    let sysvar = accounts.instructions.to_account_info();
    let message = receipt.message(ctx.program_id, &accounts.market.key(), &accounts.job.key());
    let current = load_current_index_checked(&sysvar)?;
    let at = |distance: u16| -> Result<(u16, anchor_lang::solana_program::instruction::Instruction)> {
        let index = current
            .checked_sub(distance)
            .ok_or(GpuMarketError::MissingEd25519Instruction)?;
        let ix = load_instruction_at_checked(usize::from(index), &sysvar)?;
        Ok((index, ix))
    };

    let (index, ix) = at(1)?;
    let worker = ed25519_signer(&ix, index, &message)?;
    require!(
        accounts.provider.worker_key_valid_at(&worker, receipt.window_end),
        GpuMarketError::WrongReceiptSigner
    );

    let extra = usize::from(accounts.market.params.settle_quorum.saturating_sub(1));
    require!(
        ctx.remaining_accounts.len() == extra,
        GpuMarketError::QuorumNotMet
    );
    let mut seen: Vec<Pubkey> = vec![accounts.validator_authority.key()];
    for (k, info) in ctx.remaining_accounts.iter().enumerate() {
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
        let distance = u16::try_from(k + 2).map_err(|_| GpuMarketError::QuorumNotMet)?;
        let (index, ix) = at(distance).map_err(|_| GpuMarketError::QuorumNotMet)?;
        let attester = ed25519_signer(&ix, index, &message)?;
        require_keys_eq!(attester, other.authority, GpuMarketError::NotAValidator);
        seen.push(other.authority);
    }
    Ok(())
}
