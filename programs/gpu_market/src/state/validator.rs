use anchor_lang::prelude::*;

use crate::state::Unbonding;

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub enum ValidatorStatus {
    Active,
    Exiting,
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
}
