use anchor_lang::prelude::*;

use crate::checked::{add, add32, sub};
use crate::errors::GpuMarketError;
use crate::math::SlashSplit;
use crate::state::{Market, ENDPOINT_LEN};

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

/// The last hardware verdict a quorum of validators attested for the provider
/// (`attest_hardware`): what the challenge found and when, not a judgement the chain makes.
/// `verified` holds only while the provider's declared GPU model, count and VRAM are the
/// attested ones (`update_provider` changing them, or a worker-key rotation, clears it), and
/// a proven wrong answer (`slash_wrong_answer`) clears it too.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace)]
pub struct HardwareVerdict {
    /// The last verdict passed and nothing has cleared it since.
    pub verified: bool,
    /// What the last verdict said (a cleared pass stays `passed`, no longer `verified`).
    pub passed: bool,
    pub gpu_model: [u8; 32],
    pub gpu_count: u16,
    pub vram_mib: u32,
    /// When the validators issued the challenge (their clock); 0 = never attested. Every
    /// attestation must be for a later challenge than the one recorded here.
    pub challenged_at: i64,
    /// Chain time of the attestation.
    pub attested_at: i64,
    /// sha256 of the challenge's canonical bytes (`gpu_market.challenge.Challenge.challenge_id`).
    pub challenge_digest: [u8; 32],
    /// Validators whose signatures the attestation carried.
    pub attesters: u8,
    /// sha256 of those validators' authority keys, sorted by bytes and concatenated (the keys
    /// themselves are in the `HardwareAttested` event).
    pub attesters_hash: [u8; 32],
}

impl HardwareVerdict {
    /// Whether the verdict is about `spec`'s GPU model, count and VRAM (the region is not
    /// something a challenge measures).
    pub fn matches(&self, spec: &GpuSpec) -> bool {
        self.gpu_model == spec.gpu_model && self.gpu_count == spec.gpu_count && self.vram_mib == spec.vram_mib
    }
}

/// Users' ratings of the provider's billed jobs (`rate_job`): one per job, 1..=5 stars each,
/// so `count <= sum <= 5 * count`. Clients show `sum / count` and smooth it (`gpum offers`).
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace)]
pub struct Ratings {
    pub count: u32,
    pub sum: u32,
}

impl Ratings {
    /// These ratings with one more of `score` stars (1..=5, `InvalidRating`); `MathOverflow`
    /// rather than a wrap when the count or the sum would pass `u32::MAX`.
    pub fn with(self, score: u8) -> Result<Ratings> {
        require!((MIN_RATING..=MAX_RATING).contains(&score), GpuMarketError::InvalidRating);
        Ok(Ratings {
            count: add32(self.count, 1)?,
            sum: add32(self.sum, u32::from(score))?,
        })
    }

    /// `count <= sum <= 5 * count`: every rating is 1..=5 stars.
    pub fn consistent(&self) -> bool {
        let (count, sum) = (u64::from(self.count), u64::from(self.sum));
        count <= sum && sum <= count.saturating_mul(u64::from(MAX_RATING))
    }
}

/// The stars a rating may give.
pub const MIN_RATING: u8 = 1;
pub const MAX_RATING: u8 = 5;

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
    /// Chain time of `register_provider`: the start of the provider's record.
    pub registered_at: i64,
    /// Chain time of the provider's last slash of any kind (0 = never): a clean record counts
    /// from the later of this and `registered_at` (the badge, `gpu_market.reputation.badge`).
    pub last_slash_at: i64,
    pub hardware: HardwareVerdict,
    pub ratings: Ratings,
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

    /// Books `split` against the provider's stake (then unbonding) and the market totals. The
    /// caller moves the tokens (reward, burn) out of the stake vault.
    /// Every slash path calls it, so `last_slash_at` is set by each.
    pub fn book_slash(&mut self, market: &mut Market, split: &SlashSplit, now: i64) -> Result<()> {
        self.last_slash_at = now;
        self.stake = sub(self.stake, split.from_stake)?;
        self.unbonding.amount = sub(self.unbonding.amount, split.from_unbonding)?;
        market.totals.staked = sub(market.totals.staked, split.amount)?;
        market.totals.slashed = add(market.totals.slashed, split.amount)?;
        Ok(())
    }

    /// A changed GPU model, count or VRAM, or another worker key, is not what the last
    /// challenge measured: the provider is unverified until a new verdict.
    pub fn clear_verified(&mut self) {
        self.hardware.verified = false;
    }

    /// `gpus_in_use <= gpu_count`; a verified verdict is about the declared spec; ratings are
    /// 1..=5 stars each.
    pub fn invariant(&self) -> Result<()> {
        require!(
            self.gpus_in_use <= self.spec.gpu_count,
            GpuMarketError::InvariantViolated
        );
        require!(
            !self.hardware.verified || (self.hardware.passed && self.hardware.matches(&self.spec)),
            GpuMarketError::InvariantViolated
        );
        require!(self.ratings.consistent(), GpuMarketError::InvariantViolated);
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::integer_division)]
mod tests {
    use super::*;
    use crate::state::testing::{code_of, error_code, zeroed};

