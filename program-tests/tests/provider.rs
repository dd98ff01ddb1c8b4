//! register_provider, update_provider, rotate_worker_key (and what the worker key may sign).
mod common;

use common::*;
use ed25519_dalek::SigningKey;
use gpu_market::errors::GpuMarketError as E;
use gpu_market::events::*;
use gpu_market::instructions::{RegisterProviderArgs, UpdateProviderArgs};
use gpu_market::state::{Provider, ProviderStatus, Reputation, Unbonding};
use gpum_localnet::solana_signer::Signer;

fn register_args(worker: &SigningKey, gpus: u16, price: u64) -> RegisterProviderArgs {
    RegisterProviderArgs { worker_key: worker_pubkey(worker), worker_key_expires_at: 0, spec: gpu_spec(gpus), price_per_gpu_second: price, endpoint: String::new() }
}

/// Registers a fresh owner with `args` and returns the error.
fn register_err(args: RegisterProviderArgs) -> gpum_localnet::solana_transaction_error::TransactionError {
    let mut b = Bench::new();
    let p = b.new_party(0, 0);
    let ix = b.ix_register_provider_with(&p.key.pubkey(), args);
    let err = b.send_err(&[ix], &[&p.key]);
    assert!(b.svm.get_account(&b.provider_address(&p.key.pubkey())).is_none());
    err
}

#[test]
fn success_register_provider_stores_spec_and_emits_event() {
    let mut b = Bench::new();
    let p = b.new_party(0, 0);
    let worker = SigningKey::from_bytes(&[3u8; 32]);
    let args = RegisterProviderArgs { worker_key_expires_at: T0 + 1_000, ..register_args(&worker, 256, 42) };
    let logs = b.send(&[b.ix_register_provider_with(&p.key.pubkey(), args)], &[&p.key]).unwrap().logs;
    let address = b.provider_address(&p.key.pubkey());
    let s: Provider = b.account(&address).unwrap();
    assert_eq!((s.market, s.owner, s.worker_key, s.worker_key_expires_at), (b.market, p.key.pubkey(), worker_pubkey(&worker), T0 + 1_000));
    assert_eq!((s.retired_keys, s.last_equivocation_slash_at), (Default::default(), 0));
    assert_eq!((s.spec, s.price_per_gpu_second, s.status, s.stake, s.gpus_in_use), (gpu_spec(256), 42, ProviderStatus::Active, 0, 0));
    assert_eq!((s.unbonding, s.reputation), (Unbonding::default(), Reputation::default()));
    assert_event(&logs, ProviderRegistered {
        market: b.market, provider: address, owner: p.key.pubkey(), worker_key: worker_pubkey(&worker),
        gpu_count: 256, price_per_gpu_second: 42,
    });
}

#[test]
fn fail_register_provider_zero_gpus() {
    let w = SigningKey::from_bytes(&[3u8; 32]);
    assert_eq!(register_err(register_args(&w, 0, 1)), program_err(0, E::InvalidGpuCount));
}

#[test]
fn fail_register_provider_257_gpus() {
    let w = SigningKey::from_bytes(&[3u8; 32]);
    assert_eq!(register_err(register_args(&w, 257, 1)), program_err(0, E::InvalidGpuCount));
}

#[test]
fn fail_register_provider_zero_price() {
    let w = SigningKey::from_bytes(&[3u8; 32]);
    assert_eq!(register_err(register_args(&w, 1, 0)), program_err(0, E::InvalidPrice));
}

#[test]
fn fail_register_provider_default_worker_key() {
    let w = SigningKey::from_bytes(&[3u8; 32]);
    let args = RegisterProviderArgs { worker_key: Default::default(), ..register_args(&w, 1, 1) };
    assert_eq!(register_err(args), program_err(0, E::InvalidWorkerKey));
}

// ---- update_provider -------------------------------------------------------------------------

fn update(b: &mut Bench, args: UpdateProviderArgs) -> Vec<String> {
    let ix = b.ix_update_provider(&b.provider_owner.key.pubkey(), args);
    b.as_owner(&[ix])
}

fn update_err(b: &mut Bench, args: UpdateProviderArgs) -> gpum_localnet::solana_transaction_error::TransactionError {
    let before = b.provider_state();
    let ix = b.ix_update_provider(&b.provider_owner.key.pubkey(), args);
    let err = b.owner_err(&[ix]);
    assert_eq!(b.provider_state().spec, before.spec);
    assert_eq!(b.provider_state().price_per_gpu_second, before.price_per_gpu_second);
    err
}

