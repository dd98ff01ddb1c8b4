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

/// `["wrong_answer", provider, challenge_digest]`: the provider was slashed for a wrong answer
/// to this challenge; its existence makes a second `slash_wrong_answer` for the same challenge
/// fail (a challenge's openings are one incident, however many rows contradict the root).
#[account]
#[derive(InitSpace)]
pub struct WrongAnswerRecord {
    pub provider: Pubkey,
    pub challenge_digest: [u8; 32],
    pub reporter: Pubkey,
    pub slashed: u64,
    pub bump: u8,
}
