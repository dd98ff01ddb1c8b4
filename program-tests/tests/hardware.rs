//! attest_hardware: a quorum of validators records a hardware verdict on a provider; what
//! clears it (spec change, key rotation); and the packet size of the largest quorum.
mod common;

use anchor_lang::error::ErrorCode as AE;
use anchor_lang::prelude::Pubkey;
use common::*;
use ed25519_dalek::SigningKey;
use gpu_market::challenge::{attesters_hash, HardwareVerdictArgs};
use gpu_market::errors::GpuMarketError as E;
use gpu_market::events::HardwareAttested;
use gpu_market::state::{HardwareVerdict, MarketParams, MAX_HARDWARE_QUORUM};
use gpum_localnet::solana_instruction::Instruction;
use gpum_localnet::solana_keypair::Keypair;
use gpum_localnet::solana_signer::Signer;
use gpum_localnet::solana_transaction_error::TransactionError;

const DIGEST: [u8; 32] = [0x5c; 32];

/// A bench with `extra` more Active validators (bond 5_000); returns them with the bench's own
/// validator first, as (authority keypair, Validator account).
fn bench(extra: usize) -> (Bench, Vec<(Keypair, Pubkey)>) {
    let mut b = Bench::new();
    let mut validators = vec![(b.va_kp(), b.validator)];
    for _ in 0..extra {
        let (v, address) = b.add_validator(5_000);
        validators.push((v.key, address));
    }
    (b, validators)
}

/// The verdict the bench's provider passes: its worker key and declared spec, challenged 10 s ago.
fn verdict(b: &Bench, passed: bool) -> HardwareVerdictArgs {
    let spec = gpu_spec(4);
    HardwareVerdictArgs {
        worker_key: worker_pubkey(&b.worker),
        gpu_model: spec.gpu_model,
        gpu_count: spec.gpu_count,
        vram_mib: spec.vram_mib,
        passed,
        challenged_at: b.now - 10,
        challenge_digest: DIGEST,
    }
}

fn ix_attest(b: &Bench, submitter: &Pubkey, provider: Pubkey, verdict: HardwareVerdictArgs, validators: &[Pubkey]) -> Instruction {
    let mut ix = Bench::ix(
        gpu_market::instruction::AttestHardware { verdict },
        gpu_market::accounts::AttestHardware { submitter: *submitter, market: b.market, provider, instructions: INSTRUCTIONS_SYSVAR },
    );
    ix.accounts.extend(validators.iter().map(|v| meta(*v, false)));
    ix
}

/// [Ed25519(each signer over the verdict digest), attest_hardware with `accounts` as remaining].
fn attest_ixs(b: &Bench, submitter: &Pubkey, verdict: HardwareVerdictArgs, signers: &[&Keypair], accounts: &[Pubkey]) -> Vec<Instruction> {
    let digest = verdict.digest(&gpu_market::ID, &b.market, &b.provider);
    let keys: Vec<SigningKey> = signers.iter().map(|k| signing_key(k)).collect();
    vec![ed25519_multi_ix(&keys.iter().collect::<Vec<_>>(), &digest), ix_attest(b, submitter, b.provider, verdict, accounts)]
}

/// `attest_ixs` signed by the first `n` validators, their accounts in the same order.
fn quorum_ixs(b: &Bench, vs: &[(Keypair, Pubkey)], n: usize, verdict: HardwareVerdictArgs, submitter: &Pubkey) -> Vec<Instruction> {
    let signers: Vec<&Keypair> = vs[..n].iter().map(|(k, _)| k).collect();
    let accounts: Vec<Pubkey> = vs[..n].iter().map(|(_, a)| *a).collect();
    attest_ixs(b, submitter, verdict, &signers, &accounts)
}

/// Sends `ixs` paid by a fresh stranger and expects `err`; the provider's verdict is unchanged.
fn attest_err(b: &mut Bench, ixs: &[Instruction], err: TransactionError) {
    let before = b.provider_state().hardware;
    let stranger = b.new_party(0, 0);
    let ixs: Vec<Instruction> = ixs.iter().map(|ix| swap_submitter(ix, stranger.key.pubkey())).collect();
    assert_eq!(b.send_err(&ixs, &[&stranger.key]), err);
    assert_eq!(b.provider_state().hardware, before);
}

