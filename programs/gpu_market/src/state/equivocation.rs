use anchor_lang::prelude::*;

/// `["equivocation", job, started_at, seq]`: proof that (job incarnation, seq) was already
/// slashed; its existence makes a second `slash_equivocation` for the same pair fail.
#[account]
#[derive(InitSpace)]
pub struct EquivocationRecord {
    pub job: Pubkey,
    pub seq: u64,
    /// The slashed account: the Provider (`slash_equivocation`) or the Validator
    /// (`slash_validator_equivocation`, record seeds `["validator_equivocation", ...]`).
    pub offender: Pubkey,
    pub reporter: Pubkey,
    pub slashed: u64,
    pub bump: u8,
}
