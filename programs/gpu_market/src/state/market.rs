use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;

pub const MAX_FEE_BPS: u16 = 2_500;
pub const MAX_BPS: u16 = 10_000;
pub const MAX_WINDOW_SECONDS: u32 = 3_600;
pub const MAX_UNBONDING_SECONDS: i64 = 365 * 24 * 3_600;
pub const MAX_SKEW_SECONDS: u32 = 300;

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
    pub settle_quorum: u8,
    pub max_missed_windows: u32,
    pub downtime_slash_bps: u16,
    pub equivocation_slash_bps: u16,
    pub reporter_reward_bps: u16,
    pub validator_min_bond: u64,
    pub max_skew_seconds: u32,
}

impl MarketParams {
    pub fn validate(&self) -> Result<()> {
        require!(self.fee_bps <= MAX_FEE_BPS, GpuMarketError::FeeTooHigh);
        for bps in [
            self.burn_bps,
            self.downtime_slash_bps,
            self.equivocation_slash_bps,
            self.reporter_reward_bps,
        ] {
            require!(bps <= MAX_BPS, GpuMarketError::BpsOutOfRange);
        }
        require!(
            (1..=MAX_WINDOW_SECONDS).contains(&self.window_seconds),
            GpuMarketError::InvalidWindowSeconds
        );
        require!(self.settle_quorum >= 1, GpuMarketError::InvalidQuorum);
        require!(
            (0..=MAX_UNBONDING_SECONDS).contains(&self.unbonding_seconds),
            GpuMarketError::InvalidUnbondingSeconds
        );
        require!(
            self.max_skew_seconds <= MAX_SKEW_SECONDS,
            GpuMarketError::InvalidSkew
        );
        require!(
            self.max_missed_windows >= 1,
            GpuMarketError::InvalidMaxMissedWindows
        );
        Ok(())
    }

    /// After a rotation, receipts signed by the previous key (for windows that ended before it)
    /// may still settle for this long: `max_missed_windows` windows, as long as a validator may
    /// hold receipts before settling.
    pub fn key_rotation_grace_seconds(&self) -> i64 {
        i64::from(self.window_seconds).saturating_mul(i64::from(self.max_missed_windows))
    }

    /// After a job ends, a final receipt may still settle for this long (2 windows).
    pub fn grace_seconds(&self) -> i64 {
        i64::from(self.window_seconds).saturating_mul(2)
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
    pub params: MarketParams,
    pub paused: bool,
    pub totals: MarketTotals,
    pub bump: u8,
    pub stake_vault_bump: u8,
}

impl Market {
    /// The stake vault holds exactly the stake and bonds recorded here.
    pub fn invariant(&self, stake_vault_balance: u64) -> Result<()> {
        self.params.validate()?;
        let held = self
            .totals
            .staked
            .checked_add(self.totals.bonded)
            .ok_or(GpuMarketError::MathOverflow)?;
        require!(
            held == stake_vault_balance,
            GpuMarketError::InvariantViolated
        );
        Ok(())
    }
}
