//! gpu_market: escrowed GPU rentals paid from signed usage receipts. `lib.rs` only dispatches;
//! each instruction lives in `instructions/<name>.rs` with its accounts and guarantees.
#![allow(unexpected_cfgs)]
use anchor_lang::prelude::*;

pub mod errors;
pub mod events;
pub mod instructions;
pub mod math;
pub mod receipt;
pub mod seeds;
pub mod state;

use instructions::*;
pub use receipt::Receipt;
use state::MarketParams;

declare_id!("9mfnJ96kQ4APyqVvPKsBwVLCnwWwrSrGtkXZMyDspnkg");

#[program]
pub mod gpu_market {
    use super::*;

    /// Creates a market, its stake vault and records its treasury.
    pub fn initialize_market(
        ctx: Context<InitializeMarket>,
        id: u64,
        params: MarketParams,
    ) -> Result<()> {
        instructions::initialize_market::handler(ctx, id, params)
    }

    /// Registers the signer as a GPU provider.
    pub fn register_provider(ctx: Context<RegisterProvider>, args: RegisterProviderArgs) -> Result<()> {
        instructions::register_provider::handler(ctx, args)
    }

    /// Adds stake to the signer's provider account.
    pub fn stake(ctx: Context<Stake>, amount: u64) -> Result<()> {
        instructions::stake::handler(ctx, amount)
    }

    /// Registers the signer as a bonded validator.
    pub fn register_validator(ctx: Context<RegisterValidator>, bond: u64) -> Result<()> {
        instructions::register_validator::handler(ctx, bond)
    }

    /// Opens a job and escrows the user's deposit.
    pub fn create_job(
        ctx: Context<CreateJob>,
        job_id: u64,
        gpu_count: u16,
        deposit: u64,
    ) -> Result<()> {
        instructions::create_job::handler(ctx, job_id, gpu_count, deposit)
    }

    /// The provider starts an Open job.
    pub fn accept_job(ctx: Context<AcceptJob>) -> Result<()> {
        instructions::accept_job::handler(ctx)
    }

    /// Pays one signed window receipt out of the job's escrow.
    pub fn settle<'info>(ctx: Context<'info, Settle<'info>>, receipt: Receipt) -> Result<()> {
        instructions::settle::handler(ctx, receipt)
    }

    /// Stops billing of a Running job.
    pub fn finish_job(ctx: Context<FinishJob>) -> Result<()> {
        instructions::finish_job::handler(ctx)
    }

    /// Refunds what is left to the user and closes the job and its escrow.
    pub fn close_job(ctx: Context<CloseJob>) -> Result<()> {
        instructions::close_job::handler(ctx)
    }
}
