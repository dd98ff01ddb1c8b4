use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, DowntimeSlashed, EquivocationSlashed};
use crate::math::{self, SlashSplit};
use crate::ops;
use crate::receipt::{preceding_ed25519_entries, Receipt};
use crate::seeds;
use crate::state::{
    EquivocationRecord, MAX_SKEW_SECONDS, Job, JobStatus, Market, Provider, ProviderStatus, Validator,
    ValidatorStatus,
};

/// The accounts every slash touches: the provider's stake in the vault (reward to the reporter,
/// rest burned) and the job, which fails. The job's escrow is not moved here (it keeps the
/// slash within one packet): `close_job` refunds all of it to the user at once, since a Failed
/// job needs no grace.
#[derive(Accounts)]
pub struct SlashTargets<'info> {
    #[account(mut)]
    pub market: Box<Account<'info, Market>>,
    #[account(mut, has_one = market @ GpuMarketError::ProviderMarketMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(
        mut,
        has_one = market @ GpuMarketError::JobMarketMismatch,
        has_one = provider @ GpuMarketError::JobProviderMismatch,
    )]
    pub job: Box<Account<'info, Job>>,
    #[account(mut, address = market.stake_mint @ GpuMarketError::InvalidMint)]
    pub stake_mint: Box<Account<'info, Mint>>,
    #[account(mut, address = market.stake_vault @ GpuMarketError::InvalidStakeVault)]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    /// Receives the reporter reward; any stake-mint account.
    #[account(mut, constraint = reporter_stake_account.mint == market.stake_mint @ GpuMarketError::InvalidMint)]
    pub reporter_stake_account: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

impl SlashTargets<'_> {
    /// Takes `split` from the provider's stake + unbonding (reward to the reporter, rest
    /// burned) and fails the job (freeing its GPUs) if it still holds them. A job that already
    /// ended keeps its status, so no job counts both completed and failed.
    fn apply(&mut self, split: &SlashSplit, now: i64) -> Result<()> {
        ops::book_slash(&mut self.provider, &mut self.market, split)?;
        ops::pay_slash(
            &self.token_program,
            &self.stake_vault,
            &self.stake_mint,
            &self.market,
            self.reporter_stake_account.to_account_info(),
            split,
        )?;
        if self.job.status.holds_gpus() {
            ops::end_job(&mut self.job, &mut self.provider, JobStatus::Failed, now)?;
        }
        self.stake_vault.reload()?;
        self.market.invariant(self.stake_vault.amount)?;
        self.provider.invariant()
    }
}

/// Permissionless: two different receipts for one job and seq, each signed by a key of the
/// provider for its window (the current key, or a retired key for a window that ended by its
/// retirement), prove equivocation. The Ed25519 instruction right before
/// this one carries both signatures (entry 0 over `first`'s digest, entry 1 over `second`'s,
/// everything inside that instruction: one instruction and no escrow accounts keep the slash
/// within one packet). Slashes `equivocation_slash_bps` of stake + unbonding (the job's terms),
/// jails the provider for `unbonding_seconds` and fails the job; the user's `close_job` then
/// refunds the whole escrow at once. Once per (job, seq): the record account makes a repeat fail.
///
/// Only a job that started can be the subject (`JobNeverStarted`), and only receipts for
/// windows that ended after it started count (`ReceiptBeforeJobStart`). A job address is used
/// once (`close_job` leaves a tombstone), so receipts bound to it belong to this job.
///
/// The reporter reward (`reporter_reward_bps` of the slash) goes to `reporter_stake_account`
/// only when the signing reporter is the job's user or a committee member and neither the
/// provider's owner nor a key that signed the evidence; otherwise the whole slash is burned:
/// self-reporting never pays.
///
/// One incident is punished once, at the highest rate that applies to it: evidence for windows
/// that ended within `MAX_SKEW_SECONDS` after the provider's last equivocation slash belongs to
/// that incident; under a job whose rate is higher than the one applied so far it slashes the
/// difference (`math::top_up_slash_split`), otherwise it fails with
/// `EquivocationAlreadyPunished`. So a provider cannot pre-empt the real evidence with a
/// self-report under a lower rate. Evidence dated further than the job's skew in the future is
/// refused.
#[derive(Accounts)]
#[instruction(first: Receipt)]
pub struct SlashEquivocation<'info> {
    #[account(mut)]
    pub reporter: Signer<'info>,
    pub targets: SlashTargets<'info>,
    #[account(
        init,
        payer = reporter,
        space = 8 + EquivocationRecord::INIT_SPACE,
        seeds = [
            seeds::EQUIVOCATION,
            targets.job.key().as_ref(),
            &targets.job.started_at.to_le_bytes(),
            &first.seq.to_le_bytes(),
        ],
        bump,
    )]
    pub record: Box<Account<'info, EquivocationRecord>>,
    /// CHECK: the address is the Instructions sysvar; it is read with the checked loaders.
    #[account(address = solana_sdk_ids::sysvar::instructions::ID @ GpuMarketError::InvalidInstructionsSysvar)]
    pub instructions: UncheckedAccount<'info>,
    pub system_program: Program<'info, System>,
}

