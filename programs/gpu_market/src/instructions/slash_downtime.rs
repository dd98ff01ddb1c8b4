use anchor_lang::prelude::*;

use crate::checked;
use crate::errors::GpuMarketError;
use crate::events::{emit_event, DowntimeSlashed};
// A glob: the nested `SlashTargets` needs the modules Anchor generates beside it.
use crate::instructions::slash_targets::*;
use crate::math;
use crate::state::{JobStatus, Validator, ValidatorStatus};

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

pub fn handler<'info>(
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
    reputation.windows_missed = checked::add(reputation.windows_missed, missed)?;
    reputation.slashes = checked::add32(reputation.slashes, 1)?;
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
