//! create_job, accept_job, finish_job, top_up, cancel_job, expire_job, close_job.
mod common;

use anchor_lang::prelude::Pubkey;
use common::*;
use ed25519_dalek::SigningKey;
use gpu_market::errors::GpuMarketError as E;
use gpu_market::events::*;
use gpu_market::instructions::UpdateProviderArgs;
use gpu_market::state::JobStatus;
use gpum_localnet::solana_instruction::Instruction;
use gpum_localnet::solana_keypair::Keypair;
use gpum_localnet::solana_signer::Signer;
use gpum_localnet::solana_transaction_error::TransactionError;

const GRACE: i64 = 12 * 60; // (max_missed_windows + 2) windows of 60 s
const EXPIRY: i64 = 10 * 60 + GRACE; // max_missed_windows windows plus grace

fn create_err(b: &mut Bench, ix: Instruction) -> TransactionError {
    let err = b.user_err(&[ix]);
    assert_eq!(b.provider_state().gpus_in_use, 0);
    assert_eq!(b.market_state().totals.jobs, 0);
    err
}

/// The account at `key` is gone (an escrow) or a `ClosedJob` tombstone (a job).
fn closed(b: &Bench, key: &Pubkey) -> bool {
    b.is_tombstone(key) || b.svm.get_account(key).is_none_or(|a| a.lamports == 0)
}

#[test]
fn success_create_job_escrows_deposit_and_locks_rate() {
    let mut b = Bench::new();
    let user = b.user_kp();
    let before = b.token_balance(&b.user.payment);
    let logs = b.as_user(&[b.ix_create_job(&b.user, 9, 3, 5_000)]);
    let (job, escrow) = b.job_address(&user.pubkey(), 9);
    let j = b.job_state(&job);
    assert_eq!((j.market, j.user, j.provider, j.job_id, j.gpu_count), (b.market, user.pubkey(), b.provider, 9, 3));
    assert_eq!((j.terms.rate_per_second, j.deposited, j.status, j.created_at), (30, 5_000, JobStatus::Open, T0));
    assert_eq!((j.started_at, j.ended_at, j.last_seq, j.paid_seconds, j.last_window_end), (0, 0, 0, 0, 0));
    assert_eq!(j.escrow_bump, Pubkey::find_program_address(&[gpu_market::seeds::ESCROW, job.as_ref()], &gpu_market::ID).1);
    assert_eq!(b.token_balance(&escrow), 5_000);
    assert_eq!(b.token_balance(&b.user.payment), before - 5_000);
    let e = b.svm.get_account(&escrow).unwrap();
    assert_eq!((&e.data[0..32], &e.data[32..64]), (b.payment_mint.as_ref(), job.as_ref()), "escrow: payment mint, authority job");
    assert_eq!(b.provider_state().gpus_in_use, 3);
    assert_eq!(b.market_state().totals.jobs, 1);
    assert_event(&logs, JobCreated {
        market: b.market, job, user: user.pubkey(), provider: b.provider, job_id: 9, gpu_count: 3,
        price_per_gpu_second: 10, rate_per_second: 30, deposit: 5_000, workload_hash: [0; 32],
    });
}

#[test]
fn fail_create_job_deposit_below_one_window() {
    let mut b = Bench::new();
    let ix = b.ix_create_job(&b.user, 1, 1, 599);
    assert_eq!(create_err(&mut b, ix), program_err(0, E::DepositTooSmall));
    b.open_job(1, 1, 600);
}

#[test]
fn fail_create_job_zero_gpus() {
    let mut b = Bench::new();
    let ix = b.ix_create_job(&b.user, 1, 0, 10_000);
    assert_eq!(create_err(&mut b, ix), program_err(0, E::InvalidGpuCount));
}

#[test]
fn fail_create_job_more_gpus_than_free() {
    let mut b = Bench::new();
    let ix = b.ix_create_job(&b.user, 1, 5, 100_000);
    assert_eq!(create_err(&mut b, ix), program_err(0, E::NotEnoughFreeGpus));
    b.open_job(1, 3, 100_000);
    let ix = b.ix_create_job(&b.user, 2, 2, 100_000);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotEnoughFreeGpus));
}

