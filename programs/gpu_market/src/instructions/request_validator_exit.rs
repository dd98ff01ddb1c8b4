use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, ValidatorExitRequested};
use crate::state::{Market, Unbonding, Validator, ValidatorStatus};

/// An Active validator leaves: its whole bond unbonds for `unbonding_seconds` (slashable for
/// equivocation until `withdraw_validator_bond`); it joins no new committee and reports no
/// downtime, and the users of its jobs may replace it. Until its account closes it still
/// attests and settles for the committees it is in (`ValidatorStatus::settles`), so its exit
/// never stalls the pay for seconds a worker proved. Allowed while paused. Can only be signed
/// by the validator's authority.
#[derive(Accounts)]
pub struct RequestValidatorExit<'info> {
    pub authority: Signer<'info>,
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
}

pub fn handler(ctx: Context<RequestValidatorExit>) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let unbonding_seconds = ctx.accounts.market.params_at(now).unbonding_seconds;
    let validator = &mut ctx.accounts.validator;
    require!(validator.status == ValidatorStatus::Active, GpuMarketError::ValidatorNotActive);
    let release_at = now.checked_add(unbonding_seconds).ok_or(GpuMarketError::MathOverflow)?;
    validator.unbonding = Unbonding { amount: validator.bond, release_at };
    validator.bond = 0;
    validator.status = ValidatorStatus::Exiting;
    emit_event(ValidatorExitRequested {
        validator: validator.key(),
        amount: validator.unbonding.amount,
        release_at,
    });
    Ok(())
}
