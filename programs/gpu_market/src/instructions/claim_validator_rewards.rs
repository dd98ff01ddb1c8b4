use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::checked;
use crate::errors::GpuMarketError;
use crate::events::{emit_event, ValidatorRewardsClaimed};
use crate::ops;
use crate::state::{Market, Validator};

/// Pays the validator's unclaimed rewards (credited by the settlements it attested) from the
/// market's fee vault to a payment-mint account of its authority. Allowed while paused and
/// while exiting. Can only be signed by the validator's authority.
#[derive(Accounts)]
pub struct ClaimValidatorRewards<'info> {
    pub authority: Signer<'info>,
    #[account(mut)]
    #[cfg_attr(feature = "idl-build", account(has_one = payment_mint))]
    pub market: Box<Account<'info, Market>>,
    #[account(
        mut,
        has_one = authority @ GpuMarketError::NotAValidator,
        has_one = market @ GpuMarketError::NotAValidator,
    )]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::VALIDATOR, market.key().as_ref(), authority.key().as_ref()],
        bump = validator.bump,
    ))]
    pub validator: Box<Account<'info, Validator>>,
    #[account(address = market.payment_mint @ GpuMarketError::InvalidMint)]
    pub payment_mint: Box<Account<'info, Mint>>,
    #[account(mut, address = market.fee_vault @ GpuMarketError::InvalidFeeVault)]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::FEE_VAULT, market.key().as_ref()],
        bump = market.fee_vault_bump,
    ))]
    pub fee_vault: Box<Account<'info, TokenAccount>>,
    #[account(
        mut,
        constraint = destination.mint == market.payment_mint @ GpuMarketError::InvalidMint,
        constraint = destination.owner == authority.key() @ GpuMarketError::NotAValidator,
    )]
    pub destination: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

pub fn handler(ctx: Context<ClaimValidatorRewards>) -> Result<()> {
    let amount = ctx.accounts.validator.rewards_unclaimed;
    require!(amount > 0, GpuMarketError::NothingToClaim);
    ops::transfer_from_market(
        &ctx.accounts.token_program,
        &ctx.accounts.fee_vault,
        &ctx.accounts.payment_mint,
        ctx.accounts.destination.to_account_info(),
        &ctx.accounts.market,
        amount,
    )?;
    ctx.accounts.validator.rewards_unclaimed = 0;
    let totals = &mut ctx.accounts.market.totals;
    totals.rewards_unclaimed = checked::sub(totals.rewards_unclaimed, amount)?;
    ctx.accounts.fee_vault.reload()?;
    require!(
        ctx.accounts.fee_vault.amount >= ctx.accounts.market.totals.rewards_unclaimed,
        GpuMarketError::InvariantViolated
    );
    emit_event(ValidatorRewardsClaimed {
        validator: ctx.accounts.validator.key(),
        destination: ctx.accounts.destination.key(),
        amount,
    });
    Ok(())
}
