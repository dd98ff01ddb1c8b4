//! slash_wrong_answer: a worker's signed challenge row whose Merkle path misses the root the
//! same worker signed is slashable; a consistent one, a malformed one, or one signed by another
//! key is not. Also the byte vectors of the challenge messages the SDK shares.
mod common;

use anchor_lang::error::ErrorCode as AE;
use anchor_lang::prelude::Pubkey;
use common::*;
use ed25519_dalek::SigningKey;
use gpu_market::challenge::{root_from_proof, HardwareVerdictArgs, WrongAnswerEvidence};
use gpu_market::errors::GpuMarketError as E;
use gpu_market::events::WrongAnswerSlashed;
use gpu_market::seeds;
use gpu_market::state::{HardwareVerdict, WrongAnswerRecord};
use gpum_localnet::solana_instruction::Instruction;
use gpum_localnet::solana_keypair::Keypair;
use gpum_localnet::solana_signer::Signer;
use gpum_localnet::solana_transaction_error::TransactionError;

const STAKED: u64 = 100_000;
const CHALLENGE: [u8; 32] = [0xc4; 32];

fn leaf(i: u8) -> [u8; 32] {
    [i.wrapping_add(1); 32]
}

/// `sha256(NODE_DOMAIN || a || b)`, through the program's own path rule (a two-leaf tree).
fn node(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    root_from_proof(a, 0, 2, &[*b]).unwrap()
}

/// The tree over leaves 0..5: [L0..L4] -> [n01, n23, L4] -> [n0123, L4] -> root.
fn root5() -> [u8; 32] {
    node(&node(&node(&leaf(0), &leaf(1)), &node(&leaf(2), &leaf(3))), &leaf(4))
}

/// Row 2's path: L3, n01, L4.
fn path2() -> Vec<[u8; 32]> {
    vec![leaf(3), node(&leaf(0), &leaf(1)), leaf(4)]
}

/// Row 2 opened with `leaf` (the committed one is `leaf(2)`), challenged at `at`.
fn evidence(leaf_hash: [u8; 32], at: i64) -> WrongAnswerEvidence {
    WrongAnswerEvidence {
        challenge_digest: CHALLENGE,
        challenged_at: at,
        root: root5(),
        leaf_count: 5,
        row_index: 2,
        leaf_hash,
        siblings: path2(),
    }
}

fn record(provider: &Pubkey, digest: &[u8; 32]) -> Pubkey {
    pda(&[seeds::WRONG_ANSWER, provider.as_ref(), digest])
}

fn ix_slash(b: &Bench, reporter: &Pubkey, provider: Pubkey, e: &WrongAnswerEvidence) -> Instruction {
    Bench::ix(
        gpu_market::instruction::SlashWrongAnswer { evidence: e.clone() },
        gpu_market::accounts::SlashWrongAnswer {
            reporter: *reporter,
            market: b.market,
            provider,
            stake_mint: b.stake_mint,
            stake_vault: b.stake_vault,
            record: record(&provider, &e.challenge_digest),
            instructions: INSTRUCTIONS_SYSVAR,
            token_program: TOKEN_PROGRAM,
            system_program: SYSTEM_PROGRAM,
        },
    )
}

/// [Ed25519(answer by `answer`, row by `row`), slash_wrong_answer] for the bench provider.
fn slash_ixs(b: &Bench, answer: &SigningKey, row: &SigningKey, reporter: &Pubkey, e: &WrongAnswerEvidence) -> Vec<Instruction> {
    let a = e.answer_digest(&gpu_market::ID, &b.market, &b.provider);
    let r = e.row_digest(&gpu_market::ID, &b.market, &b.provider);
    vec![ed25519_entries_ix(&[(answer, &a), (row, &r)]), ix_slash(b, reporter, b.provider, e)]
}

fn reporter(b: &mut Bench) -> Keypair {
    b.new_party(0, 0).key
}

fn slash_err(b: &mut Bench, ixs: &[Instruction], err: TransactionError) {
    let r = reporter(b);
    let ixs: Vec<Instruction> = ixs.iter().map(|ix| swap_reporter(ix, r.pubkey())).collect();
    assert_eq!(b.send_err(&ixs, &[&r]), err);
    let p = b.provider_state();
    assert_eq!((p.stake, p.reputation.slashes, p.last_slash_at), (STAKED, 0, 0));
}

