//! PDA seeds: the only place they are spelled. Canonical bumps are stored in the accounts.
//!
//! Every PDA account whose address a client can derive from the instruction's other accounts
//! and arguments carries its seeds, so the IDL's `pda` lets clients (Anchor's resolver, the
//! Codama-generated client) fill it in. Where the program creates the account (`init`) or
//! checks it by seeds (the escrow), the seeds constraint is the runtime check. Where the program
//! binds the account with a named-error check (`address = market.stake_vault @
//! InvalidStakeVault`, `has_one = owner @ NotProviderSigner`), the seeds are for the IDL builder
//! only, `#[cfg_attr(feature = "idl-build", account(seeds = ..., bump = ...))]`: Anchor checks
//! seeds before `has_one`/`address`, so a runtime seeds check would replace those named errors
//! with `ConstraintSeeds`. An IDL-only `has_one` on the market likewise gives its mints and
//! treasury (bound by `address = market.<field>`) their `relations`.
//!
//! An account whose address derives from its own data carries no seeds: the market (its creator
//! and id), a job (its id), a provider or validator whose owner or authority is not an account
//! of the instruction. No client can derive them; the user chooses them or Anchor reads them
//! from `relations` (`job.market`, `job.provider`), and Anchor's resolver never tries an
//! account's `relations` while its `pda` cannot be computed.

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