/// The same instruction with `submitter` as its first (submitter) account, when it is an
/// `attest_hardware`.
fn swap_submitter(ix: &Instruction, submitter: Pubkey) -> Instruction {
    let mut ix = ix.clone();
    if ix.program_id == gpu_market::ID {
        ix.accounts[0] = gpum_localnet::solana_instruction::AccountMeta::new_readonly(submitter, true);
    }
    ix
}

fn attest(b: &mut Bench, ixs: &[Instruction]) -> Vec<String> {
    let stranger = b.new_party(0, 0);
    let ixs: Vec<Instruction> = ixs.iter().map(|ix| swap_submitter(ix, stranger.key.pubkey())).collect();
    b.send(&ixs, &[&stranger.key]).unwrap().logs
}

// ---- success ---------------------------------------------------------------------------------

#[test]
fn success_attest_hardware_pass_records_the_verdict_and_its_attesters() {
    let (mut b, vs) = bench(1);
    b.advance(100);
    let stranger = b.new_party(0, 0);
    let v = verdict(&b, true);
    let ixs = quorum_ixs(&b, &vs, 2, v, &stranger.key.pubkey());
    let logs = b.send(&ixs, &[&stranger.key]).unwrap().logs;
    let authorities = vec![vs[0].0.pubkey(), vs[1].0.pubkey()];
    let p = b.provider_state();
    assert_eq!(p.hardware, HardwareVerdict {
        verified: true, passed: true, gpu_model: v.gpu_model, gpu_count: 4, vram_mib: 81_920, challenged_at: T0 + 90, attested_at: T0 + 100,
        challenge_digest: DIGEST, attesters: 2, attesters_hash: attesters_hash(&mut authorities.clone()),
    });
    assert_eq!(p.stake, 100_000, "a verdict moves no stake");
    assert_event(&logs, HardwareAttested {
        provider: b.provider, worker_key: v.worker_key, gpu_model: v.gpu_model, gpu_count: 4, vram_mib: 81_920, passed: true,
        challenged_at: T0 + 90, challenge_digest: DIGEST, attested_at: T0 + 100, attesters: authorities, submitter: stranger.key.pubkey(),
    });
}

#[test]
fn success_a_failing_verdict_marks_the_provider_unverified_and_slashes_nothing() {
    let (mut b, vs) = bench(2);
    b.advance(100);
    let ixs = quorum_ixs(&b, &vs, 2, verdict(&b, true), &b.validator_authority.pubkey());
    attest(&mut b, &ixs);
    b.advance(60);
    // The validators found 2 GPUs of 40 GiB: a failing verdict may name what they found.
    let failed = HardwareVerdictArgs { passed: false, gpu_count: 2, vram_mib: 40_960, challenged_at: b.now - 5, ..verdict(&b, false) };
    let ixs = quorum_ixs(&b, &vs, 3, failed, &b.validator_authority.pubkey());
    attest(&mut b, &ixs);
    let p = b.provider_state();
    assert_eq!((p.hardware.verified, p.hardware.passed, p.hardware.gpu_count, p.hardware.vram_mib, p.hardware.attesters), (false, false, 2, 40_960, 3));
    assert_eq!((p.stake, p.reputation.slashes, p.last_slash_at), (100_000, 0, 0), "timing is no evidence: no slash");
    assert_eq!(b.market_state().totals.slashed, 0);
}

#[test]
fn success_a_spec_change_or_a_key_rotation_clears_verified_a_region_change_does_not() {
    let (mut b, vs) = bench(1);
    b.advance(100);
    let ixs = quorum_ixs(&b, &vs, 2, verdict(&b, true), &b.validator_authority.pubkey());
    attest(&mut b, &ixs);
    let owner = b.provider_owner.key.pubkey();
    let mut spec = gpu_spec(4);
    spec.region = [b'x'; 16];
    b.as_owner(&[b.ix_update_provider(&owner, gpu_market::instructions::UpdateProviderArgs { spec: Some(spec), ..no_update() })]);
    assert!(b.provider_state().hardware.verified, "the region is not measured");
    spec.vram_mib += 1;
    b.as_owner(&[b.ix_update_provider(&owner, gpu_market::instructions::UpdateProviderArgs { spec: Some(spec), ..no_update() })]);
    let h = b.provider_state().hardware;
    assert!(!h.verified && h.passed, "another VRAM needs a new challenge; the verdict said pass");

    // Back to the attested spec, a new verdict; then a rotation clears it.
    b.as_owner(&[b.ix_update_provider(&owner, gpu_market::instructions::UpdateProviderArgs { spec: Some(gpu_spec(4)), ..no_update() })]);
    assert!(!b.provider_state().hardware.verified, "returning to the spec does not restore a cleared verdict");
    b.advance(10);
    let ixs = quorum_ixs(&b, &vs, 2, verdict(&b, true), &b.validator_authority.pubkey());
    attest(&mut b, &ixs);
    assert!(b.provider_state().hardware.verified);
    b.as_owner(&[b.ix_rotate_worker_key(&owner, Pubkey::new_unique(), 0)]);
    assert!(!b.provider_state().hardware.verified, "the verdict was about the old key's machine");
}

