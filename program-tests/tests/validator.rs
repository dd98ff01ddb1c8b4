//! register_validator, request_validator_exit, withdraw_validator_bond.
mod common;

use common::*;
use gpu_market::errors::GpuMarketError as E;
use gpu_market::events::*;
use gpu_market::state::{Unbonding, Validator, ValidatorStatus};
use gpum_localnet::solana_signer::Signer;

const UNBONDING: i64 = 14 * 86_400;
const BOND: u64 = 10_000; // the bench validator's bond

#[test]
fn success_register_validator_bonds_and_emits_event() {
    let mut b = Bench::new();
    let v = b.new_party(8_000, 0);
    let logs = b.send(&[b.ix_register_validator(&v.key.pubkey(), v.stake, 5_000)], &[&v.key]).unwrap().logs;
    let address = b.validator_address(&v.key.pubkey());
    let s: Validator = b.account(&address).unwrap();
    assert_eq!((s.market, s.authority, s.bond, s.status, s.settlements), (b.market, v.key.pubkey(), 5_000, ValidatorStatus::Active, 0));
    assert_eq!(s.unbonding, Unbonding::default());
    assert_eq!(b.token_balance(&v.stake), 3_000);
    assert_eq!(b.market_state().totals.bonded, BOND + 5_000);
    assert_event(&logs, ValidatorRegistered { market: b.market, validator: address, authority: v.key.pubkey(), bond: 5_000, endpoint: ENDPOINT.into() });
}

fn register_err(bond: u64, change: impl FnOnce(&Bench, &Party, gpum_localnet::solana_instruction::Instruction) -> gpum_localnet::solana_instruction::Instruction) -> gpum_localnet::solana_transaction_error::TransactionError {
    let mut b = Bench::new();
    let v = b.new_party(10_000, 10_000);
    let ix = change(&b, &v, b.ix_register_validator(&v.key.pubkey(), v.stake, bond));
    let err = b.send_err(&[ix], &[&v.key]);
    assert!(b.svm.get_account(&b.validator_address(&v.key.pubkey())).is_none());
    err
}

#[test]
fn fail_register_validator_zero_bond() {
    assert_eq!(register_err(0, |_, _, ix| ix), program_err(0, E::ZeroAmount));
}

#[test]
fn fail_register_validator_bond_below_minimum() {
    assert_eq!(register_err(4_999, |_, _, ix| ix), program_err(0, E::BondTooSmall));
}

#[test]
fn fail_register_validator_wrong_stake_mint() {
    assert_eq!(register_err(5_000, |b, _, ix| swap_account(ix, b.stake_mint, b.payment_mint)), program_err(0, E::InvalidMint));
}

#[test]
fn fail_register_validator_from_account_of_another_mint() {
    assert_eq!(register_err(5_000, |_, v, ix| swap_account(ix, v.stake, v.payment)), program_err(0, E::InvalidMint));
}

#[test]
fn fail_register_validator_into_other_vault() {
    assert_eq!(register_err(5_000, |b, _, ix| swap_account(ix, b.stake_vault, b.provider_owner.stake)), program_err(0, E::InvalidStakeVault));
}

// ---- request_validator_exit ------------------------------------------------------------------

fn exit_ix(b: &Bench) -> gpum_localnet::solana_instruction::Instruction {
    b.ix_request_validator_exit(&b.validator_authority.pubkey())
}

#[test]
fn success_request_validator_exit_unbonds_whole_bond() {
    let mut b = Bench::new();
    let logs = b.as_va(&[exit_ix(&b)]);
    let v = b.validator_state();
    assert_eq!((v.bond, v.status, v.unbonding), (0, ValidatorStatus::Exiting, Unbonding { amount: BOND, release_at: T0 + UNBONDING }));
    assert_eq!(b.market_state().totals.bonded, BOND, "still held in the vault");
    assert_event(&logs, ValidatorExitRequested { validator: b.validator, amount: BOND, release_at: T0 + UNBONDING });
}

#[test]
fn fail_request_validator_exit_twice() {
    let mut b = Bench::new();
    b.as_va(&[exit_ix(&b)]);
    b.advance(1);
    assert_eq!(b.va_err(&[exit_ix(&b)]), program_err(0, E::ValidatorNotActive));
    assert_eq!(b.validator_state().unbonding.release_at, T0 + UNBONDING);
}

#[test]
fn fail_request_validator_exit_by_other_authority() {
    let mut b = Bench::new();
    let user = b.user_kp();
    let ix = swap_account(b.ix_request_validator_exit(&user.pubkey()), b.validator_address(&user.pubkey()), b.validator);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotAValidator));
    assert_eq!(b.validator_state().status, ValidatorStatus::Active);
}

#[test]
fn fail_request_validator_exit_with_another_market() {
    let mut b = Bench::new();
    let other = b.second_market(1);
    let ix = swap_account(exit_ix(&b), b.market, other);
    assert_eq!(b.va_err(&[ix]), program_err(0, E::NotAValidator));
}