fn swap_reporter(ix: &Instruction, reporter: Pubkey) -> Instruction {
    let mut ix = ix.clone();
    if ix.program_id == gpu_market::ID {
        ix.accounts[0] = gpum_localnet::solana_instruction::AccountMeta::new(reporter, true);
    }
    ix
}

/// The bench provider verified by the bench validator and a second one (hardware_quorum 2).
fn verified_bench() -> Bench {
    let mut b = Bench::new();
    let (v, account) = b.add_validator(5_000);
    b.advance(100);
    let spec = gpu_spec(4);
    let verdict = HardwareVerdictArgs {
        worker_key: worker_pubkey(&b.worker), gpu_model: spec.gpu_model, gpu_count: 4, vram_mib: spec.vram_mib,
        passed: true, challenged_at: b.now - 10, challenge_digest: [9; 32],
    };
    let digest = verdict.digest(&gpu_market::ID, &b.market, &b.provider);
    let keys = [signing_key(&b.va_kp()), signing_key(&v.key)];
    let mut attest = Bench::ix(
        gpu_market::instruction::AttestHardware { verdict },
        gpu_market::accounts::AttestHardware { submitter: b.validator_authority.pubkey(), market: b.market, provider: b.provider, instructions: INSTRUCTIONS_SYSVAR },
    );
    attest.accounts.extend([meta(b.validator, false), meta(account, false)]);
    b.as_va(&[ed25519_multi_ix(&[&keys[0], &keys[1]], &digest), attest]);
    assert!(b.provider_state().hardware.verified);
    b
}

// ---- success ---------------------------------------------------------------------------------

#[test]
fn success_slash_wrong_answer_burns_clears_verified_and_records_once() {
    let mut b = verified_bench();
    b.advance(50);
    let supply = b.mint_supply(&b.stake_mint);
    let r = reporter(&mut b);
    let e = evidence([0xEE; 32], b.now - 20);
    let ixs = slash_ixs(&b, &b.worker, &b.worker, &r.pubkey(), &e);
    let logs = b.send(&ixs, &[&r]).unwrap().logs;
    let slashed = 50_000; // equivocation_slash_bps 5000 of 100_000, no reporter reward
    assert_eq!(b.mint_supply(&b.stake_mint), supply - slashed);
    let p = b.provider_state();
    assert_eq!((p.stake, p.reputation.slashes, p.last_slash_at), (STAKED - slashed, 1, b.now));
    assert_eq!(p.hardware, HardwareVerdict { verified: false, ..p.hardware });
    assert_eq!((p.hardware.passed, p.hardware.gpu_count), (true, 4), "the verdict's facts stay; only verified is cleared");
    assert_eq!(p.status, gpu_market::state::ProviderStatus::Active, "not jailed");
    let m = b.market_state();
    assert_eq!((m.totals.staked, m.totals.slashed), (STAKED - slashed, slashed));
    let rec: WrongAnswerRecord = b.account(&record(&b.provider, &CHALLENGE)).unwrap();
    assert_eq!((rec.provider, rec.challenge_digest, rec.reporter, rec.slashed), (b.provider, CHALLENGE, r.pubkey(), slashed));
    let computed = root_from_proof(&[0xEE; 32], 2, 5, &path2()).unwrap();
    let worker = worker_pubkey(&b.worker);
    assert_event(&logs, WrongAnswerSlashed {
        provider: b.provider, challenge_digest: CHALLENGE, challenged_at: b.now - 20, root: root5(), row_index: 2,
        leaf_hash: [0xEE; 32], computed_root: computed, answer_signer: worker, row_signer: worker, reporter: r.pubkey(),
        slash_bps: 5_000, slashed, burned: slashed,
    });
    // Another contradicting row of the same challenge: one incident, one slash.
    let mut e2 = evidence([0xDD; 32], b.now - 20);
    e2.row_index = 3;
    e2.siblings = vec![leaf(2), node(&leaf(0), &leaf(1)), leaf(4)];
    let ixs = slash_ixs(&b, &b.worker, &b.worker, &r.pubkey(), &e2);
    assert_eq!(b.send_err(&ixs, &[&r]), custom(1, 0), "SystemError::AccountAlreadyInUse");
    assert_eq!(b.provider_state().stake, STAKED - slashed);
}

