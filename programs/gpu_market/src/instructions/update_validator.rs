use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, ValidatorUpdated};
use crate::state::{encode_endpoint, Validator};

/// Changes the validator's public endpoint. Can only be signed by the validator's authority.
#[derive(Accounts)]
pub struct UpdateValidator<'info> {
    pub authority: Signer<'info>,
    #[account(mut, has_one = authority @ GpuMarketError::NotAValidator)]
    pub validator: Box<Account<'info, Validator>>,
}

pub fn handler(ctx: Context<UpdateValidator>, endpoint: String) -> Result<()> {
    let validator = &mut ctx.accounts.validator;
    validator.endpoint = encode_endpoint(&endpoint)?;
    emit_event(ValidatorUpdated { validator: validator.key(), endpoint });
    Ok(())
}
