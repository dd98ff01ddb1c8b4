//! rate_job: the user of a job that billed something rates it once, 1 to 5 stars, before or
//! after closing it; the provider's ratings add up.
mod common;

use anchor_lang::error::ErrorCode as AE;
use anchor_lang::prelude::Pubkey;
use common::*;
use gpu_market::errors::GpuMarketError as E;
use gpu_market::events::JobRated;
use gpu_market::state::{ClosedJob, Ratings};
use gpum_localnet::solana_instruction::Instruction;
use gpum_localnet::solana_signer::Signer;
use gpum_localnet::solana_transaction_error::TransactionError;

fn ix_rate(user: &Pubkey, provider: Pubkey, job: Pubkey, score: u8) -> Instruction {
    Bench::ix(gpu_market::instruction::RateJob { score }, gpu_market::accounts::RateJob { user: *user, provider, job })
}

/// A running job of the bench user that billed 30 s (deposit 10_000 at 10 per second).
fn billed_job(b: &mut Bench, job_id: u64) -> Pubkey {
    let (job, _) = b.running_job(job_id, 1, 10_000);
    b.advance(30);
    b.settle(job, receipt(1, 30, b.now)).unwrap();
    job
}

fn rate(b: &mut Bench, job: Pubkey, score: u8) -> Vec<String> {
    let ix = ix_rate(&b.user.key.pubkey(), b.provider, job, score);
    b.as_user(&[ix])
}

fn rate_err(b: &mut Bench, ix: Instruction, err: TransactionError) {
    let before = b.provider_state().ratings;
    assert_eq!(b.user_err(&[ix]), err);
    assert_eq!(b.provider_state().ratings, before);
}

/// Finishes `job` and closes it after the grace: a tombstone.
fn close(b: &mut Bench, job: Pubkey) {
    b.finish(job);
    b.advance(default_params().grace_seconds() + 1);
    let user = b.user_kp();
    b.send(&[b.ix_close_job(&user.pubkey(), b.user.payment, job)], &[&user]).unwrap();
    assert!(b.is_tombstone(&job));
}

#[test]
fn success_rate_job_running_and_billed() {
    let mut b = Bench::new();
    let job = billed_job(&mut b, 1);
    let logs = rate(&mut b, job, 4);
    assert_eq!(b.provider_state().ratings, Ratings { count: 1, sum: 4 });
    assert!(b.job_state(&job).rated);
    assert_event(&logs, JobRated { job, provider: b.provider, user: b.user.key.pubkey(), score: 4, closed: false, count: 1, sum: 4 });
    // The flag survives the close; the tombstone refuses a second rating.
    close(&mut b, job);
    let t: ClosedJob = b.account(&job).unwrap();
    assert!(t.rated);
    assert_eq!((t.user, t.provider, t.paid_seconds), (b.user.key.pubkey(), b.provider, 30));
    let ix = ix_rate(&b.user.key.pubkey(), b.provider, job, 5);
    rate_err(&mut b, ix, program_err(0, E::JobAlreadyRated));
}

#[test]
fn success_rate_job_after_closing_through_the_tombstone() {
    let mut b = Bench::new();
    let first = billed_job(&mut b, 1);
    rate(&mut b, first, 2);
    let job = billed_job(&mut b, 2);
    close(&mut b, job);
    let logs = rate(&mut b, job, 5);
    assert_eq!(b.provider_state().ratings, Ratings { count: 2, sum: 7 });
    let t: ClosedJob = b.account(&job).unwrap();
    assert!(t.rated);
    assert_eq!(b.svm.get_account(&job).unwrap().data.len(), 8 + <ClosedJob as anchor_lang::Space>::INIT_SPACE);
    assert_event(&logs, JobRated { job, provider: b.provider, user: b.user.key.pubkey(), score: 5, closed: true, count: 2, sum: 7 });
    let ix = ix_rate(&b.user.key.pubkey(), b.provider, job, 5);
    rate_err(&mut b, ix, program_err(0, E::JobAlreadyRated));
}