#[test]
fn success_slash_wrong_answer_signed_by_a_retired_key_for_a_challenge_before_its_retirement() {
    let mut b = Bench::new();
    b.advance(100);
    let challenged_at = b.now - 10;
    let owner = b.provider_owner.key.pubkey();
    b.as_owner(&[b.ix_rotate_worker_key(&owner, Pubkey::new_unique(), 0)]);
    b.advance(1_000);
    let r = reporter(&mut b);
    let ixs = slash_ixs(&b, &b.worker, &b.worker, &r.pubkey(), &evidence([0xEE; 32], challenged_at));
    b.send(&ixs, &[&r]).unwrap();
    assert_eq!(b.provider_state().stake, STAKED - 50_000);
}

#[test]
fn success_slash_wrong_answer_reaches_unbonding_stake() {
    let mut b = Bench::new();
    b.as_owner(&[b.ix_request_unstake(&b.provider_owner.key.pubkey(), 90_000)]);
    let r = reporter(&mut b);
    let ixs = slash_ixs(&b, &b.worker, &b.worker, &r.pubkey(), &evidence([0xEE; 32], b.now));
    b.send(&ixs, &[&r]).unwrap();
    let p = b.provider_state();
    // 50_000 of 100_000: the 10_000 of stake first, then 40_000 of the unbonding.
    assert_eq!((p.stake, p.unbonding.amount), (0, 50_000));
}

// ---- one failure per rule --------------------------------------------------------------------

#[test]
fn fail_slash_wrong_answer_a_consistent_answer() {
    let mut b = Bench::new();
    let e = evidence(leaf(2), b.now);
    let ixs = slash_ixs(&b, &b.worker, &b.worker, &b.user.key.pubkey(), &e);
    slash_err(&mut b, &ixs, program_err(1, E::NotAWrongAnswer));
}

#[test]
fn fail_slash_wrong_answer_malformed_paths() {
    let mut b = Bench::new();
    let good = evidence([0xEE; 32], b.now);
    let short = WrongAnswerEvidence { siblings: path2()[..2].to_vec(), ..good.clone() };
    let long = WrongAnswerEvidence { siblings: [path2(), vec![leaf(9)]].concat(), ..good.clone() };
    let past_end = WrongAnswerEvidence { row_index: 5, ..good.clone() };
    let no_leaves = WrongAnswerEvidence { leaf_count: 0, row_index: 0, ..good.clone() };
    let too_many = WrongAnswerEvidence { leaf_count: (1 << 15) + 1, ..good };
    for e in [short, long, past_end, no_leaves, too_many] {
        let ixs = slash_ixs(&b, &b.worker, &b.worker, &b.user.key.pubkey(), &e);
        slash_err(&mut b, &ixs, program_err(1, E::InvalidMerkleEvidence));
    }
}

#[test]
fn fail_slash_wrong_answer_signed_by_another_key() {
    let mut b = Bench::new();
    let e = evidence([0xEE; 32], b.now);
    let stranger = SigningKey::from_bytes(&[42; 32]);
    for (answer, row) in [(&stranger, &b.worker.clone()), (&b.worker.clone(), &stranger)] {
        let ixs = slash_ixs(&b, answer, row, &b.user.key.pubkey(), &e);
        slash_err(&mut b, &ixs, program_err(1, E::WrongChallengeSigner));
    }
}

#[test]
fn fail_slash_wrong_answer_retired_key_for_a_challenge_after_its_retirement() {
    let mut b = Bench::new();
    let owner = b.provider_owner.key.pubkey();
    b.as_owner(&[b.ix_rotate_worker_key(&owner, Pubkey::new_unique(), 0)]);
    let e = evidence([0xEE; 32], b.now + 1);
    let ixs = slash_ixs(&b, &b.worker, &b.worker, &b.user.key.pubkey(), &e);
    slash_err(&mut b, &ixs, program_err(1, E::WrongChallengeSigner));
}

#[test]
fn fail_slash_wrong_answer_signatures_over_other_messages() {
    let mut b = Bench::new();
    let e = evidence([0xEE; 32], b.now);
    let (a, r) = (e.answer_digest(&gpu_market::ID, &b.market, &b.provider), e.row_digest(&gpu_market::ID, &b.market, &b.provider));
    // Swapped entries.
    let ixs = vec![ed25519_entries_ix(&[(&b.worker, &r), (&b.worker, &a)]), ix_slash(&b, &b.user.key.pubkey(), b.provider, &e)];
    slash_err(&mut b, &ixs, program_err(1, E::ChallengeMessageMismatch));
    // Signed a consistent row; the instruction claims another leaf.
    let honest = evidence(leaf(2), b.now);
    let mut ixs = slash_ixs(&b, &b.worker, &b.worker, &b.user.key.pubkey(), &honest);
    ixs[1] = ix_slash(&b, &b.user.key.pubkey(), b.provider, &e);
    slash_err(&mut b, &ixs, program_err(1, E::ChallengeMessageMismatch));
}