pub fn slash_equivocation(ctx: Context<SlashEquivocation>, first: Receipt, second: Receipt) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    require!(first.seq == second.seq, GpuMarketError::EquivocationSeqMismatch);
    require!(first != second, GpuMarketError::NotEquivocation);
    let program_id = *ctx.program_id;
    let t = &ctx.accounts.targets;
    require!(t.job.status != JobStatus::Open, GpuMarketError::InvalidJobStatus);
    require!(t.job.started_at != 0, GpuMarketError::JobNeverStarted);
    require!(
        first.window_end > t.job.started_at && second.window_end > t.job.started_at,
        GpuMarketError::ReceiptBeforeJobStart
    );
    let terms = t.job.terms;
    let rate = terms.equivocation_slash_bps;
    let incident_over = t
        .provider
        .last_equivocation_slash_at
        .checked_add(i64::from(MAX_SKEW_SECONDS))
        .ok_or(GpuMarketError::MathOverflow)?;
    let same_incident = t.provider.last_equivocation_slash_at != 0
        && (first.window_end <= incident_over || second.window_end <= incident_over);
    let applied = t.provider.last_equivocation_slash_bps;
    require!(
        !same_incident || rate > applied,
        GpuMarketError::EquivocationAlreadyPunished
    );
    let latest = now
        .checked_add(i64::from(terms.max_skew_seconds))
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(
        first.window_end <= latest && second.window_end <= latest,
        GpuMarketError::EvidenceFromTheFuture
    );
    let (market_key, job_key) = (t.market.key(), t.job.key());
    let sysvar = ctx.accounts.instructions.to_account_info();
    let entries = preceding_ed25519_entries(&sysvar)?;
    require!(entries.len() == 2, GpuMarketError::MalformedEd25519Instruction);
    for (entry, receipt) in entries.iter().zip([&first, &second]) {
        require!(
            entry.message == receipt.digest(&program_id, &market_key, &job_key),
            GpuMarketError::ReceiptMessageMismatch
        );
        require!(
            t.provider.key_signs_window(&entry.signer, receipt.window_end),
            GpuMarketError::WrongReceiptSigner
        );
    }

    let jail_until = now
        .checked_add(t.market.params_at(now).unbonding_seconds)
        .ok_or(GpuMarketError::MathOverflow)?;
    let offender_keys = [t.provider.owner, entries[0].signer, entries[1].signer];
    let reward_bps = ops::provider_reporter_reward_bps(&ctx.accounts.reporter.key(), &t.job, &offender_keys);
    let (stake, unbonding) = (t.provider.stake, t.provider.unbonding.amount);
    let split = if same_incident {
        math::top_up_slash_split(stake, unbonding, applied, rate, reward_bps)
    } else {
        math::slash_split(stake, unbonding, rate, reward_bps)
    }
    .map_err(|_| GpuMarketError::MathOverflow)?;
    ctx.accounts.targets.apply(&split, now)?;
    let provider = &mut ctx.accounts.targets.provider;
    let jailed_until = match provider.status {
        ProviderStatus::Jailed { until } => until.max(jail_until),
        _ => jail_until,
    };
    provider.status = ProviderStatus::Jailed { until: jailed_until };
    if !same_incident {
        provider.last_equivocation_slash_at = now;
        provider.reputation.slashes = ops::add32(provider.reputation.slashes, 1)?;
    }
    provider.last_equivocation_slash_bps = rate;
    ctx.accounts.record.set_inner(EquivocationRecord {
        job: job_key,
        seq: first.seq,
        offender: ctx.accounts.targets.provider.key(),
        reporter: ctx.accounts.reporter.key(),
        slashed: split.amount,
        bump: ctx.bumps.record,
    });
    emit_event(EquivocationSlashed {
        provider: ctx.accounts.targets.provider.key(),
        job: job_key,
        seq: first.seq,
        first_proof_hash: first.proof_hash,
        second_proof_hash: second.proof_hash,
        reporter: ctx.accounts.reporter.key(),
        slash_bps: rate,
        reporter_reward_bps: reward_bps,
        slashed: split.amount,
        reward: split.reward,
        burned: split.burned,
        jailed_until,
    });
    Ok(())
}

