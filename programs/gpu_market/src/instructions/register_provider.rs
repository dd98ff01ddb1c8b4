use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, ProviderRegistered};
use crate::seeds;
use crate::state::{
    encode_optional_endpoint, GpuSpec, HardwareVerdict, Market, Provider, ProviderStatus, Ratings,
    Reputation, Unbonding, MAX_GPUS_PER_PROVIDER,
};

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct RegisterProviderArgs {
    pub worker_key: Pubkey,
    /// 0 = never expires.
    pub worker_key_expires_at: i64,
    pub spec: GpuSpec,
    pub price_per_gpu_second: u64,
    /// The worker's public API URL (http:// or https://, at most 96 bytes), or "" when the
    /// provider runs no workloads.
    pub endpoint: String,
}

/// Registers the signer as a provider of `market`. One provider account per (market, owner).
/// Can only be called while the market is not paused.
#[derive(Accounts)]
pub struct RegisterProvider<'info> {
    #[account(mut)]
    pub owner: Signer<'info>,
    #[account(constraint = !market.paused @ GpuMarketError::MarketPaused)]
    pub market: Box<Account<'info, Market>>,
    #[account(
        init,
        payer = owner,
        space = 8 + Provider::INIT_SPACE,
        seeds = [seeds::PROVIDER, market.key().as_ref(), owner.key().as_ref()],
        bump,
    )]
    pub provider: Box<Account<'info, Provider>>,
    pub system_program: Program<'info, System>,
}

pub fn handler(ctx: Context<RegisterProvider>, args: RegisterProviderArgs) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    require!(
        (1..=MAX_GPUS_PER_PROVIDER).contains(&args.spec.gpu_count),
        GpuMarketError::InvalidGpuCount
    );
    require!(args.price_per_gpu_second > 0, GpuMarketError::InvalidPrice);
    require!(
        args.worker_key != Pubkey::default(),
        GpuMarketError::InvalidWorkerKey
    );
    let endpoint = encode_optional_endpoint(&args.endpoint)?;
    let provider = &mut ctx.accounts.provider;
    provider.set_inner(Provider {
        market: ctx.accounts.market.key(),
        owner: ctx.accounts.owner.key(),
        worker_key: args.worker_key,
        worker_key_expires_at: args.worker_key_expires_at,
        retired_keys: Default::default(),
        last_equivocation_slash_at: 0,
        last_equivocation_slash_bps: 0,
        spec: args.spec,
        price_per_gpu_second: args.price_per_gpu_second,
        status: ProviderStatus::Active,
        stake: 0,
        unbonding: Unbonding::default(),
        gpus_in_use: 0,
        reputation: Reputation::default(),
        bump: ctx.bumps.provider,
        endpoint,
        registered_at: now,
        last_slash_at: 0,
        hardware: HardwareVerdict::default(),
        ratings: Ratings::default(),
    });
    provider.invariant()?;
    emit_event(ProviderRegistered {
        market: provider.market,
        provider: provider.key(),
        owner: provider.owner,
        worker_key: provider.worker_key,
        gpu_count: provider.spec.gpu_count,
        price_per_gpu_second: provider.price_per_gpu_second,
    });
    Ok(())
}
