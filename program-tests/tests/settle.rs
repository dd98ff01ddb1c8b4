//! settle: payout, every rule of the specification, quorum attestations.
mod common;

use anchor_lang::prelude::Pubkey;
use common::*;
use ed25519_dalek::SigningKey;
use gpu_market::errors::GpuMarketError as E;
use gpu_market::events::Settled;
use gpu_market::state::JobStatus;
use gpum_localnet::solana_instruction::Instruction;
use gpum_localnet::solana_keypair::Keypair;
use gpum_localnet::solana_signer::Signer;
use gpum_localnet::solana_transaction_error::TransactionError;

/// A running 1-GPU job (rate 10/s, deposit 10_000) started at `T0`, the clock at `T0 + 60`.
fn running() -> (Bench, Pubkey) {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.advance(60);
    (b, job)
}

/// Settles `r` and expects `expected` from the settle instruction (index 1); nothing is paid.
fn settle_err(b: &mut Bench, job: Pubkey, r: gpu_market::Receipt) -> TransactionError {
    let before = b.job_state(&job);
    let err = b.settle(job, r).unwrap_err().err;
    let after = b.job_state(&job);
    assert_eq!((after.last_seq, after.paid_seconds, after.paid_provider), (before.last_seq, before.paid_seconds, before.paid_provider));
    err
}

fn settle_with(b: &mut Bench, ixs: Vec<Instruction>) -> TransactionError {
    b.va_err(&ixs)
}

#[test]
fn success_settle_pays_provider_treasury_burn_and_emits_inputs() {
    let (mut b, job) = running();
    let supply = b.mint_supply(&b.payment_mint);
    let r = receipt(1, 60, T0 + 60);
    let logs = b.settle(job, r).unwrap().logs;
    let j = b.job_state(&job);
    assert_eq!((j.paid_seconds, j.last_seq, j.last_window_end, j.last_receipt_hash), (60, 1, T0 + 60, r.proof_hash));
    assert_eq!((j.paid_provider, j.paid_treasury, j.burned, j.status), (540, 30, 30, JobStatus::Running));
    assert_eq!(b.token_balance(&b.provider_owner.payment), 540);
    assert_eq!(b.token_balance(&b.fee_vault), 30);
    assert_eq!(b.mint_supply(&b.payment_mint), supply - 30);
    let m = b.market_state();
    assert_eq!((m.totals.fees, m.totals.burned), (60, 30));
    assert_eq!(b.validator_state().settlements, 1);
    assert_eq!(b.provider_state().reputation.verified_seconds, 60);
    assert_event(&logs, Settled {
        job, provider: b.provider, validator: b.validator, seq: 1, cumulative_seconds: 60, window_end: T0 + 60,
        proof_hash: r.proof_hash, claimed_seconds: 60, approved_seconds: 60, billed_seconds: 60, rate_per_second: 10,
        fee_bps: 1_000, burn_bps: 5_000, amount: 600, fee: 60, reward: 0, validator_reward_bps: 0, attesters: 1, burned: 30, to_provider: 540, to_treasury: 30,
        escrow_remaining: 9_400, exhausted: false,
    });
}

#[test]
fn success_settle_window_end_at_now_plus_skew() {
    let (mut b, job) = running();
    b.settle(job, receipt(1, 65, T0 + 65)).unwrap();
    assert_eq!(b.job_state(&job).paid_seconds, 65);
}

#[test]
fn fail_settle_window_end_beyond_skew() {
    let (mut b, job) = running();
    assert_eq!(settle_err(&mut b, job, receipt(1, 60, T0 + 66)), program_err(1, E::WindowEndInFuture));
}

#[test]
fn fail_settle_open_job() {
    let mut b = Bench::new();
    let (job, _) = b.open_job(1, 1, 10_000);
    b.advance(60);
    assert_eq!(settle_err(&mut b, job, receipt(1, 60, T0 + 60)), program_err(1, E::InvalidJobStatus));
}

