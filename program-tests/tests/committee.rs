//! Committees on chain: user-chosen committees, quorum attestations of approved seconds, validator
//! rewards, endpoints, member replacement, validator equivocation, downtime by observation.
mod common;

use anchor_lang::prelude::Pubkey;
use common::*;
use gpu_market::errors::GpuMarketError as E;
use gpu_market::events::{CommitteeMemberReplaced, Settled, ValidatorEquivocationSlashed};
use gpu_market::state::{JobStatus, MarketParams, Validator, ValidatorStatus};
use gpum_localnet::solana_keypair::Keypair;
use gpum_localnet::solana_signer::Signer;

/// Two more validators (bond 5_000): (keypair, Validator account, stake account).
fn two_more(b: &mut Bench) -> Vec<(Keypair, Pubkey, Pubkey)> {
    (0..2).map(|_| { let (v, a) = b.add_validator(5_000); (v.key.insecure_clone(), a, v.stake) }).collect()
}

fn create_err(b: &mut Bench, committee: &[Pubkey], quorum: u8) -> gpum_localnet::solana_transaction_error::TransactionError {
    let ix = b.ix_create_job_with(&b.user.clone_party(), 9, 1, 10_000, u64::MAX, committee, quorum);
    b.user_err(&[ix])
}

trait CloneParty {
    fn clone_party(&self) -> Party;
}
impl CloneParty for Party {
    fn clone_party(&self) -> Party {
        Party { key: self.key.insecure_clone(), payment: self.payment, stake: self.stake }
    }
}

// ---- create_job with a committee ---------------------------------------------------------------

#[test]
fn success_create_job_stores_committee_and_quorum() {
    let mut b = Bench::new();
    let o = two_more(&mut b);
    let committee = vec![o[1].0.pubkey(), b.validator_authority.pubkey(), o[0].0.pubkey()];
    let ix = b.ix_create_job_with(&b.user.clone_party(), 1, 1, 10_000, u64::MAX, &committee, 2);
    b.as_user(&[ix]);
    let j = b.job_state(&b.job_address(&b.user.key.pubkey(), 1).0);
    assert_eq!((j.members(), j.committee_len, j.terms.quorum), (&committee[..], 3, 2));
}

#[test]
fn fail_create_job_committee_rules() {
    let mut b = Bench::new();
    let o = two_more(&mut b);
    let va = b.validator_authority.pubkey();
    let (v1, v2) = (o[0].0.pubkey(), o[1].0.pubkey());
    assert_eq!(create_err(&mut b, &[], 1), program_err(0, E::InvalidCommittee));
    assert_eq!(create_err(&mut b, &[va, va], 1), program_err(0, E::InvalidCommittee), "duplicate member");
    assert_eq!(create_err(&mut b, &[va, v1, v2], 0), program_err(0, E::InvalidJobQuorum));
    assert_eq!(create_err(&mut b, &[va, v1], 3), program_err(0, E::InvalidJobQuorum), "quorum above the committee size");
    // The provider cannot sit on its own job's committee (owner or worker key as validator).
    let owner = b.provider_owner.key.insecure_clone();
    let owner_party = Party { key: owner.insecure_clone(), payment: b.provider_owner.payment, stake: b.provider_owner.stake };
    let ix = b.ix_register_validator(&owner.pubkey(), owner_party.stake, 5_000);
    b.send(&[ix], &[&owner]).unwrap();
    assert_eq!(create_err(&mut b, &[owner.pubkey()], 1), program_err(0, E::InvalidCommittee));
    // An exiting validator is not Active.
    let exit = b.ix_request_validator_exit(&v2);
    b.send(&[exit], &[&o[1].0]).unwrap();
    assert_eq!(create_err(&mut b, &[va, v2], 1), program_err(0, E::InvalidCommittee));
    // A validator of another market (its account passed for a member of this one).
    let (stranger, elsewhere) = b.foreign_validator();
    let mut ix = b.ix_create_job_with(&b.user.clone_party(), 9, 1, 10_000, u64::MAX, &[stranger.key.pubkey()], 1);
    let last = ix.accounts.len() - 1;
    ix.accounts[last].pubkey = elsewhere;
    assert_eq!(b.user_err(&[ix]), program_err(0, E::InvalidCommittee));
    // Six members; and a min_quorum above the chosen quorum.
    let many: Vec<Pubkey> = (0..6).map(|_| b.add_validator(5_000).0.key.pubkey()).collect();
    assert_eq!(create_err(&mut b, &many, 1), program_err(0, E::InvalidCommittee));
    let mut strict = Bench::with_params(MarketParams { min_quorum: 2, ..default_params() });
    let more = two_more(&mut strict);
    let committee = [strict.validator_authority.pubkey(), more[0].0.pubkey()];
    assert_eq!(create_err(&mut strict, &committee, 1), program_err(0, E::InvalidJobQuorum));
}

