use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobCreated};
use crate::math;
use crate::ops;
use crate::seeds;
use crate::state::{
    Job, JobStatus, JobTerms, Market, MarketParams, Provider, ProviderStatus, Validator,
    ValidatorStatus, MAX_COMMITTEE, MAX_QUORUM,
};

/// The user opens job `job_id` on `provider` and moves `deposit` payment tokens from their own
/// account into the job's escrow. Guarantees: the provider is Active, has `gpu_count` free GPUs
/// and stake covering them; the job's terms (rate, fee, burn, window, missed-window limit,
/// grace, skew, quorum, slash rates, health thresholds) are fixed now from the parameters in
/// force and nothing changes them later; the committee is 1..=5 distinct Active validators of
/// this market chosen by the user (their Validator accounts as remaining accounts, in order),
/// none of them the provider's owner or worker key, with a quorum between the market's
/// `min_quorum` and `min(3, committee size)`; the provider's price is at most the
/// `max_price_per_gpu_second` the user signed (a provider cannot front-run the user with a price
/// rise); the market parameters in force equal `expected_params`, the ones the user read and
/// signed for (else `MarketParamsChanged`), so the authority cannot change the fee, grace, slash
/// or any other term under a signed `create_job`; the deposit covers at least one window.
#[derive(Accounts)]
#[instruction(job_id: u64)]
pub struct CreateJob<'info> {
    #[account(mut)]
    pub user: Signer<'info>,
    #[account(mut, constraint = !market.paused @ GpuMarketError::MarketPaused)]
    #[cfg_attr(feature = "idl-build", account(has_one = payment_mint))]
    pub market: Box<Account<'info, Market>>,
    #[account(mut, has_one = market @ GpuMarketError::ProviderMarketMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(
        init,
        payer = user,
        space = 8 + Job::INIT_SPACE,
        seeds = [seeds::JOB, market.key().as_ref(), user.key().as_ref(), &job_id.to_le_bytes()],
        bump,
    )]
    pub job: Box<Account<'info, Job>>,
    #[account(
        init,
        payer = user,
        seeds = [seeds::ESCROW, job.key().as_ref()],
        bump,
        token::mint = payment_mint,
        token::authority = job,
    )]
    pub escrow: Box<Account<'info, TokenAccount>>,
    #[account(address = market.payment_mint @ GpuMarketError::InvalidMint)]
    pub payment_mint: Box<Account<'info, Mint>>,
    #[account(mut, constraint = user_payment_account.mint == payment_mint.key() @ GpuMarketError::InvalidMint)]
    pub user_payment_account: Box<Account<'info, TokenAccount>>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

