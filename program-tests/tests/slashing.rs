//! slash_equivocation and slash_downtime.
mod common;

use anchor_lang::prelude::Pubkey;
use common::*;
use ed25519_dalek::SigningKey;
use gpu_market::errors::GpuMarketError as E;
use gpu_market::events::{DowntimeSlashed, EquivocationSlashed};
use gpu_market::state::{EquivocationRecord, JobStatus, ProviderStatus};
use gpu_market::Receipt;
use gpum_localnet::solana_instruction::Instruction;
use gpum_localnet::solana_keypair::Keypair;
use gpum_localnet::solana_signer::Signer;
use gpum_localnet::solana_transaction_error::TransactionError;

const STAKED: u64 = 100_000;
const UNBONDING: i64 = 14 * 86_400;

/// A running job of the bench user (deposit 10_000) and its user as the reporter (a party the
/// provider is not, so it earns the reporter reward), with an empty stake account.
fn equivocation_bench() -> (Bench, Pubkey, Party) {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let reporter = Party { key: b.user_kp(), payment: b.user.payment, stake: b.user.stake };
    (b, job, reporter)
}

fn equivocation_ixs(b: &Bench, signer: &SigningKey, reporter: &Party, job: Pubkey, first: Receipt, second: Receipt) -> Vec<Instruction> {
    b.equivocation_ixs(signer, &reporter.key.pubkey(), reporter.stake, job, first, second)
}

fn equivocation_err(b: &mut Bench, reporter: &Party, ixs: &[Instruction]) -> TransactionError {
    let err = b.send_err(ixs, &[&reporter.key]);
    assert_eq!(b.provider_state().stake, STAKED);
    assert_eq!(b.provider_state().status, ProviderStatus::Active);
    err
}

#[test]
fn success_slash_equivocation_rewards_burns_jails_and_fails_job_refunded_at_close() {
    let (mut b, job, reporter) = equivocation_bench();
    b.advance(30);
    let supply = b.mint_supply(&b.stake_mint);
    let user_before = b.token_balance(&b.user.payment);
    let (first, second) = equivocating_pair(1, 30, T0 + 30);
    let ixs = equivocation_ixs(&b, &b.worker, &reporter, job, first, second);
    let logs = b.send(&ixs, &[&reporter.key]).unwrap().logs;

    let (slashed, reward) = (50_000, 5_000); // 5000 bps of 100_000; 1000 bps of that to the reporter
    assert_eq!(b.token_balance(&reporter.stake), reward);
    assert_eq!(b.mint_supply(&b.stake_mint), supply - (slashed - reward));
    assert_eq!(b.token_balance(&b.stake_vault), STAKED + 10_000 - slashed);
    let p = b.provider_state();
    assert_eq!((p.stake, p.status, p.gpus_in_use), (STAKED - slashed, ProviderStatus::Jailed { until: T0 + 30 + UNBONDING }, 0));
    assert_eq!((p.reputation.slashes, p.reputation.jobs_failed), (1, 1));
    let m = b.market_state();
    assert_eq!((m.totals.staked, m.totals.slashed), (STAKED - slashed, slashed));
    let j = b.job_state(&job);
    assert_eq!((j.status, j.refunded, j.ended_at), (JobStatus::Failed, 0, T0 + 30));
    assert_eq!(b.token_balance(&b.user.payment), user_before);
    let record: EquivocationRecord = b.account(&b.equivocation_record(&job, 1)).unwrap();
    assert_eq!((record.job, record.seq, record.offender, record.reporter, record.slashed), (job, 1, b.provider, reporter.key.pubkey(), slashed));
    assert_event(&logs, EquivocationSlashed {
        provider: b.provider, job, seq: 1, first_proof_hash: first.proof_hash, second_proof_hash: second.proof_hash,
        reporter: reporter.key.pubkey(), slash_bps: 5_000, reporter_reward_bps: 1_000, slashed, reward,
        burned: slashed - reward, jailed_until: T0 + 30 + UNBONDING,
    });
    // A Failed job closes at once (no grace) and the user gets the whole escrow back.
    let user = b.user_kp();
    b.send(&[b.ix_close_job(&user.pubkey(), b.user.payment, job)], &[&user]).unwrap();
    assert_eq!(b.token_balance(&b.user.payment), user_before + 10_000);
    // A jailed provider takes no new jobs.
    let ix = b.ix_create_job(&b.user, 2, 1, 10_000);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::ProviderNotActive));
}