#[test]
fn success_hardware_quorum_from_the_parameters_in_force() {
    let (mut b, vs) = bench(2);
    let params = MarketParams { hardware_quorum: 3, ..default_params() };
    b.as_admin(&[b.ix_update_params(&b.admin.pubkey(), params)]);
    b.advance(default_params().unbonding_seconds);
    let two = quorum_ixs(&b, &vs, 2, verdict(&b, true), &b.validator_authority.pubkey());
    attest_err(&mut b, &two, program_err(1, E::HardwareQuorumNotMet));
    let ixs = quorum_ixs(&b, &vs, 3, verdict(&b, true), &b.validator_authority.pubkey());
    attest(&mut b, &ixs);
    assert_eq!(b.provider_state().hardware.attesters, 3);
}

#[test]
fn success_challenge_age_edges_are_inclusive() {
    let (mut b, vs) = bench(1);
    b.advance(10_000);
    let skew = i64::from(default_params().max_skew_seconds);
    let oldest = HardwareVerdictArgs { challenged_at: b.now - 3_600, ..verdict(&b, true) };
    let ixs = quorum_ixs(&b, &vs, 2, oldest, &b.validator_authority.pubkey());
    attest(&mut b, &ixs);
    let newest = HardwareVerdictArgs { challenged_at: b.now + skew, ..verdict(&b, true) };
    let ixs = quorum_ixs(&b, &vs, 2, newest, &b.validator_authority.pubkey());
    attest(&mut b, &ixs);
    assert_eq!(b.provider_state().hardware.challenged_at, b.now + skew);
}

#[test]
fn the_largest_hardware_quorum_fits_one_legacy_transaction() {
    let n = usize::from(MAX_HARDWARE_QUORUM);
    let (b, vs) = bench(n - 1);
    let ixs = quorum_ixs(&b, &vs, n, verdict(&b, true), &b.validator_authority.pubkey());
    let size = wire_size(&ixs, &[&b.va_kp()]);
    assert!(size <= PACKET_DATA_SIZE, "{n} attesters: {size} bytes");
    let (b, vs) = bench(n);
    let ixs = quorum_ixs(&b, &vs, n + 1, verdict(&b, true), &b.validator_authority.pubkey());
    assert!(wire_size(&ixs, &[&b.va_kp()]) > PACKET_DATA_SIZE, "one more would not fit");
}

// ---- one failure per rule --------------------------------------------------------------------

#[test]
fn fail_attest_hardware_another_worker_key() {
    let (mut b, vs) = bench(1);
    let v = HardwareVerdictArgs { worker_key: Pubkey::new_unique(), ..verdict(&b, true) };
    let ixs = quorum_ixs(&b, &vs, 2, v, &b.validator_authority.pubkey());
    attest_err(&mut b, &ixs, program_err(1, E::HardwareWorkerKeyMismatch));
}

#[test]
fn fail_attest_hardware_a_pass_for_another_spec() {
    let (mut b, vs) = bench(1);
    for v in [
        HardwareVerdictArgs { gpu_count: 8, ..verdict(&b, true) },
        HardwareVerdictArgs { vram_mib: 40_960, ..verdict(&b, true) },
        HardwareVerdictArgs { gpu_model: [b'A'; 32], ..verdict(&b, true) },
    ] {
        let ixs = quorum_ixs(&b, &vs, 2, v, &b.validator_authority.pubkey());
        attest_err(&mut b, &ixs, program_err(1, E::HardwareSpecMismatch));
    }
}