#[test]
fn fail_create_job_provider_stake_does_not_cover_gpus() {
    let mut b = Bench::new();
    let (_, provider) = b.add_provider(&SigningKey::from_bytes(&[5u8; 32]), 4, 10, 1_999);
    let ix = swap_account(b.ix_create_job(&b.user, 1, 2, 100_000), b.provider, provider);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::InsufficientStake));
    let ix = swap_account(b.ix_create_job(&b.user, 1, 1, 100_000), b.provider, provider);
    b.as_user(&[ix]);
}

#[test]
fn fail_create_job_provider_not_active() {
    let mut b = Bench::new();
    let ix = b.ix_update_provider(&b.provider_owner.key.pubkey(), UpdateProviderArgs { accepting_jobs: Some(false), ..no_update() });
    b.as_owner(&[ix]);
    let ix = b.ix_create_job(&b.user, 1, 1, 10_000);
    assert_eq!(create_err(&mut b, ix), program_err(0, E::ProviderNotActive));
}

#[test]
fn fail_create_job_provider_of_another_market() {
    let mut b = Bench::new();
    let other = b.second_market(1);
    let provider = b.register_provider_in(other);
    let ix = swap_account(b.ix_create_job(&b.user, 1, 1, 10_000), b.provider, provider);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::ProviderMarketMismatch));
}

#[test]
fn fail_create_job_wrong_payment_mint() {
    let mut b = Bench::new();
    let ix = swap_account(b.ix_create_job(&b.user, 1, 1, 10_000), b.payment_mint, b.stake_mint);
    assert_eq!(create_err(&mut b, ix), program_err(0, E::InvalidMint));
}

#[test]
fn fail_create_job_user_account_of_another_mint() {
    let mut b = Bench::new();
    let ix = swap_account(b.ix_create_job(&b.user, 1, 1, 10_000), b.user.payment, b.user.stake);
    assert_eq!(create_err(&mut b, ix), program_err(0, E::InvalidMint));
}

// ---- accept_job ------------------------------------------------------------------------------

#[test]
fn success_accept_job_by_owner_starts_billing() {
    let mut b = Bench::new();
    let (job, _) = b.open_job(1, 1, 10_000);
    b.advance(7);
    let owner = b.owner_kp();
    let logs = b.as_owner(&[b.ix_accept_job(&owner.pubkey(), job)]);
    let j = b.job_state(&job);
    assert_eq!((j.status, j.started_at, j.last_window_end), (JobStatus::Running, T0 + 7, T0 + 7));
    assert_event(&logs, JobAccepted { job, provider: b.provider, signer: owner.pubkey(), started_at: T0 + 7 });
}

#[test]
fn success_accept_job_by_worker_key() {
    let mut b = Bench::new();
    let (job, _) = b.open_job(1, 1, 10_000);
    let (owner, worker) = (b.owner_kp(), b.worker_kp());
    let logs = b.send(&[b.ix_accept_job(&worker.pubkey(), job)], &[&owner, &worker]).unwrap().logs;
    assert_eq!(b.job_state(&job).status, JobStatus::Running);
    assert_event(&logs, JobAccepted { job, provider: b.provider, signer: worker.pubkey(), started_at: T0 });
}

#[test]
fn fail_accept_job_by_user() {
    let mut b = Bench::new();
    let (job, _) = b.open_job(1, 1, 10_000);
    let ix = b.ix_accept_job(&b.user.key.pubkey(), job);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotProviderSigner));
    assert_eq!(b.job_state(&job).status, JobStatus::Open);
}

#[test]
fn fail_accept_job_of_another_provider() {
    let mut b = Bench::new();
    let (_, provider) = b.add_provider(&SigningKey::from_bytes(&[5u8; 32]), 4, 10, 10_000);
    let ix = swap_account(b.ix_create_job(&b.user, 1, 1, 10_000), b.provider, provider);
    b.as_user(&[ix]);
    let (job, _) = b.job_address(&b.user.key.pubkey(), 1);
    let ix = b.ix_accept_job(&b.provider_owner.key.pubkey(), job);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::JobProviderMismatch));
}

