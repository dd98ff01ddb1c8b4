//! Pure money math. No runtime, no accounts: unit- and property-tested natively.
//!
//! Rounding: the fee is rounded up, in the market's favour, so that splitting a payment into
//! many tiny settlements never skips the fee (a 1-unit settlement at any non-zero fee pays a
//! 1-unit fee); the validators' reward share of the fee and the burn share of the rest are
//! rounded down, the remainder staying with the treasury.
//! `to_provider + reward + to_treasury + burned == amount` always, and the fee is never more
//! than `ceil(amount * fee_bps / 10000) <= amount`.

pub const BPS_DENOMINATOR: u64 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MathOverflow;

/// `amount * bps / 10000` in u128, rounded down, or up with `round_up`. `bps` above 10000 is
/// rejected, so the result never exceeds `amount`.
fn bps_scaled(amount: u64, bps: u16, round_up: bool) -> Result<u64, MathOverflow> {
    if u64::from(bps) > BPS_DENOMINATOR {
        return Err(MathOverflow);
    }
    let bias = if round_up { BPS_DENOMINATOR.checked_sub(1).ok_or(MathOverflow)? } else { 0 };
    let quotient = u128::from(amount)
        .checked_mul(u128::from(bps))
        .and_then(|product| product.checked_add(u128::from(bias)))
        .and_then(|biased| biased.checked_div(u128::from(BPS_DENOMINATOR)))
        .ok_or(MathOverflow)?;
    u64::try_from(quotient).map_err(|_| MathOverflow)
}

/// `floor(amount * bps / 10000)`.
pub fn bps_of(amount: u64, bps: u16) -> Result<u64, MathOverflow> {
    bps_scaled(amount, bps, false)
}

/// `ceil(amount * bps / 10000)`.
pub fn bps_of_ceil(amount: u64, bps: u16) -> Result<u64, MathOverflow> {
    bps_scaled(amount, bps, true)
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
    /// `floor(fee * reward_bps / 10000)`, for the attesting validators.
    pub reward: u64,
    /// `floor((fee - reward) * burn_bps / 10000)`.
    pub burned: u64,
    pub to_provider: u64,
    pub to_treasury: u64,
}

/// Splits a settlement of `claimed_seconds` at `rate` per second, capped by what the escrow
/// holds (its booked balance: donations are never paid out). Guarantees:
/// `amount <= escrow_balance`, `fee == ceil(amount * fee_bps / 10000)`, and
/// `to_provider + reward + to_treasury + burned == amount == billed_seconds * rate`.
pub fn payout(
    claimed_seconds: u64,
    rate: u64,
    escrow_balance: u64,
    fee_bps: u16,
    burn_bps: u16,
    reward_bps: u16,
) -> Result<Payout, MathOverflow> {
    let billed_seconds = claimed_seconds.min(affordable_seconds(escrow_balance, rate)?);
    let amount = billed_seconds.checked_mul(rate).ok_or(MathOverflow)?;
    let fee = bps_of_ceil(amount, fee_bps)?;
    let reward = bps_of(fee, reward_bps)?;
    let rest = fee.checked_sub(reward).ok_or(MathOverflow)?;
    let burned = bps_of(rest, burn_bps)?;
    Ok(Payout {
        billed_seconds,
        amount,
        fee,
        reward,
        burned,
        to_provider: amount.checked_sub(fee).ok_or(MathOverflow)?,
        to_treasury: rest.checked_sub(burned).ok_or(MathOverflow)?,
    })
}

/// Splits `reward` among `attesters` validators: `(share, remainder)` with
/// `share * attesters + remainder == reward`; the submitter gets the remainder on top.
pub fn reward_shares(reward: u64, attesters: u64) -> Result<(u64, u64), MathOverflow> {
    let share = reward.checked_div(attesters).ok_or(MathOverflow)?;
    let remainder = reward.checked_rem(attesters).ok_or(MathOverflow)?;
    Ok((share, remainder))
}

/// The smallest deposit a job may start with: one window at its rate.
pub fn min_deposit(rate: u64, window_seconds: u32) -> Result<u64, MathOverflow> {
    rate.checked_mul(u64::from(window_seconds)).ok_or(MathOverflow)
}

/// How a slash of `slash_bps` of (stake + unbonding) is taken and paid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlashSplit {
    pub amount: u64,
    /// Taken from active stake first ...
    pub from_stake: u64,
    /// ... then from unbonding stake (which stays slashable).
    pub from_unbonding: u64,
    /// `floor(amount * reward_bps / 10000)` to the reporter.
    pub reward: u64,
    /// The rest is burned: `reward + burned == amount`.
    pub burned: u64,
}

/// Guarantees: `amount <= stake + unbonding`, `from_stake <= stake`,
/// `from_unbonding <= unbonding`, `from_stake + from_unbonding == amount == reward + burned`.
pub fn slash_split(
    stake: u64,
    unbonding: u64,
    slash_bps: u16,
    reward_bps: u16,
) -> Result<SlashSplit, MathOverflow> {
    let base = stake.checked_add(unbonding).ok_or(MathOverflow)?;
    split_amount(stake, unbonding, bps_of(base, slash_bps)?, reward_bps)
}

