use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::state::ENDPOINT_LEN;

pub const MAX_GPUS_PER_PROVIDER: u16 = 256;
/// Retired worker keys kept for evidence and late receipts. A rotation that would drop a key
/// retired less than `unbonding_seconds` ago is refused, so evidence signed by any key stays
/// usable for as long as the stake it can slash stays locked.
pub const RETIRED_KEYS: usize = 4;

/// A worker key replaced by a rotation: it signs only windows that ended by `retired_at`.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace)]
pub struct RetiredWorkerKey {
    /// `Pubkey::default()` marks an empty slot.
    pub key: Pubkey,
    pub retired_at: i64,
}

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
    /// Keys replaced by rotations, newest first.
    pub retired_keys: [RetiredWorkerKey; RETIRED_KEYS],
    /// When the last equivocation slash took place (0 = never). Evidence counts only for
    /// windows that ended after it: one incident is punished once, whatever its seqs or jobs.
    pub last_equivocation_slash_at: i64,
    pub spec: GpuSpec,
    pub price_per_gpu_second: u64,
    pub status: ProviderStatus,
    pub stake: u64,
    pub unbonding: Unbonding,
    pub gpus_in_use: u16,
    pub reputation: Reputation,
    pub bump: u8,
    /// The worker's public API (workload delivery, status, logs; zero-padded URL), or all
    /// zeros when the provider runs no workloads.
    pub endpoint: [u8; ENDPOINT_LEN],
    /// The highest equivocation slash rate applied to the incident of
    /// `last_equivocation_slash_at`: later evidence of that incident under a job whose terms
    /// carry a higher rate slashes the difference, never the same rate twice.
    pub last_equivocation_slash_bps: u16,
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
        *key == self.worker_key && !self.current_key_expired_at(at)
    }

    /// Whether the current worker key has expired by unix time `at`.
    pub fn current_key_expired_at(&self, at: i64) -> bool {
        self.worker_key_expires_at != 0 && at > self.worker_key_expires_at
    }

    /// The retirement time of `key` if it is a retired key that signs a window ending at
    /// `window_end` (one that ended by its retirement). Evidence uses this with no time limit.
    pub fn retired_key_covers(&self, key: &Pubkey, window_end: i64) -> Option<i64> {
        self.retired_keys
            .iter()
            .filter(|r| r.key != Pubkey::default() && r.key == *key && window_end <= r.retired_at)
            .map(|r| r.retired_at)
            .max()
    }

    /// Whether `key` signed a window ending at `window_end` for this provider: the current key
    /// unexpired then, or a retired key for a window that ended by its retirement. A retired
    /// key (lost or leaked, say) signs for no time after its rotation.
    pub fn key_signs_window(&self, key: &Pubkey, window_end: i64) -> bool {
        self.current_key_valid_at(key, window_end)
            || self.retired_key_covers(key, window_end).is_some()
    }

    /// Whether a receipt for a window ending at `window_end`, signed by `key`, may settle at
    /// `now`: the current key unexpired at `window_end`, or a retired key for a window that
    /// ended by its retirement, settled within `grace` seconds of the retirement.
    pub fn receipt_key_valid(&self, key: &Pubkey, window_end: i64, now: i64, grace: i64) -> bool {
        self.current_key_valid_at(key, window_end)
            || self
                .retired_key_covers(key, window_end)
                .is_some_and(|retired_at| now <= retired_at.saturating_add(grace))
    }

    /// Retires the current key at `now` and installs `new_key`. The oldest retired key is
    /// dropped; that is refused while it retired less than `retention` seconds ago, so no
    /// rotation (or burst of rotations) makes evidence that could still slash unusable.
    pub fn rotate_key(&mut self, new_key: Pubkey, expires_at: i64, now: i64, retention: i64) -> Result<()> {
        let oldest = self.retired_keys[RETIRED_KEYS.saturating_sub(1)];
        require!(
            oldest.key == Pubkey::default() || now >= oldest.retired_at.saturating_add(retention),
            GpuMarketError::RotationTooSoon
        );
        self.retired_keys.rotate_right(1);
        self.retired_keys[0] = RetiredWorkerKey { key: self.worker_key, retired_at: now };
        self.worker_key = new_key;
        self.worker_key_expires_at = expires_at;
        Ok(())
    }

    pub fn invariant(&self) -> Result<()> {
        require!(
            self.gpus_in_use <= self.spec.gpu_count,
            GpuMarketError::InvariantViolated
        );
        Ok(())
    }
}