#[test]
fn fail_settle_completed_job() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 600);
    b.advance(60);
    b.settle(job, receipt(1, 60, T0 + 60)).unwrap();
    b.advance(60);
    assert_eq!(settle_err(&mut b, job, receipt(2, 120, T0 + 120)), program_err(1, E::InvalidJobStatus));
}

#[test]
fn fail_settle_cumulative_decreased() {
    let (mut b, job) = running();
    b.settle(job, receipt(1, 60, T0 + 60)).unwrap();
    b.advance(60);
    assert_eq!(settle_err(&mut b, job, receipt(2, 59, T0 + 120)), program_err(1, E::CumulativeDecreased));
}

#[test]
fn fail_settle_window_not_after_last() {
    let (mut b, job) = running();
    b.settle(job, receipt(1, 60, T0 + 60)).unwrap();
    assert_eq!(settle_err(&mut b, job, receipt(2, 60, T0 + 60)), program_err(1, E::WindowNotAfterLast));
    // A zero-second receipt for a later window is fine (idle window).
    b.advance(1);
    b.settle(job, receipt(2, 60, T0 + 61)).unwrap();
}

#[test]
fn fail_settle_stale_sequence_after_gap() {
    let (mut b, job) = running();
    b.settle(job, receipt(5, 60, T0 + 60)).unwrap();
    b.advance(60);
    assert_eq!(settle_err(&mut b, job, receipt(4, 120, T0 + 120)), program_err(1, E::StaleSequence));
}

#[test]
fn success_finishing_job_final_receipt_at_grace_end() {
    let (mut b, job) = running();
    b.finish(job); // ended_at = T0 + 60; grace (10 + 2) windows
    b.set_time(T0 + 60 + 12 * 60);
    b.settle(job, receipt(1, 60, T0 + 60)).unwrap();
    assert_eq!(b.job_state(&job).paid_seconds, 60);
}

#[test]
fn fail_finishing_job_receipt_one_second_after_grace() {
    let (mut b, job) = running();
    b.finish(job);
    b.set_time(T0 + 60 + 12 * 60 + 1);
    assert_eq!(settle_err(&mut b, job, receipt(1, 60, T0 + 60)), program_err(1, E::SettlementGraceOver));
}

#[test]
fn fail_finishing_job_receipt_after_job_end() {
    let (mut b, job) = running();
    b.finish(job);
    b.advance(5);
    assert_eq!(settle_err(&mut b, job, receipt(1, 61, T0 + 61)), program_err(1, E::WindowAfterJobEnd));
}

#[test]
fn fail_settle_message_of_another_receipt() {
    let (mut b, job) = running();
    let r = receipt(1, 60, T0 + 60);
    let signed = b.receipt_digest(&job, &receipt(1, 61, T0 + 60));
    let ixs = vec![ed25519_ix(&b.worker, &signed), b.ix_settle(&b.validator_authority.pubkey(), job, r)];
    assert_eq!(settle_with(&mut b, ixs), program_err(1, E::ReceiptMessageMismatch));
}

#[test]
fn fail_settle_signature_over_the_full_receipt_message() {
    // The pre-digest format (the worker signing the 173-byte message itself) is refused: only
    // sha256 of the message is a receipt signature now.
    let (mut b, job) = running();
    let r = receipt(1, 60, T0 + 60);
    let full = r.message(&gpu_market::ID, &b.market, &job);
    let ixs = vec![ed25519_ix(&b.worker, &full), b.ix_settle(&b.validator_authority.pubkey(), job, r)];
    assert_eq!(settle_with(&mut b, ixs), program_err(1, E::ReceiptMessageMismatch));
}

fn hex32(s: &str) -> [u8; 32] {
    let v: Vec<u8> = (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect();
    v.try_into().expect("32 bytes")
}

/// `"key": "value"` of one vector object of `docs/vectors/receipt.json` (flat strings only).
fn field<'a>(obj: &'a str, key: &str) -> &'a str {
    let at = obj.find(&format!("\"{key}\": \"")).unwrap_or_else(|| panic!("no {key}")) + key.len() + 5;
    &obj[at..at + obj[at..].find('"').unwrap()]
}