/// An exiting validator still settles the jobs whose committee it is in, up to its withdrawal.
#[test]
fn success_settle_by_exiting_validator() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.as_va(&[exit_ix(&b)]);
    b.advance(60);
    let r = receipt(1, 60, b.started(&job) + 60);
    b.settle(job, r).unwrap();
    assert_eq!(b.job_state(&job).paid_seconds, 60);
    assert_eq!(b.validator_state().settlements, 1);
}

#[test]
fn fail_settle_by_withdrawn_validator() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.as_va(&[exit_ix(&b)]);
    b.set_time(T0 + UNBONDING);
    b.as_va(&[withdraw_ix(&b)]);
    let r = receipt(1, 60, b.started(&job) + 60);
    assert_eq!(b.settle(job, r).unwrap_err().err, anchor_err(1, anchor_lang::error::ErrorCode::AccountNotInitialized));
    assert_eq!(b.job_state(&job).last_seq, 0);
}

// ---- withdraw_validator_bond -----------------------------------------------------------------

fn withdraw_ix(b: &Bench) -> gpum_localnet::solana_instruction::Instruction {
    b.ix_withdraw_validator_bond(&b.validator_authority.pubkey(), b.validator_stake_account())
}

fn exited_bench() -> Bench {
    let mut b = Bench::new();
    b.as_va(&[exit_ix(&b)]);
    b
}

#[test]
fn success_withdraw_validator_bond_at_release_closes_account() {
    let mut b = exited_bench();
    b.set_time(T0 + UNBONDING);
    let account = b.validator_stake_account();
    let lamports_before = b.svm.get_balance(&b.validator_authority.pubkey()).unwrap();
    let rent = b.svm.get_balance(&b.validator).unwrap();
    let logs = b.as_va(&[withdraw_ix(&b)]);
    assert_eq!(b.token_balance(&account), 1_000_000);
    assert_eq!(b.market_state().totals.bonded, 0);
    assert_eq!(b.token_balance(&b.stake_vault), 100_000);
    assert!(b.svm.get_account(&b.validator).is_none_or(|a| a.lamports == 0));
    assert_eq!(b.svm.get_balance(&b.validator_authority.pubkey()).unwrap(), lamports_before + rent - 5_000);
    assert_event(&logs, ValidatorBondWithdrawn { validator: b.validator, amount: BOND });
}

#[test]
fn fail_withdraw_validator_bond_one_second_before_release() {
    let mut b = exited_bench();
    b.set_time(T0 + UNBONDING - 1);
    assert_eq!(b.va_err(&[withdraw_ix(&b)]), program_err(0, E::UnbondingNotReleased));
    b.advance(2);
    b.as_va(&[withdraw_ix(&b)]);
}

#[test]
fn fail_withdraw_validator_bond_without_exit() {
    let mut b = Bench::new();
    b.advance(UNBONDING);
    assert_eq!(b.va_err(&[withdraw_ix(&b)]), program_err(0, E::ValidatorNotExiting));
}

#[test]
fn fail_withdraw_validator_bond_to_account_of_someone_else() {
    let mut b = exited_bench();
    b.set_time(T0 + UNBONDING);
    let ix = swap_account(withdraw_ix(&b), b.validator_stake_account(), b.user.stake);
    assert_eq!(b.va_err(&[ix]), program_err(0, E::NotAValidator));
}

#[test]
fn fail_withdraw_validator_bond_by_other_authority() {
    let mut b = exited_bench();
    b.set_time(T0 + UNBONDING);
    let user = b.user_kp();
    let ix = swap_account(b.ix_withdraw_validator_bond(&user.pubkey(), b.user.stake), b.validator_address(&user.pubkey()), b.validator);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotAValidator));
}

#[test]
fn fail_withdraw_validator_bond_with_another_market() {
    let mut b = exited_bench();
    b.set_time(T0 + UNBONDING);
    let other = b.second_market(1);
    let ix = swap_account(withdraw_ix(&b), b.market, other);
    assert_eq!(b.va_err(&[ix]), program_err(0, E::NotAValidator));
}

#[test]
fn fail_withdraw_validator_bond_wrong_mint_or_vault() {
    let mut b = exited_bench();
    b.set_time(T0 + UNBONDING);
    let ix = swap_account(withdraw_ix(&b), b.stake_mint, b.payment_mint);
    assert_eq!(b.va_err(&[ix]), program_err(0, E::InvalidMint));
    let va = b.validator_authority.pubkey();
    let payment = b.token_accounts_of(&va, &b.payment_mint)[0];
    let ix = swap_account(withdraw_ix(&b), b.validator_stake_account(), payment);
    assert_eq!(b.va_err(&[ix]), program_err(0, E::InvalidMint));
    let ix = swap_account(withdraw_ix(&b), b.stake_vault, b.provider_owner.stake);
    assert_eq!(b.va_err(&[ix]), program_err(0, E::InvalidStakeVault));
}