#[test]
fn fail_create_job_remaining_accounts_do_not_match_the_committee() {
    let mut b = Bench::new();
    let o = two_more(&mut b);
    let mut ix = b.ix_create_job_with(&b.user.clone_party(), 1, 1, 10_000, u64::MAX, &[o[0].0.pubkey()], 1);
    ix.accounts.pop();
    assert_eq!(b.user_err(&[ix.clone()]), program_err(0, E::InvalidCommittee));
    ix.accounts.push(meta(o[1].1, false)); // another validator's account
    assert_eq!(b.user_err(&[ix]), program_err(0, E::InvalidCommittee));
}

// ---- settle by the committee ---------------------------------------------------------------------

#[test]
fn settle_by_a_validator_outside_the_committee_fails() {
    let mut b = Bench::new();
    let o = two_more(&mut b);
    let (job, _) = b.running_job(1, 1, 10_000);
    b.advance(60);
    let r = receipt(1, 60, T0 + 60);
    let msg = b.receipt_digest(&job, &r);
    let ixs = vec![ed25519_ix(&b.worker.clone(), &msg), b.ix_settle(&o[0].0.pubkey(), job, r)];
    assert_eq!(b.send_err(&ixs, &[&o[0].0]), program_err(1, E::NotCommitteeMember));
}

#[test]
fn rejected_window_is_simply_not_approved_and_the_job_goes_on() {
    let (mut b, job, others) = Bench::with_quorum(2);
    // Window 1 (60 s) approved; window 2 rejected by the committee (approved stays 60);
    // window 3 approved: 120 of 180 claimed seconds paid.
    for (seq, cumulative, approved) in [(1u64, 60u64, 60u64), (2, 120, 60), (3, 180, 120)] {
        b.advance(60);
        let ixs = b.quorum_settle_approved_ixs(job, receipt(seq, cumulative, b.now), approved, &[&others[0].0], &[others[0].1]);
        b.as_va(&ixs);
    }
    let j = b.job_state(&job);
    assert_eq!((j.claimed_seconds, j.paid_seconds, j.paid_provider, j.status), (180, 120, 1_080, JobStatus::Running));
}

#[test]
fn settle_approval_rules() {
    let (mut b, job, others) = Bench::with_quorum(2);
    b.advance(60);
    let ixs = b.quorum_settle_approved_ixs(job, receipt(1, 60, T0 + 60), 50, &[&others[0].0], &[others[0].1]);
    b.as_va(&ixs);
    b.advance(60);
    let o = &others[0];
    let cases = [
        (receipt(2, 120, T0 + 120), 49, E::ApprovedDecreased),
        (receipt(2, 120, T0 + 120), 121, E::ApprovedExceedsClaim), // above the cumulative claim
        (receipt(2, 140, T0 + 120), 126, E::BilledSecondsExceedWallTime), // 120 s + 5 s skew
    ];
    for (r, approved, error) in cases {
        let ixs = b.quorum_settle_approved_ixs(job, r, approved, &[&o.0], &[o.1]);
        assert_eq!(b.va_err(&ixs), program_err(1, error), "approved {approved}");
    }
    let ixs = b.quorum_settle_approved_ixs(job, receipt(2, 130, T0 + 120), 110, &[&o.0], &[o.1]);
    b.as_va(&ixs);
    assert_eq!(b.job_state(&job).paid_seconds, 110);
}

#[test]
fn attestation_must_cover_the_approved_value_and_come_from_a_member() {
    let (mut b, job, others) = Bench::with_quorum(2);
    b.advance(60);
    let r = receipt(1, 60, T0 + 60);
    // The member attested 50; the submitter claims 60 with that signature.
    let mut ixs = b.quorum_settle_approved_ixs(job, r, 50, &[&others[0].0], &[others[0].1]);
    ixs[1] = b.quorum_settle_approved_ixs(job, r, 60, &[&others[0].0], &[others[0].1]).remove(1);
    assert_eq!(b.va_err(&ixs), program_err(1, E::ReceiptMessageMismatch));
    // A validator that is not in the committee attests.
    let outsider = b.add_validator(5_000);
    let ixs = b.quorum_settle_ixs(job, r, &[&outsider.0.key], &[outsider.1]);
    assert_eq!(b.va_err(&ixs), program_err(1, E::NotCommitteeMember));
}

