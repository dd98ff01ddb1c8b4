use anchor_lang::prelude::*;
use anchor_lang::Discriminator;

use crate::errors::GpuMarketError;
use crate::events::{emit_event, JobRated};
use crate::state::{ClosedJob, Job, Provider};

/// The job's user rates it, 1 to 5 stars (`InvalidRating`), once (`JobAlreadyRated`), if it
/// billed something (`paid_seconds > 0`, `JobNotBilled`: a rating is about work that was
/// paid for, which costs the rater the fee). `job` is the Job account or, once closed, its
/// `ClosedJob` tombstone, which keeps the user, the provider, `paid_seconds` and the flag, so
/// a user may rate after closing; anything else fails as a Job would
/// (`AccountOwnedByWrongProgram`, `AccountDiscriminatorMismatch`). The provider's `ratings`
/// gain the score (checked: `MathOverflow`, never a wrap). Can only be signed by the job's user
/// (`NotJobUser`); `provider` is the job's (`JobProviderMismatch`).
#[derive(Accounts)]
pub struct RateJob<'info> {
    pub user: Signer<'info>,
    #[account(mut)]
    pub provider: Box<Account<'info, Provider>>,
    /// CHECK: a Job or a ClosedJob of this program, told apart by discriminator in the handler.
    #[account(mut)]
    pub job: UncheckedAccount<'info>,
}

/// The facts `rate_job` reads, from a Job or a tombstone.
struct Rateable {
    user: Pubkey,
    provider: Pubkey,
    paid_seconds: u64,
    rated: bool,
    closed: bool,
}

pub fn handler(ctx: Context<RateJob>, score: u8) -> Result<()> {
    let info = ctx.accounts.job.to_account_info();
    let ratings = ctx.accounts.provider.ratings.with(score)?;
    let job = read(&info, ctx.program_id)?;
    require_keys_eq!(job.user, ctx.accounts.user.key(), GpuMarketError::NotJobUser);
    require_keys_eq!(job.provider, ctx.accounts.provider.key(), GpuMarketError::JobProviderMismatch);
    require!(job.paid_seconds > 0, GpuMarketError::JobNotBilled);
    require!(!job.rated, GpuMarketError::JobAlreadyRated);
    mark_rated(&info, job.closed)?;
    let provider = &mut ctx.accounts.provider;
    provider.ratings = ratings;
    provider.invariant()?;
    emit_event(JobRated {
        job: info.key(),
        provider: provider.key(),
        user: job.user,
        score,
        closed: job.closed,
        count: ratings.count,
        sum: ratings.sum,
    });
    Ok(())
}

fn read(info: &AccountInfo, program_id: &Pubkey) -> Result<Rateable> {
    if info.owner != program_id {
        return Err(Error::from(ErrorCode::AccountOwnedByWrongProgram)
            .with_account_name("job")
            .with_pubkeys((*info.owner, *program_id)));
    }
    let data = info.try_borrow_data()?;
    if data.starts_with(ClosedJob::DISCRIMINATOR) {
        let t = ClosedJob::try_deserialize(&mut &data[..]).map_err(|e| e.with_account_name("job"))?;
        return Ok(Rateable { user: t.user, provider: t.provider, paid_seconds: t.paid_seconds, rated: t.rated, closed: true });
    }
    // A boxed Job keeps the SBF stack frame small; anything else fails as `Account<Job>` would.
    let j = Job::try_deserialize(&mut &data[..]).map(Box::new).map_err(|e| e.with_account_name("job"))?;
    Ok(Rateable { user: j.user, provider: j.provider, paid_seconds: j.paid_seconds, rated: j.rated, closed: false })
}

/// Sets the `rated` flag in the account's bytes (a Job or a tombstone), leaving the rest.
fn mark_rated(info: &AccountInfo, closed: bool) -> Result<()> {
    let mut data = info.try_borrow_mut_data()?;
    if closed {
        let mut t = ClosedJob::try_deserialize(&mut &data[..])?;
        t.rated = true;
        t.try_serialize(&mut &mut data[..])
    } else {
        let mut j = Box::new(Job::try_deserialize(&mut &data[..])?);
        j.rated = true;
        j.try_serialize(&mut &mut data[..])
    }
}
