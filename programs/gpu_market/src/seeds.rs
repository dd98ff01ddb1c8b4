//! PDA seeds: the only place they are spelled. Canonical bumps are stored in the accounts.

pub const MARKET: &[u8] = b"market";
pub const PROVIDER: &[u8] = b"provider";
pub const VALIDATOR: &[u8] = b"validator";
pub const JOB: &[u8] = b"job";
pub const ESCROW: &[u8] = b"escrow";
pub const STAKE_VAULT: &[u8] = b"stake_vault";
/// `["fee_vault", market]`: payment-mint account (authority: the market PDA) holding the
/// treasury's fee share until `withdraw_fees` moves it to the treasury.
pub const FEE_VAULT: &[u8] = b"fee_vault";
/// `["equivocation", job, job.started_at (i64 le), seq (u64 le)]`.
pub const EQUIVOCATION: &[u8] = b"equivocation";
/// `["validator_equivocation", validator, job, job.started_at (i64 le), seq (u64 le)]`.
pub const VALIDATOR_EQUIVOCATION: &[u8] = b"validator_equivocation";
/// `["wrong_answer", provider, challenge_digest]`: one wrong-answer slash per challenge.
pub const WRONG_ANSWER: &[u8] = b"wrong_answer";
