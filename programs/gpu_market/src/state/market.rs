use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;

pub const MAX_FEE_BPS: u16 = 2_500;
pub const MAX_BPS: u16 = 10_000;
pub const MAX_WINDOW_SECONDS: u32 = 3_600;
pub const MAX_UNBONDING_SECONDS: i64 = 365 * 24 * 3_600;
pub const MAX_SKEW_SECONDS: u32 = 300;
/// A settle with `q` attestations must fit one 1232-byte legacy transaction: the Ed25519
/// instruction carries q signatures and keys, and the settle q - 1 more Validator accounts
/// (pinned by a packet-size test). Committees may be larger (`MAX_COMMITTEE`).
pub const MAX_QUORUM: u8 = 3;
/// Downtime and expiry need at most a day of missed 60 s windows.
pub const MAX_MISSED_WINDOWS: u32 = 1_440;
/// A reporter never earns more than half of a slash, so reporting oneself always loses.
pub const MAX_REPORTER_REWARD_BPS: u16 = 5_000;
/// Health thresholds used for billing stay within what real GPUs report.
pub const TEMP_CRITICAL_RANGE_C: core::ops::RangeInclusive<u16> = 50..=150;
pub const MAX_ECC_UNCORRECTED: u32 = 1_000_000;
/// The shortest time between `update_params` and the new parameters coming into force, whatever
/// `unbonding_seconds` is: long enough for every client to see the announcement (a `create_job`
/// signed for the old parameters fails with `MarketParamsChanged` once they apply).
pub const MIN_PARAMS_DELAY_SECONDS: i64 = 3_600;
/// The most validators a hardware verdict may need: `attest_hardware` with this many
/// signatures (one shared 32-byte digest, one Validator account each) still fits one
/// 1232-byte legacy transaction (pinned by a packet-size test).
pub const MAX_HARDWARE_QUORUM: u8 = 5;
/// A hardware challenge older than `hardware_attestation_max_age_seconds` is not attested;
/// that bound is itself a minute to a day.
pub const HARDWARE_ATTESTATION_AGE_RANGE_SECONDS: core::ops::RangeInclusive<u32> = 60..=86_400;
/// The clean record the badge asks for is at most a year.
pub const MAX_VERIFIED_RECORD_SECONDS: u32 = 365 * 24 * 3_600;

/// Bounded market parameters; `validate` runs on every write.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub struct MarketParams {
    /// Platform fee taken from each settlement, in basis points (<= 2500).
    pub fee_bps: u16,
    /// Share of the fee that is burned, in basis points (<= 10000).
    pub burn_bps: u16,
    pub min_stake_per_gpu: u64,
    pub unbonding_seconds: i64,
    pub window_seconds: u32,
    /// The smallest quorum a user may choose for a job's committee (1..=3).
    pub min_quorum: u8,
    pub max_missed_windows: u32,
    pub downtime_slash_bps: u16,
    pub equivocation_slash_bps: u16,
    pub reporter_reward_bps: u16,
    pub validator_min_bond: u64,
    pub max_skew_seconds: u32,
    /// A window in which any GPU reached this temperature bills at most `length - 1` seconds.
    pub temp_critical_c: u16,
    /// Uncorrected ECC errors a GPU may report in one window and still bill.
    pub ecc_uncorrected_max: u32,
    /// Share of each settlement's fee credited to the attesting validators (<= 10000).
    pub validator_reward_bps: u16,
    /// Distinct Active validators whose signatures a hardware verdict needs (1..=5).
    pub hardware_quorum: u8,
    /// How old a challenge may be when its verdict is attested (60..=86400 seconds).
    pub hardware_attestation_max_age_seconds: u32,
    /// The clean record (no slash since registration or the last slash) a verified provider
    /// needs for the badge clients show (0..=365 days); the chain stores only the facts.
    pub verified_record_seconds: u32,
}

