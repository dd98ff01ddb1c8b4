//! `SlashTargets`, the accounts every provider slash touches, and `apply`, the booking, payout
//! and job failure they share: nested as `targets` in `slash_equivocation` and
//! `slash_downtime` (and so in their IDL entries).
use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::math::SlashSplit;
use crate::ops;
use crate::state::{Job, JobStatus, Market, Provider};

/// The accounts every slash touches: the provider's stake in the vault (reward to the reporter,
/// rest burned) and the job, which fails. The job's escrow is not moved here (it keeps the
/// slash within one packet): `close_job` refunds all of it to the user at once, since a Failed
/// job needs no grace.
#[derive(Accounts)]
pub struct SlashTargets<'info> {
    #[account(mut)]
    #[cfg_attr(feature = "idl-build", account(has_one = stake_mint))]
    pub market: Box<Account<'info, Market>>,
    #[account(mut, has_one = market @ GpuMarketError::ProviderMarketMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(
        mut,
        has_one = market @ GpuMarketError::JobMarketMismatch,
        has_one = provider @ GpuMarketError::JobProviderMismatch,
    )]
    pub job: Box<Account<'info, Job>>,
    #[account(mut, address = market.stake_mint @ GpuMarketError::InvalidMint)]
    pub stake_mint: Box<Account<'info, Mint>>,
    #[account(mut, address = market.stake_vault @ GpuMarketError::InvalidStakeVault)]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::STAKE_VAULT, market.key().as_ref()],
        bump = market.stake_vault_bump,
    ))]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    /// Receives the reporter reward; any stake-mint account.
    #[account(mut, constraint = reporter_stake_account.mint == market.stake_mint @ GpuMarketError::InvalidMint)]
    pub reporter_stake_account: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

impl SlashTargets<'_> {
    /// Takes `split` from the provider's stake + unbonding (reward to the reporter, rest
    /// burned) and fails the job (freeing its GPUs) if it still holds them. A job that already
    /// ended keeps its status, so no job counts both completed and failed.
    pub fn apply(&mut self, split: &SlashSplit, now: i64) -> Result<()> {
        self.provider.book_slash(&mut self.market, split, now)?;
        ops::pay_slash(
            &self.token_program,
            &self.stake_vault,
            &self.stake_mint,
            &self.market,
            self.reporter_stake_account.to_account_info(),
            split,
        )?;
        if self.job.status.holds_gpus() {
            self.job.end(&mut self.provider, JobStatus::Failed, now)?;
        }
        self.stake_vault.reload()?;
        self.market.invariant(self.stake_vault.amount)?;
        self.provider.invariant()
    }
}