    const GRACE: i64 = 100;

    fn provider() -> Provider {
        let mut provider: Provider = zeroed();
        (provider.owner, provider.worker_key) = (Pubkey::new_unique(), Pubkey::new_unique());
        provider
    }

    /// A provider whose `old` key retired at `retired_at`, `new` being current.
    fn rotated(retired_at: i64) -> (Provider, Pubkey, Pubkey) {
        let mut p = provider();
        let old = p.worker_key;
        let new = Pubkey::new_unique();
        p.rotate_key(new, 0, retired_at, 0).unwrap();
        (p, old, new)
    }

    #[test]
    fn a_current_key_without_expiry_signs_every_window_whenever_settled() {
        let p = provider();
        for window_end in [i64::MIN, 0, i64::MAX] {
            for now in [i64::MIN, 0, i64::MAX] {
                assert!(p.receipt_key_valid(&p.worker_key, window_end, now, GRACE));
            }
        }
        assert!(p.receipt_key_valid(&p.worker_key, 0, 0, 0));
    }

    #[test]
    fn a_current_key_signs_windows_that_end_by_its_expiry() {
        let mut p = provider();
        p.worker_key_expires_at = 1_000;
        assert!(p.receipt_key_valid(&p.worker_key, 999, i64::MAX, GRACE));
        assert!(p.receipt_key_valid(&p.worker_key, 1_000, i64::MAX, GRACE));
        assert!(!p.receipt_key_valid(&p.worker_key, 1_001, 1_001, GRACE));
        assert!(!p.receipt_key_valid(&p.worker_key, i64::MAX, 0, GRACE));
    }

    #[test]
    fn a_retired_key_signs_only_windows_that_ended_by_its_retirement() {
        let (p, old, new) = rotated(500);
        assert!(p.receipt_key_valid(&old, 499, 500, GRACE));
        assert!(p.receipt_key_valid(&old, 500, 500, GRACE));
        assert!(!p.receipt_key_valid(&old, 501, 501, GRACE));
        assert!(p.receipt_key_valid(&new, 501, 501, GRACE));
        // The new key signs earlier windows too: it is current, without expiry.
        assert!(p.receipt_key_valid(&new, 400, 501, GRACE));
    }

    #[test]
    fn a_retired_key_settles_within_the_grace_after_its_retirement() {
        let (p, old, _) = rotated(500);
        assert!(p.receipt_key_valid(&old, 500, 500 + GRACE - 1, GRACE));
        assert!(p.receipt_key_valid(&old, 500, 500 + GRACE, GRACE));
        assert!(!p.receipt_key_valid(&old, 500, 500 + GRACE + 1, GRACE));
        assert!(!p.receipt_key_valid(&old, 500, 501, 0));
        assert!(p.receipt_key_valid(&old, 500, 500, 0));
        // Evidence has no time limit: the key still signed that window.
        assert!(p.key_signs_window(&old, 500));
    }

    #[test]
    fn the_grace_saturates_at_i64_max() {
        let (p, old, _) = rotated(i64::MAX - 1);
        assert!(p.receipt_key_valid(&old, 0, i64::MAX, GRACE));
        assert!(p.receipt_key_valid(&old, i64::MAX - 1, i64::MAX, i64::MAX));
    }

    #[test]
    fn no_other_key_signs() {
        let (p, _, _) = rotated(500);
        assert!(!p.receipt_key_valid(&Pubkey::new_unique(), 0, 0, GRACE));
        // Empty retired slots hold the default key; it signs nothing.
        assert!(!p.receipt_key_valid(&Pubkey::default(), 0, 0, GRACE));
        assert!(!p.receipt_key_valid(&Pubkey::default(), i64::MIN, i64::MIN, i64::MAX));
    }

    #[test]
    fn a_key_retired_twice_counts_from_its_latest_retirement() {
        let mut p = provider();
        let a = p.worker_key;
        let b = Pubkey::new_unique();
        p.rotate_key(b, 0, 100, 0).unwrap();
        p.rotate_key(a, 0, 200, 0).unwrap();
        p.rotate_key(b, 0, 300, 0).unwrap();
        // `a` retired at 100 and again at 300: a window ending at 300 settles until 300 + grace.
        assert!(p.receipt_key_valid(&a, 300, 300 + GRACE, GRACE));
        assert!(!p.receipt_key_valid(&a, 301, 301, GRACE));
    }

