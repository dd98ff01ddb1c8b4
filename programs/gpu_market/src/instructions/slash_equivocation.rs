use anchor_lang::prelude::*;

use crate::checked;
use crate::errors::GpuMarketError;
use crate::events::{emit_event, EquivocationSlashed};
// A glob: the nested `SlashTargets` needs the modules Anchor generates beside it.
use crate::instructions::slash_targets::*;
use crate::math;
use crate::ops;
use crate::receipt::{preceding_ed25519_entries, Receipt};
use crate::seeds;
use crate::state::{EquivocationRecord, ProviderStatus, MAX_SKEW_SECONDS};

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

pub fn handler(ctx: Context<SlashEquivocation>, first: Receipt, second: Receipt) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    require!(first.seq == second.seq, GpuMarketError::EquivocationSeqMismatch);
    require!(first != second, GpuMarketError::NotEquivocation);
    let program_id = *ctx.program_id;
    let t = &ctx.accounts.targets;
    t.job.check_evidence_windows(first.window_end, second.window_end)?;
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
        provider.reputation.slashes = checked::add32(provider.reputation.slashes, 1)?;
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
