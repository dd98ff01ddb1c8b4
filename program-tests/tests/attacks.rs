//! One test per security class of CONVENTIONS.md, each showing the program immune.
mod common;

use anchor_lang::error::ErrorCode as AE;
use anchor_lang::prelude::Pubkey;
use common::*;
use ed25519_dalek::SigningKey;
use gpu_market::errors::GpuMarketError as E;
use gpu_market::instructions::UpdateProviderArgs;
use gpu_market::state::{JobStatus, MarketParams};
use gpum_localnet::solana_account::Account;
use gpum_localnet::solana_instruction::{AccountMeta, Instruction};
use gpum_localnet::solana_signer::Signer;

const TOKEN_2022: Pubkey = anchor_lang::prelude::pubkey!("TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb");

/// A running 1-GPU job (rate 10/s, deposit 10_000) started at `T0`, the clock at `T0 + 60`.
fn running() -> (Bench, Pubkey) {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.advance(60);
    (b, job)
}

fn settle_ixs(b: &Bench, job: Pubkey) -> Vec<Instruction> {
    b.settle_ixs(&b.worker.clone(), job, receipt(1, 60, T0 + 60))
}

/// Copies the account at `from` to a new address, owned by `owner`.
fn clone_account_owned_by(b: &mut Bench, from: &Pubkey, owner: Pubkey) -> Pubkey {
    let mut account: Account = b.svm.get_account(from).unwrap();
    account.owner = owner;
    let fake = Pubkey::new_unique();
    b.svm.set_account(fake, account).unwrap();
    fake
}

fn assert_unpaid(b: &Bench, job: &Pubkey) {
    let j = b.job_state(job);
    assert_eq!((j.last_seq, j.paid_provider, j.refunded), (0, 0, 0));
}

// ---- missing signer --------------------------------------------------------------------------

#[test]
fn attack_missing_signer() {
    let (mut b, job) = running();
    let user = b.user_kp();
    // The authority is named but does not sign (the user pays the fee).
    let ix = unsign(b.ix_update_params(&b.admin.pubkey(), MarketParams { fee_bps: 2_500, ..default_params() }), b.admin.pubkey());
    assert_eq!(b.user_err(&[ix]), anchor_err(0, AE::AccountNotSigner));
    assert_eq!(b.market_state().params, default_params());
    // The validator authority of a settle, the user of a top-up.
    let mut ixs = settle_ixs(&b, job);
    ixs[1] = unsign(ixs[1].clone(), b.validator_authority.pubkey());
    assert_eq!(b.user_err(&ixs), anchor_err(1, AE::AccountNotSigner));
    let owner = b.owner_kp();
    let ix = unsign(b.ix_top_up(&user.pubkey(), b.user.payment, job, 1), user.pubkey());
    assert_eq!(b.owner_err(&[ix]), anchor_err(0, AE::AccountNotSigner));
    let ix = unsign(b.ix_request_unstake(&owner.pubkey(), 1), owner.pubkey());
    assert_eq!(b.user_err(&[ix]), anchor_err(0, AE::AccountNotSigner));
    assert_unpaid(&b, &job);
}