#[test]
fn fail_accept_job_provider_paused() {
    let mut b = Bench::new();
    let (job, _) = b.open_job(1, 1, 10_000);
    let owner = b.owner_kp();
    b.as_owner(&[b.ix_update_provider(&owner.pubkey(), UpdateProviderArgs { accepting_jobs: Some(false), ..no_update() })]);
    assert_eq!(b.owner_err(&[b.ix_accept_job(&owner.pubkey(), job)]), program_err(0, E::ProviderNotActive));
}

#[test]
fn fail_accept_job_twice() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.advance(5);
    let owner = b.owner_kp();
    assert_eq!(b.owner_err(&[b.ix_accept_job(&owner.pubkey(), job)]), program_err(0, E::InvalidJobStatus));
    assert_eq!(b.job_state(&job).started_at, T0);
}

// ---- finish_job ------------------------------------------------------------------------------

#[test]
fn success_finish_job_by_user_and_by_owner() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.advance(30);
    let user = b.user_kp();
    let logs = b.as_user(&[b.ix_finish_job(&user.pubkey(), job)]);
    let j = b.job_state(&job);
    assert_eq!((j.status, j.ended_at), (JobStatus::Finishing, T0 + 30));
    assert_eq!(b.provider_state().gpus_in_use, 1, "GPUs stay held through the grace");
    assert_event(&logs, JobFinished { job, by: user.pubkey(), ended_at: T0 + 30 });

    let (job2, _) = b.running_job(2, 1, 10_000);
    let owner = b.owner_kp();
    let logs = b.as_owner(&[b.ix_finish_job(&owner.pubkey(), job2)]);
    assert_event(&logs, JobFinished { job: job2, by: owner.pubkey(), ended_at: T0 + 30 });
}

#[test]
fn fail_finish_job_by_stranger() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let va = b.va_kp();
    assert_eq!(b.va_err(&[b.ix_finish_job(&va.pubkey(), job)]), program_err(0, E::NotJobParty));
    assert_eq!(b.job_state(&job).status, JobStatus::Running);
}

#[test]
fn fail_finish_job_with_another_provider() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let (_, provider) = b.add_provider(&SigningKey::from_bytes(&[5u8; 32]), 4, 10, 0);
    let user = b.user_kp();
    let ix = swap_account(b.ix_finish_job(&user.pubkey(), job), b.provider, provider);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::JobProviderMismatch));
}

#[test]
fn fail_finish_job_not_running() {
    let mut b = Bench::new();
    let (job, _) = b.open_job(1, 1, 10_000);
    let user = b.user_kp();
    assert_eq!(b.user_err(&[b.ix_finish_job(&user.pubkey(), job)]), program_err(0, E::InvalidJobStatus));
    b.as_owner(&[b.ix_accept_job(&b.provider_owner.key.pubkey(), job)]);
    b.finish(job);
    assert_eq!(b.user_err(&[b.ix_finish_job(&user.pubkey(), job)]), program_err(0, E::InvalidJobStatus));
}

// ---- top_up ----------------------------------------------------------------------------------

fn top_up_ix(b: &Bench, job: Pubkey, amount: u64) -> Instruction {
    b.ix_top_up(&b.user.key.pubkey(), b.user.payment, job, amount)
}

fn top_up_err(b: &mut Bench, ix: Instruction, job: Pubkey) -> TransactionError {
    let err = b.user_err(&[ix]);
    assert_eq!(b.job_state(&job).deposited, 10_000);
    err
}

#[test]
fn success_top_up_open_and_running_job() {
    let mut b = Bench::new();
    let (job, escrow) = b.open_job(1, 1, 10_000);
    let logs = b.as_user(&[top_up_ix(&b, job, 2_000)]);
    assert_eq!((b.job_state(&job).deposited, b.token_balance(&escrow)), (12_000, 12_000));
    assert_event(&logs, JobToppedUp { job, amount: 2_000, deposited: 12_000 });
    b.as_owner(&[b.ix_accept_job(&b.provider_owner.key.pubkey(), job)]);
    b.as_user(&[top_up_ix(&b, job, 1)]);
    assert_eq!(b.token_balance(&escrow), 12_001);
}

