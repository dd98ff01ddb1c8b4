use anchor_lang::prelude::*;

use crate::checked::add;
use crate::errors::GpuMarketError;
use crate::state::{MarketParams, Provider};

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
    /// The user rated this job (`rate_job`, once per job; the tombstone keeps the flag).
    pub rated: bool,
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

    /// Equivocation evidence (two receipts, or two attestations of receipts, for windows ending
    /// at `first_window_end` and `second_window_end`) is about this job only if the job started
    /// and both windows ended after its start: a job address is used once (`close_job` leaves a
    /// tombstone), so such evidence belongs to this job and no earlier one.
    pub fn check_evidence_windows(&self, first_window_end: i64, second_window_end: i64) -> Result<()> {
        require!(self.status != JobStatus::Open, GpuMarketError::InvalidJobStatus);
        require!(self.started_at != 0, GpuMarketError::JobNeverStarted);
        require!(
            first_window_end > self.started_at && second_window_end > self.started_at,
            GpuMarketError::ReceiptBeforeJobStart
        );
        Ok(())
    }

    /// Ends a job that still holds its provider's GPUs (Open, Running or Finishing): frees them,
    /// sets `status` (`ended_at` is kept once set by `finish_job`) and books the outcome once on
    /// the provider's reputation: Completed counts only if the job billed something (a job that
    /// paid nothing proves nothing), Failed always.
    pub fn end(&mut self, provider: &mut Provider, status: JobStatus, now: i64) -> Result<()> {
        require!(self.status.holds_gpus(), GpuMarketError::InvalidJobStatus);
        provider.gpus_in_use = provider
            .gpus_in_use
            .checked_sub(self.gpu_count)
            .ok_or(GpuMarketError::MathOverflow)?;
        if matches!(self.status, JobStatus::Open | JobStatus::Running) {
            self.ended_at = now;
        }
        self.status = status;
        let reputation = &mut provider.reputation;
        match status {
            JobStatus::Completed if self.paid_seconds > 0 => {
                reputation.jobs_completed = add(reputation.jobs_completed, 1)?;
            }
            JobStatus::Failed => reputation.jobs_failed = add(reputation.jobs_failed, 1)?,
            _ => {}
        }
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
/// It keeps what `rate_job` needs (who may rate, whom, whether the job billed, whether it was
/// rated), so a user may rate after closing; `rate_job` is the only instruction that writes
/// it, and only `rated`.
#[account]
#[derive(InitSpace)]
pub struct ClosedJob {
    pub closed_at: i64,
    pub user: Pubkey,
    /// The Provider account (PDA).
    pub provider: Pubkey,
    pub paid_seconds: u64,
    pub rated: bool,
}

impl ClosedJob {
    /// The tombstone of `job`, closed at `now`.
    pub fn of(job: &Job, now: i64) -> Self {
        Self { closed_at: now, user: job.user, provider: job.provider, paid_seconds: job.paid_seconds, rated: job.rated }
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::integer_division)]
mod tests {
    use super::*;
    use crate::state::testing::{code_of, error_code, zeroed};

    const GRACE: i64 = 60;
    const ENDED: i64 = 1_000;

    fn job(status: JobStatus) -> Job {
        let mut job: Job = zeroed();
        (job.status, job.gpu_count, job.deposited, job.ended_at) = (status, 2, 1_000, ENDED);
        job.terms.grace_seconds = GRACE;
        job
    }

    fn provider(gpus_in_use: u16) -> Provider {
        let mut provider: Provider = zeroed();
        (provider.gpus_in_use, provider.spec.gpu_count) = (gpus_in_use, 8);
        provider
    }

    #[test]
    fn settlement_is_never_over_while_the_job_can_bill() {
        for status in [JobStatus::Open, JobStatus::Running] {
            for now in [i64::MIN, 0, ENDED + GRACE + 1, i64::MAX] {
                assert!(!job(status).settlement_over(now).unwrap(), "{status:?} at {now}");
            }
        }
    }

    #[test]
    fn a_finishing_job_settles_until_its_grace_is_over_strictly() {
        let j = job(JobStatus::Finishing);
        assert!(!j.settlement_over(ENDED).unwrap());
        assert!(!j.settlement_over(ENDED + GRACE - 1).unwrap());
        assert!(!j.settlement_over(ENDED + GRACE).unwrap());
        assert!(j.settlement_over(ENDED + GRACE + 1).unwrap());
        assert!(j.settlement_over(i64::MAX).unwrap());
    }

    #[test]
    fn a_grace_end_past_i64_max_is_an_overflow_not_a_wrap() {
        let mut j = job(JobStatus::Finishing);
        j.ended_at = i64::MAX - GRACE + 1;
        assert_eq!(error_code(j.settlement_over(i64::MAX).unwrap_err()), code_of(GpuMarketError::MathOverflow));
        j.ended_at = i64::MAX - GRACE;
        assert!(!j.settlement_over(i64::MAX).unwrap());
    }

    #[test]
    fn an_ended_job_has_nothing_left_to_settle() {
        for status in [JobStatus::Completed, JobStatus::Cancelled, JobStatus::Failed, JobStatus::Declined] {
            for now in [i64::MIN, 0, ENDED, i64::MAX] {
                assert!(job(status).settlement_over(now).unwrap(), "{status:?} at {now}");
            }
        }
    }

    #[test]
    fn booked_escrow_is_the_deposit_less_every_outflow() {
        let mut j = job(JobStatus::Running);
        assert_eq!(j.booked_escrow().unwrap(), 1_000);
        (j.paid_provider, j.paid_validators, j.paid_treasury, j.burned, j.refunded) = (500, 100, 200, 50, 149);
        assert_eq!(j.booked_escrow().unwrap(), 1);
        j.refunded = 150;
        assert_eq!(j.booked_escrow().unwrap(), 0);
        j.refunded = 151;
        assert_eq!(error_code(j.booked_escrow().unwrap_err()), code_of(GpuMarketError::InvariantViolated));
    }

    #[test]
    fn booked_escrow_refuses_any_single_outflow_above_the_deposit() {
        for field in 0..5 {
            let mut j = job(JobStatus::Running);
            j.deposited = u64::MAX;
            assert_eq!(j.booked_escrow().unwrap(), u64::MAX);
            let outflow = [&mut j.paid_provider, &mut j.paid_validators, &mut j.paid_treasury, &mut j.burned, &mut j.refunded];
            *outflow[field] = u64::MAX;
            assert_eq!(j.booked_escrow().unwrap(), 0);
            j.deposited = u64::MAX - 1;
            assert_eq!(error_code(j.booked_escrow().unwrap_err()), code_of(GpuMarketError::InvariantViolated));
        }
    }

    #[test]
    fn the_escrow_may_hold_more_than_booked_never_less() {
        let j = job(JobStatus::Running);
        assert!(j.invariant(1_000).is_ok());
        assert!(j.invariant(u64::MAX).is_ok());
        assert_eq!(error_code(j.invariant(999).unwrap_err()), code_of(GpuMarketError::InvariantViolated));
    }

    #[test]
    fn evidence_counts_only_for_windows_after_the_start_of_a_started_job() {
        let code = |j: &Job, a, b| j.check_evidence_windows(a, b).map_err(error_code);
        let mut j = job(JobStatus::Running);
        j.started_at = 100;
        assert_eq!(code(&j, 101, 101), Ok(()));
        assert_eq!(code(&j, 101, i64::MAX), Ok(()));
        assert_eq!(code(&j, 100, 101), Err(code_of(GpuMarketError::ReceiptBeforeJobStart)));
        assert_eq!(code(&j, 101, 100), Err(code_of(GpuMarketError::ReceiptBeforeJobStart)));
        assert_eq!(code(&j, i64::MIN, 99), Err(code_of(GpuMarketError::ReceiptBeforeJobStart)));
        for status in [JobStatus::Finishing, JobStatus::Completed, JobStatus::Failed] {
            j.status = status;
            assert_eq!(code(&j, 101, 101), Ok(()), "{status:?}");
        }
        j.started_at = 0;
        assert_eq!(code(&j, 101, 101), Err(code_of(GpuMarketError::JobNeverStarted)));
        j.status = JobStatus::Open;
        assert_eq!(code(&j, 101, 101), Err(code_of(GpuMarketError::InvalidJobStatus)));
    }

    #[test]
    fn ending_frees_the_gpus_and_books_the_outcome_once() {
        let mut j = job(JobStatus::Running);
        let mut p = provider(3);
        j.end(&mut p, JobStatus::Failed, 2_000).unwrap();
        assert_eq!((j.status, j.ended_at, p.gpus_in_use), (JobStatus::Failed, 2_000, 1));
        assert_eq!((p.reputation.jobs_failed, p.reputation.jobs_completed), (1, 0));
        // It holds no GPUs any more: a second end is refused and books nothing.
        assert_eq!(error_code(j.end(&mut p, JobStatus::Completed, 2_001).unwrap_err()), code_of(GpuMarketError::InvalidJobStatus));
        assert_eq!((p.gpus_in_use, p.reputation.jobs_completed), (1, 0));
    }

    #[test]
    fn a_finished_job_keeps_its_end_and_counts_completed_only_if_it_billed() {
        let mut p = provider(4);
        let mut unpaid = job(JobStatus::Finishing);
        unpaid.end(&mut p, JobStatus::Completed, 5_000).unwrap();
        assert_eq!((unpaid.ended_at, p.reputation.jobs_completed), (ENDED, 0));
        let mut paid = job(JobStatus::Finishing);
        paid.paid_seconds = 1;
        paid.end(&mut p, JobStatus::Completed, 5_000).unwrap();
        assert_eq!((p.gpus_in_use, p.reputation.jobs_completed), (0, 1));
    }

    #[test]
    fn ending_more_gpus_than_the_provider_has_in_use_is_an_overflow() {
        let mut j = job(JobStatus::Open);
        let mut p = provider(1);
        assert_eq!(error_code(j.end(&mut p, JobStatus::Cancelled, 0).unwrap_err()), code_of(GpuMarketError::MathOverflow));
        let mut p = provider(2);
        j.end(&mut p, JobStatus::Cancelled, 0).unwrap();
        assert_eq!(p.gpus_in_use, 0);
    }

    #[test]
    fn reputation_counters_do_not_wrap() {
        let mut j = job(JobStatus::Running);
        let mut p = provider(2);
        p.reputation.jobs_failed = u64::MAX;
        assert_eq!(error_code(j.end(&mut p, JobStatus::Failed, 0).unwrap_err()), code_of(GpuMarketError::MathOverflow));
    }
}
