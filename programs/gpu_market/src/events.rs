//! Events, one per state change. Off SBF, anchor's `emit!` compiles to nothing, so events go
//! through `emit_event`, which on the host calls the `sol_log_data` syscall stub installed by the
//! native runtime: logs then read `Program data: <base64>` exactly as on a cluster.
use anchor_lang::prelude::*;

use crate::state::{MarketParams, ProviderStatus};

pub fn emit_event<E: anchor_lang::Event>(event: E) {
    let data = anchor_lang::Event::data(&event);
    #[cfg(target_os = "solana")]
    anchor_lang::solana_program::log::sol_log_data(&[&data]);
    #[cfg(not(target_os = "solana"))]
    solana_sysvar::program_stubs::sol_log_data(&[&data]);
}

#[event]
pub struct MarketInitialized {
    pub market: Pubkey,
    pub authority: Pubkey,
    pub id: u64,
    pub stake_mint: Pubkey,
    pub payment_mint: Pubkey,
    pub treasury: Pubkey,
    pub params: MarketParams,
}

#[event]
pub struct ProviderRegistered {
    pub market: Pubkey,
    pub provider: Pubkey,
    pub owner: Pubkey,
    pub worker_key: Pubkey,
    pub gpu_count: u16,
    pub price_per_gpu_second: u64,
}

#[event]
pub struct Staked {
    pub provider: Pubkey,
    pub amount: u64,
    pub stake: u64,
}

#[event]
pub struct ValidatorRegistered {
    pub market: Pubkey,
    pub validator: Pubkey,
    pub authority: Pubkey,
    pub bond: u64,
    pub endpoint: String,
}

#[event]
pub struct JobCreated {
    pub market: Pubkey,
    pub job: Pubkey,
    pub user: Pubkey,
    pub provider: Pubkey,
    pub job_id: u64,
    pub gpu_count: u16,
    pub price_per_gpu_second: u64,
    pub rate_per_second: u64,
    pub deposit: u64,
    /// sha256 of the workload spec; zeros for none.
    pub workload_hash: [u8; 32],
}

#[event]
pub struct JobAccepted {
    pub job: Pubkey,
    pub provider: Pubkey,
    pub signer: Pubkey,
    pub started_at: i64,
}

/// Carries every input of the payout math (rate, seconds, bps) and every output.
#[event]
pub struct Settled {
    pub job: Pubkey,
    pub provider: Pubkey,
    pub validator: Pubkey,
    pub seq: u64,
    pub cumulative_seconds: u64,
    pub window_end: i64,
    pub proof_hash: [u8; 32],
    /// New seconds the worker claimed with this receipt (`cumulative - claimed_seconds`).
    pub claimed_seconds: u64,
    /// The committee quorum's approved cumulative seconds.
    pub approved_seconds: u64,
    pub billed_seconds: u64,
    pub rate_per_second: u64,
    pub fee_bps: u16,
    pub burn_bps: u16,
    pub amount: u64,
    pub fee: u64,
    /// Credited to the attesting validators (equal shares, remainder to the submitter).
    pub reward: u64,
    pub validator_reward_bps: u16,
    /// Attestations counted, the submitter's included.
    pub attesters: u8,
    pub burned: u64,
    pub to_provider: u64,
    pub to_treasury: u64,
    pub escrow_remaining: u64,
    pub exhausted: bool,
}

#[event]
pub struct JobFinished {
    pub job: Pubkey,
    pub by: Pubkey,
    pub ended_at: i64,
}

#[event]
pub struct JobClosed {
    pub job: Pubkey,
    pub user: Pubkey,
    /// The booked escrow balance refunded now.
    pub refunded: u64,
    /// Tokens above the books (donations) returned to the user with it.
    pub surplus_returned: u64,
    pub deposited: u64,
    pub paid_provider: u64,
    pub paid_treasury: u64,
    pub burned: u64,
}

#[event]
pub struct PausedSet {
    pub market: Pubkey,
    pub paused: bool,
}

#[event]
pub struct AuthorityProposed {
    pub market: Pubkey,
    pub current: Pubkey,
    pub proposed: Pubkey,
}

#[event]
pub struct AuthorityAccepted {
    pub market: Pubkey,
    pub previous: Pubkey,
    pub authority: Pubkey,
}

#[event]
pub struct ProviderUpdated {
    pub provider: Pubkey,
    pub price_per_gpu_second: u64,
    pub gpu_count: u16,
    pub status: ProviderStatus,
}

#[event]
pub struct WorkerKeyRotated {
    pub provider: Pubkey,
    pub previous: Pubkey,
    pub current: Pubkey,
    pub expires_at: i64,
    /// The previous key signs only windows that ended by this time.
    pub retired_at: i64,
}

#[event]
pub struct UnstakeRequested {
    pub provider: Pubkey,
    pub amount: u64,
    pub stake: u64,
    pub unbonding: u64,
    pub release_at: i64,
}

#[event]
pub struct StakeWithdrawn {
    pub provider: Pubkey,
    pub amount: u64,
}

#[event]
pub struct ValidatorExitRequested {
    pub validator: Pubkey,
    pub amount: u64,
    pub release_at: i64,
}