    fn market(staked: u64) -> Market {
        let mut market: Market = zeroed();
        market.totals.staked = staked;
        market
    }

    fn split(from_stake: u64, from_unbonding: u64) -> SlashSplit {
        let amount = from_stake + from_unbonding;
        SlashSplit { amount, from_stake, from_unbonding, reward: 0, burned: amount }
    }

    #[test]
    fn a_slash_is_booked_on_stake_unbonding_and_market_totals() {
        let mut p = provider();
        p.stake = 100;
        p.unbonding.amount = 50;
        let mut m = market(150);
        p.book_slash(&mut m, &split(100, 50), 7).unwrap();
        assert_eq!(p.last_slash_at, 7);
        assert_eq!((p.stake, p.unbonding.amount), (0, 0));
        assert_eq!((m.totals.staked, m.totals.slashed), (0, 150));
    }

    #[test]
    fn a_slash_above_the_stake_is_an_overflow() {
        let mut p = provider();
        p.stake = 100;
        let mut m = market(100);
        assert_eq!(error_code(p.book_slash(&mut m, &split(101, 0), 0).unwrap_err()), code_of(GpuMarketError::MathOverflow));
        let mut p = provider();
        assert_eq!(error_code(p.book_slash(&mut m, &split(0, 1), 0).unwrap_err()), code_of(GpuMarketError::MathOverflow));
        let mut p = provider();
        p.stake = u64::MAX;
        let mut m = market(u64::MAX);
        m.totals.slashed = 1;
        assert_eq!(error_code(p.book_slash(&mut m, &split(u64::MAX, 0), 0).unwrap_err()), code_of(GpuMarketError::MathOverflow));
    }

    #[test]
    fn a_rating_is_one_to_five_stars() {
        for score in [0u8, 6, u8::MAX] {
            assert_eq!(error_code(Ratings::default().with(score).unwrap_err()), code_of(GpuMarketError::InvalidRating));
        }
        let r = Ratings::default().with(1).unwrap().with(5).unwrap();
        assert_eq!((r.count, r.sum), (2, 6));
        assert!(r.consistent());
    }

    #[test]
    fn ratings_overflow_rather_than_wrap() {
        let full = Ratings { count: u32::MAX, sum: u32::MAX };
        assert_eq!(error_code(full.with(1).unwrap_err()), code_of(GpuMarketError::MathOverflow));
        let sum_full = Ratings { count: 1, sum: u32::MAX - 4 };
        assert_eq!(error_code(sum_full.with(5).unwrap_err()), code_of(GpuMarketError::MathOverflow));
        assert_eq!(sum_full.with(4).unwrap().sum, u32::MAX);
    }

    #[test]
    fn a_spec_change_is_what_clears_a_verdict() {
        let mut p = provider();
        p.spec.gpu_count = 8;
        p.hardware = HardwareVerdict { verified: true, passed: true, gpu_count: 8, ..Default::default() };
        assert!(p.invariant().is_ok());
        p.spec.region = [1; 16];
        assert!(p.hardware.matches(&p.spec), "the region is not measured");
        p.spec.vram_mib = 1;
        assert_eq!(error_code(p.invariant().unwrap_err()), code_of(GpuMarketError::InvariantViolated));
        p.clear_verified();
        assert!(p.invariant().is_ok());
    }

    use proptest::prelude::*;

    proptest! {
        /// Any sequence of valid ratings keeps `count <= sum <= 5 count` and adds up exactly;
        /// an invalid score changes nothing.
        #[test]
        fn ratings_add_up(scores in proptest::collection::vec(0u8..8, 0..200), start in 0u32..1_000_000) {
            let mut r = Ratings { count: start, sum: start.saturating_mul(3) };
            let (mut count, mut sum) = (u64::from(r.count), u64::from(r.sum));
            for s in scores {
                match r.with(s) {
                    Ok(next) => {
                        prop_assert!((1..=5).contains(&s));
                        count += 1;
                        sum += u64::from(s);
                        r = next;
                    }
                    Err(e) => {
                        prop_assert!(!(1..=5).contains(&s));
                        prop_assert_eq!(error_code(e), code_of(GpuMarketError::InvalidRating));
                    }
                }
                prop_assert_eq!((u64::from(r.count), u64::from(r.sum)), (count, sum));
                prop_assert!(r.consistent());
            }
        }
    }
}
