use anchor_lang::prelude::*;

use crate::challenge::{attesters_hash, HardwareVerdictArgs};
use crate::errors::GpuMarketError;
use crate::events::{emit_event, HardwareAttested};
use crate::receipt::preceding_ed25519_entries;
use crate::state::{HardwareVerdict, Market, MarketParams, Provider, Validator, ValidatorStatus};

/// Records a hardware verdict on the provider: a quorum of the market's validators says the
/// machine holding the provider's current worker key passed (or failed) a challenge for this
/// GPU model, count and VRAM, issued at `challenged_at`.
///
/// Specification:
/// - anyone may submit (the signer pays the fee); the instruction right before this one is an
///   Ed25519-program instruction whose every entry is over exactly the verdict digest
///   (`HardwareVerdictArgs::digest`: program, market, provider and every field of the verdict);
/// - it carries at least `hardware_quorum` (the parameters in force) entries, and entry `i` is
///   signed by the authority of the `i`-th remaining account: a Validator of this market
///   (`NotAValidator`), Active (`ValidatorNotActive`: an exiting validator attests no verdict),
///   bonding at least `max(1, validator_min_bond)` (`BondTooSmall`), neither the provider's
///   owner nor its worker key (`HardwareAttesterIsProvider`), all distinct
///   (`DuplicateValidator`); as many remaining accounts as entries (`HardwareQuorumNotMet`);
/// - the verdict names the provider's current worker key (`HardwareWorkerKeyMismatch`); a
///   passing verdict names the provider's declared GPU model, count and VRAM
///   (`HardwareSpecMismatch`: a pass for another spec says nothing about this one); a failing
///   one may name anything (what the validators found);
/// - `challenged_at` is at most `max_skew_seconds` in the future (`HardwareChallengeInFuture`),
///   at most `hardware_attestation_max_age_seconds` old (`HardwareVerdictStale`), and later than
///   the provider's recorded verdict (`HardwareVerdictReplayed`: an old verdict, passing or
///   failing, is never replayed over a newer one).
///
/// Effect: `provider.hardware` is the verdict (`verified = passed`), with the attestation time,
/// the number of attesters and the hash of their sorted keys; the `HardwareAttested` event
/// names them. Timing is not evidence the chain can check: a failing verdict marks the
/// provider unverified and slashes nothing.
#[derive(Accounts)]
pub struct AttestHardware<'info> {
    pub submitter: Signer<'info>,
    pub market: Box<Account<'info, Market>>,
    #[account(mut, has_one = market @ GpuMarketError::ProviderMarketMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    /// CHECK: the address is the Instructions sysvar; it is read with the checked loaders.
    #[account(address = solana_sdk_ids::sysvar::instructions::ID @ GpuMarketError::InvalidInstructionsSysvar)]
    pub instructions: UncheckedAccount<'info>,
}

pub fn handler<'info>(ctx: Context<'info, AttestHardware<'info>>, verdict: HardwareVerdictArgs) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let params = ctx.accounts.market.params_at(now);
    let provider = &ctx.accounts.provider;
    require_keys_eq!(verdict.worker_key, provider.worker_key, GpuMarketError::HardwareWorkerKeyMismatch);
    require!(!verdict.passed || verdict.is_for(&provider.spec), GpuMarketError::HardwareSpecMismatch);
    let latest = now
        .checked_add(i64::from(params.max_skew_seconds))
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(verdict.challenged_at <= latest, GpuMarketError::HardwareChallengeInFuture);
    let oldest = now
        .checked_sub(i64::from(params.hardware_attestation_max_age_seconds))
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(verdict.challenged_at >= oldest, GpuMarketError::HardwareVerdictStale);
    require!(
        verdict.challenged_at > provider.hardware.challenged_at,
        GpuMarketError::HardwareVerdictReplayed
    );
    let mut attesters = check_attesters(&ctx, &verdict, &params)?;

    let hash = attesters_hash(&mut attesters.clone());
    let provider = &mut ctx.accounts.provider;
    provider.hardware = HardwareVerdict {
        verified: verdict.passed,
        passed: verdict.passed,
        gpu_model: verdict.gpu_model,
        gpu_count: verdict.gpu_count,
        vram_mib: verdict.vram_mib,
        challenged_at: verdict.challenged_at,
        attested_at: now,
        challenge_digest: verdict.challenge_digest,
        attesters: u8::try_from(attesters.len()).map_err(|_| GpuMarketError::MathOverflow)?,
        attesters_hash: hash,
    };
    provider.invariant()?;
    emit_event(HardwareAttested {
        provider: provider.key(),
        worker_key: verdict.worker_key,
        gpu_model: verdict.gpu_model,
        gpu_count: verdict.gpu_count,
        vram_mib: verdict.vram_mib,
        passed: verdict.passed,
        challenged_at: verdict.challenged_at,
        challenge_digest: verdict.challenge_digest,
        attested_at: now,
        attesters: core::mem::take(&mut attesters),
        submitter: ctx.accounts.submitter.key(),
    });
    Ok(())
}

/// The attesters' authorities, in order: one Ed25519 entry over the verdict digest per
/// remaining Validator account, at least `hardware_quorum` of them, each Active, bonded, not
/// the provider, distinct.
fn check_attesters<'info>(
    ctx: &Context<'info, AttestHardware<'info>>,
    verdict: &HardwareVerdictArgs,
    params: &MarketParams,
) -> Result<Vec<Pubkey>> {
    let accounts = &ctx.accounts;
    let market = accounts.market.key();
    let provider = &accounts.provider;
    let digest = verdict.digest(ctx.program_id, &market, &provider.key());
    let entries = preceding_ed25519_entries(&accounts.instructions.to_account_info())?;
    require!(
        entries.len() == ctx.remaining_accounts.len() && entries.len() >= usize::from(params.hardware_quorum),
        GpuMarketError::HardwareQuorumNotMet
    );
    let min_bond = params.validator_min_bond.max(1);
    let mut seen: Vec<Pubkey> = Vec::with_capacity(entries.len());
    for (info, entry) in ctx.remaining_accounts.iter().zip(&entries) {
        require!(entry.message == digest, GpuMarketError::HardwareVerdictMismatch);
        let validator: Account<Validator> = Account::try_from(info)?;
        require_keys_eq!(validator.market, market, GpuMarketError::NotAValidator);
        require_keys_eq!(entry.signer, validator.authority, GpuMarketError::NotAValidator);
        require!(validator.status == ValidatorStatus::Active, GpuMarketError::ValidatorNotActive);
        require!(validator.bond >= min_bond, GpuMarketError::BondTooSmall);
        require!(
            validator.authority != provider.owner && validator.authority != provider.worker_key,
            GpuMarketError::HardwareAttesterIsProvider
        );
        require!(!seen.contains(&validator.authority), GpuMarketError::DuplicateValidator);
        seen.push(validator.authority);
    }
    Ok(seen)
}
