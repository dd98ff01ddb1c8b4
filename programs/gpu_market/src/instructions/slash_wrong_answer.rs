use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::challenge::WrongAnswerEvidence;
use crate::checked;
use crate::errors::GpuMarketError;
use crate::events::{emit_event, WrongAnswerSlashed};
use crate::math;
use crate::ops;
use crate::receipt::preceding_ed25519_entries;
use crate::seeds;
use crate::state::{Market, Provider, WrongAnswerRecord};

/// Permissionless: a worker that answered a hardware challenge with a row that contradicts
/// its own commitment has signed evidence against itself. The Ed25519 instruction right before
/// this one carries exactly two entries: entry 0 over the answer digest (the committed Merkle
/// `root` of the challenge `challenge_digest`, issued at `challenged_at`), entry 1 over the
/// row digest (row `row_index` of `leaf_count`, its leaf hash and its sibling hashes), both by
/// a key that signed for the provider at `challenged_at` (the current key unexpired then, or a
/// retired key retired at or after it, with no time limit: `WrongChallengeSigner`). The path
/// must be well formed (`InvalidMerkleEvidence`) and lead to another root than the signed one
/// (`NotAWrongAnswer`): the chain recomputes it, so nobody but the worker can produce such a
/// pair. A `challenged_at` more than `max_skew_seconds` in the future fails
/// `EvidenceFromTheFuture`.
///
/// Effect: `equivocation_slash_bps` (the parameters in force) of the provider's stake +
/// unbonding, all of it burned (no reporter reward: the evidence comes from the challenger,
/// which the provider may itself run, so no reporter is a party the offender surely is not);
/// `hardware.verified` cleared, `last_slash_at = now`, `reputation.slashes += 1`; no job is
/// touched and the provider is not jailed. Once per (provider, challenge): the
/// `WrongAnswerRecord` makes a repeat fail (`AccountAlreadyInUse`). A slow or missing answer
/// is not slashable (timing is no evidence the chain can check): `attest_hardware` with a
/// failing verdict is the only consequence.
#[derive(Accounts)]
#[instruction(evidence: WrongAnswerEvidence)]
pub struct SlashWrongAnswer<'info> {
    #[account(mut)]
    pub reporter: Signer<'info>,
    #[account(mut)]
    #[cfg_attr(feature = "idl-build", account(has_one = stake_mint))]
    pub market: Box<Account<'info, Market>>,
    #[account(mut, has_one = market @ GpuMarketError::ProviderMarketMismatch)]
    pub provider: Box<Account<'info, Provider>>,
    #[account(mut, address = market.stake_mint @ GpuMarketError::InvalidMint)]
    pub stake_mint: Box<Account<'info, Mint>>,
    #[account(mut, address = market.stake_vault @ GpuMarketError::InvalidStakeVault)]
    #[cfg_attr(feature = "idl-build", account(
        seeds = [crate::seeds::STAKE_VAULT, market.key().as_ref()],
        bump = market.stake_vault_bump,
    ))]
    pub stake_vault: Box<Account<'info, TokenAccount>>,
    #[account(
        init,
        payer = reporter,
        space = 8 + WrongAnswerRecord::INIT_SPACE,
        seeds = [seeds::WRONG_ANSWER, provider.key().as_ref(), evidence.challenge_digest.as_ref()],
        bump,
    )]
    pub record: Box<Account<'info, WrongAnswerRecord>>,
    /// CHECK: the address is the Instructions sysvar; it is read with the checked loaders.
    #[account(address = solana_sdk_ids::sysvar::instructions::ID @ GpuMarketError::InvalidInstructionsSysvar)]
    pub instructions: UncheckedAccount<'info>,
    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

pub fn handler(ctx: Context<SlashWrongAnswer>, evidence: WrongAnswerEvidence) -> Result<()> {
    let now = Clock::get()?.unix_timestamp;
    let computed_root = evidence.computed_root().ok_or(GpuMarketError::InvalidMerkleEvidence)?;
    require!(computed_root != evidence.root, GpuMarketError::NotAWrongAnswer);
    let params = ctx.accounts.market.params_at(now);
    let latest = now
        .checked_add(i64::from(params.max_skew_seconds))
        .ok_or(GpuMarketError::MathOverflow)?;
    require!(evidence.challenged_at <= latest, GpuMarketError::EvidenceFromTheFuture);
    let (market_key, provider_key) = (ctx.accounts.market.key(), ctx.accounts.provider.key());
    let entries = preceding_ed25519_entries(&ctx.accounts.instructions.to_account_info())?;
    require!(entries.len() == 2, GpuMarketError::MalformedEd25519Instruction);
    let digests = [
        evidence.answer_digest(ctx.program_id, &market_key, &provider_key),
        evidence.row_digest(ctx.program_id, &market_key, &provider_key),
    ];
    for (entry, digest) in entries.iter().zip(digests) {
        require!(entry.message == digest, GpuMarketError::ChallengeMessageMismatch);
        require!(
            ctx.accounts.provider.key_signs_window(&entry.signer, evidence.challenged_at),
            GpuMarketError::WrongChallengeSigner
        );
    }

    let bps = params.equivocation_slash_bps;
    let provider = &ctx.accounts.provider;
    let split = math::slash_split(provider.stake, provider.unbonding.amount, bps, 0)
        .map_err(|_| GpuMarketError::MathOverflow)?;
    let accounts = &mut *ctx.accounts;
    accounts.provider.book_slash(&mut accounts.market, &split, now)?;
    ops::burn_from_stake_vault(&accounts.token_program, &accounts.stake_vault, &accounts.stake_mint, &accounts.market, split.burned)?;
    let provider = &mut accounts.provider;
    provider.clear_verified();
    provider.reputation.slashes = checked::add32(provider.reputation.slashes, 1)?;
    accounts.stake_vault.reload()?;
    accounts.market.invariant(accounts.stake_vault.amount)?;
    accounts.provider.invariant()?;
    accounts.record.set_inner(WrongAnswerRecord {
        provider: provider_key,
        challenge_digest: evidence.challenge_digest,
        reporter: accounts.reporter.key(),
        slashed: split.amount,
        bump: ctx.bumps.record,
    });
    emit_event(WrongAnswerSlashed {
        provider: provider_key,
        challenge_digest: evidence.challenge_digest,
        challenged_at: evidence.challenged_at,
        root: evidence.root,
        row_index: evidence.row_index,
        leaf_hash: evidence.leaf_hash,
        computed_root,
        answer_signer: entries[0].signer,
        row_signer: entries[1].signer,
        reporter: ctx.accounts.reporter.key(),
        slash_bps: bps,
        slashed: split.amount,
        burned: split.burned,
    });
    Ok(())
}