#[test]
fn rewards_are_split_among_attesters_and_claimed_from_the_fee_vault() {
    let mut b = Bench::with_params(MarketParams { validator_reward_bps: 5_000, ..default_params() });
    let o = two_more(&mut b);
    b.committee = vec![b.validator_authority.pubkey(), o[0].0.pubkey(), o[1].0.pubkey()];
    b.quorum = 3;
    let (job, _) = b.running_job(1, 1, 100_000);
    b.advance(61);
    // 61 s at 10 = 610; fee ceil(61) = 61; reward 30 (10 each); rest 31: burn 15, treasury 16.
    let ixs = b.quorum_settle_ixs(job, receipt(1, 61, T0 + 61), &[&o[0].0, &o[1].0], &[o[0].1, o[1].1]);
    let logs = b.as_va(&ixs);
    let s: Settled = event(&logs);
    assert_eq!((s.fee, s.reward, s.burned, s.to_treasury, s.attesters), (61, 30, 15, 16, 3));
    let v: Validator = b.account(&o[0].1).unwrap();
    assert_eq!((v.rewards_earned, v.rewards_unclaimed), (10, 10));
    assert_eq!(b.validator_state().rewards_unclaimed, 10);
    assert_eq!(b.token_balance(&b.fee_vault), 46);
    assert_eq!(b.job_state(&job).paid_validators, 30);
    // withdraw_fees leaves the validators' 30.
    let stranger = b.new_party(0, 0);
    b.send(&[b.ix_withdraw_fees()], &[&stranger.key]).unwrap();
    assert_eq!(b.token_balance(&b.fee_vault), 30);
    // A member claims its 10 to its own payment account.
    let dest = b.create_token_account(b.payment_mint, &o[0].0.pubkey());
    let ix = b.ix_claim_validator_rewards(&o[0].0.pubkey(), dest);
    b.send(&[ix.clone()], &[&o[0].0]).unwrap();
    assert_eq!(b.token_balance(&dest), 10);
    assert_eq!(b.send_err(&[ix], &[&o[0].0]), program_err(0, E::NothingToClaim));
    // Someone else's account as destination.
    let va = b.va_kp();
    let ix = b.ix_claim_validator_rewards(&va.pubkey(), dest);
    assert_eq!(b.va_err(&[ix]), program_err(0, E::NotAValidator));
    assert_eq!(b.market_state().totals.rewards_unclaimed, 20);
}

#[test]
fn quorum_3_settle_with_attestations_fits_one_packet() {
    let (b, job, others) = Bench::with_quorum(3);
    let keys: Vec<&Keypair> = others.iter().map(|(k, _)| k).collect();
    let accounts: Vec<Pubkey> = others.iter().map(|(_, a)| *a).collect();
    let ixs = b.quorum_settle_ixs(job, receipt(1, 60, T0 + 60), &keys, &accounts);
    let size = wire_size(&ixs, &[&b.va_kp()]);
    assert!(size <= PACKET_DATA_SIZE, "quorum-3 settle is {size} bytes");
}

// ---- endpoints ---------------------------------------------------------------------------------

#[test]
fn validator_endpoint_is_registered_and_updated() {
    let mut b = Bench::new();
    assert_eq!(&b.validator_state().endpoint[..ENDPOINT.len()], ENDPOINT.as_bytes());
    let va = b.va_kp();
    b.as_va(&[b.ix_update_validator(&va.pubkey(), "https://v1.example.org:8443")]);
    let e = b.validator_state().endpoint;
    assert_eq!(&e[..27], b"https://v1.example.org:8443");
    assert!(e[27..].iter().all(|x| *x == 0));
    for bad in ["", "ftp://x", "http://", "http://a b", &format!("http://{}", "a".repeat(90))] {
        assert_eq!(b.va_err(&[b.ix_update_validator(&va.pubkey(), bad)]), program_err(0, E::InvalidEndpoint), "{bad:?}");
    }
    let p = b.new_party(5_000, 0);
    let ix = b.ix_register_validator_at(&p.key.pubkey(), p.stake, 5_000, "localhost:80");
    assert_eq!(b.send_err(&[ix], &[&p.key]), program_err(0, E::InvalidEndpoint));
    let user = b.user_kp();
    let ix = swap_account(b.ix_update_validator(&user.pubkey(), ENDPOINT), b.validator_address(&user.pubkey()), b.validator);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotAValidator));
}