#[test]
fn success_slash_equivocation_reaches_unbonding_stake() {
    let (mut b, job, reporter) = equivocation_bench();
    b.as_owner(&[b.ix_request_unstake(&b.provider_owner.key.pubkey(), 90_000)]);
    let (first, second) = equivocating_pair(1, 1, T0 + 1);
    let ixs = equivocation_ixs(&b, &b.worker, &reporter, job, first, second);
    b.send(&ixs, &[&reporter.key]).unwrap();
    let p = b.provider_state();
    // 50_000 slashed: all 10_000 of active stake, then 40_000 of the 90_000 unbonding.
    assert_eq!((p.stake, p.unbonding.amount), (0, 50_000));
}

#[test]
fn success_slash_equivocation_by_previous_worker_key() {
    let (mut b, job, reporter) = equivocation_bench();
    let new = SigningKey::from_bytes(&[11u8; 32]);
    b.advance(1); // the evidence's window (ending at T0 + 1) ended by the rotation
    b.as_owner(&[b.ix_rotate_worker_key(&b.provider_owner.key.pubkey(), worker_pubkey(&new), 0)]);
    let (first, second) = equivocating_pair(1, 1, T0 + 1);
    let ixs = equivocation_ixs(&b, &b.worker, &reporter, job, first, second);
    b.send(&ixs, &[&reporter.key]).unwrap();
    assert_eq!(b.provider_state().stake, STAKED / 2);
}

#[test]
fn success_slash_equivocation_fits_one_packet() {
    let (b, job, reporter) = equivocation_bench();
    let (first, second) = equivocating_pair(1, 1, T0 + 1);
    let ixs = equivocation_ixs(&b, &b.worker, &reporter, job, first, second);
    let size = wire_size(&ixs, &[&reporter.key]);
    assert!(size <= PACKET_DATA_SIZE, "slash_equivocation transaction is {size} bytes");
}

#[test]
fn fail_slash_equivocation_identical_receipts() {
    let (mut b, job, reporter) = equivocation_bench();
    let r = receipt(1, 1, T0 + 1);
    let ixs = equivocation_ixs(&b, &b.worker, &reporter, job, r, r);
    assert_eq!(equivocation_err(&mut b, &reporter, &ixs), program_err(1, E::NotEquivocation));
}

#[test]
fn fail_slash_equivocation_different_seqs() {
    let (mut b, job, reporter) = equivocation_bench();
    let ixs = equivocation_ixs(&b, &b.worker, &reporter, job, receipt(1, 1, T0 + 1), receipt(2, 1, T0 + 1));
    assert_eq!(equivocation_err(&mut b, &reporter, &ixs), program_err(1, E::EquivocationSeqMismatch));
}

#[test]
fn fail_slash_equivocation_signed_by_another_key() {
    let (mut b, job, reporter) = equivocation_bench();
    let (first, second) = equivocating_pair(1, 1, T0 + 1);
    let other = SigningKey::from_bytes(&[9u8; 32]);
    let ixs = equivocation_ixs(&b, &other, &reporter, job, first, second);
    assert_eq!(equivocation_err(&mut b, &reporter, &ixs), program_err(1, E::WrongReceiptSigner));
    // One of the two by the worker is not enough either.
    let (m1, m2) = (b.receipt_digest(&job, &first), b.receipt_digest(&job, &second));
    let ixs = vec![
        ed25519_entries_ix(&[(&b.worker, &m1), (&other, &m2)]),
        b.ix_slash_equivocation(&reporter.key.pubkey(), reporter.stake, job, first, second),
    ];
    assert_eq!(equivocation_err(&mut b, &reporter, &ixs), program_err(1, E::WrongReceiptSigner));
}