/// Every instruction, with each of its signer accounts named but not signing (an outsider, who
/// is none of them, pays the fee): rejected with `AccountNotSigner` before anything else runs.
#[test]
fn attack_missing_signer_on_every_instruction() {
    let (mut b, job) = running();
    let (admin, owner, user, va) = (b.admin.pubkey(), b.provider_owner.key.pubkey(), b.user.key.pubkey(), b.validator_authority.pubkey());
    let stranger = b.new_party(10_000, 10_000);
    let (first, second) = equivocating_pair(1, 60, T0 + 60);
    let no_update = UpdateProviderArgs { price_per_gpu_second: Some(11), spec: None, accepting_jobs: None, endpoint: None };
    let cases: Vec<(&str, Vec<Instruction>)> = vec![
        ("initialize_market", vec![b.ix_initialize_market(1, default_params())]),
        ("register_provider", vec![b.ix_register_provider(&user, Pubkey::new_unique(), 1, 1)]),
        ("stake", vec![b.ix_stake(&owner, b.provider_owner.stake, 1)]),
        ("register_validator", vec![b.ix_register_validator(&user, b.user.stake, 10_000)]),
        ("create_job", vec![b.ix_create_job(&b.user, 2, 1, 10_000)]),
        ("accept_job", vec![b.ix_accept_job(&owner, job)]),
        ("finish_job", vec![b.ix_finish_job(&user, job)]),
        ("close_job", vec![b.ix_close_job(&user, b.user.payment, job)]),
        ("settle", settle_ixs(&b, job)),
        ("update_params", vec![b.ix_update_params(&admin, default_params())]),
        ("set_paused", vec![b.ix_set_paused(&admin, true)]),
        ("propose_authority", vec![b.ix_propose_authority(&admin, user)]),
        ("accept_authority", vec![b.ix_accept_authority(&user)]),
        ("update_provider", vec![b.ix_update_provider(&owner, no_update)]),
        ("rotate_worker_key", vec![b.ix_rotate_worker_key(&owner, Pubkey::new_unique(), 0)]),
        ("request_unstake", vec![b.ix_request_unstake(&owner, 1)]),
        ("withdraw_unstaked", vec![b.ix_withdraw_unstaked(&owner, b.provider_owner.stake)]),
        ("request_validator_exit", vec![b.ix_request_validator_exit(&va)]),
        ("withdraw_validator_bond", vec![b.ix_withdraw_validator_bond(&va, b.validator_stake_account())]),
        ("top_up", vec![b.ix_top_up(&user, b.user.payment, job, 1)]),
        ("cancel_job", vec![b.ix_cancel_job(&user, job, b.user.payment)]),
        ("expire_job", vec![b.ix_expire_job(&user, job)]),
        ("slash_equivocation", b.equivocation_ixs(&b.worker.clone(), &user, b.user.stake, job, first, second)),
        ("slash_downtime", vec![b.ix_slash_downtime(&va, b.validator_stake_account(), job, &[])]),
    ];
    assert_eq!(cases.len(), 24, "every instruction of lib.rs");
    for (name, ixs) in cases {
        let last = ixs.len() - 1;
        let signers: Vec<Pubkey> = ixs[last].accounts.iter().filter(|m| m.is_signer).map(|m| m.pubkey).collect();
        assert!(!signers.is_empty(), "{name} has a signer");
        for key in signers {
            let mut tampered = ixs.clone();
            tampered[last] = unsign(tampered[last].clone(), key);
            let err = b.send_err(&tampered, &[&stranger.key]);
            assert_eq!(err, anchor_err(last as u8, AE::AccountNotSigner), "{name}: {key} not signing");
        }
    }
    assert_unpaid(&b, &job);
}

// ---- missing owner check ---------------------------------------------------------------------

#[test]
fn attack_missing_owner_check_fake_job_and_market() {
    let (mut b, job) = running();
    // Byte-for-byte copies of the real Job, owned by the system program and by a fake program.
    for owner in [SYSTEM_PROGRAM, Pubkey::new_unique()] {
        let fake = clone_account_owned_by(&mut b, &job, owner);
        let mut ixs = settle_ixs(&b, job);
        ixs[1] = swap_account(ixs[1].clone(), job, fake);
        assert_eq!(b.va_err(&ixs), anchor_err(1, AE::AccountOwnedByWrongProgram));
        let user = b.user_kp();
        assert_eq!(b.user_err(&[b.ix_finish_job(&user.pubkey(), fake)]), anchor_err(0, AE::AccountOwnedByWrongProgram));
    }
    // A copy of the Market whose authority field is rewritten to the attacker.
    let mut account: Account = b.svm.get_account(&b.market).unwrap();
    account.data[8..40].copy_from_slice(b.user.key.pubkey().as_ref());
    account.owner = Pubkey::new_unique();
    let fake_market = Pubkey::new_unique();
    b.svm.set_account(fake_market, account).unwrap();
    let ix = swap_account(b.ix_set_paused(&b.user.key.pubkey(), true), b.market, fake_market);
    assert_eq!(b.user_err(&[ix]), anchor_err(0, AE::AccountOwnedByWrongProgram));
    assert_unpaid(&b, &job);
}

// ---- account type confusion ------------------------------------------------------------------

#[test]
fn attack_account_type_confusion() {
    let (mut b, job) = running();
    let user = b.user_kp();
    // A Provider where a Job is expected.
    let ix = swap_account(b.ix_finish_job(&user.pubkey(), job), job, b.provider);
    let ix = Instruction { accounts: vec![ix.accounts[0].clone(), ix.accounts[1].clone(), AccountMeta::new(b.provider, false)], ..ix };
    assert_eq!(b.user_err(&[ix]), anchor_err(0, AE::AccountDiscriminatorMismatch));
    // A Job where a Validator is expected.
    let mut ixs = settle_ixs(&b, job);
    ixs[1] = swap_account(ixs[1].clone(), b.validator, job);
    assert_eq!(b.va_err(&ixs), anchor_err(1, AE::AccountDiscriminatorMismatch));
    // A Market where a Provider is expected.
    let owner = b.owner_kp();
    let ix = swap_account(b.ix_update_provider(&owner.pubkey(), no_update()), b.provider, b.market);
    assert_eq!(b.owner_err(&[ix]), anchor_err(0, AE::AccountDiscriminatorMismatch));
    assert_eq!(b.job_state(&job).status, JobStatus::Running);
}