// ---- replace_committee_member -------------------------------------------------------------------

#[test]
fn user_replaces_a_member_that_left_and_settlement_goes_on() {
    let (mut b, job, others) = Bench::with_quorum(3);
    let user = b.user_kp();
    let newcomer = b.add_validator(5_000);
    let (v2, v2_account) = (&others[1].0, others[1].1);
    // Still Active: refused.
    let ix = b.ix_replace_committee_member(&user.pubkey(), job, 2, &v2.pubkey(), &newcomer.0.key.pubkey());
    assert_eq!(b.user_err(&[ix.clone()]), program_err(0, E::MemberStillActive));
    b.send(&[b.ix_request_validator_exit(&v2.pubkey())], &[v2]).unwrap();
    // Only the user; a new member must not be in the committee already.
    assert_eq!(b.owner_err(&[swap_account(ix.clone(), user.pubkey(), b.provider_owner.key.pubkey())]), program_err(0, E::NotJobUser));
    let dup = b.ix_replace_committee_member(&user.pubkey(), job, 2, &v2.pubkey(), &others[0].0.pubkey());
    assert_eq!(b.user_err(&[dup]), program_err(0, E::InvalidCommittee));
    let oob = b.ix_replace_committee_member(&user.pubkey(), job, 3, &v2.pubkey(), &newcomer.0.key.pubkey());
    assert_eq!(b.user_err(&[oob]), program_err(0, E::NotCommitteeMember));
    let logs = b.as_user(&[ix]);
    assert_event(&logs, CommitteeMemberReplaced { job, index: 2, previous: v2.pubkey(), member: newcomer.0.key.pubkey() });
    // 3-of-3 settles again with the new member.
    b.advance(60);
    let ixs = b.quorum_settle_ixs(job, receipt(1, 60, T0 + 60), &[&others[0].0, &newcomer.0.key], &[others[0].1, newcomer.1]);
    b.as_va(&ixs);
    // The replaced member is no longer in the committee.
    b.advance(60);
    let ixs = b.quorum_settle_ixs(job, receipt(2, 120, T0 + 120), &[&others[0].0, v2], &[others[0].1, v2_account]);
    assert_eq!(b.va_err(&ixs), program_err(1, E::NotCommitteeMember));
}

#[test]
fn a_member_whose_account_closed_can_be_replaced() {
    let (mut b, job, others) = Bench::with_quorum(2);
    let (v1, v1_stake) = (others[0].0.insecure_clone(), b.token_accounts_of(&others[0].0.pubkey(), &b.stake_mint)[0]);
    b.send(&[b.ix_request_validator_exit(&v1.pubkey())], &[&v1]).unwrap();
    b.advance(14 * 86_400);
    b.send(&[b.ix_withdraw_validator_bond(&v1.pubkey(), v1_stake)], &[&v1]).unwrap();
    let newcomer = b.add_validator(5_000);
    let user = b.user_kp();
    let ix = b.ix_replace_committee_member(&user.pubkey(), job, 1, &v1.pubkey(), &newcomer.0.key.pubkey());
    b.as_user(&[ix]);
    assert_eq!(b.job_state(&job).committee[1], newcomer.0.key.pubkey());
}

// ---- slash_validator_equivocation -----------------------------------------------------------------

#[test]
fn validator_attesting_two_values_for_one_seq_is_slashed_once() {
    let (mut b, job, others) = Bench::with_quorum(2);
    b.advance(60);
    let (byz, byz_account) = (&others[0].0, others[0].1);
    let r = receipt(1, 60, T0 + 60);
    // The job's user reports (a party the validator is not: it earns the reward).
    let reporter = Party { key: b.user_kp(), payment: b.user.payment, stake: b.user.stake };
    let ixs = b.validator_equivocation_ixs(&signing_key(byz), &byz.pubkey(), &reporter.key.pubkey(), reporter.stake, job, (r, 60), (r, 61));
    let logs = b.send(&ixs, &[&reporter.key]).unwrap().logs;
    let e: ValidatorEquivocationSlashed = event(&logs);
    assert_eq!((e.slashed, e.reward, e.burned, e.first_approved, e.second_approved), (2_500, 250, 2_250, 60, 61));
    let v: Validator = b.account(&byz_account).unwrap();
    assert_eq!((v.status, v.bond, v.unbonding.amount, v.slashes), (ValidatorStatus::Exiting, 0, 2_500, 1));
    assert_eq!(b.token_balance(&reporter.stake), 250);
    // The same evidence again: the record exists.
    assert!(b.send(&ixs, &[&reporter.key]).is_err());
    // Forced out (Exiting) it joins no new committee, yet still counts in this one's settlements
    // while its bond unbonds (the user may replace it).
    let ixs = b.quorum_settle_ixs(job, r, &[byz], &[byz_account]);
    b.as_va(&ixs);
    assert_eq!(b.job_state(&job).paid_seconds, 60);
}

