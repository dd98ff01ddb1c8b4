//! The walking skeleton's flow in the real runtime, with the conservation invariant checked
//! after every transaction (by `Bench::send`), and the skeleton's negative tests.
mod common;

use common::*;
use gpu_market::errors::GpuMarketError as E;
use gpum_localnet::solana_signer::Signer;

#[test]
fn success_full_job_lifecycle_pays_provider_treasury_burn_and_refunds_user() {
    let mut b = Bench::new();
    let deposit = 10 * 2 * 600; // rate 20/s (2 GPUs x 10), 600 seconds
    let user_before = b.token_balance(&b.user.payment);
    let supply_before = b.mint_supply(&b.payment_mint);
    let (job, escrow) = b.running_job(1, 2, deposit);
    assert_eq!(b.provider_state().gpus_in_use, 2);
    let started = b.job_state(&job).started_at;

    for seq in 1..=3u64 {
        b.advance(60);
        let r = receipt(seq, 60 * seq, started + 60 * seq as i64);
        b.settle(job, r).unwrap();
    }
    let j = b.job_state(&job);
    assert_eq!(j.paid_seconds, 180);
    assert_eq!(j.last_seq, 3);
    let amount = 180 * 20;
    let fee = amount / 10; // fee_bps 1000
    let burn = fee / 2; // burn_bps 5000
    assert_eq!(j.paid_provider, amount - fee);
    assert_eq!(j.paid_treasury, fee - burn);
    assert_eq!(j.burned, burn);
    assert_eq!(b.token_balance(&b.provider_owner.payment), amount - fee);
    assert_eq!(b.token_balance(&b.fee_vault), fee - burn);
    assert_eq!(b.mint_supply(&b.payment_mint), supply_before - burn);
    assert_eq!(b.validator_state().settlements, 3);
    assert_eq!(b.provider_state().reputation.verified_seconds, 180);

    let user = b.user.key.insecure_clone();
    b.advance(10);
    b.send(&[b.ix_finish_job(&user.pubkey(), job)], &[&user]).unwrap();
    assert_eq!(b.job_state(&job).status, gpu_market::state::JobStatus::Finishing);

    // Closing inside the grace ((max_missed_windows + 2) windows) fails; after it succeeds.
    let close = b.ix_close_job(&user.pubkey(), b.user.payment, job);
    assert_eq!(b.send_err(&[close.clone()], &[&user]), custom(0, err_code(E::GracePeriodActive)));
    b.advance(12 * 60 + 1);
    b.send(&[close], &[&user]).unwrap();
    assert!(b.is_tombstone(&job));
    assert!(b.svm.get_account(&escrow).is_none_or(|a| a.lamports == 0));
    assert_eq!(b.token_balance(&b.user.payment), user_before - amount);
    assert_eq!(b.provider_state().gpus_in_use, 0);
    assert_eq!(b.provider_state().reputation.jobs_completed, 1);
}

#[test]
fn success_escrow_exhaustion_completes_job_and_frees_gpus() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10 * 90); // 90 seconds of budget at 10/s
    let started = b.job_state(&job).started_at;
    b.advance(60);
    b.settle(job, receipt(1, 60, started + 60)).unwrap();
    b.advance(60);
    b.settle(job, receipt(2, 120, started + 120)).unwrap();
    let j = b.job_state(&job);
    assert_eq!(j.paid_seconds, 90, "billing capped by escrow");
    assert_eq!(j.status, gpu_market::state::JobStatus::Completed);
    assert_eq!(b.provider_state().gpus_in_use, 0);
    assert_eq!(j.paid_provider + j.paid_treasury + j.burned, 900);
}