// ---- unbound related accounts ----------------------------------------------------------------

#[test]
fn attack_unbound_related_accounts() {
    let (mut b, job) = running();
    let (other_job, other_escrow) = b.open_job(2, 1, 50_000);
    // Another job's escrow (the seeds bind the escrow to the job).
    let mut ixs = settle_ixs(&b, job);
    ixs[1] = swap_account(ixs[1].clone(), escrow_address(&job), other_escrow);
    assert_eq!(b.va_err(&ixs), anchor_err(1, AE::ConstraintSeeds));
    // A fee vault that is not the market's (same mint).
    let fake_vault = b.create_token_account(b.payment_mint, &b.validator_authority.pubkey());
    let mut ixs = settle_ixs(&b, job);
    ixs[1] = swap_account(ixs[1].clone(), b.fee_vault, fake_vault);
    assert_eq!(b.va_err(&ixs), program_err(1, E::InvalidFeeVault));
    // A provider payment account owned by the validator.
    let mut ixs = settle_ixs(&b, job);
    let va_payment = b.token_accounts_of(&b.validator_authority.pubkey(), &b.payment_mint)[0];
    ixs[1] = swap_account(ixs[1].clone(), b.provider_owner.payment, va_payment);
    assert_eq!(b.va_err(&ixs), program_err(1, E::InvalidProviderPaymentAccount));
    // A stake vault that is not the market's (same mint, authority the market PDA).
    let fake_vault = b.create_token_account(b.stake_mint, &b.market.clone());
    b.mint_to(b.stake_mint, fake_vault, 1_000_000);
    b.as_owner(&[b.ix_request_unstake(&b.provider_owner.key.pubkey(), 1_000)]);
    b.advance(default_params().unbonding_seconds);
    let ix = swap_account(b.ix_withdraw_unstaked(&b.provider_owner.key.pubkey(), b.provider_owner.stake), b.stake_vault, fake_vault);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::InvalidStakeVault));
    assert_eq!(b.token_balance(&other_escrow), 50_000);
    assert_eq!(b.job_state(&other_job).paid_provider, 0);
}

// ---- re-initialization -----------------------------------------------------------------------

#[test]
fn attack_reinitialization() {
    let mut b = Bench::new();
    let params = MarketParams { fee_bps: 0, ..default_params() };
    // Market 0 exists (the bench's); initializing it again is refused by the system program
    // (SystemError::AccountAlreadyInUse = 0) and changes nothing.
    assert_eq!(b.admin_err(&[b.ix_initialize_market(0, params)]), custom(0, 0));
    assert_eq!(b.market_state().params, default_params());
    // register_provider twice.
    let owner = b.owner_kp();
    let ix = b.ix_register_provider(&owner.pubkey(), worker_pubkey(&SigningKey::from_bytes(&[1u8; 32])), 1, 1);
    assert_eq!(b.owner_err(&[ix]), custom(0, 0));
    let p = b.provider_state();
    assert_eq!((p.worker_key, p.stake, p.spec.gpu_count), (worker_pubkey(&b.worker), 100_000, 4));
    // register_validator twice.
    let va = b.va_kp();
    let ix = b.ix_register_validator(&va.pubkey(), b.validator_stake_account(), 5_000);
    assert_eq!(b.va_err(&[ix]), custom(0, 0));
    assert_eq!(b.validator_state().bond, 10_000);
    // create_job with an id in use.
    b.open_job(1, 1, 10_000);
    let ix = b.ix_create_job(&b.user, 1, 1, 20_000);
    assert_eq!(b.user_err(&[ix]), custom(0, 0));
}

// ---- non-canonical bump ----------------------------------------------------------------------

/// An address for `seeds` with a valid but non-canonical bump.
fn non_canonical(seeds: &[&[u8]]) -> Pubkey {
    let (_, canonical) = Pubkey::find_program_address(seeds, &gpu_market::ID);
    (0..canonical)
        .rev()
        .find_map(|bump| {
            let mut s = seeds.to_vec();
            let bump = [bump];
            s.push(&bump);
            Pubkey::create_program_address(&s, &gpu_market::ID).ok()
        })
        .expect("a non-canonical bump")
}

