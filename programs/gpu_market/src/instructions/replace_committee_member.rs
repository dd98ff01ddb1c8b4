use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, CommitteeMemberReplaced};
use crate::seeds;
use crate::state::{Job, Market, Provider, Validator, ValidatorStatus};

/// The job's user replaces committee member `index`, which is no longer Active (exiting, or its
/// Validator account closed), by `new_validator`: an Active validator of this market, not yet in
/// the committee, and not the provider's owner or worker key. A job never becomes unsettleable
/// because a member left. Allowed while the job holds GPUs (Open, Running, Finishing) and while
/// paused. Can only be signed by the job's user.
#[derive(Accounts)]
pub struct ReplaceCommitteeMember<'info> {
    pub user: Signer<'info>,
    pub market: Box<Account<'info, Market>>,
    #[account(has_one = market @ GpuMarketError::ProviderMarketMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(
        mut,
        has_one = user @ GpuMarketError::NotJobUser,
        has_one = market @ GpuMarketError::JobMarketMismatch,
        has_one = provider @ GpuMarketError::JobProviderMismatch,
    )]
    pub job: Box<Account<'info, Job>>,
    /// CHECK: must be the Validator PDA of the member being replaced; it may be closed.
    pub previous_validator: UncheckedAccount<'info>,
    #[account(constraint = new_validator.market == market.key() @ GpuMarketError::NotAValidator)]
    pub new_validator: Box<Account<'info, Validator>>,
}

pub fn handler(ctx: Context<ReplaceCommitteeMember>, index: u8) -> Result<()> {
    let job = &ctx.accounts.job;
    require!(job.status.holds_gpus(), GpuMarketError::InvalidJobStatus);
    let slot = usize::from(index);
    let previous = *job.members().get(slot).ok_or(GpuMarketError::NotCommitteeMember)?;
    let market_key = ctx.accounts.market.key();
    let (expected, _) = Pubkey::find_program_address(
        &[seeds::VALIDATOR, market_key.as_ref(), previous.as_ref()],
        ctx.program_id,
    );
    let info = ctx.accounts.previous_validator.to_account_info();
    require_keys_eq!(info.key(), expected, GpuMarketError::NotCommitteeMember);
    if info.owner == ctx.program_id && !info.data_is_empty() {
        let data = info.try_borrow_data()?;
        let v = Validator::try_deserialize(&mut &data[..])?;
        require!(v.status != ValidatorStatus::Active, GpuMarketError::MemberStillActive);
    }
    let new = &ctx.accounts.new_validator;
    let provider = &ctx.accounts.provider;
    require!(
        new.status == ValidatorStatus::Active
            && job.member_index(&new.authority).is_none()
            && new.authority != provider.owner
            && new.authority != provider.worker_key,
        GpuMarketError::InvalidCommittee
    );
    let member = new.authority;
    let job = &mut ctx.accounts.job;
    job.committee[slot] = member;
    emit_event(CommitteeMemberReplaced { job: job.key(), index, previous, member });
    Ok(())
}
