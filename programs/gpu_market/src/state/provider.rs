use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;

pub const MAX_GPUS_PER_PROVIDER: u16 = 256;

/// What the provider rents out. Strings are fixed-size, zero-padded UTF-8 so every account of a
/// kind has one size and fixed offsets (memcmp filters).
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub struct GpuSpec {
    pub gpu_model: [u8; 32],
    pub gpu_count: u16,
    pub vram_mib: u32,
    pub region: [u8; 16],
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub enum ProviderStatus {
    Active,
    Paused,
    Jailed { until: i64 },
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace)]
pub struct Unbonding {
    pub amount: u64,
    pub release_at: i64,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace)]
pub struct Reputation {
    pub verified_seconds: u64,
    pub windows_missed: u64,
    pub jobs_completed: u64,
    pub jobs_failed: u64,
    pub slashes: u32,
}

/// `["provider", market, owner]`.
#[account]
#[derive(InitSpace)]
pub struct Provider {
    pub market: Pubkey,
    pub owner: Pubkey,
    pub worker_key: Pubkey,
    /// Unix time after which the worker key no longer signs; 0 = never expires.
    pub worker_key_expires_at: i64,
    /// The key replaced by the last rotation (`Pubkey::default()` if none).
    pub previous_worker_key: Pubkey,
    /// When `previous_worker_key` was replaced: it signs only windows that ended by then.
    pub previous_key_retired_at: i64,
    pub spec: GpuSpec,
    pub price_per_gpu_second: u64,
    pub status: ProviderStatus,
    pub stake: u64,
    pub unbonding: Unbonding,
    pub gpus_in_use: u16,
    pub reputation: Reputation,
    pub bump: u8,
}

impl Provider {
    pub fn free_gpus(&self) -> u16 {
        self.spec.gpu_count.saturating_sub(self.gpus_in_use)
    }

    /// Stake needed to cover `gpus` GPUs in use.
    pub fn required_stake(min_stake_per_gpu: u64, gpus: u16) -> Result<u64> {
        min_stake_per_gpu
            .checked_mul(u64::from(gpus))
            .ok_or_else(|| GpuMarketError::MathOverflow.into())
    }

    /// Whether `key` is the current worker key, unexpired at unix time `at` (accepting jobs,
    /// signing windows that end at `at`).
    pub fn current_key_valid_at(&self, key: &Pubkey, at: i64) -> bool {
        *key == self.worker_key
            && (self.worker_key_expires_at == 0 || at <= self.worker_key_expires_at)
    }

    /// Whether a receipt for a window ending at `window_end`, signed by `key`, may settle at
    /// `now`: the current key unexpired at `window_end`, or the previous key for a window that
    /// ended by its retirement, settled within `grace` seconds of the retirement. A retired key
    /// (lost or leaked, say) cannot sign for any time after the rotation.
    pub fn receipt_key_valid(&self, key: &Pubkey, window_end: i64, now: i64, grace: i64) -> bool {
        let previous = *key == self.previous_worker_key
            && self.previous_worker_key != Pubkey::default()
            && window_end <= self.previous_key_retired_at
            && now <= self.previous_key_retired_at.saturating_add(grace);
        self.current_key_valid_at(key, window_end) || previous
    }

    pub fn invariant(&self) -> Result<()> {
        require!(
            self.gpus_in_use <= self.spec.gpu_count,
            GpuMarketError::InvariantViolated
        );
        Ok(())
    }
}