#[test]
fn fail_slash_wrong_answer_not_exactly_two_signatures() {
    let mut b = Bench::new();
    let e = evidence([0xEE; 32], b.now);
    let a = e.answer_digest(&gpu_market::ID, &b.market, &b.provider);
    let ixs = vec![ed25519_entries_ix(&[(&b.worker, &a)]), ix_slash(&b, &b.user.key.pubkey(), b.provider, &e)];
    slash_err(&mut b, &ixs, program_err(1, E::MalformedEd25519Instruction));
    let ixs = slash_ixs(&b, &b.worker, &b.worker, &b.user.key.pubkey(), &e);
    slash_err(&mut b, &ixs[1..], program_err(0, E::MissingEd25519Instruction));
}

#[test]
fn fail_slash_wrong_answer_from_the_future() {
    let mut b = Bench::new();
    let skew = i64::from(default_params().max_skew_seconds);
    let e = evidence([0xEE; 32], b.now + skew + 1);
    let ixs = slash_ixs(&b, &b.worker, &b.worker, &b.user.key.pubkey(), &e);
    slash_err(&mut b, &ixs, program_err(1, E::EvidenceFromTheFuture));
}

#[test]
fn fail_slash_wrong_answer_accounts_of_another_market_or_mint() {
    let mut b = Bench::new();
    let e = evidence([0xEE; 32], b.now);
    let ixs = slash_ixs(&b, &b.worker, &b.worker, &b.user.key.pubkey(), &e);
    let other = b.second_market(1);
    let elsewhere = b.register_provider_in(other);
    let moved = swap_account(swap_account(ixs[1].clone(), b.provider, elsewhere), record(&b.provider, &CHALLENGE), record(&elsewhere, &CHALLENGE));
    slash_err(&mut b, &[ixs[0].clone(), moved], program_err(1, E::ProviderMarketMismatch));
    let wrong_mint = swap_account(ixs[1].clone(), b.stake_mint, b.payment_mint);
    slash_err(&mut b, &[ixs[0].clone(), wrong_mint], program_err(1, E::InvalidMint));
    let other_vault = pda(&[seeds::STAKE_VAULT, other.as_ref()]);
    let wrong_vault = swap_account(ixs[1].clone(), b.stake_vault, other_vault);
    slash_err(&mut b, &[ixs[0].clone(), wrong_vault], program_err(1, E::InvalidStakeVault));
}

#[test]
fn fail_slash_wrong_answer_reporter_not_signing() {
    let mut b = Bench::new();
    let stranger = b.new_party(0, 0);
    let e = evidence([0xEE; 32], b.now);
    let ixs = slash_ixs(&b, &b.worker, &b.worker, &b.user.key.pubkey(), &e);
    let unsigned = vec![ixs[0].clone(), unsign(ixs[1].clone(), b.user.key.pubkey())];
    assert_eq!(b.send_err(&unsigned, &[&stranger.key]), anchor_err(1, AE::AccountNotSigner));
}

// ---- byte vectors shared with the SDK (clients/py/tests/test_hardware.py) -------------------

#[test]
fn challenge_message_vectors() {
    let (program, market, provider) = (gpu_market::ID, Pubkey::new_from_array([1; 32]), Pubkey::new_from_array([2; 32]));
    let mut gpu_model = [0u8; 32];
    gpu_model[..4].copy_from_slice(b"H100");
    let verdict = HardwareVerdictArgs {
        worker_key: Pubkey::new_from_array([3; 32]), gpu_model, gpu_count: 8, vram_mib: 81_559, passed: true,
        challenged_at: 1_750_000_000, challenge_digest: [4; 32],
    };
    let e = WrongAnswerEvidence {
        challenge_digest: [4; 32], challenged_at: 1_750_000_000, root: [5; 32], leaf_count: 5, row_index: 2,
        leaf_hash: [6; 32], siblings: vec![[7; 32], [8; 32], [9; 32]],
    };
    let hex = |b: [u8; 32]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    assert_eq!(hex(verdict.digest(&program, &market, &provider)), VERDICT_DIGEST);
    assert_eq!(hex(e.answer_digest(&program, &market, &provider)), ANSWER_DIGEST);
    assert_eq!(hex(e.row_digest(&program, &market, &provider)), ROW_DIGEST);
    assert_eq!(hex(e.computed_root().unwrap()), PATH_ROOT);
}