#[test]
fn success_program_logs_and_events_reach_transaction_logs() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let started = b.job_state(&job).started_at;
    b.advance(60);
    let meta = b.settle(job, receipt(1, 60, started + 60)).unwrap();
    let logs = meta.logs.join("\n");
    assert!(logs.contains(&format!("Program {} invoke [1]", gpu_market::ID)), "{logs}");
    assert!(logs.contains("Program log: Instruction: Settle"), "{logs}");
    assert!(logs.contains("Program TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA invoke [2]"), "{logs}");
    assert!(logs.contains("Program data: "), "event missing: {logs}");
    assert!(logs.contains(&format!("Program {} success", gpu_market::ID)), "{logs}");
}

#[test]
fn fail_settle_receipt_signed_by_other_key() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let started = b.job_state(&job).started_at;
    b.advance(60);
    let impostor = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]);
    let ixs = b.settle_ixs(&impostor, job, receipt(1, 60, started + 60));
    let va = b.validator_authority.insecure_clone();
    assert_eq!(b.send_err(&ixs, &[&va]), custom(1, err_code(E::WrongReceiptSigner)));
}

#[test]
fn fail_settle_replay_of_settled_receipt() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let started = b.job_state(&job).started_at;
    b.advance(60);
    let r = receipt(1, 60, started + 60);
    b.settle(job, r).unwrap();
    let before = b.job_state(&job);
    assert_eq!(b.settle(job, r).unwrap_err().err, custom(1, err_code(E::StaleSequence)));
    assert_eq!(b.job_state(&job).paid_provider, before.paid_provider);
}

#[test]
fn fail_settle_signed_by_non_validator() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let started = b.job_state(&job).started_at;
    b.advance(60);
    let outsider = gpum_localnet::solana_keypair::Keypair::new();
    b.svm.airdrop(&outsider.pubkey(), 1_000_000_000).unwrap();
    let r = receipt(1, 60, started + 60);
    let msg = b.receipt_digest(&job, &r);
    // The outsider presents the real validator's account: rejected by the authority check.
    let mut settle = b.ix_settle(&outsider.pubkey(), job, r);
    settle.accounts[2].pubkey = b.validator;
    let ixs = vec![ed25519_ix(&b.worker, &msg), settle];
    assert_eq!(b.send_err(&ixs, &[&outsider]), custom(1, err_code(E::NotAValidator)));
}

#[test]
fn fail_settle_bills_more_than_wall_time() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let started = b.job_state(&job).started_at;
    b.advance(60);
    // 60 s of wall time + 5 s skew allow 65 s; 66 is too many.
    let ok_limit = receipt(1, 65, started + 60);
    let too_many = receipt(1, 66, started + 60);
    assert_eq!(b.settle(job, too_many).unwrap_err().err, custom(1, err_code(E::BilledSecondsExceedWallTime)));
    b.settle(job, ok_limit).unwrap();
}

#[test]
fn fail_close_job_by_other_than_user() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let user = b.user.key.insecure_clone();
    b.send(&[b.ix_finish_job(&user.pubkey(), job)], &[&user]).unwrap();
    b.advance(1_000);
    let owner = b.provider_owner.key.insecure_clone();
    let ix = b.ix_close_job(&owner.pubkey(), b.provider_owner.payment, job);
    assert_eq!(b.send_err(&[ix], &[&owner]), custom(0, err_code(E::NotJobUser)));
}

#[test]
fn fail_corrupted_signature_under_right_key_rejected_by_precompile_before_settle() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let started = b.job_state(&job).started_at;
    b.advance(60);
    let mut ixs = b.settle_ixs(&b.worker.clone(), job, receipt(1, 60, started + 60));
    ixs[0].data[48] ^= 0x01; // first byte of the signature
    let va = b.validator_authority.insecure_clone();
    let failed = b.send(&ixs, &[&va]).unwrap_err();
    // The precompile fails instruction 0; settle (instruction 1) never runs.
    assert!(
        matches!(failed.err, gpum_localnet::solana_transaction_error::TransactionError::InstructionError(0, _)),
        "{:?}", failed.err
    );
    assert!(!failed.meta.logs.iter().any(|l| l.contains("Instruction: Settle")), "{:?}", failed.meta.logs);
    assert_eq!(b.job_state(&job).last_seq, 0);
}