#[test]
fn fail_attest_hardware_challenge_in_the_future() {
    let (mut b, vs) = bench(1);
    let v = HardwareVerdictArgs { challenged_at: b.now + i64::from(default_params().max_skew_seconds) + 1, ..verdict(&b, true) };
    let ixs = quorum_ixs(&b, &vs, 2, v, &b.validator_authority.pubkey());
    attest_err(&mut b, &ixs, program_err(1, E::HardwareChallengeInFuture));
}

#[test]
fn fail_attest_hardware_stale_challenge() {
    let (mut b, vs) = bench(1);
    b.advance(10_000);
    let v = HardwareVerdictArgs { challenged_at: b.now - 3_601, ..verdict(&b, true) };
    let ixs = quorum_ixs(&b, &vs, 2, v, &b.validator_authority.pubkey());
    attest_err(&mut b, &ixs, program_err(1, E::HardwareVerdictStale));
}

#[test]
fn fail_attest_hardware_replayed_or_older_verdict() {
    let (mut b, vs) = bench(1);
    b.advance(100);
    let pass = verdict(&b, true);
    let ixs = quorum_ixs(&b, &vs, 2, pass, &b.validator_authority.pubkey());
    attest(&mut b, &ixs);
    b.advance(30);
    // The same verdict again, and an older failing one, are both refused.
    let again = quorum_ixs(&b, &vs, 2, pass, &b.validator_authority.pubkey());
    attest_err(&mut b, &again, program_err(1, E::HardwareVerdictReplayed));
    let older = HardwareVerdictArgs { challenged_at: pass.challenged_at - 1, ..verdict(&b, false) };
    let ixs = quorum_ixs(&b, &vs, 2, older, &b.validator_authority.pubkey());
    attest_err(&mut b, &ixs, program_err(1, E::HardwareVerdictReplayed));
}

#[test]
fn fail_attest_hardware_below_quorum_or_accounts_not_matching_signatures() {
    let (mut b, vs) = bench(1);
    let v = verdict(&b, true);
    let one = quorum_ixs(&b, &vs, 1, v, &b.validator_authority.pubkey());
    attest_err(&mut b, &one, program_err(1, E::HardwareQuorumNotMet));
    let missing_account = attest_ixs(&b, &b.validator_authority.pubkey(), v, &[&vs[0].0, &vs[1].0], &[vs[0].1]);
    attest_err(&mut b, &missing_account, program_err(1, E::HardwareQuorumNotMet));
}

#[test]
fn fail_attest_hardware_signatures_over_another_verdict() {
    let (mut b, vs) = bench(1);
    let mut ixs = quorum_ixs(&b, &vs, 2, verdict(&b, true), &b.validator_authority.pubkey());
    // The validators signed a pass; the instruction claims a pass for another challenge.
    let claimed = HardwareVerdictArgs { challenge_digest: [1; 32], ..verdict(&b, true) };
    ixs[1] = ix_attest(&b, &b.validator_authority.pubkey(), b.provider, claimed, &[vs[0].1, vs[1].1]);
    attest_err(&mut b, &ixs, program_err(1, E::HardwareVerdictMismatch));
}

#[test]
fn fail_attest_hardware_not_a_validator_of_this_market() {
    let (mut b, vs) = bench(1);
    let (foreign, elsewhere) = b.foreign_validator();
    let v = verdict(&b, true);
    let ixs = attest_ixs(&b, &b.validator_authority.pubkey(), v, &[&vs[0].0, &foreign.key], &[vs[0].1, elsewhere]);
    attest_err(&mut b, &ixs, program_err(1, E::NotAValidator));
    // A stranger's signature with a validator's account: not that validator's authority.
    let stranger = Keypair::new();
    let ixs = attest_ixs(&b, &b.validator_authority.pubkey(), v, &[&vs[0].0, &stranger], &[vs[0].1, vs[1].1]);
    attest_err(&mut b, &ixs, program_err(1, E::NotAValidator));
}