#[test]
fn fail_validator_equivocation_rules() {
    let (mut b, job, others) = Bench::with_quorum(2);
    b.advance(60);
    let (v1, v1_key) = (&others[0].0, signing_key(&others[0].0));
    let r = receipt(1, 60, T0 + 60);
    let reporter = b.new_party(0, 0);
    let rep = reporter.key.pubkey();
    let send = |b: &mut Bench, ixs: Vec<gpum_localnet::solana_instruction::Instruction>| b.send_err(&ixs, &[&reporter.key]);
    let ixs = b.validator_equivocation_ixs(&v1_key, &v1.pubkey(), &rep, reporter.stake, job, (r, 60), (r, 60));
    assert_eq!(send(&mut b, ixs), program_err(1, E::NotValidatorEquivocation));
    let ixs = b.validator_equivocation_ixs(&v1_key, &v1.pubkey(), &rep, reporter.stake, job, (r, 60), (receipt(2, 60, T0 + 60), 60));
    assert_eq!(send(&mut b, ixs), program_err(1, E::EquivocationSeqMismatch));
    // Signed by someone else than the accused validator.
    let ixs = b.validator_equivocation_ixs(&signing_key(&others[1].0), &v1.pubkey(), &rep, reporter.stake, job, (r, 60), (r, 61));
    assert_eq!(send(&mut b, ixs), program_err(1, E::NotAValidator));
    // A validator outside the job's committee.
    let outsider = b.add_validator(5_000);
    let ixs = b.validator_equivocation_ixs(&signing_key(&outsider.0.key), &outsider.0.key.pubkey(), &rep, reporter.stake, job, (r, 60), (r, 61));
    assert_eq!(send(&mut b, ixs), program_err(1, E::NotCommitteeMember));
    assert_eq!(b.account::<Validator>(&others[0].1).unwrap().bond, 5_000);
}

// ---- slash_downtime by observation ----------------------------------------------------------------

#[test]
fn downtime_counts_from_proofs_the_committee_saw_not_from_settlement() {
    let (mut b, job, others) = Bench::with_quorum(2);
    let va = b.va_kp();
    let stake = b.validator_stake_account();
    let member = others[0].0.insecure_clone();
    // 11 windows without a settlement, but the committee accepted a proof ending 2 windows ago.
    b.set_time(T0 + 11 * 60);
    let ix = b.ix_slash_downtime_seen(&va.pubkey(), stake, job, &[member.pubkey()], T0 + 9 * 60);
    assert_eq!(b.send_err(&[ix], &[&va, &member]), program_err(0, E::NotEnoughMissedWindows));
    // A quorum of 2 is needed: the submitter alone is not enough.
    let ix = b.ix_slash_downtime_seen(&va.pubkey(), stake, job, &[], 0);
    assert_eq!(b.va_err(&[ix]), program_err(0, E::QuorumNotMet));
    // A non-member cannot make up the quorum.
    let outsider = b.add_validator(5_000).0.key;
    let ix = b.ix_slash_downtime_seen(&va.pubkey(), stake, job, &[outsider.pubkey()], 0);
    assert_eq!(b.send_err(&[ix], &[&va, &outsider]), program_err(0, E::NotCommitteeMember));
    // Silence since the last proof seen: slashed.
    b.set_time(T0 + 9 * 60 + 10 * 60);
    let ix = b.ix_slash_downtime_seen(&va.pubkey(), stake, job, &[member.pubkey()], T0 + 9 * 60);
    b.send(&[ix], &[&va, &member]).unwrap();
    assert_eq!(b.job_state(&job).status, JobStatus::Failed);
}