#[test]
fn receipt_digest_and_attestation_match_the_shared_vectors() {
    // The SDK, the worker and the validator fast path sign and check these same bytes.
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/vectors/receipt.json")).unwrap();
    let vectors = &doc[doc.find("\"vectors\"").unwrap()..];
    let objs: Vec<&str> = vectors.split('{').skip(1).collect();
    assert!(objs.len() >= 5);
    for obj in objs {
        let r = gpu_market::Receipt {
            seq: field(obj, "seq").parse().unwrap(),
            cumulative_seconds: field(obj, "cumulative_seconds").parse().unwrap(),
            window_end: field(obj, "window_end").parse().unwrap(),
            proof_hash: hex32(field(obj, "proof_hash")),
        };
        let (program, market, job) = (
            Pubkey::new_from_array(hex32(field(obj, "program_id"))),
            Pubkey::new_from_array(hex32(field(obj, "market"))),
            Pubkey::new_from_array(hex32(field(obj, "job"))),
        );
        let digest = r.digest(&program, &market, &job);
        assert_eq!(digest, hex32(field(obj, "digest")), "{}", field(obj, "name"));
        let approved: u64 = field(obj, "approved_seconds").parse().unwrap();
        let att = gpu_market::receipt::attestation_message(&digest, approved);
        let hex: String = att.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, field(obj, "attestation"));
    }
}

#[test]
fn fail_settle_message_of_another_job() {
    let (mut b, job) = running();
    let (other, _) = b.open_job(2, 1, 10_000);
    let r = receipt(1, 60, T0 + 60);
    let ixs = vec![ed25519_ix(&b.worker, &b.receipt_digest(&other, &r)), b.ix_settle(&b.validator_authority.pubkey(), job, r)];
    assert_eq!(settle_with(&mut b, ixs), program_err(1, E::ReceiptMessageMismatch));
}

#[test]
fn fail_settle_without_ed25519_instruction() {
    let (mut b, job) = running();
    let settle = b.ix_settle(&b.validator_authority.pubkey(), job, receipt(1, 60, T0 + 60));
    assert_eq!(settle_with(&mut b, vec![settle.clone()]), program_err(0, E::MissingEd25519Instruction));
    // Something other than an Ed25519 instruction right before settle.
    let noop = gpum_localnet::solana_system_interface::instruction::transfer(&b.validator_authority.pubkey(), &b.user.key.pubkey(), 1);
    assert_eq!(settle_with(&mut b, vec![noop, settle]), program_err(1, E::MissingEd25519Instruction));
}

#[test]
fn fail_settle_ed25519_instruction_with_zero_signatures() {
    let (mut b, job) = running();
    let empty = Instruction { program_id: gpu_market::receipt::ED25519_PROGRAM_ID, accounts: vec![], data: vec![0, 0] };
    let ixs = vec![empty, b.ix_settle(&b.validator_authority.pubkey(), job, receipt(1, 60, T0 + 60))];
    assert_eq!(settle_with(&mut b, ixs), program_err(1, E::MalformedEd25519Instruction));
}

#[test]
fn fail_settle_ed25519_instruction_with_17_signatures() {
    let (mut b, job) = running();
    let r = receipt(1, 60, T0 + 60);
    let worker = b.worker.clone();
    let ixs = vec![ed25519_multi_ix(&[&worker; 17], &b.receipt_digest(&job, &r)), b.ix_settle(&b.validator_authority.pubkey(), job, r)];
    assert_eq!(settle_with(&mut b, ixs), program_err(1, E::MalformedEd25519Instruction));
}

