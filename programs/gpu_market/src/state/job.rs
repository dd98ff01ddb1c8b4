use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub enum JobStatus {
    Open,
    Running,
    Finishing,
    Completed,
    Cancelled,
    Failed,
}

impl JobStatus {
    /// Open, Running and Finishing jobs hold the provider's GPUs.
    pub fn holds_gpus(self) -> bool {
        matches!(self, Self::Open | Self::Running | Self::Finishing)
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
    /// Locked at creation: `price_per_gpu_second * gpu_count`.
    pub rate_per_second: u64,
    pub deposited: u64,
    pub settled_seconds: u64,
    pub paid_provider: u64,
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
}

impl Job {
    /// Conservation: every token deposited is paid out, burned, refunded or still in escrow.
    pub fn invariant(&self, escrow_balance: u64) -> Result<()> {
        let accounted = [
            self.paid_provider,
            self.paid_treasury,
            self.burned,
            self.refunded,
            escrow_balance,
        ]
        .iter()
        .try_fold(0u64, |sum, v| sum.checked_add(*v))
        .ok_or(GpuMarketError::MathOverflow)?;
        require!(accounted == self.deposited, GpuMarketError::InvariantViolated);
        Ok(())
    }
}