#[test]
fn success_every_star_count_from_one_to_five() {
    let mut b = Bench::new();
    for score in 1..=5u8 {
        let job = billed_job(&mut b, u64::from(score));
        rate(&mut b, job, score);
        close(&mut b, job);
    }
    assert_eq!(b.provider_state().ratings, Ratings { count: 5, sum: 15 });
}

#[test]
fn fail_rate_job_zero_or_six_stars() {
    let mut b = Bench::new();
    let job = billed_job(&mut b, 1);
    for score in [0u8, 6, u8::MAX] {
        let ix = ix_rate(&b.user.key.pubkey(), b.provider, job, score);
        rate_err(&mut b, ix, program_err(0, E::InvalidRating));
    }
    assert!(!b.job_state(&job).rated);
}

#[test]
fn fail_rate_job_that_billed_nothing() {
    let mut b = Bench::new();
    let (running, _) = b.running_job(1, 1, 10_000);
    let ix = ix_rate(&b.user.key.pubkey(), b.provider, running, 5);
    rate_err(&mut b, ix, program_err(0, E::JobNotBilled));
    // Nor once cancelled and closed: the tombstone says it billed nothing.
    let (open, _) = b.open_job(2, 1, 10_000);
    let user = b.user_kp();
    b.send(&[b.ix_cancel_job(&user.pubkey(), open, b.user.payment)], &[&user]).unwrap();
    b.send(&[b.ix_close_job(&user.pubkey(), b.user.payment, open)], &[&user]).unwrap();
    let ix = ix_rate(&b.user.key.pubkey(), b.provider, open, 5);
    rate_err(&mut b, ix, program_err(0, E::JobNotBilled));
}

#[test]
fn fail_rate_job_twice() {
    let mut b = Bench::new();
    let job = billed_job(&mut b, 1);
    rate(&mut b, job, 3);
    let ix = ix_rate(&b.user.key.pubkey(), b.provider, job, 3);
    rate_err(&mut b, ix, program_err(0, E::JobAlreadyRated));
}

#[test]
fn fail_rate_job_by_anyone_but_its_user() {
    let mut b = Bench::new();
    let job = billed_job(&mut b, 1);
    let owner = b.owner_kp();
    let ix = ix_rate(&owner.pubkey(), b.provider, job, 5);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::NotJobUser));
    close(&mut b, job);
    let ix = ix_rate(&owner.pubkey(), b.provider, job, 5);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::NotJobUser));
    assert_eq!(b.provider_state().ratings, Ratings::default());
}

#[test]
fn fail_rate_job_with_another_provider() {
    let mut b = Bench::new();
    let job = billed_job(&mut b, 1);
    let (_, other) = b.add_provider(&b.worker.clone(), 1, 10, 0);
    let ix = ix_rate(&b.user.key.pubkey(), other, job, 5);
    rate_err(&mut b, ix, program_err(0, E::JobProviderMismatch));
}

#[test]
fn fail_rate_job_account_that_is_no_job() {
    let mut b = Bench::new();
    let (job, escrow) = b.running_job(1, 1, 10_000);
    let ix = ix_rate(&b.user.key.pubkey(), b.provider, b.market, 5);
    rate_err(&mut b, ix, anchor_err(0, AE::AccountDiscriminatorMismatch));
    let ix = ix_rate(&b.user.key.pubkey(), b.provider, escrow, 5);
    rate_err(&mut b, ix, anchor_err(0, AE::AccountOwnedByWrongProgram));
    let mut ix = ix_rate(&b.user.key.pubkey(), b.provider, job, 5);
    ix.accounts[2].is_writable = false;
    rate_err(&mut b, ix, anchor_err(0, AE::ConstraintMut));
    let ix = ix_rate(&b.user.key.pubkey(), job, job, 5);
    rate_err(&mut b, ix, anchor_err(0, AE::AccountDiscriminatorMismatch));
}

#[test]
fn fail_rate_job_user_not_signing() {
    let mut b = Bench::new();
    let job = billed_job(&mut b, 1);
    let stranger = b.new_party(0, 0);
    let ix = unsign(ix_rate(&b.user.key.pubkey(), b.provider, job, 5), b.user.key.pubkey());
    assert_eq!(b.send_err(&[ix], &[&stranger.key]), anchor_err(0, AE::AccountNotSigner));
}
