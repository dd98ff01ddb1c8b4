//! gpu_market: escrowed GPU rentals paid from signed usage receipts. `lib.rs` only dispatches;
//! each instruction lives in `instructions/<name>.rs` with its accounts and guarantees.
#![allow(unexpected_cfgs)]
// All arithmetic is checked and returns a typed error; `make lint` enforces it.
#![deny(clippy::arithmetic_side_effects, clippy::integer_division)]
// Raised inside the code `#[program]` generates.
#![allow(clippy::diverging_sub_expression)]
use anchor_lang::prelude::*;

pub mod challenge;
pub mod checked;
pub mod errors;
pub mod events;
pub mod instructions;
pub mod math;
pub mod ops;
pub mod receipt;
pub mod seeds;
pub mod state;

use challenge::{HardwareVerdictArgs, WrongAnswerEvidence};
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
    pub fn register_validator(
        ctx: Context<RegisterValidator>,
        bond: u64,
        endpoint: String,
    ) -> Result<()> {
        instructions::register_validator::handler(ctx, bond, endpoint)
    }

    /// Changes a validator's public endpoint (its authority).
    pub fn update_validator(ctx: Context<UpdateValidator>, endpoint: String) -> Result<()> {
        instructions::update_validator::handler(ctx, endpoint)
    }

    /// Pays a validator's unclaimed settlement rewards from the fee vault (its authority).
    pub fn claim_validator_rewards(ctx: Context<ClaimValidatorRewards>) -> Result<()> {
        instructions::claim_validator_rewards::handler(ctx)
    }

    /// The user replaces a committee member that is no longer Active.
    pub fn replace_committee_member(
        ctx: Context<ReplaceCommitteeMember>,
        index: u8,
    ) -> Result<()> {
        instructions::replace_committee_member::handler(ctx, index)
    }

    /// Slashes a validator that attested two different values for one job and seq (anyone).
    pub fn slash_validator_equivocation(
        ctx: Context<SlashValidatorEquivocation>,
        first: Receipt,
        first_approved: u64,
        second: Receipt,
        second_approved: u64,
    ) -> Result<()> {
        instructions::slash_validator_equivocation::handler(
            ctx,
            first,
            first_approved,
            second,
            second_approved,
        )
    }

    /// Opens a job on the terms the user signed for and escrows the user's deposit.
    #[allow(clippy::too_many_arguments)]
    pub fn create_job<'info>(
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
        instructions::create_job::handler(
            ctx,
            job_id,
            gpu_count,
            deposit,
            max_price_per_gpu_second,
            committee,
            quorum,
            workload_hash,
            expected_params,
        )
    }

    /// The provider starts an Open job.
    pub fn accept_job(ctx: Context<AcceptJob>) -> Result<()> {
        instructions::accept_job::handler(ctx)
    }

    /// Pays the seconds a quorum of the job's committee approved up to a signed receipt.
    pub fn settle<'info>(
        ctx: Context<'info, Settle<'info>>,
        receipt: Receipt,
        approved_seconds: u64,
    ) -> Result<()> {
        instructions::settle::handler(ctx, receipt, approved_seconds)
    }

    /// Stops billing of a Running job.
    pub fn finish_job(ctx: Context<FinishJob>) -> Result<()> {
        instructions::finish_job::handler(ctx)
    }

    /// Refunds what is left to the user and closes the job and its escrow.
    pub fn close_job(ctx: Context<CloseJob>) -> Result<()> {
        instructions::close_job::handler(ctx)
    }

    /// Announces new market parameters, in force after `max(unbonding_seconds,
    /// MIN_PARAMS_DELAY_SECONDS)` (authority).
    pub fn update_params(ctx: Context<UpdateParams>, params: MarketParams) -> Result<()> {
        instructions::update_params::handler(ctx, params)
    }

    /// Pauses or resumes new business (authority).
    pub fn set_paused(ctx: Context<SetPaused>, paused: bool) -> Result<()> {
        instructions::set_paused::handler(ctx, paused)
    }

    /// Names the next market authority (authority).
    pub fn propose_authority(ctx: Context<ProposeAuthority>, new_authority: Pubkey) -> Result<()> {
        instructions::propose_authority::handler(ctx, new_authority)
    }

    /// The proposed authority takes over.
    pub fn accept_authority(ctx: Context<AcceptAuthority>) -> Result<()> {
        instructions::accept_authority::handler(ctx)
    }

    /// Changes price, spec or availability of a provider (owner).
    pub fn update_provider(ctx: Context<UpdateProvider>, args: UpdateProviderArgs) -> Result<()> {
        instructions::update_provider::handler(ctx, args)
    }

    /// Replaces the worker key; the retired one signs only windows that ended by now (owner).
    pub fn rotate_worker_key(
        ctx: Context<RotateWorkerKey>,
        new_worker_key: Pubkey,
        expires_at: i64,
    ) -> Result<()> {
        instructions::rotate_worker_key::handler(ctx, new_worker_key, expires_at)
    }

    /// Starts unbonding part of a provider's stake (owner).
    pub fn request_unstake(ctx: Context<RequestUnstake>, amount: u64) -> Result<()> {
        instructions::request_unstake::handler(ctx, amount)
    }

    /// Withdraws released unbonding stake (owner).
    pub fn withdraw_unstaked(ctx: Context<WithdrawUnstaked>) -> Result<()> {
        instructions::withdraw_unstaked::handler(ctx)
    }

    /// A validator starts unbonding its whole bond and leaves: no new committee, no downtime
    /// reports; it still settles for the committees it is in until it withdraws.
    pub fn request_validator_exit(ctx: Context<RequestValidatorExit>) -> Result<()> {
        instructions::request_validator_exit::handler(ctx)
    }

    /// An exited validator withdraws its released bond; its account closes.
    pub fn withdraw_validator_bond(ctx: Context<WithdrawValidatorBond>) -> Result<()> {
        instructions::withdraw_validator_bond::handler(ctx)
    }

    /// Adds tokens to an Open or Running job's escrow (user).
    pub fn top_up(ctx: Context<TopUp>, amount: u64) -> Result<()> {
        instructions::top_up::handler(ctx, amount)
    }

    /// Cancels an Open job with a full refund (user).
    pub fn cancel_job(ctx: Context<RefundJob>) -> Result<()> {
        instructions::cancel_job::handler(ctx)
    }

    /// Fails a Running job whose provider stopped proving; no tokens move (anyone).
    pub fn expire_job(ctx: Context<EndJob>) -> Result<()> {
        instructions::expire_job::handler(ctx)
    }

    /// The provider refuses an Open job; the user's `close_job` refunds it in full.
    pub fn decline_job(ctx: Context<EndJob>) -> Result<()> {
        instructions::decline_job::handler(ctx)
    }

    /// Completes a Finishing job whose grace is over and frees its GPUs (anyone).
    pub fn complete_job(ctx: Context<EndJob>) -> Result<()> {
        instructions::complete_job::handler(ctx)
    }

    /// Replaces the treasury token account (authority).
    pub fn set_treasury(ctx: Context<SetTreasury>) -> Result<()> {
        instructions::set_treasury::handler(ctx)
    }

    /// Moves the fee vault's balance to the treasury account (anyone).
    pub fn withdraw_fees(ctx: Context<WithdrawFees>) -> Result<()> {
        instructions::withdraw_fees::handler(ctx)
    }

    /// Moves the stake vault's surplus over the booked stake to the treasury's owner (anyone).
    pub fn sweep_vault(ctx: Context<SweepVault>) -> Result<()> {
        instructions::sweep_vault::handler(ctx)
    }

    /// Slashes a provider whose worker key signed two receipts for one job and seq (anyone).
    pub fn slash_equivocation(
        ctx: Context<SlashEquivocation>,
        first: Receipt,
        second: Receipt,
    ) -> Result<()> {
        instructions::slash_equivocation::handler(ctx, first, second)
    }

    /// Slashes a provider for missed windows on its job committee's quorum attestation.
    pub fn slash_downtime<'info>(
        ctx: Context<'info, SlashDowntime<'info>>,
        last_proof_window_end: i64,
    ) -> Result<()> {
        instructions::slash_downtime::handler(ctx, last_proof_window_end)
    }

    /// Records a quorum of validators' verdict on a provider's hardware (anyone submits).
    pub fn attest_hardware<'info>(
        ctx: Context<'info, AttestHardware<'info>>,
        verdict: HardwareVerdictArgs,
    ) -> Result<()> {
        instructions::attest_hardware::handler(ctx, verdict)
    }

    /// Slashes a provider whose worker signed a challenge row contradicting its own root (anyone).
    pub fn slash_wrong_answer(ctx: Context<SlashWrongAnswer>, evidence: WrongAnswerEvidence) -> Result<()> {
        instructions::slash_wrong_answer::handler(ctx, evidence)
    }

    /// The job's user rates a job that billed something, 1 to 5 stars, once (also once closed).
    pub fn rate_job(ctx: Context<RateJob>, score: u8) -> Result<()> {
        instructions::rate_job::handler(ctx, score)
    }
}