#[test]
fn attack_non_canonical_bump() {
    let (mut b, job) = running();
    let user = b.user_kp();
    // A job address from a non-canonical bump cannot be created.
    let (id, user_key) = (7u64.to_le_bytes(), user.pubkey());
    let seeds: [&[u8]; 4] = [gpu_market::seeds::JOB, b.market.as_ref(), user_key.as_ref(), &id];
    let odd_job = non_canonical(&seeds);
    let (canonical_job, _) = b.job_address(&user.pubkey(), 7);
    let ix = swap_account(b.ix_create_job(&b.user, 7, 1, 10_000), canonical_job, odd_job);
    let ix = swap_account(ix, escrow_address(&canonical_job), non_canonical(&[gpu_market::seeds::ESCROW, odd_job.as_ref()]));
    assert_eq!(b.user_err(&[ix]), anchor_err(0, AE::ConstraintSeeds));
    // An escrow address from a non-canonical bump is not the job's escrow, even holding a
    // copy of the real escrow (same mint, authority the job; an empty balance, so the
    // supply stays accounted for).
    let escrow = escrow_address(&job);
    let odd_escrow = non_canonical(&[gpu_market::seeds::ESCROW, job.as_ref()]);
    let mut copy = b.svm.get_account(&escrow).unwrap();
    copy.data[64..72].copy_from_slice(&0u64.to_le_bytes());
    b.svm.set_account(odd_escrow, copy).unwrap();
    let mut ixs = settle_ixs(&b, job);
    ixs[1] = swap_account(ixs[1].clone(), escrow_address(&job), odd_escrow);
    assert_eq!(b.va_err(&ixs), anchor_err(1, AE::ConstraintSeeds));
    assert_unpaid(&b, &job);
}

// ---- PDA sharing across users ----------------------------------------------------------------

#[test]
fn attack_pda_sharing_across_users() {
    let mut b = Bench::new();
    let (job_a, escrow_a) = b.running_job(1, 1, 10_000);
    let mallory = b.new_party(0, 1_000_000);
    let m = mallory.key.pubkey();
    // Mallory cannot top up (and so redirect), cancel or close user A's job.
    let ix = b.ix_top_up(&m, mallory.payment, job_a, 1);
    assert_eq!(b.send_err(&[ix], &[&mallory.key]), program_err(0, E::NotJobUser));
    let (open_a, _) = b.open_job(2, 1, 10_000);
    let ix = b.ix_cancel_job(&m, open_a, b.user.payment);
    assert_eq!(b.send_err(&[ix], &[&mallory.key]), program_err(0, E::NotJobUser));
    let ix = b.ix_cancel_job(&m, open_a, mallory.payment);
    assert_eq!(b.send_err(&[ix], &[&mallory.key]), program_err(0, E::NotJobUser));
    b.as_user(&[b.ix_cancel_job(&b.user.key.pubkey(), open_a, b.user.payment)]);
    let ix = b.ix_close_job(&m, mallory.payment, open_a);
    assert_eq!(b.send_err(&[ix], &[&mallory.key]), program_err(0, E::NotJobUser));
    // Mallory's own job cannot be paid out of A's escrow.
    let ix = b.ix_create_job(&mallory, 1, 1, 600);
    b.send(&[ix], &[&mallory.key]).unwrap();
    let (job_m, _) = b.job_address(&m, 1);
    let owner = b.owner_kp();
    b.as_owner(&[b.ix_accept_job(&owner.pubkey(), job_m)]);
    b.advance(60);
    let mut ixs = b.settle_ixs(&b.worker.clone(), job_m, receipt(1, 60, T0 + 60));
    ixs[1] = swap_account(ixs[1].clone(), escrow_address(&job_m), escrow_a);
    assert_eq!(b.va_err(&ixs), anchor_err(1, AE::ConstraintSeeds));
    assert_eq!(b.token_balance(&escrow_a), 10_000);
}

// ---- overflow / underflow --------------------------------------------------------------------

#[test]
fn attack_overflow_deposit_of_u64_max_tokens() {
    let mut b = Bench::new();
    let whale = b.new_party(0, 0);
    let room = u64::MAX - b.mint_supply(&b.payment_mint);
    b.mint_to(b.payment_mint, whale.payment, room);
    b.send(&[b.ix_create_job(&whale, 1, 1, room)], &[&whale.key]).unwrap();
    let (job, escrow) = b.job_address(&whale.key.pubkey(), 1);
    b.as_owner(&[b.ix_accept_job(&b.provider_owner.key.pubkey(), job)]);
    b.advance(60);
    b.settle(job, receipt(1, 60, T0 + 60)).unwrap();
    assert_eq!(b.token_balance(&escrow), room - 600);
    // One more token cannot be minted; a top-up of u64::MAX fails in the token program.
    let ix = b.ix_top_up(&whale.key.pubkey(), whale.payment, job, u64::MAX);
    assert_eq!(b.send_err(&[ix], &[&whale.key]), custom(0, 1));
    assert_eq!(b.job_state(&job).deposited, room);
}