#[test]
fn fail_top_up_zero() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let ix = top_up_ix(&b, job, 0);
    assert_eq!(top_up_err(&mut b, ix, job), program_err(0, E::ZeroAmount));
}

#[test]
fn fail_top_up_finishing_job() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.finish(job);
    let ix = top_up_ix(&b, job, 1);
    assert_eq!(top_up_err(&mut b, ix, job), program_err(0, E::InvalidJobStatus));
}

#[test]
fn fail_top_up_by_other_than_user() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let owner = b.owner_kp();
    let ix = b.ix_top_up(&owner.pubkey(), b.provider_owner.payment, job, 1);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::NotJobUser));
}

#[test]
fn fail_top_up_with_another_market() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let other = b.second_market(1);
    let ix = swap_account(top_up_ix(&b, job, 1), b.market, other);
    assert_eq!(top_up_err(&mut b, ix, job), program_err(0, E::JobMarketMismatch));
}

#[test]
fn fail_top_up_wrong_mint() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let ix = swap_account(top_up_ix(&b, job, 1), b.payment_mint, b.stake_mint);
    assert_eq!(top_up_err(&mut b, ix, job), program_err(0, E::InvalidMint));
    let ix = swap_account(top_up_ix(&b, job, 1), b.user.payment, b.user.stake);
    assert_eq!(top_up_err(&mut b, ix, job), program_err(0, E::InvalidMint));
}

// ---- cancel_job ------------------------------------------------------------------------------

fn cancel_ix(b: &Bench, job: Pubkey) -> Instruction {
    b.ix_cancel_job(&b.user.key.pubkey(), job, b.user.payment)
}

#[test]
fn success_cancel_open_job_refunds_everything() {
    let mut b = Bench::new();
    let before = b.token_balance(&b.user.payment);
    let (job, escrow) = b.open_job(1, 2, 10_000);
    b.advance(3);
    let logs = b.as_user(&[cancel_ix(&b, job)]);
    let j = b.job_state(&job);
    assert_eq!((j.status, j.refunded, j.ended_at), (JobStatus::Cancelled, 10_000, T0 + 3));
    assert_eq!((b.token_balance(&escrow), b.token_balance(&b.user.payment)), (0, before));
    assert_eq!(b.provider_state().gpus_in_use, 0);
    assert_event(&logs, JobCancelled { job, refunded: 10_000, surplus_returned: 0 });
}

#[test]
fn fail_cancel_job_by_other_than_user() {
    let mut b = Bench::new();
    let (job, _) = b.open_job(1, 1, 10_000);
    let ix = b.ix_cancel_job(&b.provider_owner.key.pubkey(), job, b.user.payment);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::NotJobUser));
    assert_eq!(b.job_state(&job).status, JobStatus::Open);
}

#[test]
fn fail_cancel_running_job() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    assert_eq!(b.user_err(&[cancel_ix(&b, job)]), program_err(0, E::InvalidJobStatus));
}

#[test]
fn fail_cancel_job_refund_to_account_of_someone_else() {
    let mut b = Bench::new();
    let (job, _) = b.open_job(1, 1, 10_000);
    let ix = swap_account(cancel_ix(&b, job), b.user.payment, b.provider_owner.payment);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotJobUser));
}

#[test]
fn fail_cancel_job_refund_account_of_another_mint() {
    let mut b = Bench::new();
    let (job, _) = b.open_job(1, 1, 10_000);
    let ix = swap_account(cancel_ix(&b, job), b.user.payment, b.user.stake);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::InvalidMint));
    let ix = swap_account(cancel_ix(&b, job), b.payment_mint, b.stake_mint);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::InvalidMint));
}

#[test]
fn fail_cancel_job_with_mismatched_provider_or_market() {
    let mut b = Bench::new();
    let (job, _) = b.open_job(1, 1, 10_000);
    let (_, provider) = b.add_provider(&SigningKey::from_bytes(&[5u8; 32]), 4, 10, 0);
    let ix = swap_account(cancel_ix(&b, job), b.provider, provider);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::JobProviderMismatch));
    let other = b.second_market(1);
    let ix = swap_account(cancel_ix(&b, job), b.market, other);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::ProviderMarketMismatch));
    let elsewhere = b.register_provider_in(other);
    let ix = swap_account(swap_account(cancel_ix(&b, job), b.market, other), b.provider, elsewhere);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::JobMarketMismatch));
}