#[test]
fn success_update_provider_price_spec_and_availability() {
    let mut b = Bench::new();
    let logs = update(&mut b, UpdateProviderArgs { price_per_gpu_second: Some(25), spec: Some(gpu_spec(8)), accepting_jobs: None, endpoint: None });
    let p = b.provider_state();
    assert_eq!((p.price_per_gpu_second, p.spec, p.status), (25, gpu_spec(8), ProviderStatus::Active));
    assert_event(&logs, ProviderUpdated { provider: b.provider, price_per_gpu_second: 25, gpu_count: 8, status: ProviderStatus::Active });

    let logs = update(&mut b, UpdateProviderArgs { accepting_jobs: Some(false), ..no_update() });
    assert_eq!(b.provider_state().status, ProviderStatus::Paused);
    assert_event(&logs, ProviderUpdated { provider: b.provider, price_per_gpu_second: 25, gpu_count: 8, status: ProviderStatus::Paused });
    let ix = b.ix_create_job(&b.user, 1, 1, 100_000);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::ProviderNotActive));

    update(&mut b, UpdateProviderArgs { accepting_jobs: Some(true), ..no_update() });
    assert_eq!(b.provider_state().status, ProviderStatus::Active);
    b.open_job(1, 8, 100_000);
}

#[test]
fn success_price_change_does_not_touch_running_job_rate() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 2, 100_000);
    update(&mut b, UpdateProviderArgs { price_per_gpu_second: Some(50), ..no_update() });
    assert_eq!(b.job_state(&job).terms.rate_per_second, 20);
    let started = b.started(&job);
    b.advance(60);
    b.settle(job, receipt(1, 60, started + 60)).unwrap();
    let j = b.job_state(&job);
    assert_eq!(j.paid_provider + j.paid_treasury + j.burned, 60 * 20);
    // A job created after the change gets the new price.
    let (job2, _) = b.open_job(2, 2, 100_000);
    assert_eq!(b.job_state(&job2).terms.rate_per_second, 100);
}

#[test]
fn fail_update_provider_zero_price() {
    let mut b = Bench::new();
    assert_eq!(update_err(&mut b, UpdateProviderArgs { price_per_gpu_second: Some(0), ..no_update() }), program_err(0, E::InvalidPrice));
}

#[test]
fn fail_update_provider_zero_gpus() {
    let mut b = Bench::new();
    assert_eq!(update_err(&mut b, UpdateProviderArgs { spec: Some(gpu_spec(0)), ..no_update() }), program_err(0, E::InvalidGpuCount));
}

#[test]
fn fail_update_provider_257_gpus() {
    let mut b = Bench::new();
    assert_eq!(update_err(&mut b, UpdateProviderArgs { spec: Some(gpu_spec(257)), ..no_update() }), program_err(0, E::InvalidGpuCount));
}

#[test]
fn fail_update_provider_gpu_count_below_in_use() {
    let mut b = Bench::new();
    b.running_job(1, 2, 100_000);
    assert_eq!(update_err(&mut b, UpdateProviderArgs { spec: Some(gpu_spec(1)), ..no_update() }), program_err(0, E::GpusInUse));
    update(&mut b, UpdateProviderArgs { spec: Some(gpu_spec(2)), ..no_update() });
}

#[test]
fn fail_update_provider_by_other_than_owner() {
    let mut b = Bench::new();
    let user = b.user_kp();
    let ix = swap_account(
        b.ix_update_provider(&user.pubkey(), UpdateProviderArgs { price_per_gpu_second: Some(1), ..no_update() }),
        b.provider_address(&user.pubkey()),
        b.provider,
    );
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotProviderSigner));
    assert_eq!(b.provider_state().price_per_gpu_second, 10);
}

#[test]
fn fail_update_provider_jailed_until_jail_ends() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.report_equivocation(job, 1);
    let ProviderStatus::Jailed { until } = b.provider_state().status else { panic!("not jailed") };
    assert_eq!(until, T0 + default_params().unbonding_seconds);
    b.set_time(until - 1);
    let resume = UpdateProviderArgs { accepting_jobs: Some(true), ..no_update() };
    assert_eq!(update_err(&mut b, resume.clone()), program_err(0, E::ProviderJailed));
    assert!(matches!(b.provider_state().status, ProviderStatus::Jailed { .. }));
    b.set_time(until);
    update(&mut b, resume);
    assert_eq!(b.provider_state().status, ProviderStatus::Active);
}

// ---- rotate_worker_key -----------------------------------------------------------------------

fn new_worker() -> SigningKey { SigningKey::from_bytes(&[11u8; 32]) }

fn rotate(b: &mut Bench, key: anchor_lang::prelude::Pubkey, expires_at: i64) -> Vec<String> {
    let ix = b.ix_rotate_worker_key(&b.provider_owner.key.pubkey(), key, expires_at);
    b.as_owner(&[ix])
}

fn rotate_err(b: &mut Bench, key: anchor_lang::prelude::Pubkey, expires_at: i64) -> gpum_localnet::solana_transaction_error::TransactionError {
    let ix = b.ix_rotate_worker_key(&b.provider_owner.key.pubkey(), key, expires_at);
    let err = b.owner_err(&[ix]);
    assert_eq!(b.provider_state().worker_key, worker_pubkey(&b.worker));
    err
}