#[test]
fn attack_overflow_price_times_gpus() {
    let mut b = Bench::new();
    let owner = b.owner_kp();
    b.as_owner(&[b.ix_update_provider(&owner.pubkey(), UpdateProviderArgs { price_per_gpu_second: Some(u64::MAX), ..no_update() })]);
    let ix = b.ix_create_job(&b.user, 1, 2, 1_000);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::MathOverflow));
    // One GPU: the rate fits, one window of it does not.
    let ix = b.ix_create_job(&b.user, 1, 1, 1_000);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::MathOverflow));
    assert_eq!(b.provider_state().gpus_in_use, 0);
}

#[test]
fn attack_overflow_cumulative_seconds_and_window_end_extremes() {
    let (mut b, job) = running();
    let r = receipt(1, u64::MAX, T0 + 60);
    assert_eq!(b.settle(job, r).unwrap_err().err, program_err(1, E::BilledSecondsExceedWallTime));
    let r = receipt(1, 60, i64::MAX);
    assert_eq!(b.settle(job, r).unwrap_err().err, program_err(1, E::WindowEndInFuture));
    let r = receipt(u64::MAX, 60, T0 + 60);
    b.settle(job, r).unwrap();
    // After seq u64::MAX nothing can follow.
    b.advance(60);
    assert_eq!(b.settle(job, receipt(u64::MAX, 120, T0 + 120)).unwrap_err().err, program_err(1, E::StaleSequence));
    assert_eq!(b.owner_err(&[b.ix_request_unstake(&b.provider_owner.key.pubkey(), u64::MAX)]), program_err(0, E::UnstakeExceedsStake));
}

/// Job 1 of the bench user (1 GPU, deposit 10_000) on a second `provider`, accepted by `owner`.
fn running_job_on(b: &mut Bench, owner: &Party, provider: Pubkey) -> Pubkey {
    let ix = swap_account(b.ix_create_job(&b.user, 1, 1, 10_000), b.provider, provider);
    b.as_user(&[ix]);
    let (job, _) = b.job_address(&b.user.key.pubkey(), 1);
    let ix = swap_account(b.ix_accept_job(&owner.key.pubkey(), job), b.provider, provider);
    b.send(&[ix], &[&owner.key]).unwrap();
    job
}

#[test]
fn attack_overflow_slash_all_of_a_tiny_stake() {
    let mut b = Bench::with_params(MarketParams {
        min_stake_per_gpu: 0, equivocation_slash_bps: 10_000, reporter_reward_bps: 5_000, ..default_params()
    });
    let (owner, provider) = b.add_provider(&b.worker.clone(), 1, 10, 1);
    let job = running_job_on(&mut b, &owner, provider);
    // Slash 100% of a stake of 1 (the slash can never exceed stake + unbonding); the reward is
    // half of it, rounded down.
    let (first, second) = equivocating_pair(1, 1, T0 + 1);
    let user = b.user_kp();
    let mut ixs = b.equivocation_ixs(&b.worker.clone(), &user.pubkey(), b.user.stake, job, first, second);
    ixs[1] = swap_account(ixs[1].clone(), b.provider, provider);
    let logs = b.as_user(&ixs);
    let e: gpu_market::events::EquivocationSlashed = event(&logs);
    assert_eq!((e.slashed, e.reward, e.burned), (1, 0, 1));
    let p: gpu_market::state::Provider = b.account(&provider).unwrap();
    assert_eq!((p.stake, p.unbonding.amount), (0, 0));
    assert_eq!(b.token_balance(&b.user.stake), 0);
}

#[test]
fn attack_overflow_slash_of_zero_stake() {
    let mut b = Bench::with_params(MarketParams { min_stake_per_gpu: 0, downtime_slash_bps: 10_000, ..default_params() });
    let (owner, provider) = b.add_provider(&b.worker.clone(), 1, 10, 0);
    let job = running_job_on(&mut b, &owner, provider);
    b.set_time(T0 + 600);
    // 100% of a zero stake: nothing to take, nothing underflows; the job still fails and refunds.
    let va = b.va_kp();
    let ix = swap_account(b.ix_slash_downtime(&va.pubkey(), b.validator_stake_account(), job, &[]), b.provider, provider);
    let logs = b.as_va(&[ix]);
    let e: gpu_market::events::DowntimeSlashed = event(&logs);
    assert_eq!((e.slashed, e.reward, e.burned), (0, 0, 0));
    assert_eq!(b.job_state(&job).status, JobStatus::Failed);
}

// ---- fee rounding leaks ----------------------------------------------------------------------