impl MarketParams {
    pub fn validate(&self) -> Result<()> {
        require!(self.fee_bps <= MAX_FEE_BPS, GpuMarketError::FeeTooHigh);
        for bps in [
            self.burn_bps,
            self.downtime_slash_bps,
            self.equivocation_slash_bps,
            self.validator_reward_bps,
        ] {
            require!(bps <= MAX_BPS, GpuMarketError::BpsOutOfRange);
        }
        require!(
            self.reporter_reward_bps <= MAX_REPORTER_REWARD_BPS,
            GpuMarketError::ReporterRewardTooHigh
        );
        require!(
            (1..=MAX_WINDOW_SECONDS).contains(&self.window_seconds),
            GpuMarketError::InvalidWindowSeconds
        );
        require!(
            (1..=MAX_QUORUM).contains(&self.min_quorum),
            GpuMarketError::InvalidQuorum
        );
        require!(
            (0..=MAX_UNBONDING_SECONDS).contains(&self.unbonding_seconds),
            GpuMarketError::InvalidUnbondingSeconds
        );
        require!(
            self.max_skew_seconds <= MAX_SKEW_SECONDS,
            GpuMarketError::InvalidSkew
        );
        require!(
            (1..=MAX_MISSED_WINDOWS).contains(&self.max_missed_windows),
            GpuMarketError::InvalidMaxMissedWindows
        );
        require!(
            TEMP_CRITICAL_RANGE_C.contains(&self.temp_critical_c)
                && self.ecc_uncorrected_max <= MAX_ECC_UNCORRECTED,
            GpuMarketError::InvalidHealthThresholds
        );
        require!(
            (1..=MAX_HARDWARE_QUORUM).contains(&self.hardware_quorum),
            GpuMarketError::InvalidHardwareQuorum
        );
        require!(
            HARDWARE_ATTESTATION_AGE_RANGE_SECONDS.contains(&self.hardware_attestation_max_age_seconds),
            GpuMarketError::InvalidHardwareAttestationAge
        );
        require!(
            self.verified_record_seconds <= MAX_VERIFIED_RECORD_SECONDS,
            GpuMarketError::InvalidVerifiedRecord
        );
        Ok(())
    }

    /// After a job ends, receipts for windows up to its end may still settle for this long:
    /// `max_missed_windows + 2` windows, which covers the validators' settle cadence and an
    /// outage of `max_missed_windows` windows. `close_job` waits for it.
    pub fn grace_seconds(&self) -> i64 {
        i64::from(self.window_seconds)
            .saturating_mul(i64::from(self.max_missed_windows).saturating_add(2))
    }
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, InitSpace)]
pub struct MarketTotals {
    /// Provider stake plus provider unbonding held in the stake vault.
    pub staked: u64,
    /// Validator bonds plus validator unbonding held in the stake vault.
    pub bonded: u64,
    /// Payment tokens burned by settlements.
    pub burned: u64,
    /// Fees taken by settlements (treasury share plus burn).
    pub fees: u64,
    /// Stake tokens taken by slashes (reporter rewards plus burns).
    pub slashed: u64,
    /// Jobs ever created.
    pub jobs: u64,
    /// Validator rewards credited and not yet claimed; the fee vault holds at least this much.
    pub rewards_unclaimed: u64,
    /// Validator rewards ever credited.
    pub rewards: u64,
}

/// `["market", creator, id]`: the PDA keeps the creating authority in its seeds, so it stays
/// the same address (and signs for the stake vault) after an authority transfer.
#[account]
#[derive(InitSpace)]
pub struct Market {
    pub authority: Pubkey,
    /// The authority that created the market (PDA seed); never changes.
    pub creator: Pubkey,
    /// `Pubkey::default()` when no transfer is pending.
    pub pending_authority: Pubkey,
    pub id: u64,
    pub stake_mint: Pubkey,
    pub payment_mint: Pubkey,
    pub stake_vault: Pubkey,
    pub treasury: Pubkey,
    /// The parameters in force until `params_effective_at`; read them with `params_at(now)`.
    pub params: MarketParams,
    /// Parameters announced by `update_params`; in force from `params_effective_at` on.
    pub pending_params: MarketParams,
    /// 0 when nothing is pending; else at least `max(unbonding_seconds,
    /// MIN_PARAMS_DELAY_SECONDS)` after the announcement, so every provider and validator who
    /// disagrees can leave before a change touches its stake, and every user sees it coming.
    pub params_effective_at: i64,
    pub paused: bool,
    pub totals: MarketTotals,
    pub bump: u8,
    pub stake_vault_bump: u8,
    /// `["fee_vault", market]`: settlements pay the treasury share here, never to an account
    /// the authority could close or freeze, so nobody can stall settlement through the treasury.
    pub fee_vault: Pubkey,
    pub fee_vault_bump: u8,
}

impl Market {
    /// The parameters in force at unix time `now`: the announced ones once their time came.
    pub fn params_at(&self, now: i64) -> MarketParams {
        if self.params_effective_at != 0 && now >= self.params_effective_at {
            self.pending_params
        } else {
            self.params
        }
    }