fn hex32(v: &serde_json::Value) -> [u8; 32] {
    let s = v.as_str().expect("hex string");
    std::array::from_fn(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
}

fn int(v: &serde_json::Value) -> i64 {
    v.as_i64().or_else(|| v.as_str().and_then(|s| s.parse().ok())).expect("integer")
}

/// `docs/vectors/challenge.json`, written from the SDK's `gpu_market.challenge_messages`: the
/// program computes the same digests (and, for rows, the same roots) from the same fields.
#[test]
fn sdk_challenge_vectors_match_the_program() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/vectors/challenge.json");
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let key = |name: &str| Pubkey::new_from_array(hex32(&doc[name]));
    let (program, market, provider) = (key("program_id"), key("market"), key("provider"));
    let answers = doc["answers"].as_array().unwrap();
    let rows = doc["rows"].as_array().unwrap();
    let verdicts = doc["hardware"].as_array().unwrap();
    assert!(!answers.is_empty() && !rows.is_empty() && !verdicts.is_empty());
    for a in answers {
        let e = WrongAnswerEvidence {
            challenge_digest: hex32(&a["challenge_digest"]), challenged_at: int(&a["challenged_at"]), root: hex32(&a["root"]),
            leaf_count: 1, row_index: 0, leaf_hash: [0; 32], siblings: vec![],
        };
        assert_eq!(e.answer_digest(&program, &market, &provider), hex32(&a["digest"]), "{}", a["name"]);
    }
    let mut wrong = 0;
    for r in rows {
        let e = WrongAnswerEvidence {
            challenge_digest: hex32(&r["challenge_digest"]), challenged_at: 0, root: hex32(&r["root"]),
            leaf_count: int(&r["leaf_count"]) as u32, row_index: int(&r["row_index"]) as u32, leaf_hash: hex32(&r["leaf_hash"]),
            siblings: r["siblings"].as_array().unwrap().iter().map(hex32).collect(),
        };
        assert_eq!(e.row_digest(&program, &market, &provider), hex32(&r["digest"]), "{}", r["name"]);
        let computed = e.computed_root().expect("well-formed path");
        match r.get("computed_root") {
            Some(c) => {
                assert_eq!(computed, hex32(c), "{}", r["name"]);
                assert_ne!(computed, e.root, "{}: a wrong answer misses its root", r["name"]);
                wrong += 1;
            }
            None => assert_eq!(computed, e.root, "{}", r["name"]),
        }
    }
    assert!(wrong > 0, "the vectors hold a wrong answer");
    for v in verdicts {
        let verdict = HardwareVerdictArgs {
            worker_key: Pubkey::new_from_array(hex32(&v["worker_key"])), gpu_model: hex32(&v["gpu_model_hex"]),
            gpu_count: int(&v["gpu_count"]) as u16, vram_mib: int(&v["vram_mib"]) as u32, passed: v["passed"].as_bool().unwrap(),
            challenged_at: int(&v["challenged_at"]), challenge_digest: hex32(&v["challenge_digest"]),
        };
        assert_eq!(verdict.digest(&program, &market, &provider), hex32(&v["digest"]), "{}", v["name"]);
    }
}

/// Computed by `gpu_market.hardware` (the SDK); `clients/py/tests/test_hardware.py` pins the same.
const VERDICT_DIGEST: &str = "3756b492b230c72bd90e17ed9632e1cb5b588bca281458294b958bed4fed4295";
const ANSWER_DIGEST: &str = "a1229ca142bcfd808ad306bcfbe7ddf4e523bf6315fbf8b39f0467a496666ca4";
const ROW_DIGEST: &str = "2fee750fb9c024aa2d530c8980d3536d5e82f66aacbbab848cf5a933c37790ba";
const PATH_ROOT: &str = "fc4eafaa3397782154edcab6cc906997afa760a067b17dab6ca88c8bee48e647";
