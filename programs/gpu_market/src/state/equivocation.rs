use anchor_lang::prelude::*;

/// `["equivocation", job, started_at, seq]`: proof that (job incarnation, seq) was already
/// slashed; its existence makes a second `slash_equivocation` for the same pair fail.
#[account]
#[derive(InitSpace)]
pub struct EquivocationRecord {
    pub job: Pubkey,
    pub seq: u64,
    pub provider: Pubkey,
    pub reporter: Pubkey,
    pub slashed: u64,
    pub bump: u8,
}