#[test]
fn attack_fee_rounding_conserves_every_unit() {
    let mut b = Bench::with_params(MarketParams { fee_bps: 333, burn_bps: 3_333, ..default_params() });
    let owner = b.owner_kp();
    b.as_owner(&[b.ix_update_provider(&owner.pubkey(), UpdateProviderArgs { price_per_gpu_second: Some(7), ..no_update() })]);
    let deposit = 10_007;
    let supply = b.mint_supply(&b.payment_mint);
    let user_before = b.token_balance(&b.user.payment);
    let (job, _) = b.running_job(1, 1, deposit);
    let mut cumulative = 0;
    for (seq, seconds) in [(1u64, 61u64), (2, 59), (3, 1), (4, 173)] {
        b.advance(seconds as i64);
        cumulative += seconds;
        b.settle(job, receipt(seq, cumulative, b.now)).unwrap();
    }
    b.finish(job);
    b.advance(12 * 60 + 1);
    b.as_user(&[b.ix_close_job(&b.user.key.pubkey(), b.user.payment, job)]);
    let provider = b.token_balance(&b.provider_owner.payment);
    let treasury = b.token_balance(&b.fee_vault);
    let burned = supply - b.mint_supply(&b.payment_mint);
    let refund = b.token_balance(&b.user.payment) - (user_before - deposit);
    assert_eq!(provider + treasury + burned + refund, deposit);
    // Per settlement: fee = ceil(amount * 333 / 10000), burn = floor(fee * 3333 / 10000).
    let expected: (u64, u64, u64) = [61u64, 59, 1, 173].iter().fold((0, 0, 0), |(p, t, bu), s| {
        let amount = s * 7;
        let fee = (amount * 333).div_ceil(10_000);
        let burn = fee * 3_333 / 10_000;
        (p + amount - fee, t + fee - burn, bu + burn)
    });
    assert_eq!((provider, treasury, burned), expected);
    assert_eq!(refund, deposit - 294 * 7);
}

// ---- duplicate mutable accounts --------------------------------------------------------------

#[test]
fn attack_duplicate_mutable_accounts() {
    let (mut b, job) = running();
    let escrow = escrow_address(&job);
    // The escrow passed as the provider payment account.
    let mut ixs = settle_ixs(&b, job);
    ixs[1] = swap_account(ixs[1].clone(), b.provider_owner.payment, escrow);
    assert_eq!(b.va_err(&ixs), anchor_err(1, AE::ConstraintDuplicateMutableAccount));
    // The fee vault passed as the provider payment account.
    let mut ixs = settle_ixs(&b, job);
    ixs[1] = swap_account(ixs[1].clone(), b.provider_owner.payment, b.fee_vault);
    assert_eq!(b.va_err(&ixs), anchor_err(1, AE::ConstraintDuplicateMutableAccount));
    // user_payment == escrow on top-up, cancel and close.
    let user = b.user_kp();
    let ix = b.ix_top_up(&user.pubkey(), escrow, job, 1);
    assert_eq!(b.user_err(&[ix]), anchor_err(0, AE::ConstraintDuplicateMutableAccount));
    let (open, open_escrow) = b.open_job(2, 1, 10_000);
    let ix = b.ix_cancel_job(&user.pubkey(), open, open_escrow);
    assert_eq!(b.user_err(&[ix]), anchor_err(0, AE::ConstraintDuplicateMutableAccount));
    b.as_user(&[b.ix_cancel_job(&user.pubkey(), open, b.user.payment)]);
    let ix = b.ix_close_job(&user.pubkey(), open_escrow, open);
    assert_eq!(b.user_err(&[ix]), anchor_err(0, AE::ConstraintDuplicateMutableAccount));
    assert_unpaid(&b, &job);
}

// ---- closed-account revival ------------------------------------------------------------------

#[test]
fn attack_closed_account_revival() {
    let mut b = Bench::new();
    let user = b.user_kp();
    let (job, escrow) = b.running_job(1, 1, 10_000);
    b.advance(60);
    b.settle(job, receipt(1, 60, T0 + 60)).unwrap();
    b.finish(job);
    b.advance(12 * 60 + 1);
    let close = b.ix_close_job(&user.pubkey(), b.user.payment, job);
    b.as_user(&[close.clone()]);
    let settle = b.settle_ixs(&b.worker.clone(), job, receipt(2, 60, T0 + 61));
    let top_up = b.ix_top_up(&user.pubkey(), b.user.payment, job, 1);
    // The address holds a ClosedJob tombstone: no instruction reads it as a Job, and the
    // escrow is gone.
    assert!(b.is_tombstone(&job));
    assert_eq!(b.va_err(&settle), anchor_err(1, AE::AccountDiscriminatorMismatch));
    assert_eq!(b.user_err(&[top_up.clone()]), anchor_err(0, AE::AccountDiscriminatorMismatch));
    assert_eq!(b.user_err(&[close.clone()]), anchor_err(0, AE::AccountNotInitialized));
    // Re-funding the closed address with lamports does not revive it: it stays a tombstone.
    let transfer = gpum_localnet::solana_system_interface::instruction::transfer(&user.pubkey(), &job, 10_000_000);
    b.as_user(&[transfer]);
    assert!(b.is_tombstone(&job));
    assert_eq!(b.va_err(&settle), anchor_err(1, AE::AccountDiscriminatorMismatch));
    assert_eq!(b.user_err(&[top_up]), anchor_err(0, AE::AccountDiscriminatorMismatch));
    assert_eq!(b.user_err(&[close]), anchor_err(0, AE::AccountNotInitialized));
    assert!(b.svm.get_account(&escrow).is_none_or(|a| a.lamports == 0));
    assert_eq!(b.token_balance(&b.provider_owner.payment), 540);
}

