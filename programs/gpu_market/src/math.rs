//! Pure money math. No runtime, no accounts: unit- and property-tested natively.
//!
//! Rounding: the fee and the burn share are rounded down, so rounding never takes more from a
//! payment than its stated basis points; the remainder stays with the provider (fee) or the
//! treasury (burn). `to_provider + to_treasury + burned == amount` always.

pub const BPS_DENOMINATOR: u64 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MathOverflow;

/// `floor(amount * bps / 10000)`, computed in u128. `bps` above 10000 is rejected.
pub fn bps_of(amount: u64, bps: u16) -> Result<u64, MathOverflow> {
    if u64::from(bps) > BPS_DENOMINATOR {
        return Err(MathOverflow);
    }
    let product = u128::from(amount)
        .checked_mul(u128::from(bps))
        .ok_or(MathOverflow)?;
    u64::try_from(product / u128::from(BPS_DENOMINATOR)).map_err(|_| MathOverflow)
}

/// Seconds the escrow can still pay for at `rate` per second (`floor(balance / rate)`).
pub fn affordable_seconds(escrow_balance: u64, rate: u64) -> Result<u64, MathOverflow> {
    escrow_balance.checked_div(rate).ok_or(MathOverflow)
}

/// The outcome of one settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payout {
    /// Seconds actually billed: `min(claimed, affordable)`.
    pub billed_seconds: u64,
    pub amount: u64,
    pub fee: u64,
    pub burned: u64,
    pub to_provider: u64,
    pub to_treasury: u64,
}

/// Splits a settlement of `claimed_seconds` at `rate` per second, capped by what the escrow
/// holds. Guarantees: `amount <= escrow_balance`, and
/// `to_provider + to_treasury + burned == amount == billed_seconds * rate`.
pub fn payout(
    claimed_seconds: u64,
    rate: u64,
    escrow_balance: u64,
    fee_bps: u16,
    burn_bps: u16,
) -> Result<Payout, MathOverflow> {
    let billed_seconds = claimed_seconds.min(affordable_seconds(escrow_balance, rate)?);
    let amount = billed_seconds.checked_mul(rate).ok_or(MathOverflow)?;
    let fee = bps_of(amount, fee_bps)?;
    let burned = bps_of(fee, burn_bps)?;
    Ok(Payout {
        billed_seconds,
        amount,
        fee,
        burned,
        to_provider: amount.checked_sub(fee).ok_or(MathOverflow)?,
        to_treasury: fee.checked_sub(burned).ok_or(MathOverflow)?,
    })
}

/// The smallest deposit a job may start with: one window at its rate.
pub fn min_deposit(rate: u64, window_seconds: u32) -> Result<u64, MathOverflow> {
    rate.checked_mul(u64::from(window_seconds)).ok_or(MathOverflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bps_rounds_down() {
        assert_eq!(bps_of(999, 100), Ok(9));
        assert_eq!(bps_of(u64::MAX, 10_000), Ok(u64::MAX));
        assert_eq!(bps_of(1, 10_001), Err(MathOverflow));
    }

    #[test]
    fn payout_caps_at_escrow() {
        let p = payout(100, 7, 500, 1000, 5000).unwrap();
        assert_eq!(p.billed_seconds, 71);
        assert_eq!(p.amount, 497);
        assert_eq!(p.fee, 49);
        assert_eq!(p.burned, 24);
        assert_eq!(p.to_provider + p.to_treasury + p.burned, p.amount);
    }

    #[test]
    fn payout_overflow_is_an_error() {
        assert_eq!(payout(u64::MAX, 2, u64::MAX, 0, 0).map(|p| p.billed_seconds), Ok(u64::MAX / 2));
        assert_eq!(payout(1, 0, 10, 0, 0), Err(MathOverflow));
    }
}