#[test]
fn fail_attest_hardware_an_exiting_validator() {
    let (mut b, vs) = bench(1);
    b.send(&[b.ix_request_validator_exit(&vs[1].0.pubkey())], &[&vs[1].0]).unwrap();
    let ixs = quorum_ixs(&b, &vs, 2, verdict(&b, true), &b.validator_authority.pubkey());
    attest_err(&mut b, &ixs, program_err(1, E::ValidatorNotActive));
}

#[test]
fn fail_attest_hardware_a_validator_below_the_bond_in_force() {
    let (mut b, vs) = bench(1);
    let params = MarketParams { validator_min_bond: 5_001, ..default_params() };
    b.as_admin(&[b.ix_update_params(&b.admin.pubkey(), params)]);
    b.advance(default_params().unbonding_seconds);
    let ixs = quorum_ixs(&b, &vs, 2, verdict(&b, true), &b.validator_authority.pubkey());
    attest_err(&mut b, &ixs, program_err(1, E::BondTooSmall));
}

#[test]
fn fail_attest_hardware_by_the_provider_itself() {
    let (mut b, vs) = bench(0);
    let owner = Party { key: b.owner_kp(), payment: b.provider_owner.payment, stake: b.provider_owner.stake };
    b.send(&[b.ix_register_validator(&owner.key.pubkey(), owner.stake, 5_000)], &[&owner.key]).unwrap();
    let own = b.validator_address(&owner.key.pubkey());
    let ixs = attest_ixs(&b, &b.validator_authority.pubkey(), verdict(&b, true), &[&vs[0].0, &owner.key], &[vs[0].1, own]);
    attest_err(&mut b, &ixs, program_err(1, E::HardwareAttesterIsProvider));
}

#[test]
fn fail_attest_hardware_one_validator_twice() {
    let (mut b, vs) = bench(1);
    let ixs = attest_ixs(&b, &b.validator_authority.pubkey(), verdict(&b, true), &[&vs[0].0, &vs[0].0], &[vs[0].1, vs[0].1]);
    attest_err(&mut b, &ixs, program_err(1, E::DuplicateValidator));
}

#[test]
fn fail_attest_hardware_provider_of_another_market() {
    let (mut b, vs) = bench(1);
    let other = b.second_market(1);
    let elsewhere = b.register_provider_in(other);
    let v = verdict(&b, true);
    let digest = v.digest(&gpu_market::ID, &b.market, &elsewhere);
    let keys = [signing_key(&vs[0].0), signing_key(&vs[1].0)];
    let ixs = vec![ed25519_multi_ix(&[&keys[0], &keys[1]], &digest), ix_attest(&b, &b.validator_authority.pubkey(), elsewhere, v, &[vs[0].1, vs[1].1])];
    attest_err(&mut b, &ixs, program_err(1, E::ProviderMarketMismatch));
}

#[test]
fn fail_attest_hardware_without_signatures_or_with_a_fake_sysvar() {
    let (mut b, vs) = bench(1);
    let ixs = quorum_ixs(&b, &vs, 2, verdict(&b, true), &b.validator_authority.pubkey());
    attest_err(&mut b, &ixs[1..], program_err(0, E::MissingEd25519Instruction));
    let fake = swap_account(ixs[1].clone(), INSTRUCTIONS_SYSVAR, Pubkey::new_unique());
    attest_err(&mut b, &[ixs[0].clone(), fake], program_err(1, E::InvalidInstructionsSysvar));
}

#[test]
fn fail_attest_hardware_a_job_in_place_of_a_validator() {
    let (mut b, vs) = bench(1);
    let (job, _) = b.running_job(1, 1, 10_000);
    let mut ixs = quorum_ixs(&b, &vs, 2, verdict(&b, true), &b.validator_authority.pubkey());
    ixs[1] = swap_account(ixs[1].clone(), vs[1].1, job);
    attest_err(&mut b, &ixs, anchor_err(1, AE::AccountDiscriminatorMismatch));
}

#[test]
fn fail_attest_hardware_submitter_not_signing() {
    let (mut b, vs) = bench(1);
    let stranger = b.new_party(0, 0);
    let ixs = quorum_ixs(&b, &vs, 2, verdict(&b, true), &b.validator_authority.pubkey());
    let unsigned = vec![ixs[0].clone(), unsign(ixs[1].clone(), b.validator_authority.pubkey())];
    assert_eq!(b.send_err(&unsigned, &[&stranger.key]), anchor_err(1, AE::AccountNotSigner));
}
