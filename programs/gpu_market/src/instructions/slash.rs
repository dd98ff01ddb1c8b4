use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, DowntimeSlashed, EquivocationSlashed};
use crate::math::SlashSplit;
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
    /// Slashes `slash_bps` of stake + unbonding (the job's terms), pays `reward_bps` of it to the
    /// reporter, burns the rest, and fails the job (freeing its GPUs) if it still holds them. A
    /// job that already ended keeps its status, so no job counts both completed and failed.
    fn apply(&mut self, slash_bps: u16, reward_bps: u16, now: i64) -> Result<SlashSplit> {
        let split = ops::book_slash(&mut self.provider, &mut self.market, slash_bps, reward_bps)?;
        ops::pay_slash(
            &self.token_program,
            &self.stake_vault,
            &self.stake_mint,
            &self.market,
            self.reporter_stake_account.to_account_info(),
            &split,
        )?;
        if self.job.status.holds_gpus() {
            ops::end_job(&mut self.job, &mut self.provider, JobStatus::Failed, now)?;
        }
        self.stake_vault.reload()?;
        self.market.invariant(self.stake_vault.amount)?;
        self.provider.invariant()?;
        Ok(split)
    }
}

/// Permissionless: two different receipts for one job and seq, each signed by a key of the
/// provider for its window (the current key, or a retired key for a window that ended by its
/// retirement), prove equivocation. The Ed25519 instruction right before
/// this one carries both signatures (entry 0 over `first`'s digest, entry 1 over `second`'s,
/// everything inside that instruction: one instruction and no escrow accounts keep the slash
/// within one packet). Slashes `equivocation_slash_bps` of stake + unbonding (reporter reward
/// `reporter_reward_bps` of it, the rest burned), jails the provider for `unbonding_seconds`
/// and fails the job; the user's `close_job` then refunds the whole escrow at once. Once per
/// (job incarnation, seq): the record account makes a repeat fail.
///
/// Job ids are chosen by users and a closed job's address can be used again, so the receipt
/// message alone does not say which incarnation of the address it belongs to. Only receipts that
/// could settle on the current job count (`window_end > started_at`): receipts of an earlier
/// incarnation always end before the current one started, so honest receipts of two
/// incarnations are never taken for equivocation. The record is keyed by `started_at` too.
///
/// One incident is punished once: evidence counts only for windows that ended more than
/// `MAX_SKEW_SECONDS` after the provider's last equivocation slash, whatever the seq or job, so
/// a key holder cannot slash the same provider again and again with receipts signed before it
/// was caught. Evidence dated further than the job's skew in the future is refused.
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
    require!(
        first.window_end > t.job.started_at && second.window_end > t.job.started_at,
        GpuMarketError::ReceiptBeforeJobStart
    );
    let incident_over = t
        .provider
        .last_equivocation_slash_at
        .checked_add(i64::from(MAX_SKEW_SECONDS))
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(
        t.provider.last_equivocation_slash_at == 0
            || (first.window_end > incident_over && second.window_end > incident_over),
        GpuMarketError::EquivocationAlreadyPunished
    );
    let latest = now
        .checked_add(i64::from(t.job.terms.max_skew_seconds))
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
    let terms = t.job.terms;
    let bps = terms.equivocation_slash_bps;
    let split = ctx.accounts.targets.apply(bps, terms.reporter_reward_bps, now)?;
    let provider = &mut ctx.accounts.targets.provider;
    provider.status = ProviderStatus::Jailed { until: jail_until };
    provider.last_equivocation_slash_at = now;
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
        slash_bps: bps,
        reporter_reward_bps: terms.reporter_reward_bps,
        slashed: split.amount,
        reward: split.reward,
        burned: split.burned,
        jailed_until: jail_until,
    });
    Ok(())
}

/// A quorum (the job's `quorum`) of distinct Active members of the job's committee attests,
/// by signing this transaction, that none of them accepted a proof of this Running job ending
/// after `last_proof_window_end`; if `max_missed_windows` windows have passed since the later of
/// that and the last settled window, the provider is slashed `downtime_slash_bps` (reward to
/// the submitting validator's `reporter_stake_account`, rest burned) and the job fails; the
/// user's `close_job` refunds the escrow. Downtime is measured from proofs the committee saw,
/// so late settlement never slashes an honest provider. The signer is one member; the others
/// are passed as remaining accounts in pairs (Validator account, its authority as a signer).
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

    require!(job.status == JobStatus::Running, GpuMarketError::InvalidJobStatus);
    let window = i64::from(terms.window_seconds);
    let last_seen = job.last_window_end.max(last_proof_window_end);
    let missed = now
        .checked_sub(last_seen)
        .and_then(|idle| idle.checked_div(window))
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(
        missed >= i64::from(terms.max_missed_windows),
        GpuMarketError::NotEnoughMissedWindows
    );
    let missed = u64::try_from(missed).map_err(|_| GpuMarketError::MathOverflow)?;
    let bps = terms.downtime_slash_bps;
    let split = ctx.accounts.targets.apply(bps, terms.reporter_reward_bps, now)?;
    let reputation = &mut ctx.accounts.targets.provider.reputation;
    reputation.windows_missed = ops::add(reputation.windows_missed, missed)?;
    emit_event(DowntimeSlashed {
        provider: ctx.accounts.targets.provider.key(),
        job: ctx.accounts.targets.job.key(),
        missed_windows: missed,
        last_proof_window_end,
        validators: seen.len() as u8,
        slash_bps: bps,
        reporter_reward_bps: terms.reporter_reward_bps,
        slashed: split.amount,
        reward: split.reward,
        burned: split.burned,
    });
    Ok(())
}