#[test]
fn fail_slash_equivocation_signatures_over_other_receipts() {
    let (mut b, job, reporter) = equivocation_bench();
    let (first, second) = equivocating_pair(1, 1, T0 + 1);
    // Entries in the wrong order: each signature sits where the other receipt is expected.
    let ixs = equivocation_ixs(&b, &b.worker, &reporter, job, second, first);
    let ixs = vec![ixs[0].clone(), b.ix_slash_equivocation(&reporter.key.pubkey(), reporter.stake, job, first, second)];
    assert_eq!(equivocation_err(&mut b, &reporter, &ixs), program_err(1, E::ReceiptMessageMismatch));
}

#[test]
fn fail_slash_equivocation_without_ed25519_instruction() {
    let (mut b, job, reporter) = equivocation_bench();
    let (first, second) = equivocating_pair(1, 1, T0 + 1);
    let ixs = equivocation_ixs(&b, &b.worker, &reporter, job, first, second);
    assert_eq!(equivocation_err(&mut b, &reporter, &ixs[1..]), program_err(0, E::MissingEd25519Instruction));
}

#[test]
fn fail_slash_equivocation_ed25519_instruction_without_two_entries() {
    let (mut b, job, reporter) = equivocation_bench();
    let (first, second) = equivocating_pair(1, 1, T0 + 1);
    let (m1, m2) = (b.receipt_digest(&job, &first), b.receipt_digest(&job, &second));
    let worker = b.worker.clone();
    let slash = b.ix_slash_equivocation(&reporter.key.pubkey(), reporter.stake, job, first, second);
    for entries in [vec![(&worker, &m1[..])], vec![(&worker, &m1[..]), (&worker, &m2[..]), (&worker, &m2[..])]] {
        let ixs = vec![ed25519_entries_ix(&entries), slash.clone()];
        assert_eq!(equivocation_err(&mut b, &reporter, &ixs), program_err(1, E::MalformedEd25519Instruction));
    }
}

#[test]
fn fail_slash_equivocation_of_open_job() {
    let mut b = Bench::new();
    let (job, _) = b.open_job(1, 1, 10_000);
    let reporter = b.new_party(0, 0);
    let (first, second) = equivocating_pair(1, 1, T0 + 1);
    let ixs = equivocation_ixs(&b, &b.worker, &reporter, job, first, second);
    assert_eq!(equivocation_err(&mut b, &reporter, &ixs), program_err(1, E::InvalidJobStatus));
}

#[test]
fn fail_slash_equivocation_receipt_ending_at_job_start() {
    let (mut b, job, reporter) = equivocation_bench();
    // A receipt with window_end == started_at can only belong to an earlier job at this address.
    let late = receipt(1, 1, T0 + 1);
    let early = Receipt { proof_hash: [0xEE; 32], ..receipt(1, 1, T0) };
    for (first, second) in [(early, late), (late, early)] {
        let ixs = equivocation_ixs(&b, &b.worker, &reporter, job, first, second);
        assert_eq!(equivocation_err(&mut b, &reporter, &ixs), program_err(1, E::ReceiptBeforeJobStart));
    }
}

#[test]
fn fail_slash_equivocation_twice_for_same_job_and_seq() {
    let (mut b, job, reporter) = equivocation_bench();
    let (first, second) = equivocating_pair(1, 1, T0 + 1);
    let ixs = equivocation_ixs(&b, &b.worker, &reporter, job, first, second);
    b.send(&ixs, &[&reporter.key]).unwrap();
    let stake = b.provider_state().stake;
    // A different second receipt, so the transaction is new; the record for (job, 1) exists.
    let third = Receipt { proof_hash: [0xAB; 32], ..first };
    let ixs = equivocation_ixs(&b, &b.worker, &reporter, job, first, third);
    // The system program refuses to allocate the record again: SystemError::AccountAlreadyInUse (0).
    assert_eq!(b.send_err(&ixs, &[&reporter.key]), custom(1, 0));
    assert_eq!(b.provider_state().stake, stake);
}

