use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::checked;
use crate::errors::GpuMarketError;
use crate::events::{emit_event, ValidatorEquivocationSlashed};
use crate::math;
use crate::ops;
use crate::receipt::{attestation_message, preceding_ed25519_entries, Receipt};
use crate::seeds;
use crate::state::{EquivocationRecord, Job, Market, Unbonding, Validator, ValidatorStatus};

/// Permissionless: two different attestations (receipt and approved seconds) by one member of a
/// job's committee for the same seq prove that validator equivocated. The Ed25519 instruction
/// right before this one carries both (entry 0 over `first`'s attestation message, entry 1 over
/// `second`'s, everything inside that instruction). Slashes the job's `equivocation_slash_bps`
/// of the validator's bond + unbonding (reporter reward `reporter_reward_bps` of it, the rest
/// burned) and forces it out: it becomes Exiting with what is left of its bond unbonding again
/// for `unbonding_seconds` (still slashable), so it joins no new committee and users can
/// replace it; like any exiting member it still counts in the settlements of the committees it
/// is in (its co-members' pay for the provider does not hang on its status). Once per
/// (validator, job, seq). Only a job that started can be the subject (`JobNeverStarted`), and
/// only attestations of receipts for windows that ended after it started count; a job address
/// is used once (`close_job` leaves a tombstone), so attestations bound to it belong to this
/// job. The reward goes to `reporter_stake_account` only when the signing reporter is the job's
/// user, its provider's owner or another member of its committee; otherwise (the offender
/// itself, or a stranger who may be it) the whole slash is burned.
#[derive(Accounts)]
#[instruction(first: Receipt)]
pub struct SlashValidatorEquivocation<'info> {
    #[account(mut)]
    pub reporter: Signer<'info>,
    #[account(mut)]
    #[cfg_attr(feature = "idl-build", account(has_one = stake_mint))]
    pub market: Box<Account<'info, Market>>,
    #[account(has_one = market @ GpuMarketError::JobMarketMismatch)]
    pub job: Box<Account<'info, Job>>,
    #[account(mut, has_one = market @ GpuMarketError::NotAValidator)]
    pub validator: Box<Account<'info, Validator>>,
    #[account(mut, address = market.stake_mint @ GpuMarketError::InvalidMint)]
    pub stake_mint: Box<Account<'info, Mint>>,
    #[account(mut, address = market.stake_vault @ GpuMarketError::InvalidStakeVault)]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::STAKE_VAULT, market.key().as_ref()],
        bump = market.stake_vault_bump,
    ))]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    /// Receives the reporter reward; any stake-mint account.
    #[account(mut, constraint = reporter_stake_account.mint == market.stake_mint @ GpuMarketError::InvalidMint)]
    pub reporter_stake_account: Box<Account<'info, TokenAccount>>,
    #[account(
        init,
        payer = reporter,
        space = 8 + EquivocationRecord::INIT_SPACE,
        seeds = [
            seeds::VALIDATOR_EQUIVOCATION,
            validator.key().as_ref(),
            job.key().as_ref(),
            &job.started_at.to_le_bytes(),
            &first.seq.to_le_bytes(),
        ],
        bump,
    )]
    pub record: Box<Account<'info, EquivocationRecord>>,
    /// CHECK: the address is the Instructions sysvar; it is read with the checked loaders.
    #[account(address = solana_sdk_ids::sysvar::instructions::ID @ GpuMarketError::InvalidInstructionsSysvar)]
    pub instructions: UncheckedAccount<'info>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

pub fn handler(
    ctx: Context<SlashValidatorEquivocation>,
    first: Receipt,
    first_approved: u64,
    second: Receipt,
    second_approved: u64,
) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    require!(first.seq == second.seq, GpuMarketError::EquivocationSeqMismatch);
    require!(
        first != second || first_approved != second_approved,
        GpuMarketError::NotValidatorEquivocation
    );
    let accounts = &ctx.accounts;
    let job = &accounts.job;
    job.check_evidence_windows(first.window_end, second.window_end)?;
    let authority = accounts.validator.authority;
    require!(job.member_index(&authority).is_some(), GpuMarketError::NotCommitteeMember);
    let (market_key, job_key) = (accounts.market.key(), job.key());
    let sysvar = accounts.instructions.to_account_info();
    let entries = preceding_ed25519_entries(&sysvar)?;
    require!(entries.len() == 2, GpuMarketError::MalformedEd25519Instruction);
    for (entry, (receipt, approved)) in entries.iter().zip([(&first, first_approved), (&second, second_approved)]) {
        let digest = receipt.digest(ctx.program_id, &market_key, &job_key);
        require!(
            entry.message == attestation_message(&digest, approved).as_slice(),
            GpuMarketError::ReceiptMessageMismatch
        );
        require_keys_eq!(entry.signer, authority, GpuMarketError::NotAValidator);
    }

    let terms = job.terms;
    let reward_bps =
        ops::validator_reporter_reward_bps(&accounts.reporter.key(), job, &authority, ctx.program_id);
    let validator = &ctx.accounts.validator;
    let split = math::slash_split(
        validator.bond,
        validator.unbonding.amount,
        terms.equivocation_slash_bps,
        reward_bps,
    )
    .map_err(|_| GpuMarketError::MathOverflow)?;
    ops::pay_slash(
        &ctx.accounts.token_program,
        &ctx.accounts.stake_vault,
        &ctx.accounts.stake_mint,
        &ctx.accounts.market,
        ctx.accounts.reporter_stake_account.to_account_info(),
        &split,
    )?;
    let unbonding_seconds = ctx.accounts.market.params_at(now).unbonding_seconds;
    let validator = &mut ctx.accounts.validator;
    let bond = checked::sub(validator.bond, split.from_stake)?;
    let unbonding = checked::sub(validator.unbonding.amount, split.from_unbonding)?;
    // It is forced out: the rest of its bond unbonds (still slashable) from now.
    validator.bond = 0;
    validator.unbonding = Unbonding {
        amount: checked::add(bond, unbonding)?,
        release_at: now.checked_add(unbonding_seconds).ok_or(GpuMarketError::MathOverflow)?,
    };
    validator.status = ValidatorStatus::Exiting;
    validator.slashes = validator.slashes.checked_add(1).ok_or(GpuMarketError::MathOverflow)?;
    let market = &mut ctx.accounts.market;
    market.totals.bonded = checked::sub(market.totals.bonded, split.amount)?;
    market.totals.slashed = checked::add(market.totals.slashed, split.amount)?;
    ctx.accounts.stake_vault.reload()?;
    ctx.accounts.market.invariant(ctx.accounts.stake_vault.amount)?;
    ctx.accounts.record.set_inner(EquivocationRecord {
        job: job_key,
        seq: first.seq,
        offender: ctx.accounts.validator.key(),
        reporter: ctx.accounts.reporter.key(),
        slashed: split.amount,
        bump: ctx.bumps.record,
    });
    emit_event(ValidatorEquivocationSlashed {
        validator: ctx.accounts.validator.key(),
        job: job_key,
        seq: first.seq,
        first_approved,
        second_approved,
        reporter: ctx.accounts.reporter.key(),
        slash_bps: terms.equivocation_slash_bps,
        reporter_reward_bps: reward_bps,
        slashed: split.amount,
        reward: split.reward,
        burned: split.burned,
    });
    Ok(())
}
