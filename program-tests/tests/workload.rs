//! Workloads on chain: `job.workload_hash` fixed at create_job, the provider's worker
//! endpoint (register/update), and `finish_job` signed by the worker key (finish_on_exit).
mod common;

use anchor_lang::prelude::Pubkey;
use common::*;
use ed25519_dalek::SigningKey;
use gpu_market::errors::GpuMarketError as E;
use gpu_market::events::*;
use gpu_market::instructions::{RegisterProviderArgs, UpdateProviderArgs};
use gpu_market::state::{JobStatus, Provider};
use gpum_localnet::solana_signer::Signer;

fn endpoint_text(raw: &[u8]) -> String {
    String::from_utf8(raw.iter().copied().take_while(|b| *b != 0).collect()).unwrap()
}

#[test]
fn success_create_job_fixes_the_workload_hash_and_emits_it() {
    let mut b = Bench::new();
    let user = b.user_kp();
    let hash = [0xab; 32];
    let logs = b.as_user(&[b.ix_create_job_workload(&b.user, 9, 1, 5_000, hash)]);
    let (job, _) = b.job_address(&user.pubkey(), 9);
    assert_eq!(b.job_state(&job).workload_hash, hash);
    assert_event(&logs, JobCreated {
        market: b.market, job, user: user.pubkey(), provider: b.provider, job_id: 9, gpu_count: 1,
        price_per_gpu_second: 10, rate_per_second: 10, deposit: 5_000, workload_hash: hash,
    });
    // A job without a workload carries zeros; the hash never changes while the job runs.
    let (plain, _) = b.running_job(10, 1, 5_000);
    assert_eq!(b.job_state(&plain).workload_hash, [0; 32]);
    b.as_owner(&[b.ix_accept_job(&b.provider_owner.key.pubkey(), job)]);
    b.advance(30);
    assert_eq!(b.job_state(&job).workload_hash, hash);
}

fn register(b: &mut Bench, endpoint: &str) -> Result<Pubkey, gpum_localnet::solana_transaction_error::TransactionError> {
    let p = b.new_party(0, 0);
    let args = RegisterProviderArgs {
        worker_key: worker_pubkey(&SigningKey::from_bytes(&[3u8; 32])), worker_key_expires_at: 0,
        spec: gpu_spec(2), price_per_gpu_second: 7, endpoint: endpoint.into(),
    };
    let ix = b.ix_register_provider_with(&p.key.pubkey(), args);
    match b.send(&[ix], &[&p.key]) {
        Ok(_) => Ok(b.provider_address(&p.key.pubkey())),
        Err(e) => Err(e.err),
    }
}

#[test]
fn success_register_provider_with_and_without_endpoint() {
    let mut b = Bench::new();
    let with = register(&mut b, "http://203.0.113.9:7070").unwrap();
    assert_eq!(endpoint_text(&b.account::<Provider>(&with).unwrap().endpoint), "http://203.0.113.9:7070");
    let without = register(&mut b, "").unwrap();
    assert_eq!(b.account::<Provider>(&without).unwrap().endpoint, [0u8; 96]);
}

#[test]
fn fail_register_provider_bad_endpoint() {
    let long = format!("http://{}", "a".repeat(90));
    for bad in ["ftp://x.example", "http://", "http://a b.example", long.as_str()] {
        let mut b = Bench::new();
        assert_eq!(register(&mut b, bad).unwrap_err(), program_err(0, E::InvalidEndpoint), "{bad}");
    }
}

#[test]
fn success_update_provider_sets_and_clears_the_endpoint() {
    let mut b = Bench::new();
    let owner = b.owner_kp();
    let set = UpdateProviderArgs { endpoint: Some("https://gpu-7.example:8443".into()), ..no_update() };
    b.as_owner(&[b.ix_update_provider(&owner.pubkey(), set)]);
    assert_eq!(endpoint_text(&b.provider_state().endpoint), "https://gpu-7.example:8443");
    // None leaves it as it is.
    b.as_owner(&[b.ix_update_provider(&owner.pubkey(), UpdateProviderArgs { price_per_gpu_second: Some(11), ..no_update() })]);
    assert_eq!(endpoint_text(&b.provider_state().endpoint), "https://gpu-7.example:8443");
    b.as_owner(&[b.ix_update_provider(&owner.pubkey(), UpdateProviderArgs { endpoint: Some(String::new()), ..no_update() })]);
    assert_eq!(b.provider_state().endpoint, [0u8; 96]);
}

#[test]
fn fail_update_provider_bad_endpoint() {
    let mut b = Bench::new();
    let owner = b.owner_kp();
    let bad = UpdateProviderArgs { endpoint: Some("gopher://x".into()), ..no_update() };
    let err = b.send_err(&[b.ix_update_provider(&owner.pubkey(), bad)], &[&owner]);
    assert_eq!(err, program_err(0, E::InvalidEndpoint));
    assert_eq!(b.provider_state().endpoint, [0u8; 96]);
}

#[test]
fn success_finish_job_by_the_worker_key() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.advance(30);
    let worker = b.worker_kp();
    b.svm.airdrop(&worker.pubkey(), 1_000_000_000).unwrap(); // it pays its own fee
    let logs = b.send(&[b.ix_finish_job(&worker.pubkey(), job)], &[&worker]).unwrap().logs;
    let j = b.job_state(&job);
    assert_eq!((j.status, j.ended_at), (JobStatus::Finishing, T0 + 30));
    assert_event(&logs, JobFinished { job, by: worker.pubkey(), ended_at: T0 + 30 });
}

#[test]
fn fail_finish_job_by_an_expired_or_retired_worker_key() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let old = b.worker_kp();
    b.svm.airdrop(&old.pubkey(), 1_000_000_000).unwrap();
    // Rotated: the retired key may no longer end jobs ...
    let new = SigningKey::from_bytes(&[9u8; 32]);
    let owner = b.owner_kp();
    b.as_owner(&[b.ix_rotate_worker_key(&owner.pubkey(), worker_pubkey(&new), T0 + 100)]);
    assert_eq!(b.send_err(&[b.ix_finish_job(&old.pubkey(), job)], &[&old]), program_err(0, E::NotJobParty));
    // ... and the new one only until it expires.
    b.advance(101);
    let new_kp = gpum_localnet::solana_keypair::Keypair::new_from_array(new.to_bytes());
    b.svm.airdrop(&new_kp.pubkey(), 1_000_000_000).unwrap();
    assert_eq!(b.send_err(&[b.ix_finish_job(&new_kp.pubkey(), job)], &[&new_kp]), program_err(0, E::NotJobParty));
    assert_eq!(b.job_state(&job).status, JobStatus::Running);
}