// ---- expire_job ------------------------------------------------------------------------------

fn expire_ix(b: &Bench, signer: &Keypair, job: Pubkey) -> Instruction {
    b.ix_expire_job(&signer.pubkey(), job)
}

#[test]
fn success_expire_job_one_second_after_deadline_by_anyone() {
    let mut b = Bench::new();
    let before = b.token_balance(&b.user.payment);
    let (job, escrow) = b.running_job(1, 1, 10_000);
    b.set_time(T0 + EXPIRY + 1);
    let va = b.va_kp();
    let logs = b.as_va(&[expire_ix(&b, &va, job)]);
    let j = b.job_state(&job);
    // No tokens move: the user's close_job refunds, at once (a Failed job needs no grace).
    assert_eq!((j.status, j.refunded, j.ended_at), (JobStatus::Failed, 0, T0 + EXPIRY + 1));
    assert_eq!(b.token_balance(&escrow), 10_000);
    let p = b.provider_state();
    assert_eq!((p.gpus_in_use, p.reputation.jobs_failed, p.reputation.windows_missed, p.stake), (0, 1, 22, 100_000));
    assert_event(&logs, JobExpired { job, by: va.pubkey(), last_window_end: T0, missed_windows: 22 });
    b.as_user(&[close_ix(&b, job)]);
    assert_eq!(b.token_balance(&b.user.payment), before);
}

#[test]
fn fail_expire_job_at_and_before_deadline() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let va = b.va_kp();
    for t in [T0 + EXPIRY - 1, T0 + EXPIRY] {
        b.set_time(t);
        assert_eq!(b.va_err(&[expire_ix(&b, &va, job)]), program_err(0, E::JobNotExpired));
    }
    assert_eq!(b.job_state(&job).status, JobStatus::Running);
}

#[test]
fn fail_expire_job_deadline_moves_with_last_settled_window() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 100_000);
    b.set_time(T0 + 300);
    b.settle(job, receipt(1, 300, T0 + 300)).unwrap();
    b.set_time(T0 + EXPIRY + 1);
    let va = b.va_kp();
    assert_eq!(b.va_err(&[expire_ix(&b, &va, job)]), program_err(0, E::JobNotExpired));
    b.set_time(T0 + 300 + EXPIRY + 1);
    b.as_va(&[expire_ix(&b, &va, job)]);
}

#[test]
fn fail_expire_job_not_running() {
    let mut b = Bench::new();
    let (job, _) = b.open_job(1, 1, 10_000);
    b.set_time(T0 + 100 * EXPIRY);
    let va = b.va_kp();
    assert_eq!(b.va_err(&[expire_ix(&b, &va, job)]), program_err(0, E::InvalidJobStatus));
}

// ---- close_job -------------------------------------------------------------------------------

fn close_ix(b: &Bench, job: Pubkey) -> Instruction {
    b.ix_close_job(&b.user.key.pubkey(), b.user.payment, job)
}

#[test]
fn success_close_cancelled_job_returns_rent_and_tokens() {
    let mut b = Bench::new();
    let user = b.user_kp();
    let tokens = b.token_balance(&b.user.payment);
    let (job, escrow) = b.open_job(1, 1, 10_000);
    b.as_user(&[cancel_ix(&b, job)]);
    let rent = b.svm.get_balance(&job).unwrap() + b.svm.get_balance(&escrow).unwrap();
    let lamports = b.svm.get_balance(&user.pubkey()).unwrap();
    let logs = b.as_user(&[close_ix(&b, job)]);
    assert!(b.is_tombstone(&job) && closed(&b, &escrow));
    // All rent back but the tombstone's.
    let kept = b.svm.get_balance(&job).unwrap();
    assert_eq!(kept, b.svm.minimum_balance_for_rent_exemption(8 + <gpu_market::state::ClosedJob as anchor_lang::Space>::INIT_SPACE));
    assert_eq!(b.svm.get_balance(&user.pubkey()).unwrap(), lamports + rent - kept - 5_000);
    assert_eq!(b.token_balance(&b.user.payment), tokens);
    assert_event(&logs, JobClosed { job, user: user.pubkey(), refunded: 0, surplus_returned: 0, deposited: 10_000, paid_provider: 0, paid_treasury: 0, burned: 0 });
}

