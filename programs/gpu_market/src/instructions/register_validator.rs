use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::ops::{self, MarketSigner};
use crate::events::{emit_event, ValidatorRegistered, ValidatorRewardsClaimed, ValidatorUpdated};
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

/// Changes the validator's public endpoint. Can only be signed by the validator's authority.
#[derive(Accounts)]
pub struct UpdateValidator<'info> {
    pub authority: Signer<'info>,
    #[account(mut, has_one = authority @ GpuMarketError::NotAValidator)]
    pub validator: Box<Account<'info, Validator>>,
}

pub fn update(ctx: Context<UpdateValidator>, endpoint: String) -> Result<()> {
    let validator = &mut ctx.accounts.validator;
    validator.endpoint = encode_endpoint(&endpoint)?;
    emit_event(ValidatorUpdated { validator: validator.key(), endpoint });
    Ok(())
}

/// Pays the validator's unclaimed rewards (credited by the settlements it attested) from the
/// market's fee vault to a payment-mint account of its authority. Allowed while paused and
/// while exiting. Can only be signed by the validator's authority.
#[derive(Accounts)]
pub struct ClaimValidatorRewards<'info> {
    pub authority: Signer<'info>,
    #[account(mut)]
    pub market: Box<Account<'info, Market>>,
    #[account(
        mut,
        has_one = authority @ GpuMarketError::NotAValidator,
        has_one = market @ GpuMarketError::NotAValidator,
    )]
    pub validator: Box<Account<'info, Validator>>,
    #[account(address = market.payment_mint @ GpuMarketError::InvalidMint)]
    pub payment_mint: Box<Account<'info, Mint>>,
    #[account(mut, address = market.fee_vault @ GpuMarketError::InvalidFeeVault)]
    pub fee_vault: Box<Account<'info, TokenAccount>>,
    #[account(
        mut,
        constraint = destination.mint == market.payment_mint @ GpuMarketError::InvalidMint,
        constraint = destination.owner == authority.key() @ GpuMarketError::NotAValidator,
    )]
    pub destination: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
}

pub fn claim_rewards(ctx: Context<ClaimValidatorRewards>) -> Result<()> {
    let amount = ctx.accounts.validator.rewards_unclaimed;
    require!(amount > 0, GpuMarketError::NothingToClaim);
    let signer = MarketSigner::of(&ctx.accounts.market);
    ops::transfer_signed(
        &ctx.accounts.token_program,
        &ctx.accounts.fee_vault,
        &ctx.accounts.payment_mint,
        ctx.accounts.destination.to_account_info(),
        ctx.accounts.market.to_account_info(),
        &signer.seeds(),
        amount,
    )?;
    ctx.accounts.validator.rewards_unclaimed = 0;
    let totals = &mut ctx.accounts.market.totals;
    totals.rewards_unclaimed = ops::sub(totals.rewards_unclaimed, amount)?;
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