// ---- CPI to a fake token program -------------------------------------------------------------

#[test]
fn attack_fake_token_program() {
    let (mut b, job) = running();
    let fake = Pubkey::new_unique();
    for program in [TOKEN_2022, fake, SYSTEM_PROGRAM] {
        let mut ixs = settle_ixs(&b, job);
        ixs[1] = swap_account(ixs[1].clone(), TOKEN_PROGRAM, program);
        assert_eq!(b.va_err(&ixs), anchor_err(1, AE::InvalidProgramId));
        let ix = swap_account(b.ix_top_up(&b.user.key.pubkey(), b.user.payment, job, 1), TOKEN_PROGRAM, program);
        assert_eq!(b.user_err(&[ix]), anchor_err(0, AE::InvalidProgramId));
    }
    assert_unpaid(&b, &job);
}

// ---- fake Instructions sysvar ----------------------------------------------------------------

#[test]
fn attack_fake_instructions_sysvar() {
    let (mut b, job) = running();
    // An account owned by the Sysvar program, like the real one, at another address; a token
    // account; another sysvar (Clock).
    let treasury = b.treasury;
    let fake = clone_account_owned_by(&mut b, &treasury, solana_sdk_ids::sysvar::ID);
    for sysvar in [fake, b.user.payment, solana_sdk_ids::sysvar::clock::ID] {
        let mut ixs = settle_ixs(&b, job);
        ixs[1] = swap_account(ixs[1].clone(), INSTRUCTIONS_SYSVAR, sysvar);
        assert_eq!(b.va_err(&ixs), program_err(1, E::InvalidInstructionsSysvar));
    }
    let (first, second) = equivocating_pair(1, 1, T0 + 1);
    let user = b.user_kp();
    let mut ixs = b.equivocation_ixs(&b.worker.clone(), &user.pubkey(), b.user.stake, job, first, second);
    ixs[1] = swap_account(ixs[1].clone(), INSTRUCTIONS_SYSVAR, fake);
    assert_eq!(b.user_err(&ixs), program_err(1, E::InvalidInstructionsSysvar));
    assert_unpaid(&b, &job);
}

// ---- Ed25519 offsets pointing at another instruction -----------------------------------------

#[test]
fn attack_ed25519_offsets_point_at_another_instruction() {
    let (mut b, job) = running();
    let r = receipt(1, 60, T0 + 60);
    let msg = b.receipt_digest(&job, &r);
    let real = ed25519_ix(&b.worker, &msg);
    let (pk, sig): ([u8; 32], [u8; 64]) = (real.data[16..48].try_into().unwrap(), real.data[48..112].try_into().unwrap());
    let settle = b.ix_settle(&b.validator_authority.pubkey(), job, r);
    // [real Ed25519 at 0, pointing Ed25519 at 1, settle at 2]: each index field set to 0 in turn
    // makes the precompile read that part from instruction 0 (valid), but settle refuses it.
    for field in 0..3 {
        let mut indexes = [u16::MAX; 3];
        indexes[field] = 0;
        let pointing = ed25519_ix_raw(&pk, &sig, &msg, indexes);
        let ixs = vec![real.clone(), pointing, settle.clone()];
        assert_eq!(b.va_err(&ixs), program_err(2, E::MalformedEd25519Instruction), "field {field}");
    }
    // Index 2 (the settle instruction itself): the precompile reads out of its bounds and
    // rejects the transaction first (PrecompileError::InvalidDataOffsets = 3).
    let pointing = ed25519_ix_raw(&pk, &sig, &msg, [2, u16::MAX, u16::MAX]);
    let ixs = vec![real.clone(), pointing, settle.clone()];
    assert_eq!(b.va_err(&ixs), custom(1, 3));
    // An absolute index equal to its own position is accepted, as the program documents.
    let own = ed25519_ix_raw(&pk, &sig, &msg, [0, 0, 0]);
    b.as_va(&[own, settle]);
    assert_eq!(b.job_state(&job).last_seq, 1);
}

