use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, CommitteeMemberReplaced, ValidatorEquivocationSlashed};
use crate::math;
use crate::ops;
use crate::receipt::{attestation_message, preceding_ed25519_entries, Receipt};
use crate::seeds;
use crate::state::{
    EquivocationRecord, Job, JobStatus, Market, Provider, Unbonding, Validator, ValidatorStatus,
};

/// The job's user replaces committee member `index`, which is no longer Active (exiting, or its
/// Validator account closed), by `new_validator`: an Active validator of this market, not yet in
/// the committee, and not the provider's owner or worker key. A job never becomes unsettleable
/// because a member left. Allowed while the job holds GPUs (Open, Running, Finishing) and while
/// paused. Can only be signed by the job's user.
#[derive(Accounts)]
pub struct ReplaceCommitteeMember<'info> {
    pub user: Signer<'info>,
    pub market: Box<Account<'info, Market>>,
    #[account(has_one = market @ GpuMarketError::ProviderMarketMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(
        mut,
        has_one = user @ GpuMarketError::NotJobUser,
        has_one = market @ GpuMarketError::JobMarketMismatch,
        has_one = provider @ GpuMarketError::JobProviderMismatch,
    )]
    pub job: Box<Account<'info, Job>>,
    /// CHECK: must be the Validator PDA of the member being replaced; it may be closed.
    pub previous_validator: UncheckedAccount<'info>,
    #[account(constraint = new_validator.market == market.key() @ GpuMarketError::NotAValidator)]
    pub new_validator: Box<Account<'info, Validator>>,
}

pub fn replace(ctx: Context<ReplaceCommitteeMember>, index: u8) -> Result<()> {
    let job = &ctx.accounts.job;
    require!(job.status.holds_gpus(), GpuMarketError::InvalidJobStatus);
    let slot = usize::from(index);
    let previous = *job.members().get(slot).ok_or(GpuMarketError::NotCommitteeMember)?;
    let market_key = ctx.accounts.market.key();
    let (expected, _) = Pubkey::find_program_address(
        &[seeds::VALIDATOR, market_key.as_ref(), previous.as_ref()],
        ctx.program_id,
    );
    let info = ctx.accounts.previous_validator.to_account_info();
    require_keys_eq!(info.key(), expected, GpuMarketError::NotCommitteeMember);
    if info.owner == ctx.program_id && !info.data_is_empty() {
        let data = info.try_borrow_data()?;
        let v = Validator::try_deserialize(&mut &data[..])?;
        require!(v.status != ValidatorStatus::Active, GpuMarketError::MemberStillActive);
    }
    let new = &ctx.accounts.new_validator;
    let provider = &ctx.accounts.provider;
    require!(
        new.status == ValidatorStatus::Active
            && job.member_index(&new.authority).is_none()
            && new.authority != provider.owner
            && new.authority != provider.worker_key,
        GpuMarketError::InvalidCommittee
    );
    let member = new.authority;
    let job = &mut ctx.accounts.job;
    job.committee[slot] = member;
    emit_event(CommitteeMemberReplaced { job: job.key(), index, previous, member });
    Ok(())
}

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
    pub market: Box<Account<'info, Market>>,
    #[account(has_one = market @ GpuMarketError::JobMarketMismatch)]
    pub job: Box<Account<'info, Job>>,
    #[account(mut, has_one = market @ GpuMarketError::NotAValidator)]
    pub validator: Box<Account<'info, Validator>>,
    #[account(mut, address = market.stake_mint @ GpuMarketError::InvalidMint)]
    pub stake_mint: Box<Account<'info, Mint>>,
    #[account(mut, address = market.stake_vault @ GpuMarketError::InvalidStakeVault)]
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

pub fn slash_validator_equivocation(
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
    require!(job.status != JobStatus::Open, GpuMarketError::InvalidJobStatus);
    require!(job.started_at != 0, GpuMarketError::JobNeverStarted);
    require!(
        first.window_end > job.started_at && second.window_end > job.started_at,
        GpuMarketError::ReceiptBeforeJobStart
    );
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
    let bond = ops::sub(validator.bond, split.from_stake)?;
    let unbonding = ops::sub(validator.unbonding.amount, split.from_unbonding)?;
    // It is forced out: the rest of its bond unbonds (still slashable) from now.
    validator.bond = 0;
    validator.unbonding = Unbonding {
        amount: ops::add(bond, unbonding)?,
        release_at: now.checked_add(unbonding_seconds).ok_or(GpuMarketError::MathOverflow)?,
    };
    validator.status = ValidatorStatus::Exiting;
    validator.slashes = validator.slashes.checked_add(1).ok_or(GpuMarketError::MathOverflow)?;
    let market = &mut ctx.accounts.market;
    market.totals.bonded = ops::sub(market.totals.bonded, split.amount)?;
    market.totals.slashed = ops::add(market.totals.slashed, split.amount)?;
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