#[test]
fn success_rotate_worker_key_retires_the_previous_one() {
    let mut b = Bench::new();
    b.advance(100);
    let logs = rotate(&mut b, worker_pubkey(&new_worker()), 0);
    let p = b.provider_state();
    assert_eq!((p.worker_key, p.worker_key_expires_at), (worker_pubkey(&new_worker()), 0));
    assert_eq!(p.retired_keys[0], gpu_market::state::RetiredWorkerKey { key: worker_pubkey(&b.worker), retired_at: b.now });
    assert_eq!(p.retired_keys[1..], [Default::default(); 3]);
    assert_event(&logs, WorkerKeyRotated {
        provider: b.provider, previous: worker_pubkey(&b.worker), current: worker_pubkey(&new_worker()),
        expires_at: 0, retired_at: b.now,
    });
}

#[test]
fn fail_rotate_worker_key_to_default() {
    let mut b = Bench::new();
    assert_eq!(rotate_err(&mut b, Default::default(), 0), program_err(0, E::InvalidWorkerKey));
}

#[test]
fn fail_rotate_worker_key_to_current() {
    let mut b = Bench::new();
    let current = worker_pubkey(&b.worker);
    assert_eq!(rotate_err(&mut b, current, 0), program_err(0, E::InvalidWorkerKey));
}

#[test]
fn fail_rotate_worker_key_expiring_now_then_success_one_second_later() {
    let mut b = Bench::new();
    let now = b.now;
    assert_eq!(rotate_err(&mut b, worker_pubkey(&new_worker()), now), program_err(0, E::InvalidWorkerKey));
    assert_eq!(rotate_err(&mut b, worker_pubkey(&new_worker()), now - 1), program_err(0, E::InvalidWorkerKey));
    rotate(&mut b, worker_pubkey(&new_worker()), now + 1);
    assert_eq!(b.provider_state().worker_key_expires_at, now + 1);
}

#[test]
fn fail_rotate_worker_key_by_other_than_owner() {
    let mut b = Bench::new();
    let user = b.user_kp();
    let ix = swap_account(
        b.ix_rotate_worker_key(&user.pubkey(), worker_pubkey(&new_worker()), 0),
        b.provider_address(&user.pubkey()),
        b.provider,
    );
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotProviderSigner));
}

#[test]
fn fail_rotate_worker_key_with_another_market() {
    let mut b = Bench::new();
    let other = b.second_market(1);
    let ix = swap_account(b.ix_rotate_worker_key(&b.provider_owner.key.pubkey(), worker_pubkey(&new_worker()), 0), b.market, other);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::ProviderMarketMismatch));
}

/// A job running from `T0`, then a rotation at `T0 + 100`: the previous key signs only windows
/// that ended by `T0 + 100`, settled by `T0 + 700` (grace: 10 windows of 60 s).
fn rotated_with_job() -> (Bench, anchor_lang::prelude::Pubkey) {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 100_000);
    b.advance(100);
    rotate(&mut b, worker_pubkey(&new_worker()), 0);
    (b, job)
}

#[test]
fn success_previous_worker_key_receipt_before_rotation_settles_at_grace_end() {
    let (mut b, job) = rotated_with_job();
    b.set_time(T0 + 700);
    let ixs = b.settle_ixs(&b.worker.clone(), job, receipt(1, 100, T0 + 100));
    b.as_va(&ixs);
    assert_eq!(b.job_state(&job).paid_seconds, 100);
}

#[test]
fn fail_previous_worker_key_receipt_settled_after_grace() {
    let (mut b, job) = rotated_with_job();
    b.set_time(T0 + 701);
    let ixs = b.settle_ixs(&b.worker.clone(), job, receipt(1, 100, T0 + 100));
    assert_eq!(b.va_err(&ixs), program_err(1, E::WrongReceiptSigner));
}

#[test]
fn fail_previous_worker_key_receipt_for_window_after_rotation() {
    let (mut b, job) = rotated_with_job();
    b.advance(1);
    // A window ending one second after the rotation: the retired key cannot sign it ...
    let ixs = b.settle_ixs(&b.worker.clone(), job, receipt(1, 101, T0 + 101));
    assert_eq!(b.va_err(&ixs), program_err(1, E::WrongReceiptSigner));
    // ... the new key can.
    let ixs = b.settle_ixs(&new_worker(), job, receipt(1, 101, T0 + 101));
    b.as_va(&ixs);
}

#[test]
fn fail_expired_worker_key_receipt_and_accept() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 100_000);
    rotate(&mut b, worker_pubkey(&new_worker()), T0 + 100);
    b.advance(101);
    // Signed for a window ending at expiry: valid. One second later: not.
    let ixs = b.settle_ixs(&new_worker(), job, receipt(1, 100, T0 + 100));
    b.as_va(&ixs);
    let ixs = b.settle_ixs(&new_worker(), job, receipt(2, 101, T0 + 101));
    assert_eq!(b.va_err(&ixs), program_err(1, E::WorkerKeyExpired));
    // An expired key cannot accept jobs either.
    let (job2, _) = b.open_job(2, 1, 100_000);
    let worker = gpum_localnet::solana_keypair::Keypair::new_from_array(new_worker().to_bytes());
    let owner = b.owner_kp();
    let err = b.send_err(&[b.ix_accept_job(&worker.pubkey(), job2)], &[&owner, &worker]);
    assert_eq!(err, program_err(0, E::WorkerKeyExpired));
}
