//! Token movements in and out of program-owned accounts, and the reporter-reward rule the slashes
//! share. Every outflow goes through here: escrows pay only the provider owner, the treasury,
//! the burn or the user; the stake vault pays only withdrawals, reporter rewards and the burn.
//! State changes that several instructions share are methods of the account they change
//! (`Job::end`, `Provider::book_slash` in `state/`).
use anchor_lang::prelude::*;
use anchor_spl::token::{self, Burn, Mint, Token, TokenAccount, TransferChecked};

use crate::checked::add;
use crate::errors::GpuMarketError;
use crate::math;
use crate::seeds;
use crate::state::{Job, Market};

/// Owned signer seeds of a job PDA (authority of its escrow).
pub struct JobSigner {
    market: Pubkey,
    user: Pubkey,
    id: [u8; 8],
    bump: [u8; 1],
}

impl JobSigner {
    pub fn of(job: &Job) -> Self {
        Self { market: job.market, user: job.user, id: job.job_id.to_le_bytes(), bump: [job.bump] }
    }

    pub fn seeds(&self) -> [&[u8]; 5] {
        [seeds::JOB, self.market.as_ref(), self.user.as_ref(), &self.id, &self.bump]
    }
}

/// Owned signer seeds of a market PDA (authority of the stake vault).
pub struct MarketSigner {
    creator: Pubkey,
    id: [u8; 8],
    bump: [u8; 1],
}

impl MarketSigner {
    pub fn of(market: &Market) -> Self {
        Self { creator: market.creator, id: market.id.to_le_bytes(), bump: [market.bump] }
    }

    pub fn seeds(&self) -> [&[u8]; 4] {
        [seeds::MARKET, self.creator.as_ref(), &self.id, &self.bump]
    }
}

/// `transfer_checked` of `amount` into a program account, signed by `authority`, the owner of
/// `from` who signs the transaction (a user's deposit, a provider's stake, a validator's bond).
pub fn transfer_in<'info>(
    token_program: &Program<'info, Token>,
    from: &Account<'info, TokenAccount>,
    mint: &Account<'info, Mint>,
    to: AccountInfo<'info>,
    authority: AccountInfo<'info>,
    amount: u64,
) -> Result<()> {
    transfer(token_program, from, mint, to, authority, &[], amount)
}

/// `transfer_checked` of `amount` (nothing when zero), signed by the PDA `seeds`.
#[allow(clippy::too_many_arguments)]
pub fn transfer_signed<'info>(
    token_program: &Program<'info, Token>,
    from: &Account<'info, TokenAccount>,
    mint: &Account<'info, Mint>,
    to: AccountInfo<'info>,
    authority: AccountInfo<'info>,
    seeds: &[&[u8]],
    amount: u64,
) -> Result<()> {
    transfer(token_program, from, mint, to, authority, &[seeds], amount)
}

/// `transfer_checked` of `amount` (nothing when zero) out of a vault whose authority is the
/// market PDA (the stake vault, the fee vault), signed by the market.
pub fn transfer_from_market<'info>(
    token_program: &Program<'info, Token>,
    vault: &Account<'info, TokenAccount>,
    mint: &Account<'info, Mint>,
    to: AccountInfo<'info>,
    market: &Account<'info, Market>,
    amount: u64,
) -> Result<()> {
    let signer = MarketSigner::of(market);
    transfer_signed(token_program, vault, mint, to, market.to_account_info(), &signer.seeds(), amount)
}

/// `transfer_checked` of `amount` (nothing when zero); `signer_seeds` are the PDA signers, if
/// `authority` is one.
#[allow(clippy::too_many_arguments)]
fn transfer<'info>(
    token_program: &Program<'info, Token>,
    from: &Account<'info, TokenAccount>,
    mint: &Account<'info, Mint>,
    to: AccountInfo<'info>,
    authority: AccountInfo<'info>,
    signer_seeds: &[&[&[u8]]],
    amount: u64,
) -> Result<()> {
    if amount == 0 {
        return Ok(());
    }
    token::transfer_checked(
        CpiContext::new_with_signer(
            token_program.key(),
            TransferChecked {
                from: from.to_account_info(),
                mint: mint.to_account_info(),
                to,
                authority,
            },
            signer_seeds,
        ),
        amount,
        mint.decimals,
    )
}

/// SPL `burn` of `amount` from `from` (nothing when zero), signed by the PDA `seeds`.
pub fn burn_signed<'info>(
    token_program: &Program<'info, Token>,
    from: &Account<'info, TokenAccount>,
    mint: &Account<'info, Mint>,
    authority: AccountInfo<'info>,
    seeds: &[&[u8]],
    amount: u64,
) -> Result<()> {
    if amount == 0 {
        return Ok(());
    }
    token::burn(
        CpiContext::new_with_signer(
            token_program.key(),
            Burn { mint: mint.to_account_info(), from: from.to_account_info(), authority },
            &[seeds],
        ),
        amount,
    )
}