/// The slash that raises an incident already slashed at `applied_bps` to `rate_bps`
/// (`rate_bps > applied_bps`): `floor(left * (rate - applied) / (10000 - applied))` of what is
/// left (`stake + unbonding` now), so both slashes together take `rate_bps` of the stake held
/// before the incident, rounded down (never more). Same guarantees as `slash_split`.
pub fn top_up_slash_split(
    stake: u64,
    unbonding: u64,
    applied_bps: u16,
    rate_bps: u16,
    reward_bps: u16,
) -> Result<SlashSplit, MathOverflow> {
    if rate_bps <= applied_bps || u64::from(rate_bps) > BPS_DENOMINATOR {
        return Err(MathOverflow);
    }
    let left = stake.checked_add(unbonding).ok_or(MathOverflow)?;
    let step = u128::from(rate_bps.checked_sub(applied_bps).ok_or(MathOverflow)?);
    let rest = u128::from(BPS_DENOMINATOR.checked_sub(u64::from(applied_bps)).ok_or(MathOverflow)?);
    let amount = u128::from(left)
        .checked_mul(step)
        .and_then(|p| p.checked_div(rest))
        .ok_or(MathOverflow)?;
    split_amount(stake, unbonding, u64::try_from(amount).map_err(|_| MathOverflow)?, reward_bps)
}

/// Takes `amount <= stake + unbonding` from stake first, then unbonding; `reward_bps` of it to
/// the reporter (rounded down), the rest burned.
fn split_amount(stake: u64, unbonding: u64, amount: u64, reward_bps: u16) -> Result<SlashSplit, MathOverflow> {
    if amount > stake.checked_add(unbonding).ok_or(MathOverflow)? {
        return Err(MathOverflow);
    }
    let from_stake = amount.min(stake);
    let from_unbonding = amount.checked_sub(from_stake).ok_or(MathOverflow)?;
    let reward = bps_of(amount, reward_bps)?;
    Ok(SlashSplit {
        amount,
        from_stake,
        from_unbonding,
        reward,
        burned: amount.checked_sub(reward).ok_or(MathOverflow)?,
    })
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::integer_division)]
mod tests {
    use super::*;

    #[test]
    fn bps_rounds_down() {
        assert_eq!(bps_of(999, 100), Ok(9));
        assert_eq!(bps_of(u64::MAX, 10_000), Ok(u64::MAX));
        assert_eq!(bps_of(1, 10_001), Err(MathOverflow));
    }

    #[test]
    fn fee_rounds_up_so_tiny_settlements_pay_it() {
        assert_eq!(bps_of_ceil(1, 1), Ok(1));
        assert_eq!(bps_of_ceil(0, 2_500), Ok(0));
        assert_eq!(bps_of_ceil(10_000, 100), Ok(100));
        assert_eq!(bps_of_ceil(10_001, 100), Ok(101));
        assert_eq!(bps_of_ceil(u64::MAX, 10_000), Ok(u64::MAX));
        assert_eq!(bps_of_ceil(1, 10_001), Err(MathOverflow));
        // 1000 one-unit settlements at 1 % pay 1000 in fees; the old floor paid none.
        let fees: u64 = (0..1000).map(|_| payout(1, 1, 1, 100, 0, 0).unwrap().fee).sum();
        assert_eq!(fees, 1000);
    }

    #[test]
    fn payout_caps_at_escrow() {
        let p = payout(100, 7, 500, 1000, 5000, 0).unwrap();
        assert_eq!(p.billed_seconds, 71);
        assert_eq!(p.amount, 497);
        assert_eq!(p.fee, 50);
        assert_eq!(p.burned, 25);
        assert_eq!(p.to_provider + p.to_treasury + p.burned, p.amount);
    }

    #[test]
    fn slash_takes_stake_before_unbonding() {
        let s = slash_split(100, 900, 5_000, 1_000).unwrap();
        assert_eq!((s.amount, s.from_stake, s.from_unbonding), (500, 100, 400));
        assert_eq!((s.reward, s.burned), (50, 450));
        assert_eq!(slash_split(u64::MAX, 1, 1, 0), Err(MathOverflow));
    }

    #[test]
    fn top_up_brings_an_incident_to_the_higher_rate() {
        // 1 % of 100_000, then up to 50 % of the 100_000: 49_000 more.
        let first = slash_split(100_000, 0, 100, 0).unwrap();
        assert_eq!(first.amount, 1_000);
        let top = top_up_slash_split(99_000, 0, 100, 5_000, 1_000).unwrap();
        assert_eq!((top.amount, top.reward, top.burned), (49_000, 4_900, 44_100));
        assert_eq!(top_up_slash_split(99_000, 0, 5_000, 5_000, 0), Err(MathOverflow));
        assert_eq!(top_up_slash_split(99_000, 0, 5_000, 100, 0), Err(MathOverflow));
        assert_eq!(top_up_slash_split(0, 0, 0, 10_000, 0).map(|s| s.amount), Ok(0));
        assert_eq!(top_up_slash_split(1, 0, 0, 10_001, 0), Err(MathOverflow));
    }