#[test]
fn fail_slash_equivocation_reward_to_account_of_another_mint() {
    let (mut b, job, reporter) = equivocation_bench();
    let (first, second) = equivocating_pair(1, 1, T0 + 1);
    let mut ixs = equivocation_ixs(&b, &b.worker, &reporter, job, first, second);
    ixs[1] = swap_account(ixs[1].clone(), reporter.stake, reporter.payment);
    assert_eq!(equivocation_err(&mut b, &reporter, &ixs), program_err(1, E::InvalidMint));
}

#[test]
fn fail_slash_equivocation_wrong_stake_mint_or_vault() {
    let (mut b, job, reporter) = equivocation_bench();
    let (first, second) = equivocating_pair(1, 1, T0 + 1);
    let ixs = equivocation_ixs(&b, &b.worker, &reporter, job, first, second);
    let mut bad = ixs.clone();
    bad[1] = swap_account(ixs[1].clone(), b.stake_mint, b.payment_mint);
    assert_eq!(equivocation_err(&mut b, &reporter, &bad), program_err(1, E::InvalidMint));
    bad[1] = swap_account(ixs[1].clone(), b.stake_vault, b.provider_owner.stake);
    assert_eq!(equivocation_err(&mut b, &reporter, &bad), program_err(1, E::InvalidStakeVault));
}

// ---- slash_downtime --------------------------------------------------------------------------

const MISSED: i64 = 10 * 60; // max_missed_windows windows of 60 s

fn downtime_bench(quorum: u8) -> (Bench, Pubkey, Vec<(Keypair, Pubkey)>) {
    let (mut b, job, others) = Bench::with_quorum(quorum);
    b.set_time(T0 + MISSED);
    (b, job, others)
}

fn downtime_ix(b: &Bench, job: Pubkey, others: &[&Keypair]) -> Instruction {
    let keys: Vec<Pubkey> = others.iter().map(|k| k.pubkey()).collect();
    b.ix_slash_downtime(&b.validator_authority.pubkey(), b.validator_stake_account(), job, &keys)
}

fn downtime_err(b: &mut Bench, ix: Instruction, others: &[&Keypair]) -> TransactionError {
    let va = b.va_kp();
    let mut signers = vec![&va];
    signers.extend_from_slice(others);
    let err = b.send_err(&[ix], &signers);
    assert_eq!(b.provider_state().stake, STAKED);
    err
}

#[test]
fn success_slash_downtime_quorum_1() {
    let (mut b, job, _) = downtime_bench(1);
    let supply = b.mint_supply(&b.stake_mint);
    let reward_account = b.validator_stake_account();
    let before = b.token_balance(&reward_account);
    let logs = b.as_va(&[downtime_ix(&b, job, &[])]);
    // 100 bps of 100_000 = 1_000; 10% to the submitting validator, the rest burned.
    assert_eq!(b.token_balance(&reward_account), before + 100);
    assert_eq!(b.mint_supply(&b.stake_mint), supply - 900);
    let p = b.provider_state();
    assert_eq!((p.stake, p.status, p.gpus_in_use), (STAKED - 1_000, ProviderStatus::Active, 0));
    assert_eq!((p.reputation.windows_missed, p.reputation.jobs_failed, p.reputation.slashes), (10, 1, 1));
    let j = b.job_state(&job);
    assert_eq!((j.status, j.refunded), (JobStatus::Failed, 0));
    assert_event(&logs, DowntimeSlashed {
        provider: b.provider, job, missed_windows: 10, last_proof_window_end: 0, validators: 1, slash_bps: 100, reporter_reward_bps: 1_000,
        slashed: 1_000, reward: 100, burned: 900,
    });
}