#[test]
fn success_close_finishing_job_one_second_after_grace_completes_it() {
    let mut b = Bench::new();
    let (job, escrow) = b.running_job(1, 1, 10_000);
    b.advance(60);
    b.settle(job, receipt(1, 60, T0 + 60)).unwrap();
    b.finish(job);
    b.set_time(T0 + 60 + GRACE + 1);
    let before = b.token_balance(&b.user.payment);
    let logs = b.as_user(&[close_ix(&b, job)]);
    assert!(closed(&b, &job) && closed(&b, &escrow));
    assert_eq!(b.token_balance(&b.user.payment), before + 9_400);
    let p = b.provider_state();
    assert_eq!((p.gpus_in_use, p.reputation.jobs_completed), (0, 1));
    assert_event(&logs, JobClosed { job, user: b.user.key.pubkey(), refunded: 9_400, surplus_returned: 0, deposited: 10_000, paid_provider: 540, paid_treasury: 30, burned: 30 });
}

#[test]
fn fail_close_job_at_and_before_grace_end() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.finish(job);
    for t in [T0 + GRACE - 1, T0 + GRACE] {
        b.set_time(t);
        assert_eq!(b.user_err(&[close_ix(&b, job)]), program_err(0, E::GracePeriodActive));
    }
    assert_eq!(b.job_state(&job).status, JobStatus::Finishing);
}

#[test]
fn success_close_completed_job_at_once() {
    // Escrow exhaustion completes the job: no settlement is possible any more, so no grace.
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 600); // exactly one window of budget
    b.advance(60);
    b.settle(job, receipt(1, 60, T0 + 60)).unwrap();
    assert_eq!(b.job_state(&job).status, JobStatus::Completed);
    b.as_user(&[close_ix(&b, job)]);
}

#[test]
fn fail_close_open_or_running_job() {
    let mut b = Bench::new();
    let (job, _) = b.open_job(1, 1, 10_000);
    b.advance(10_000);
    assert_eq!(b.user_err(&[close_ix(&b, job)]), program_err(0, E::InvalidJobStatus));
    b.as_owner(&[b.ix_accept_job(&b.provider_owner.key.pubkey(), job)]);
    b.advance(10_000);
    assert_eq!(b.user_err(&[close_ix(&b, job)]), program_err(0, E::InvalidJobStatus));
}

/// A cancelled job of the bench user, ready to close.
fn cancelled_job(b: &mut Bench) -> Pubkey {
    let (job, _) = b.open_job(1, 1, 10_000);
    b.as_user(&[cancel_ix(b, job)]);
    job
}

#[test]
fn fail_close_job_refund_to_account_of_someone_else() {
    let mut b = Bench::new();
    let job = cancelled_job(&mut b);
    let ix = swap_account(close_ix(&b, job), b.user.payment, b.provider_owner.payment);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotJobUser));
}

#[test]
fn fail_close_job_wrong_mint() {
    let mut b = Bench::new();
    let job = cancelled_job(&mut b);
    let ix = swap_account(close_ix(&b, job), b.user.payment, b.user.stake);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::InvalidMint));
    let ix = swap_account(close_ix(&b, job), b.payment_mint, b.stake_mint);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::InvalidMint));
}

#[test]
fn fail_close_job_with_mismatched_provider_or_market() {
    let mut b = Bench::new();
    let job = cancelled_job(&mut b);
    let (_, provider) = b.add_provider(&SigningKey::from_bytes(&[5u8; 32]), 4, 10, 0);
    let ix = swap_account(close_ix(&b, job), b.provider, provider);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::JobProviderMismatch));
    let other = b.second_market(1);
    let ix = swap_account(close_ix(&b, job), b.market, other);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::ProviderMarketMismatch));
    let elsewhere = b.register_provider_in(other);
    let ix = swap_account(swap_account(close_ix(&b, job), b.market, other), b.provider, elsewhere);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::JobMarketMismatch));
    assert!(!closed(&b, &job));
}