    /// Makes announced parameters whose time came the current ones (no observable change:
    /// `params_at` already returned them).
    pub fn promote_params(&mut self, now: i64) {
        if self.params_effective_at != 0 && now >= self.params_effective_at {
            self.params = self.pending_params;
            self.params_effective_at = 0;
        }
    }

    /// Stake and bonds booked here, which the stake vault must hold.
    pub fn booked_stake(&self) -> Result<u64> {
        self.totals
            .staked
            .checked_add(self.totals.bonded)
            .ok_or_else(|| GpuMarketError::MathOverflow.into())
    }

    /// The stake vault holds at least the stake and bonds recorded here. It may hold more
    /// (anyone can send tokens to it); `sweep_vault` moves that surplus to the treasury.
    pub fn invariant(&self, stake_vault_balance: u64) -> Result<()> {
        self.params.validate()?;
        if self.params_effective_at != 0 {
            self.pending_params.validate()?;
        }
        require!(
            stake_vault_balance >= self.booked_stake()?,
            GpuMarketError::InvariantViolated
        );
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::integer_division)]
mod tests {
    use super::*;
    use crate::state::testing::{code_of, error_code, zeroed};

    const AT: i64 = 1_000;

    /// Valid parameters, told apart by `fee_bps`.
    fn params(fee_bps: u16) -> MarketParams {
        let mut params: MarketParams = zeroed();
        (params.fee_bps, params.window_seconds, params.min_quorum) = (fee_bps, 1, 1);
        (params.max_missed_windows, params.temp_critical_c) = (1, 90);
        (params.hardware_quorum, params.hardware_attestation_max_age_seconds) = (1, 60);
        params
    }

    /// Parameters `params(1)` in force, `params(2)` announced for `effective_at` (0: none).
    fn market(effective_at: i64) -> Market {
        let mut market: Market = zeroed();
        (market.params, market.pending_params, market.params_effective_at) = (params(1), params(2), effective_at);
        market
    }

    #[test]
    fn without_an_announcement_the_current_parameters_hold_for_ever() {
        let m = market(0);
        for now in [i64::MIN, -1, 0, 1, AT, i64::MAX] {
            assert_eq!(m.params_at(now), params(1), "at {now}");
        }
    }

    #[test]
    fn announced_parameters_apply_from_their_time_on() {
        let m = market(AT);
        assert_eq!(m.params_at(i64::MIN), params(1));
        assert_eq!(m.params_at(AT - 1), params(1));
        assert_eq!(m.params_at(AT), params(2));
        assert_eq!(m.params_at(AT + 1), params(2));
        assert_eq!(m.params_at(i64::MAX), params(2));
    }

    #[test]
    fn the_edges_of_time_are_no_special_case() {
        let late = market(i64::MAX);
        assert_eq!(late.params_at(i64::MAX - 1), params(1));
        assert_eq!(late.params_at(i64::MAX), params(2));
        let early = market(i64::MIN);
        assert_eq!(early.params_at(i64::MIN), params(2));
        let before_epoch = market(-5);
        assert_eq!(before_epoch.params_at(-6), params(1));
        assert_eq!(before_epoch.params_at(-5), params(2));
    }

    #[test]
    fn promoting_changes_nothing_params_at_can_see() {
        for now in [AT - 1, AT, AT + 1] {
            let mut m = market(AT);
            let before = m.params_at(now);
            m.promote_params(now);
            assert_eq!(m.params_at(now), before, "at {now}");
            assert_eq!(m.params_at(i64::MAX), params(2), "at {now}");
            assert_eq!(m.params_effective_at == 0, now >= AT, "at {now}");
        }
    }

    #[test]
    fn booked_stake_is_stake_plus_bonds_without_overflow() {
        let mut m = market(0);
        (m.totals.staked, m.totals.bonded) = (u64::MAX - 1, 1);
        assert_eq!(m.booked_stake().unwrap(), u64::MAX);
        m.totals.bonded = 2;
        assert_eq!(error_code(m.booked_stake().unwrap_err()), code_of(GpuMarketError::MathOverflow));
    }

    #[test]
    fn the_stake_vault_may_hold_more_than_booked_never_less() {
        let mut m = market(0);
        (m.totals.staked, m.totals.bonded) = (10, 5);
        assert!(m.invariant(15).is_ok());
        assert!(m.invariant(u64::MAX).is_ok());
        assert_eq!(error_code(m.invariant(14).unwrap_err()), code_of(GpuMarketError::InvariantViolated));
    }
}
