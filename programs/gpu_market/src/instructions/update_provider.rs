use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, ProviderUpdated};
use crate::state::{
    encode_optional_endpoint, GpuSpec, Provider, ProviderStatus, MAX_GPUS_PER_PROVIDER,
};

/// What an owner may set on its provider. `None` leaves a field unchanged.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct UpdateProviderArgs {
    /// Applies to jobs created from now on; running jobs keep their locked rate.
    pub price_per_gpu_second: Option<u64>,
    /// `gpu_count` may not drop below the GPUs in use.
    pub spec: Option<GpuSpec>,
    /// Active or Paused (stop taking new jobs). A jailed provider can only become Active or
    /// Paused once its jail time is over.
    pub accepting_jobs: Option<bool>,
    /// The worker's public API URL, or "" to remove it.
    pub endpoint: Option<String>,
}

/// Updates price, spec or availability. A spec whose GPU model, count or VRAM differs from the
/// last hardware verdict's clears `hardware.verified`: the new spec needs a new challenge.
/// Can only be signed by the provider's owner.
#[derive(Accounts)]
pub struct UpdateProvider<'info> {
    pub owner: Signer<'info>,
    #[account(mut, has_one = owner @ GpuMarketError::NotProviderSigner)]
    pub provider: Box<Account<'info, Provider>>,
}

pub fn handler(ctx: Context<UpdateProvider>, args: UpdateProviderArgs) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let provider = &mut ctx.accounts.provider;
    if let Some(price) = args.price_per_gpu_second {
        require!(price > 0, GpuMarketError::InvalidPrice);
        provider.price_per_gpu_second = price;
    }
    if let Some(spec) = args.spec {
        require!(
            (1..=MAX_GPUS_PER_PROVIDER).contains(&spec.gpu_count),
            GpuMarketError::InvalidGpuCount
        );
        require!(spec.gpu_count >= provider.gpus_in_use, GpuMarketError::GpusInUse);
        if !provider.hardware.matches(&spec) {
            provider.clear_verified();
        }
        provider.spec = spec;
    }
    if let Some(endpoint) = &args.endpoint {
        provider.endpoint = encode_optional_endpoint(endpoint)?;
    }
    if let Some(accepting) = args.accepting_jobs {
        if let ProviderStatus::Jailed { until } = provider.status {
            require!(now >= until, GpuMarketError::ProviderJailed);
        }
        provider.status = if accepting { ProviderStatus::Active } else { ProviderStatus::Paused };
    }
    provider.invariant()?;
    emit_event(ProviderUpdated {
        provider: provider.key(),
        price_per_gpu_second: provider.price_per_gpu_second,
        gpu_count: provider.spec.gpu_count,
        status: provider.status,
    });
    Ok(())
}
