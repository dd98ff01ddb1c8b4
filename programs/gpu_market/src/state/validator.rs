use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::state::Unbonding;

/// Bytes of a validator's endpoint URL (zero-padded UTF-8).
pub const ENDPOINT_LEN: usize = 96;

/// Active: bonded, may join new committees and report downtime. Exiting (`request_validator_exit`
/// or an equivocation slash): its bond unbonds and stays slashable until
/// `withdraw_validator_bond` closes the account; it joins no new committee, reports no downtime,
/// and may be replaced by the user of any job whose committee it is in.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub enum ValidatorStatus {
    Active,
    Exiting,
}

impl ValidatorStatus {
    /// Whether a validator in this status attests and submits `settle` for the jobs whose
    /// committee it is in. Both statuses do: a member that leaves (or is forced out) cannot stall
    /// the pay for seconds its committee's worker proved, and an exiting member's bond is still
    /// slashable for equivocation until its account closes; once closed it attests nothing (no
    /// account), which `unbonding_seconds` after its exit bounds, and the job's user can replace
    /// it from the moment it exits. A new status must decide here.
    pub fn settles(self) -> bool {
        match self {
            ValidatorStatus::Active | ValidatorStatus::Exiting => true,
        }
    }
}

/// `["validator", market, authority]`.
#[account]
#[derive(InitSpace)]
pub struct Validator {
    pub market: Pubkey,
    pub authority: Pubkey,
    pub bond: u64,
    pub unbonding: Unbonding,
    pub status: ValidatorStatus,
    pub settlements: u64,
    pub bump: u8,
    /// Public base URL of its HTTP API (`http://` or `https://`), zero-padded: workers deliver
    /// proofs there, committee members exchange attestations there.
    pub endpoint: [u8; ENDPOINT_LEN],
    /// Rewards ever credited (a share of the fee of every settlement it attested).
    pub rewards_earned: u64,
    /// Credited rewards not yet claimed (`claim_validator_rewards`); held by the fee vault.
    pub rewards_unclaimed: u64,
    pub slashes: u32,
}

/// A provider's endpoint: like a validator's (`encode_endpoint`), or "" for none (all zeros).
pub fn encode_optional_endpoint(url: &str) -> Result<[u8; ENDPOINT_LEN]> {
    if url.is_empty() {
        return Ok([0u8; ENDPOINT_LEN]);
    }
    encode_endpoint(url)
}

/// Checks and pads an endpoint URL: 1..=96 bytes of printable ASCII without spaces, starting
/// with `http://` or `https://`.
pub fn encode_endpoint(url: &str) -> Result<[u8; ENDPOINT_LEN]> {
    let bytes = url.as_bytes();
    require!(
        bytes.len() <= ENDPOINT_LEN
            && (url.starts_with("http://") || url.starts_with("https://"))
            && bytes.len() > "https://".len()
            && bytes.iter().all(|b| b.is_ascii_graphic()),
        GpuMarketError::InvalidEndpoint
    );
    let mut out = [0u8; ENDPOINT_LEN];
    out[..bytes.len()].copy_from_slice(bytes);
    Ok(out)
}