/// Pays a slash out of the stake vault: `split.reward` to the reporter's stake account, the
/// rest (`split.burned`) burned. The caller has booked it (stake, bond, market totals).
pub fn pay_slash<'info>(
    token_program: &Program<'info, Token>,
    stake_vault: &Account<'info, TokenAccount>,
    stake_mint: &Account<'info, Mint>,
    market: &Account<'info, Market>,
    reporter: AccountInfo<'info>,
    split: &math::SlashSplit,
) -> Result<()> {
    let signer = MarketSigner::of(market);
    let authority = market.to_account_info();
    let seeds = signer.seeds();
    transfer_signed(
        token_program,
        stake_vault,
        stake_mint,
        reporter,
        authority.clone(),
        &seeds,
        split.reward,
    )?;
    burn_signed(token_program, stake_vault, stake_mint, authority, &seeds, split.burned)
}

/// Burns `amount` of the stake vault (a slash without a reporter reward), signed by the market.
/// The caller has booked it (stake, market totals).
pub fn burn_from_stake_vault<'info>(
    token_program: &Program<'info, Token>,
    stake_vault: &Account<'info, TokenAccount>,
    stake_mint: &Account<'info, Mint>,
    market: &Account<'info, Market>,
    amount: u64,
) -> Result<()> {
    let signer = MarketSigner::of(market);
    burn_signed(token_program, stake_vault, stake_mint, market.to_account_info(), &signer.seeds(), amount)
}

/// What emptying an escrow paid the user.
pub struct EscrowRefund {
    /// The booked balance, now booked as `refunded`.
    pub booked: u64,
    /// Tokens above the books (donations); they go to the user as well.
    pub surplus: u64,
}

/// Pays the whole escrow balance to `to` (a payment account of the job's user, checked by the
/// caller) and books its booked part as refunded; `job_info` is the job's account, the escrow's
/// authority. Donations never block this: the balance may exceed the books, and the surplus
/// goes to the user too.
pub fn refund_escrow<'info>(
    token_program: &Program<'info, Token>,
    escrow: &mut Account<'info, TokenAccount>,
    mint: &Account<'info, Mint>,
    to: AccountInfo<'info>,
    job: &mut Job,
    job_info: AccountInfo<'info>,
) -> Result<EscrowRefund> {
    let booked = job.booked_escrow()?;
    let balance = escrow.amount;
    let surplus = balance.checked_sub(booked).ok_or(GpuMarketError::InvariantViolated)?;
    let signer = JobSigner::of(job);
    transfer_signed(token_program, escrow, mint, to, job_info, &signer.seeds(), balance)?;
    job.refunded = add(job.refunded, booked)?;
    escrow.reload()?;
    job.invariant(escrow.amount)?;
    Ok(EscrowRefund { booked, surplus })
}

/// The reporter reward rate a slash of `provider` on `job` pays `reporter`: the job's
/// `reporter_reward_bps` if the reporter is the job's user or a member of its committee and
/// none of `offender_keys`, the keys the provider provably holds (its owner, which signed its
/// registration, and the worker keys that signed the evidence); else 0, and the whole slash
/// is burned. A stranger may be the offender under another name, so only the parties the
/// offender is not earn from its punishment. Keys the provider merely names (a worker key it
/// rotated to someone else's pubkey) do not count, so it cannot strip a reporter of its reward.
pub fn provider_reporter_reward_bps(reporter: &Pubkey, job: &Job, offender_keys: &[Pubkey]) -> u16 {
    let party = *reporter == job.user || job.member_index(reporter).is_some();
    if party && !offender_keys.contains(reporter) {
        job.terms.reporter_reward_bps
    } else {
        0
    }
}

/// The reporter reward rate a slash of the validator `offender` (an authority) on `job` pays
/// `reporter`: the job's `reporter_reward_bps` if the reporter is the job's user, the owner of
/// its provider (the Provider PDA of `reporter` is `job.provider`) or another member of its
/// committee; else 0, and the whole slash is burned.
pub fn validator_reporter_reward_bps(
    reporter: &Pubkey,
    job: &Job,
    offender: &Pubkey,
    program_id: &Pubkey,
) -> u16 {
    let provider_owner = || {
        Pubkey::find_program_address(&[seeds::PROVIDER, job.market.as_ref(), reporter.as_ref()], program_id).0
            == job.provider
    };
    let party = *reporter == job.user || job.member_index(reporter).is_some() || provider_owner();
    if party && reporter != offender {
        job.terms.reporter_reward_bps
    } else {
        0
    }
}