#[test]
fn fail_settle_quorum_1_with_extra_signature() {
    let (mut b, job) = running();
    let r = receipt(1, 60, T0 + 60);
    let va = b.va_kp();
    let ixs = vec![ed25519_multi_ix(&[&b.worker.clone(), &signing_key(&va)], &b.receipt_digest(&job, &r)), b.ix_settle(&va.pubkey(), job, r)];
    assert_eq!(settle_with(&mut b, ixs), program_err(1, E::QuorumNotMet));
}

// ---- account constraints ----------------------------------------------------------------------

fn settle_ixs_swapped(b: &Bench, job: Pubkey, old: Pubkey, new: Pubkey) -> Vec<Instruction> {
    let mut ixs = b.settle_ixs(&b.worker.clone(), job, receipt(1, 60, T0 + 60));
    ixs[1] = swap_account(ixs[1].clone(), old, new);
    ixs
}

#[test]
fn fail_settle_payment_to_account_not_of_provider_owner() {
    let (mut b, job) = running();
    let ixs = settle_ixs_swapped(&b, job, b.provider_owner.payment, b.user.payment);
    assert_eq!(settle_with(&mut b, ixs), program_err(1, E::InvalidProviderPaymentAccount));
}

#[test]
fn fail_settle_payment_to_account_of_another_mint() {
    let (mut b, job) = running();
    let ixs = settle_ixs_swapped(&b, job, b.provider_owner.payment, b.provider_owner.stake);
    assert_eq!(settle_with(&mut b, ixs), program_err(1, E::InvalidMint));
    let ixs = settle_ixs_swapped(&b, job, b.payment_mint, b.stake_mint);
    assert_eq!(settle_with(&mut b, ixs), program_err(1, E::InvalidMint));
}

#[test]
fn fail_settle_fee_to_other_fee_vault() {
    let (mut b, job) = running();
    let fake = b.create_token_account(b.payment_mint, &b.validator_authority.pubkey());
    let ixs = settle_ixs_swapped(&b, job, b.fee_vault, fake);
    assert_eq!(settle_with(&mut b, ixs), program_err(1, E::InvalidFeeVault));
}

#[test]
fn fail_settle_validator_of_another_market() {
    let (mut b, job) = running();
    let other = b.second_market(1);
    let va = b.va_kp();
    let stake = b.validator_stake_account();
    b.mint_to(b.stake_mint, stake, 5_000);
    let elsewhere = b.register_validator_in(other, &Party { key: va, payment: Pubkey::default(), stake }, 5_000);
    let ixs = settle_ixs_swapped(&b, job, b.validator, elsewhere);
    assert_eq!(settle_with(&mut b, ixs), program_err(1, E::NotAValidator));
}

#[test]
fn fail_settle_job_of_another_provider() {
    let (mut b, job) = running();
    let (_, provider) = b.add_provider(&SigningKey::from_bytes(&[5u8; 32]), 4, 10, 0);
    let ixs = settle_ixs_swapped(&b, job, b.provider, provider);
    assert_eq!(settle_with(&mut b, ixs), program_err(1, E::JobProviderMismatch));
}

#[test]
fn fail_settle_provider_or_job_of_another_market() {
    let (mut b, job) = running();
    let other = b.second_market(1);
    let elsewhere = b.register_provider_in(other);
    // The validator belongs to the bench market: a foreign market fails the validator check first.
    let ixs = settle_ixs_swapped(&b, job, b.provider, elsewhere);
    assert_eq!(settle_with(&mut b, ixs), program_err(1, E::ProviderMarketMismatch));
}

// ---- quorum ----------------------------------------------------------------------------------

fn quorum_bench(q: u8) -> (Bench, Pubkey, Vec<(Keypair, Pubkey)>) {
    let (mut b, job, others) = Bench::with_quorum(q);
    b.advance(60);
    (b, job, others)
}

fn quorum_err(b: &mut Bench, job: Pubkey, attesters: &[&Keypair], validators: &[Pubkey]) -> TransactionError {
    let ixs = b.quorum_settle_ixs(job, receipt(1, 60, T0 + 60), attesters, validators);
    let err = b.va_err(&ixs);
    assert_eq!(b.job_state(&job).last_seq, 0);
    err
}

