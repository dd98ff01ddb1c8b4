use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, ValidatorRegistered};
use crate::ops;
use crate::seeds;
use crate::state::{encode_endpoint, Market, Unbonding, Validator, ValidatorStatus};

/// Registers the signer as a validator of `market` with its public `endpoint`, bonding at least
/// `validator_min_bond` stake tokens into the stake vault. Can only be called while the market
/// is not paused.
#[derive(Accounts)]
pub struct RegisterValidator<'info> {
    #[account(mut)]
    pub authority: Signer<'info>,
    #[account(mut, constraint = !market.paused @ GpuMarketError::MarketPaused)]
    #[cfg_attr(feature = "idl-build", account(has_one = stake_mint))]
    pub market: Box<Account<'info, Market>>,
    #[account(
        init,
        payer = authority,
        space = 8 + Validator::INIT_SPACE,
        seeds = [seeds::VALIDATOR, market.key().as_ref(), authority.key().as_ref()],
        bump,
    )]
    pub validator: Box<Account<'info, Validator>>,
    #[account(address = market.stake_mint @ GpuMarketError::InvalidMint)]
    pub stake_mint: Box<Account<'info, Mint>>,
    #[account(mut, constraint = authority_stake_account.mint == stake_mint.key() @ GpuMarketError::InvalidMint)]
    pub authority_stake_account: Box<Account<'info, TokenAccount>>,
    #[account(mut, address = market.stake_vault @ GpuMarketError::InvalidStakeVault)]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::STAKE_VAULT, market.key().as_ref()],
        bump = market.stake_vault_bump,
    ))]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

pub fn handler(ctx: Context<RegisterValidator>, bond: u64, endpoint: String) -> Result<()> {
    let encoded = encode_endpoint(&endpoint)?;
    let now = Clock::get()?.unix_timestamp;
    require!(bond > 0, GpuMarketError::ZeroAmount);
    require!(
        bond >= ctx.accounts.market.params_at(now).validator_min_bond,
        GpuMarketError::BondTooSmall
    );
    ops::transfer_in(
        &ctx.accounts.token_program,
        &ctx.accounts.authority_stake_account,
        &ctx.accounts.stake_mint,
        ctx.accounts.stake_vault.to_account_info(),
        ctx.accounts.authority.to_account_info(),
        bond,
    )?;
    ctx.accounts.validator.set_inner(Validator {
        market: ctx.accounts.market.key(),
        authority: ctx.accounts.authority.key(),
        bond,
        unbonding: Unbonding::default(),
        status: ValidatorStatus::Active,
        settlements: 0,
        bump: ctx.bumps.validator,
        endpoint: encoded,
        rewards_earned: 0,
        rewards_unclaimed: 0,
        slashes: 0,
    });
    let market = &mut ctx.accounts.market;
    market.totals.bonded = market
        .totals
        .bonded
        .checked_add(bond)
        .ok_or(GpuMarketError::MathOverflow)?;
    ctx.accounts.stake_vault.reload()?;
    ctx.accounts.market.invariant(ctx.accounts.stake_vault.amount)?;
    emit_event(ValidatorRegistered {
        market: ctx.accounts.market.key(),
        validator: ctx.accounts.validator.key(),
        authority: ctx.accounts.authority.key(),
        bond,
        endpoint,
    });
    Ok(())
}