#[allow(clippy::too_many_arguments)]
pub fn handler<'info>(
    ctx: Context<'info, CreateJob<'info>>,
    job_id: u64,
    gpu_count: u16,
    deposit: u64,
    max_price_per_gpu_second: u64,
    committee: Vec<Pubkey>,
    quorum: u8,
    workload_hash: [u8; 32],
    expected_params: MarketParams,
) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    ctx.accounts.market.promote_params(now);
    let params = ctx.accounts.market.params;
    require!(params == expected_params, GpuMarketError::MarketParamsChanged);
    let provider = &mut ctx.accounts.provider;
    require!(
        provider.status == ProviderStatus::Active,
        GpuMarketError::ProviderNotActive
    );
    require!(
        provider.price_per_gpu_second <= max_price_per_gpu_second,
        GpuMarketError::PriceAboveLimit
    );
    require!(gpu_count >= 1, GpuMarketError::InvalidGpuCount);
    require!(
        gpu_count <= provider.free_gpus(),
        GpuMarketError::NotEnoughFreeGpus
    );
    let gpus_in_use = provider
        .gpus_in_use
        .checked_add(gpu_count)
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(
        provider.stake >= Provider::required_stake(params.min_stake_per_gpu, gpus_in_use)?,
        GpuMarketError::InsufficientStake
    );
    let rate = provider
        .price_per_gpu_second
        .checked_mul(u64::from(gpu_count))
        .ok_or(GpuMarketError::MathOverflow)?;
    let min_deposit =
        math::min_deposit(rate, params.window_seconds).map_err(|_| GpuMarketError::MathOverflow)?;
    require!(deposit >= min_deposit, GpuMarketError::DepositTooSmall);

    let members = check_committee(&ctx, &committee, quorum, params.min_quorum)?;

    ops::transfer_in(
        &ctx.accounts.token_program,
        &ctx.accounts.user_payment_account,
        &ctx.accounts.payment_mint,
        ctx.accounts.escrow.to_account_info(),
        ctx.accounts.user.to_account_info(),
        deposit,
    )?;

    let provider = &mut ctx.accounts.provider;
    provider.gpus_in_use = gpus_in_use;
    provider.invariant()?;
    let market = &mut ctx.accounts.market;
    market.totals.jobs = market
        .totals
        .jobs
        .checked_add(1)
        .ok_or(GpuMarketError::MathOverflow)?;
    let job = &mut ctx.accounts.job;
    job.set_inner(Job {
        market: market.key(),
        user: ctx.accounts.user.key(),
        provider: provider.key(),
        job_id,
        gpu_count,
        terms: JobTerms::new(&params, rate, quorum),
        committee: members,
        committee_len: u8::try_from(committee.len()).map_err(|_| GpuMarketError::InvalidCommittee)?,
        deposited: deposit,
        claimed_seconds: 0,
        paid_seconds: 0,
        paid_provider: 0,
        paid_validators: 0,
        paid_treasury: 0,
        burned: 0,
        refunded: 0,
        status: JobStatus::Open,
        created_at: now,
        started_at: 0,
        ended_at: 0,
        last_seq: 0,
        last_receipt_hash: [0; 32],
        last_window_end: 0,
        bump: ctx.bumps.job,
        escrow_bump: ctx.bumps.escrow,
        workload_hash,
        rated: false,
    });
    ctx.accounts.escrow.reload()?;
    ctx.accounts.job.invariant(ctx.accounts.escrow.amount)?;
    emit_event(JobCreated {
        market: ctx.accounts.market.key(),
        job: ctx.accounts.job.key(),
        user: ctx.accounts.user.key(),
        provider: ctx.accounts.provider.key(),
        job_id,
        gpu_count,
        price_per_gpu_second: ctx.accounts.provider.price_per_gpu_second,
        rate_per_second: rate,
        deposit,
        workload_hash,
    });
    Ok(())
}

/// The user's committee: 1..=5 distinct Active validators of this market (their Validator
/// accounts as remaining accounts, same order), none of them the provider's owner or worker
/// key; `min_quorum <= quorum <= min(MAX_QUORUM, len)`. Returns the padded member array.
fn check_committee<'info>(
    ctx: &Context<'info, CreateJob<'info>>,
    committee: &[Pubkey],
    quorum: u8,
    min_quorum: u8,
) -> Result<[Pubkey; MAX_COMMITTEE]> {
    require!(
        (1..=MAX_COMMITTEE).contains(&committee.len())
            && ctx.remaining_accounts.len() == committee.len(),
        GpuMarketError::InvalidCommittee
    );
    let size = u8::try_from(committee.len()).map_err(|_| GpuMarketError::InvalidCommittee)?;
    require!(
        quorum >= min_quorum && quorum <= MAX_QUORUM.min(size),
        GpuMarketError::InvalidJobQuorum
    );
    let provider = &ctx.accounts.provider;
    let mut members = [Pubkey::default(); MAX_COMMITTEE];
    for (i, (member, info)) in committee.iter().zip(ctx.remaining_accounts).enumerate() {
        let v: Account<Validator> = Account::try_from(info)?;
        require!(
            v.authority == *member
                && v.market == ctx.accounts.market.key()
                && v.status == ValidatorStatus::Active
                && *member != provider.owner
                && *member != provider.worker_key
                && !committee[..i].contains(member),
            GpuMarketError::InvalidCommittee
        );
        members[i] = *member;
    }
    Ok(members)
}