    #[test]
    fn payout_overflow_is_an_error() {
        assert_eq!(payout(u64::MAX, 2, u64::MAX, 0, 0, 0).map(|p| p.billed_seconds), Ok(u64::MAX / 2));
        assert_eq!(payout(1, 0, 10, 0, 0, 0), Err(MathOverflow));
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::integer_division)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// No rounding leak: provider + treasury + burn == amount; never more than the escrow;
        /// the conservation equation holds for the escrow after payout.
        #[test]
        fn payout_conserves(claimed in any::<u64>(), rate in 1u64..=u64::MAX, escrow in any::<u64>(),
                            fee_bps in 0u16..=2_500, burn_bps in 0u16..=10_000, reward_bps in 0u16..=10_000) {
            if let Ok(p) = payout(claimed, rate, escrow, fee_bps, burn_bps, reward_bps) {
                prop_assert_eq!(p.to_provider + p.reward + p.to_treasury + p.burned, p.amount);
                prop_assert_eq!(p.reward + p.to_treasury + p.burned, p.fee);
                prop_assert!(p.amount <= escrow);
                prop_assert!(p.billed_seconds <= claimed);
                prop_assert_eq!(p.amount, p.billed_seconds * rate);
                prop_assert!(p.fee <= p.amount / 4 + 1);
                // Rounded up, never by more than one unit.
                prop_assert!(u128::from(p.fee) * 10_000 >= u128::from(p.amount) * u128::from(fee_bps));
                prop_assert!(u128::from(p.fee) * 10_000 < u128::from(p.amount) * u128::from(fee_bps) + 10_000);
                prop_assert!(escrow - p.amount < rate || p.billed_seconds == claimed);
            } else {
                // Only possible when billed seconds times rate overflows.
                prop_assert!(claimed.min(escrow / rate).checked_mul(rate).is_none());
            }
        }

        /// A sequence of settlements never pays out more than was deposited.
        #[test]
        fn repeated_payouts_never_exceed_deposit(deposit in 0u64..1_000_000_000_000, rate in 1u64..1_000_000,
                                                  claims in proptest::collection::vec(0u64..100_000, 1..20),
                                                  fee_bps in 0u16..=2_500, burn_bps in 0u16..=10_000,
                                                  reward_bps in 0u16..=10_000, attesters in 1u64..=3) {
            let mut escrow = deposit;
            let (mut provider, mut validators, mut treasury, mut burned) = (0u64, 0u64, 0u64, 0u64);
            for c in claims {
                let p = payout(c, rate, escrow, fee_bps, burn_bps, reward_bps).unwrap();
                let (share, remainder) = reward_shares(p.reward, attesters).unwrap();
                prop_assert_eq!(share * attesters + remainder, p.reward);
                escrow -= p.amount;
                provider += p.to_provider;
                validators += p.reward;
                treasury += p.to_treasury;
                burned += p.burned;
                prop_assert_eq!(provider + validators + treasury + burned + escrow, deposit);
            }
        }

        #[test]
        fn slash_never_exceeds_stake(stake in any::<u64>(), unbonding in any::<u64>(),
                                     slash_bps in 0u16..=10_000, reward_bps in 0u16..=10_000) {
            if let Ok(s) = slash_split(stake, unbonding, slash_bps, reward_bps) {
                prop_assert!(s.from_stake <= stake);
                prop_assert!(s.from_unbonding <= unbonding);
                prop_assert_eq!(s.from_stake + s.from_unbonding, s.amount);
                prop_assert_eq!(s.reward + s.burned, s.amount);
            } else {
                prop_assert!(stake.checked_add(unbonding).is_none());
            }
        }

        /// One incident slashed at `first` and topped up to `rate` takes `rate` of the stake
        /// held before it, rounded down by at most 2 units, never more.
        #[test]
        fn top_up_reaches_the_higher_rate(stake in 0u64..=u64::MAX / 2, unbonding in 0u64..=u64::MAX / 2,
                                          first in 0u16..10_000, rate in 1u16..=10_000, reward_bps in 0u16..=5_000) {
            prop_assume!(rate > first);
            let s1 = slash_split(stake, unbonding, first, reward_bps).unwrap();
            let (stake2, unbonding2) = (stake - s1.from_stake, unbonding - s1.from_unbonding);
            let s2 = top_up_slash_split(stake2, unbonding2, first, rate, reward_bps).unwrap();
            prop_assert!(s2.from_stake <= stake2 && s2.from_unbonding <= unbonding2);
            prop_assert_eq!(s2.from_stake + s2.from_unbonding, s2.amount);
            prop_assert_eq!(s2.reward + s2.burned, s2.amount);
            let target = (u128::from(stake) + u128::from(unbonding)) * u128::from(rate) / 10_000;
            let total = u128::from(s1.amount) + u128::from(s2.amount);
            prop_assert!(total <= target, "total {} above {}", total, target);
            prop_assert!(total + 2 >= target, "total {} below {} by more than 2", total, target);
        }
    }
}
