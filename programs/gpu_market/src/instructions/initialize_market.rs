use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, MarketInitialized};
use crate::seeds;
use crate::state::{Market, MarketParams, MarketTotals};

/// Creates market `id` of `authority`, its stake vault `["stake_vault", market]` and fee vault
/// `["fee_vault", market]` (authority of both: the market PDA), and records the treasury token
/// account to which `withdraw_fees` moves the unburned fee share.
#[derive(Accounts)]
#[instruction(id: u64)]
pub struct InitializeMarket<'info> {
    #[account(mut)]
    pub authority: Signer<'info>,
    #[account(
        init,
        payer = authority,
        space = 8 + Market::INIT_SPACE,
        seeds = [seeds::MARKET, authority.key().as_ref(), &id.to_le_bytes()],
        bump,
    )]
    pub market: Box<Account<'info, Market>>,
    pub stake_mint: Box<Account<'info, Mint>>,
    pub payment_mint: Box<Account<'info, Mint>>,
    #[account(
        init,
        payer = authority,
        seeds = [seeds::STAKE_VAULT, market.key().as_ref()],
        bump,
        token::mint = stake_mint,
        token::authority = market,
    )]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    #[account(
        init,
        payer = authority,
        seeds = [seeds::FEE_VAULT, market.key().as_ref()],
        bump,
        token::mint = payment_mint,
        token::authority = market,
    )]
    pub fee_vault: Box<Account<'info, TokenAccount>>,
    #[account(constraint = treasury.mint == payment_mint.key() @ GpuMarketError::InvalidTreasury)]
    pub treasury: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

pub fn handler(ctx: Context<InitializeMarket>, id: u64, params: MarketParams) -> Result<()> {
    params.validate()?;
    let market = &mut ctx.accounts.market;
    market.set_inner(Market {
        authority: ctx.accounts.authority.key(),
        creator: ctx.accounts.authority.key(),
        pending_authority: Pubkey::default(),
        id,
        stake_mint: ctx.accounts.stake_mint.key(),
        payment_mint: ctx.accounts.payment_mint.key(),
        stake_vault: ctx.accounts.stake_vault.key(),
        treasury: ctx.accounts.treasury.key(),
        params,
        pending_params: params,
        params_effective_at: 0,
        paused: false,
        totals: MarketTotals::default(),
        bump: ctx.bumps.market,
        stake_vault_bump: ctx.bumps.stake_vault,
        fee_vault: ctx.accounts.fee_vault.key(),
        fee_vault_bump: ctx.bumps.fee_vault,
    });
    market.invariant(ctx.accounts.stake_vault.amount)?;
    emit_event(MarketInitialized {
        market: market.key(),
        authority: market.authority,
        id,
        stake_mint: market.stake_mint,
        payment_mint: market.payment_mint,
        treasury: market.treasury,
        params,
    });
    Ok(())
}