#[test]
fn success_slash_downtime_quorum_2() {
    let (mut b, job, o) = downtime_bench(2);
    let ix = downtime_ix(&b, job, &[&o[0].0]);
    let va = b.va_kp();
    let logs = b.send(&[ix], &[&va, &o[0].0]).unwrap().logs;
    let e: DowntimeSlashed = event(&logs);
    assert_eq!((e.validators, e.slashed), (2, 1_000));
    assert_eq!(b.job_state(&job).status, JobStatus::Failed);
}

#[test]
fn fail_slash_downtime_one_second_too_early() {
    let (mut b, job, _) = downtime_bench(1);
    b.set_time(T0 + MISSED - 1);
    let ix = downtime_ix(&b, job, &[]);
    assert_eq!(downtime_err(&mut b, ix, &[]), program_err(0, E::NotEnoughMissedWindows));
}

#[test]
fn fail_slash_downtime_extra_validator_not_signer() {
    let (mut b, job, o) = downtime_bench(2);
    let ix = unsign(downtime_ix(&b, job, &[&o[0].0]), o[0].0.pubkey());
    assert_eq!(downtime_err(&mut b, ix, &[]), program_err(0, E::QuorumNotMet));
}

#[test]
fn fail_slash_downtime_quorum_2_alone() {
    let (mut b, job, _) = downtime_bench(2);
    let ix = downtime_ix(&b, job, &[]);
    assert_eq!(downtime_err(&mut b, ix, &[]), program_err(0, E::QuorumNotMet));
}

#[test]
fn fail_slash_downtime_submitter_counted_twice() {
    let (mut b, job, _) = downtime_bench(2);
    let va = b.va_kp();
    let ix = b.ix_slash_downtime(&va.pubkey(), b.validator_stake_account(), job, &[va.pubkey()]);
    assert_eq!(downtime_err(&mut b, ix, &[]), program_err(0, E::DuplicateValidator));
}

#[test]
fn fail_slash_downtime_extra_validator_exited() {
    let (mut b, job, o) = downtime_bench(2);
    b.send(&[b.ix_request_validator_exit(&o[0].0.pubkey())], &[&o[0].0]).unwrap();
    let ix = downtime_ix(&b, job, &[&o[0].0]);
    assert_eq!(downtime_err(&mut b, ix, &[&o[0].0]), program_err(0, E::ValidatorNotActive));
}

#[test]
fn fail_slash_downtime_submitter_exited() {
    let (mut b, job, _) = downtime_bench(1);
    b.as_va(&[b.ix_request_validator_exit(&b.validator_authority.pubkey())]);
    let ix = downtime_ix(&b, job, &[]);
    assert_eq!(downtime_err(&mut b, ix, &[]), program_err(0, E::ValidatorNotActive));
}

#[test]
fn fail_slash_downtime_by_non_validator() {
    let (mut b, job, _) = downtime_bench(1);
    let user = b.user_kp();
    let ix = swap_account(downtime_ix(&b, job, &[]), b.validator_authority.pubkey(), user.pubkey());
    assert_eq!(downtime_err(&mut b, ix, &[&user]), program_err(0, E::NotAValidator));
}

#[test]
fn fail_slash_downtime_validator_of_another_market() {
    let (mut b, job, _) = downtime_bench(1);
    let (stranger, elsewhere) = b.foreign_validator();
    let ix = b.ix_slash_downtime(&stranger.key.pubkey(), stranger.stake, job, &[]);
    let ix = swap_account(ix, b.validator_address(&stranger.key.pubkey()), elsewhere);
    let err = b.send_err(&[ix], &[&stranger.key]);
    assert_eq!(err, program_err(0, E::NotAValidator));
}

#[test]
fn fail_slash_downtime_job_not_running() {
    let (mut b, _, _) = downtime_bench(1);
    let (job, _) = b.open_job(2, 1, 10_000);
    b.advance(MISSED * 10);
    let ix = downtime_ix(&b, job, &[]);
    assert_eq!(downtime_err(&mut b, ix, &[]), program_err(0, E::InvalidJobStatus));
}