#[event]
pub struct ValidatorBondWithdrawn {
    pub validator: Pubkey,
    pub amount: u64,
}

#[event]
pub struct JobToppedUp {
    pub job: Pubkey,
    pub amount: u64,
    pub deposited: u64,
}

#[event]
pub struct JobCancelled {
    pub job: Pubkey,
    pub refunded: u64,
    pub surplus_returned: u64,
}

#[event]
pub struct JobExpired {
    pub job: Pubkey,
    pub by: Pubkey,
    pub last_window_end: i64,
    pub missed_windows: u64,
}

/// Carries the inputs (bps) and outputs of the slash math.
#[event]
pub struct EquivocationSlashed {
    pub provider: Pubkey,
    pub job: Pubkey,
    pub seq: u64,
    pub first_proof_hash: [u8; 32],
    pub second_proof_hash: [u8; 32],
    pub reporter: Pubkey,
    pub slash_bps: u16,
    pub reporter_reward_bps: u16,
    pub slashed: u64,
    pub reward: u64,
    pub burned: u64,
    pub jailed_until: i64,
}

#[event]
pub struct DowntimeSlashed {
    pub provider: Pubkey,
    pub job: Pubkey,
    pub missed_windows: u64,
    /// The newest proof window the attesting committee members accepted (their attestation).
    pub last_proof_window_end: i64,
    pub validators: u8,
    pub slash_bps: u16,
    pub reporter_reward_bps: u16,
    pub slashed: u64,
    pub reward: u64,
    pub burned: u64,
}

#[event]
pub struct JobDeclined {
    pub job: Pubkey,
    pub provider: Pubkey,
    pub by: Pubkey,
}

#[event]
pub struct JobCompleted {
    pub job: Pubkey,
    pub by: Pubkey,
    pub paid_seconds: u64,
}

/// `update_params` announced parameters; they are in force from `effective_at` on.
#[event]
pub struct ParamsAnnounced {
    pub market: Pubkey,
    pub current: MarketParams,
    pub pending: MarketParams,
    pub effective_at: i64,
}

#[event]
pub struct TreasurySet {
    pub market: Pubkey,
    pub previous: Pubkey,
    pub treasury: Pubkey,
}

#[event]
pub struct VaultSwept {
    pub market: Pubkey,
    pub amount: u64,
    pub destination: Pubkey,
}

/// `withdraw_fees` moved the fee vault's balance to the treasury.
#[event]
pub struct FeesWithdrawn {
    pub market: Pubkey,
    pub treasury: Pubkey,
    pub amount: u64,
}

#[event]
pub struct ValidatorUpdated {
    pub validator: Pubkey,
    pub endpoint: String,
}

#[event]
pub struct ValidatorRewardsClaimed {
    pub validator: Pubkey,
    pub destination: Pubkey,
    pub amount: u64,
}

/// The user replaced committee member `index` (no longer Active) of a job.
#[event]
pub struct CommitteeMemberReplaced {
    pub job: Pubkey,
    pub index: u8,
    pub previous: Pubkey,
    pub member: Pubkey,
}

/// Carries the inputs (bps) and outputs of the slash math.
#[event]
pub struct ValidatorEquivocationSlashed {
    pub validator: Pubkey,
    pub job: Pubkey,
    pub seq: u64,
    pub first_approved: u64,
    pub second_approved: u64,
    pub reporter: Pubkey,
    pub slash_bps: u16,
    pub reporter_reward_bps: u16,
    pub slashed: u64,
    pub reward: u64,
    pub burned: u64,
}

/// `attest_hardware` recorded a verdict; carries everything the validators signed and who.
#[event]
pub struct HardwareAttested {
    pub provider: Pubkey,
    pub worker_key: Pubkey,
    pub gpu_model: [u8; 32],
    pub gpu_count: u16,
    pub vram_mib: u32,
    pub passed: bool,
    pub challenged_at: i64,
    pub challenge_digest: [u8; 32],
    pub attested_at: i64,
    /// The validators' authority keys, in the order of their signatures.
    pub attesters: Vec<Pubkey>,
    pub submitter: Pubkey,
}

/// Carries the evidence (what the worker signed, the root its path leads to) and the inputs
/// and outputs of the slash math.
#[event]
pub struct WrongAnswerSlashed {
    pub provider: Pubkey,
    pub challenge_digest: [u8; 32],
    pub challenged_at: i64,
    pub root: [u8; 32],
    pub row_index: u32,
    pub leaf_hash: [u8; 32],
    /// Where the signed path leads instead of `root`.
    pub computed_root: [u8; 32],
    /// The worker keys that signed the answer and the row.
    pub answer_signer: Pubkey,
    pub row_signer: Pubkey,
    pub reporter: Pubkey,
    pub slash_bps: u16,
    pub slashed: u64,
    pub burned: u64,
}

/// The user rated one of the provider's billed jobs; `count` and `sum` are the provider's
/// ratings after it.
#[event]
pub struct JobRated {
    pub job: Pubkey,
    pub provider: Pubkey,
    pub user: Pubkey,
    pub score: u8,
    /// The job was already closed (rated through its tombstone).
    pub closed: bool,
    pub count: u32,
    pub sum: u32,
}