/// A quorum (the job's `quorum`) of distinct Active members of the job's committee attests,
/// by signing this transaction, that none of them accepted a proof of this job ending after
/// `last_proof_window_end`. The job is Running, or Finishing: a provider that finishes its own
/// job does not escape, since the missed windows are counted up to `ended_at` (up to now while
/// Running) from the later of that and the last settled window. With at least
/// `max_missed_windows` of them the provider is slashed `downtime_slash_bps` (the job's terms)
/// and the job fails, so a job is slashed for downtime at most once; the committee has the
/// job's grace after the finish to report (`complete_job` and `close_job` wait for it). The
/// reward (`reporter_reward_bps`) goes to the submitting member's `reporter_stake_account`
/// unless the submitter is the provider's owner (then it is burned with the rest);
/// the user's `close_job` refunds the escrow. Downtime is measured from proofs the committee
/// saw, so late settlement never slashes an honest provider. The signer is one member; the
/// others are passed as remaining accounts in pairs (Validator account, its authority as a
/// signer). Only Active members count: an exiting member still settles but reports no downtime
/// (it is leaving; fewer slashes is the safe side, and `expire_job` ends a silent job without
/// any member).
#[derive(Accounts)]
pub struct SlashDowntime<'info> {
    pub validator_authority: Signer<'info>,
    #[account(
        constraint = validator.authority == validator_authority.key() @ GpuMarketError::NotAValidator,
    )]
    pub validator: Box<Account<'info, Validator>>,
    pub targets: SlashTargets<'info>,
}

pub fn slash_downtime<'info>(
    ctx: Context<'info, SlashDowntime<'info>>,
    last_proof_window_end: i64,
) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let terms = ctx.accounts.targets.job.terms;
    let market_key = ctx.accounts.targets.market.key();
    let v = &ctx.accounts.validator;
    require_keys_eq!(v.market, market_key, GpuMarketError::NotAValidator);
    require!(v.status == ValidatorStatus::Active, GpuMarketError::ValidatorNotActive);
    let job = &ctx.accounts.targets.job;
    require!(job.member_index(&v.authority).is_some(), GpuMarketError::NotCommitteeMember);

    let extra = usize::from(terms.quorum.saturating_sub(1));
    require!(ctx.remaining_accounts.len() == extra * 2, GpuMarketError::QuorumNotMet);
    let mut seen = vec![v.authority];
    for pair in ctx.remaining_accounts.chunks(2) {
        let other: Account<Validator> = Account::try_from(&pair[0])?;
        require_keys_eq!(other.market, market_key, GpuMarketError::NotAValidator);
        require!(other.status == ValidatorStatus::Active, GpuMarketError::ValidatorNotActive);
        require!(
            pair[1].is_signer && pair[1].key() == other.authority,
            GpuMarketError::QuorumNotMet
        );
        require!(!seen.contains(&other.authority), GpuMarketError::DuplicateValidator);
        require!(job.member_index(&other.authority).is_some(), GpuMarketError::NotCommitteeMember);
        seen.push(other.authority);
    }

    let observed_until = match job.status {
        JobStatus::Running => now,
        JobStatus::Finishing => job.ended_at,
        _ => return err!(GpuMarketError::InvalidJobStatus),
    };
    require!(job.started_at != 0, GpuMarketError::JobNeverStarted);
    let window = i64::from(terms.window_seconds);
    let last_seen = job.last_window_end.max(last_proof_window_end);
    let missed = observed_until
        .checked_sub(last_seen)
        .and_then(|idle| idle.checked_div(window))
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(
        missed >= i64::from(terms.max_missed_windows),
        GpuMarketError::NotEnoughMissedWindows
    );
    let missed = u64::try_from(missed).map_err(|_| GpuMarketError::MathOverflow)?;
    let bps = terms.downtime_slash_bps;
    let t = &ctx.accounts.targets;
    let reward_bps = if v.authority == t.provider.owner { 0 } else { terms.reporter_reward_bps };
    let split = math::slash_split(t.provider.stake, t.provider.unbonding.amount, bps, reward_bps)
        .map_err(|_| GpuMarketError::MathOverflow)?;
    ctx.accounts.targets.apply(&split, now)?;
    let reputation = &mut ctx.accounts.targets.provider.reputation;
    reputation.windows_missed = ops::add(reputation.windows_missed, missed)?;
    reputation.slashes = ops::add32(reputation.slashes, 1)?;
    emit_event(DowntimeSlashed {
        provider: ctx.accounts.targets.provider.key(),
        job: ctx.accounts.targets.job.key(),
        missed_windows: missed,
        last_proof_window_end,
        validators: seen.len() as u8,
        slash_bps: bps,
        reporter_reward_bps: reward_bps,
        slashed: split.amount,
        reward: split.reward,
        burned: split.burned,
    });
    Ok(())
}