#[test]
fn attack_ed25519_signed_by_another_key() {
    let (mut b, job) = running();
    let other = SigningKey::from_bytes(&[9u8; 32]);
    let ixs = b.settle_ixs(&other, job, receipt(1, 60, T0 + 60));
    assert_eq!(b.va_err(&ixs), program_err(1, E::WrongReceiptSigner));
    // The validator's own signature over the receipt is not the worker's either.
    let ixs = b.settle_ixs(&signing_key(&b.va_kp()), job, receipt(1, 60, T0 + 60));
    assert_eq!(b.va_err(&ixs), program_err(1, E::WrongReceiptSigner));
    assert_unpaid(&b, &job);
}

#[test]
fn attack_ed25519_instruction_reused_by_two_settles() {
    let (mut b, job) = running();
    let first = receipt(1, 30, T0 + 30);
    let mut ixs = b.settle_ixs(&b.worker.clone(), job, first);
    ixs.push(b.ix_settle(&b.validator_authority.pubkey(), job, receipt(2, 60, T0 + 60)));
    assert_eq!(b.va_err(&ixs), program_err(2, E::MissingEd25519Instruction));
    assert_unpaid(&b, &job);
}

// ---- extra unexpected accounts ---------------------------------------------------------------

#[test]
fn attack_extra_unexpected_accounts() {
    let (mut b, job) = running();
    let (_, v2) = b.add_validator(5_000);
    let mut ixs = settle_ixs(&b, job);
    ixs[1].accounts.push(meta(v2, false));
    assert_eq!(b.va_err(&ixs), program_err(1, E::QuorumNotMet));
    // On an instruction that reads no remaining accounts, extras are ignored without effect.
    let user = b.user_kp();
    let mut ix = b.ix_top_up(&user.pubkey(), b.user.payment, job, 5);
    ix.accounts.extend([meta(v2, true), meta(b.fee_vault, true), meta(b.provider_owner.payment, true)]);
    b.as_user(&[ix]);
    assert_eq!(b.job_state(&job).deposited, 10_005);
    assert_eq!(b.token_balance(&b.fee_vault), 0);
    assert_eq!(b.token_balance(&b.provider_owner.payment), 0);
}

// ---- look-alike mints ------------------------------------------------------------------------

#[test]
fn attack_look_alike_mints() {
    let mut b = Bench::new();
    let fake_mint = b.create_mint(); // same decimals, same mint authority
    let fake_account = b.create_token_account(fake_mint, &b.user.key.pubkey());
    b.mint_to(fake_mint, fake_account, 1_000_000);
    // As payment_mint: refused; a user account of the look-alike mint: refused.
    let ix = swap_account(b.ix_create_job(&b.user, 1, 1, 10_000), b.payment_mint, fake_mint);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::InvalidMint));
    let ix = swap_account(b.ix_create_job(&b.user, 1, 1, 10_000), b.user.payment, fake_account);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::InvalidMint));
    // As stake_mint.
    let owner = b.owner_kp();
    let fake_stake = b.create_token_account(fake_mint, &owner.pubkey());
    b.mint_to(fake_mint, fake_stake, 1_000_000);
    let ix = swap_account(b.ix_stake(&owner.pubkey(), fake_stake, 1_000), b.stake_mint, fake_mint);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::InvalidMint));
    let ix = b.ix_stake(&owner.pubkey(), fake_stake, 1_000);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::InvalidMint));
    assert_eq!(b.provider_state().stake, 100_000);
    assert_eq!(b.market_state().totals.jobs, 0);
}

// ---- deadlines at -1/0/+1 seconds ------------------------------------------------------------
// close_job grace end, settle finish grace, withdraw release, expire deadline: job.rs
// (fail_close_job_at_and_before_grace_end, success_close_finishing_job_one_second_after_grace_completes_it,
// fail_expire_job_at_and_before_deadline, success_expire_job_one_second_after_deadline_by_anyone),
// settle.rs (success_finishing_job_final_receipt_at_grace_end, fail_finishing_job_receipt_one_second_after_grace),
// staking.rs / validator.rs (withdraw at release_at -1 / 0 / +1).

#[test]
fn attack_deadline_window_end_vs_now_plus_skew() {
    // window_end at now + skew - 1 and now + skew settle; now + skew + 1 does not.
    for (offset, ok) in [(4i64, true), (5, true), (6, false)] {
        let (mut b, job) = running();
        let r = receipt(1, 60, T0 + 60 + offset);
        match b.settle(job, r) {
            Ok(_) => assert!(ok, "offset {offset}"),
            Err(f) => {
                assert!(!ok, "offset {offset}: {:?}", f.err);
                assert_eq!(f.err, program_err(1, E::WindowEndInFuture));
            }
        }
    }
}
