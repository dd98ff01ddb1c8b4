//! `EndJob`, the accounts of the instructions that end a job without moving tokens:
//! `expire_job`, `decline_job` and `complete_job` (each in its own file).
use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::state::{Job, Provider};

/// Accounts to end a job without moving tokens: only the job and its provider's GPU count
/// change, so no account of the user (closed or frozen, say) can stop a job from ending. The
/// user's `close_job` refunds the escrow afterwards.
#[derive(Accounts)]
pub struct EndJob<'info> {
    pub signer: Signer<'info>,
    #[account(mut)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(mut, has_one = provider @ GpuMarketError::JobProviderMismatch)]
    pub job: Box<Account<'info, Job>>,
}