#[test]
fn success_settle_quorum_2_one_ed25519_instruction() {
    let (mut b, job, o) = quorum_bench(2);
    let ixs = b.quorum_settle_ixs(job, receipt(1, 60, T0 + 60), &[&o[0].0], &[o[0].1]);
    assert_eq!(ixs.len(), 2);
    b.as_va(&ixs);
    assert_eq!(b.job_state(&job).paid_seconds, 60);
    assert_eq!(b.validator_state().settlements, 1);
}

#[test]
fn success_settle_quorum_3_one_ed25519_instruction() {
    let (mut b, job, o) = quorum_bench(3);
    let ixs = b.quorum_settle_ixs(job, receipt(1, 60, T0 + 60), &[&o[0].0, &o[1].0], &[o[0].1, o[1].1]);
    b.as_va(&ixs);
    assert_eq!(b.job_state(&job).paid_seconds, 60);
}

#[test]
fn fail_settle_quorum_2_missing_attestation() {
    let (mut b, job, o) = quorum_bench(2);
    assert_eq!(quorum_err(&mut b, job, &[], &[o[0].1]), program_err(1, E::QuorumNotMet));
}

#[test]
fn fail_settle_quorum_2_missing_validator_account() {
    let (mut b, job, o) = quorum_bench(2);
    assert_eq!(quorum_err(&mut b, job, &[&o[0].0], &[]), program_err(1, E::QuorumNotMet));
}

#[test]
fn fail_settle_quorum_3_same_validator_twice() {
    let (mut b, job, o) = quorum_bench(3);
    assert_eq!(quorum_err(&mut b, job, &[&o[0].0, &o[0].0], &[o[0].1, o[0].1]), program_err(1, E::DuplicateValidator));
}

#[test]
fn fail_settle_quorum_2_submitter_attests_itself() {
    let (mut b, job, _) = quorum_bench(2);
    let va = b.va_kp();
    let own = b.validator;
    assert_eq!(quorum_err(&mut b, job, &[&va], &[own]), program_err(1, E::DuplicateValidator));
}

#[test]
fn fail_settle_quorum_2_attester_not_the_passed_validator() {
    let (mut b, job, o) = quorum_bench(2);
    assert_eq!(quorum_err(&mut b, job, &[&o[1].0], &[o[0].1]), program_err(1, E::NotAValidator));
}

/// An exiting member still attests for the committees it is in (its bond is still slashable).
#[test]
fn success_settle_quorum_2_attester_exiting() {
    let (mut b, job, o) = quorum_bench(2);
    let exit = b.ix_request_validator_exit(&o[0].0.pubkey());
    b.send(&[exit], &[&o[0].0]).unwrap();
    let ixs = b.quorum_settle_ixs(job, receipt(1, 60, T0 + 60), &[&o[0].0], &[o[0].1]);
    b.as_va(&ixs);
    assert_eq!(b.job_state(&job).paid_seconds, 60);
}

#[test]
fn fail_settle_quorum_2_attester_of_another_market() {
    let (mut b, job, _) = quorum_bench(2);
    let (stranger, elsewhere) = b.foreign_validator();
    assert_eq!(quorum_err(&mut b, job, &[&stranger.key], &[elsewhere]), program_err(1, E::NotAValidator));
}

#[test]
fn success_settle_with_quorum_3_fits_one_packet() {
    let (b, job, others) = Bench::with_quorum(3);
    let keys: Vec<&Keypair> = others.iter().map(|(k, _)| k).collect();
    let accounts: Vec<Pubkey> = others.iter().map(|(_, a)| *a).collect();
    let ixs = b.quorum_settle_ixs(job, receipt(1, 60, T0 + 60), &keys, &accounts);
    let va = b.validator_authority.insecure_clone();
    let size = wire_size(&ixs, &[&va]);
    assert!(size <= PACKET_DATA_SIZE, "quorum-3 settle transaction is {size} bytes");
}
