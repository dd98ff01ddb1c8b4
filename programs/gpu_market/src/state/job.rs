use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::state::MarketParams;

/// Validators a user may name for a job.
pub const MAX_COMMITTEE: usize = 5;

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub enum JobStatus {
    Open,
    Running,
    Finishing,
    Completed,
    Cancelled,
    Failed,
    /// The provider refused an Open job; the user's `close_job` refunds everything.
    Declined,
}

impl JobStatus {
    /// Open, Running and Finishing jobs hold the provider's GPUs.
    pub fn holds_gpus(self) -> bool {
        matches!(self, Self::Open | Self::Running | Self::Finishing)
    }
}

/// The economic terms of a job, fixed at `create_job` from the market parameters in force then
/// and the provider's price. Nothing can change them afterwards: not the authority (parameter
/// changes apply to new jobs only), not the provider (price changes apply to new jobs only).
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub struct JobTerms {
    /// `price_per_gpu_second * gpu_count`.
    pub rate_per_second: u64,
    pub fee_bps: u16,
    pub burn_bps: u16,
    pub window_seconds: u32,
    pub max_missed_windows: u32,
    /// After the job ends, receipts up to `ended_at` settle for this long; `close_job` waits.
    pub grace_seconds: i64,
    pub max_skew_seconds: u32,
    /// Attestations (the submitter's included) a settle or downtime report needs: the user's q.
    pub quorum: u8,
    pub downtime_slash_bps: u16,
    pub equivocation_slash_bps: u16,
    pub reporter_reward_bps: u16,
    pub temp_critical_c: u16,
    pub ecc_uncorrected_max: u32,
    pub validator_reward_bps: u16,
}

impl JobTerms {
    pub fn new(params: &MarketParams, rate_per_second: u64, quorum: u8) -> Self {
        Self {
            rate_per_second,
            fee_bps: params.fee_bps,
            burn_bps: params.burn_bps,
            window_seconds: params.window_seconds,
            max_missed_windows: params.max_missed_windows,
            grace_seconds: params.grace_seconds(),
            max_skew_seconds: params.max_skew_seconds,
            quorum,
            downtime_slash_bps: params.downtime_slash_bps,
            equivocation_slash_bps: params.equivocation_slash_bps,
            reporter_reward_bps: params.reporter_reward_bps,
            temp_critical_c: params.temp_critical_c,
            ecc_uncorrected_max: params.ecc_uncorrected_max,
            validator_reward_bps: params.validator_reward_bps,
        }
    }

    /// After a rotation, receipts signed by the retired key (for windows that ended by then)
    /// may still settle for `max_missed_windows` windows: as long as a validator may hold them.
    pub fn key_rotation_grace_seconds(&self) -> i64 {
        i64::from(self.window_seconds).saturating_mul(i64::from(self.max_missed_windows))
    }

    /// `max_missed_windows` windows in seconds: the silence after which a job may be slashed.
    pub fn missed_windows_seconds(&self) -> i64 {
        i64::from(self.window_seconds).saturating_mul(i64::from(self.max_missed_windows))
    }
}

/// `["job", market, user, job_id]`. Tokens sit in the escrow `["escrow", job]`, whose
/// authority is this account.
#[account]
#[derive(InitSpace)]
pub struct Job {
    pub market: Pubkey,
    pub user: Pubkey,
    /// The Provider account (PDA), not its owner.
    pub provider: Pubkey,
    pub job_id: u64,
    pub gpu_count: u16,
    pub terms: JobTerms,
    /// The validators the user chose (authority keys), `committee_len` of them first; only they
    /// settle, attest and report downtime for this job.
    pub committee: [Pubkey; MAX_COMMITTEE],
    pub committee_len: u8,
    pub deposited: u64,
    /// Cumulative seconds of the last settled receipt (the worker's claim).
    pub claimed_seconds: u64,
    /// Seconds paid so far: the committee's approved total; never more than the claim, nor the
    /// wall time since `started_at` (+ skew while running), in total.
    pub paid_seconds: u64,
    pub paid_provider: u64,
    /// Rewards credited to the attesting validators (held by the fee vault until claimed).
    pub paid_validators: u64,
    pub paid_treasury: u64,
    pub burned: u64,
    pub refunded: u64,
    pub status: JobStatus,
    pub created_at: i64,
    pub started_at: i64,
    pub ended_at: i64,
    pub last_seq: u64,
    pub last_receipt_hash: [u8; 32],
    /// `window_end` of the last settled receipt; `started_at` before the first.
    pub last_window_end: i64,
    pub bump: u8,
    pub escrow_bump: u8,
    /// sha256 of the canonical workload spec the user asked to run (DESIGN section 8), fixed
    /// at `create_job`; all zeros for a job without a workload (GPUs only). Lets the provider
    /// prove what it was asked to run and the user prove what it asked for.
    pub workload_hash: [u8; 32],
}

impl Job {
    /// The committee members, in the user's order.
    pub fn members(&self) -> &[Pubkey] {
        let len = usize::from(self.committee_len).min(MAX_COMMITTEE);
        &self.committee[..len]
    }

    /// Index of `authority` in the committee, if it is a member.
    pub fn member_index(&self, authority: &Pubkey) -> Option<usize> {
        self.members().iter().position(|m| m == authority)
    }

    /// Tokens the books say are still in escrow:
    /// `deposited - paid_provider - paid_validators - paid_treasury - burned - refunded`.
    pub fn booked_escrow(&self) -> Result<u64> {
        [self.paid_provider, self.paid_validators, self.paid_treasury, self.burned, self.refunded]
            .iter()
            .try_fold(self.deposited, |left, v| left.checked_sub(*v))
            .ok_or_else(|| GpuMarketError::InvariantViolated.into())
    }

    /// Conservation: every token deposited is paid out, burned, refunded or still booked in
    /// escrow, and the escrow holds at least the booked amount. It may hold more: anyone can
    /// send tokens to it, and that surplus goes to the user when the escrow is emptied.
    pub fn invariant(&self, escrow_balance: u64) -> Result<()> {
        require!(
            escrow_balance >= self.booked_escrow()?,
            GpuMarketError::InvariantViolated
        );
        Ok(())
    }

    /// The job can bill and settle no more, and the grace for late receipts is over (or there
    /// never was anything to settle): the escrow may be emptied.
    pub fn settlement_over(&self, now: i64) -> Result<bool> {
        Ok(match self.status {
            JobStatus::Open | JobStatus::Running => false,
            JobStatus::Finishing => {
                let grace_end = self
                    .ended_at
                    .checked_add(self.terms.grace_seconds)
                    .ok_or(GpuMarketError::MathOverflow)?;
                now > grace_end
            }
            JobStatus::Completed | JobStatus::Cancelled | JobStatus::Failed | JobStatus::Declined => {
                true
            }
        })
    }
}

/// What `close_job` leaves at a job's address: a program-owned tombstone, so the address can
/// never hold a Job again (`create_job`'s `init` finds it in use). One address, one incarnation:
/// every receipt, attestation and piece of evidence bound to a job address is about one job.
#[account]
#[derive(InitSpace)]
pub struct ClosedJob {
    pub closed_at: i64,
}
