//! No honest party can be slashed, starved or stalled by one other party: the attack sequences
//! against the money paths (settlement by totals, single-use job addresses, downtime after a
//! finish, reporter rewards and incident rates, members that leave, rewards at bond withdrawal, job
//! terms the user signed for), each with the success path that must keep working.
mod common;

use anchor_lang::prelude::Pubkey;
use common::*;
use gpu_market::errors::GpuMarketError as E;
use gpu_market::events::{DowntimeSlashed, EquivocationSlashed, ValidatorEquivocationSlashed};
use gpu_market::state::{JobStatus, MarketParams, ProviderStatus, Validator, ValidatorStatus};
use gpum_localnet::solana_keypair::Keypair;
use gpum_localnet::solana_signer::Signer;

const STAKED: u64 = 100_000;

// ---- settlement by totals --------------------------------------------------------------------

/// A member (the user's own validator, say) settles every fresh receipt first with nothing
/// approved and one honest co-signature (a value below the co-signer's own total is one it may
/// sign). The honest round that follows still pays every second the worker proved.
#[test]
fn attack_member_settling_fresh_receipts_at_zero_cannot_starve_the_provider() {
    let (mut b, job, others) = Bench::with_quorum(2);
    let honest = &others[0];
    for seq in 1..=5u64 {
        b.advance(60);
        let r = receipt(seq, seq * 60, b.now);
        let ixs = b.quorum_settle_approved_ixs(job, r, 0, &[&honest.0], &[honest.1]);
        b.as_va(&ixs);
    }
    let j = b.job_state(&job);
    assert_eq!((j.claimed_seconds, j.paid_seconds, j.last_seq), (300, 0, 5));
    b.advance(60);
    let ixs = b.quorum_settle_approved_ixs(job, receipt(6, 360, b.now), 360, &[&honest.0], &[honest.1]);
    b.as_va(&ixs);
    let j = b.job_state(&job);
    assert_eq!((j.claimed_seconds, j.paid_seconds), (360, 360), "every proved second is paid");
    assert_eq!(b.token_balance(&b.provider_owner.payment), 360 * 10 - 360);
}

/// Totals bound the approval: never above the receipt's cumulative claim, never below what was
/// paid, never above the wall time.
#[test]
fn fail_settle_approved_total_above_cumulative_claim() {
    let (mut b, job, others) = Bench::with_quorum(2);
    let o = &others[0];
    b.advance(60);
    b.as_va(&b.quorum_settle_approved_ixs(job, receipt(1, 60, b.now), 0, &[&o.0], &[o.1]));
    b.advance(60);
    let ixs = b.quorum_settle_approved_ixs(job, receipt(2, 110, b.now), 111, &[&o.0], &[o.1]);
    assert_eq!(b.va_err(&ixs), program_err(1, E::ApprovedExceedsClaim));
    let ixs = b.quorum_settle_approved_ixs(job, receipt(2, 110, b.now), 110, &[&o.0], &[o.1]);
    b.as_va(&ixs);
    assert_eq!(b.job_state(&job).paid_seconds, 110);
}

// ---- one job address, one incarnation --------------------------------------------------------

/// A closed job leaves a tombstone at its address: the same job id can never be created again,
/// so receipts and attestations bound to the address belong to one incarnation.
#[test]
fn attack_closed_job_address_cannot_be_created_again() {
    let mut b = Bench::new();
    let user = b.user_kp();
    let (job, escrow) = b.running_job(1, 1, 10_000);
    b.advance(60);
    b.settle(job, receipt(1, 60, b.now)).unwrap();
    b.finish(job);
    b.advance(12 * 60 + 1);
    let lamports = b.svm.get_balance(&user.pubkey()).unwrap();
    let job_rent = b.svm.get_balance(&job).unwrap();
    let escrow_rent = b.svm.get_balance(&escrow).unwrap();
    b.as_user(&[b.ix_close_job(&user.pubkey(), b.user.payment, job)]);
    let tombstone = b.svm.get_account(&job).expect("the address keeps a tombstone");
    assert_eq!(tombstone.owner, gpu_market::ID);
    assert_eq!(tombstone.data.len(), 8 + <gpu_market::state::ClosedJob as anchor_lang::Space>::INIT_SPACE);
    assert!(b.account::<gpu_market::state::Job>(&job).is_none());
    let kept = b.svm.minimum_balance_for_rent_exemption(tombstone.data.len());
    assert_eq!(tombstone.lamports, kept);
    assert_eq!(b.svm.get_balance(&user.pubkey()).unwrap(), lamports + job_rent - kept + escrow_rent - 5_000);
    // The same job id again: the System program refuses to allocate over the tombstone.
    let ix = b.ix_create_job(&b.user, 1, 1, 10_000);
    assert_eq!(b.user_err(&[ix]), custom(0, SYSTEM_ACCOUNT_ALREADY_IN_USE));
    // Lamports sent to the tombstone (a "pre-funded" address) change nothing.
    b.as_user(&[gpum_localnet::solana_system_interface::instruction::transfer(&user.pubkey(), &job, 10_000_000)]);
    let ix = b.ix_create_job(&b.user, 1, 1, 10_000);
    assert_eq!(b.user_err(&[ix]), custom(0, SYSTEM_ACCOUNT_ALREADY_IN_USE));
    assert_eq!(b.svm.get_account(&job).unwrap().owner, gpu_market::ID);
    // Every job instruction refuses the tombstone as a Job.
    let settle = b.settle_ixs(&b.worker.clone(), job, receipt(2, 120, b.now));
    assert_eq!(b.va_err(&settle), anchor_err(1, anchor_lang::error::ErrorCode::AccountDiscriminatorMismatch));
    let top_up = b.ix_top_up(&user.pubkey(), b.user.payment, job, 1);
    assert_eq!(b.user_err(&[top_up]), anchor_err(0, anchor_lang::error::ErrorCode::AccountDiscriminatorMismatch));
    // Closing again: the escrow is gone.
    let close = b.ix_close_job(&user.pubkey(), b.user.payment, job);
    assert_eq!(b.user_err(&[close]), anchor_err(0, anchor_lang::error::ErrorCode::AccountNotInitialized));
}

/// `AccountAlreadyInUse` of the System program (its error 0).
const SYSTEM_ACCOUNT_ALREADY_IN_USE: u32 = 0;

/// The review's sequence: the user cancels a job that never started and presents two receipts
/// the worker key signed for its address. A job that never started is never slashed.
#[test]
fn attack_slash_equivocation_on_a_job_that_never_started() {
    let mut b = Bench::new();
    let user = b.user_kp();
    let (job, _) = b.open_job(3, 1, 10_000);
    b.as_user(&[b.ix_cancel_job(&user.pubkey(), job, b.user.payment)]);
    b.advance(120);
    let (first, second) = equivocating_pair(1, 60, b.now - 60);
    let ixs = b.equivocation_ixs(&b.worker.clone(), &user.pubkey(), b.user.stake, job, first, second);
    assert_eq!(b.user_err(&ixs), program_err(1, E::JobNeverStarted));
    let (job, _) = b.open_job(4, 1, 10_000);
    let owner = b.owner_kp();
    b.as_owner(&[b.ix_decline_job(&owner.pubkey(), job)]);
    let ixs = b.equivocation_ixs(&b.worker.clone(), &user.pubkey(), b.user.stake, job, first, second);
    assert_eq!(b.user_err(&ixs), program_err(1, E::JobNeverStarted));
    let p = b.provider_state();
    assert_eq!((p.stake, p.status), (STAKED, ProviderStatus::Active));
}

#[test]
fn attack_slash_validator_equivocation_on_a_job_that_never_started() {
    let mut b = Bench::new();
    let others: Vec<(Keypair, Pubkey)> = (0..2).map(|_| { let (v, a) = b.add_validator(5_000); (v.key, a) }).collect();
    b.committee.extend(others.iter().map(|(k, _)| k.pubkey()));
    b.quorum = 2;
    let user = b.user_kp();
    let (job, _) = b.open_job(5, 1, 10_000);
    b.as_user(&[b.ix_cancel_job(&user.pubkey(), job, b.user.payment)]);
    b.advance(120);
    let r = receipt(1, 60, b.now - 60);
    let byz = &others[0].0;
    let ixs = b.validator_equivocation_ixs(&signing_key(byz), &byz.pubkey(), &user.pubkey(), b.user.stake, job, (r, 60), (r, 0));
    assert_eq!(b.user_err(&ixs), program_err(1, E::JobNeverStarted));
    assert_eq!(b.account::<Validator>(&others[0].1).unwrap().bond, 5_000);
}

// ---- downtime after a finish -----------------------------------------------------------------

/// A provider silent for `max_missed_windows` windows finishes its own job before the committee
/// reports: the windows it missed before `ended_at` stay punishable.
#[test]
fn attack_silent_provider_finishing_first_is_still_slashed_for_downtime() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.set_time(T0 + 10 * 60);
    let owner = b.owner_kp();
    b.as_owner(&[b.ix_finish_job(&owner.pubkey(), job)]);
    b.advance(60);
    let va = b.va_kp();
    let ix = b.ix_slash_downtime(&va.pubkey(), b.validator_stake_account(), job, &[]);
    let logs = b.as_va(&[ix.clone()]);
    let e: DowntimeSlashed = event(&logs);
    assert_eq!((e.missed_windows, e.slashed), (10, 1_000));
    assert_eq!(b.provider_state().stake, STAKED - 1_000);
    assert_eq!(b.job_state(&job).status, JobStatus::Failed);
    // One slash per job: the job is Failed now.
    assert_eq!(b.va_err(&[ix]), program_err(0, E::InvalidJobStatus));
}

/// Missed windows count up to `ended_at` only: silence after the finish is no downtime.
#[test]
fn fail_slash_downtime_for_silence_after_the_finish() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.set_time(T0 + 10 * 60 - 1);
    b.finish(job);
    b.advance(5 * 60);
    let va = b.va_kp();
    let ix = b.ix_slash_downtime(&va.pubkey(), b.validator_stake_account(), job, &[]);
    assert_eq!(b.va_err(&[ix]), program_err(0, E::NotEnoughMissedWindows));
    assert_eq!(b.provider_state().stake, STAKED);
}

// ---- reporter rewards and incident rates ------------------------------------------------------

/// The provider lands the evidence against itself (its owner as reporter, reward to its own
/// account): it is slashed in full and the reward is burned with the rest.
#[test]
fn attack_provider_reporting_itself_earns_nothing() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.advance(30);
    let owner = b.owner_kp();
    let supply = b.mint_supply(&b.stake_mint);
    let before = b.token_balance(&b.provider_owner.stake);
    let (first, second) = equivocating_pair(1, 30, b.now);
    let ixs = b.equivocation_ixs(&b.worker.clone(), &owner.pubkey(), b.provider_owner.stake, job, first, second);
    let logs = b.as_owner(&ixs);
    let e: EquivocationSlashed = event(&logs);
    assert_eq!((e.slashed, e.reward, e.burned, e.reporter_reward_bps), (50_000, 0, 50_000, 0));
    assert_eq!(b.token_balance(&b.provider_owner.stake), before);
    assert_eq!(b.mint_supply(&b.stake_mint), supply - 50_000);
    // A stranger (who may be the provider under another key) earns nothing either ...
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.advance(30);
    let stranger = b.new_party(0, 0);
    let ixs = b.equivocation_ixs(&b.worker.clone(), &stranger.key.pubkey(), stranger.stake, job, first, second);
    let e: EquivocationSlashed = event(&b.send(&ixs, &[&stranger.key]).unwrap().logs);
    assert_eq!((e.slashed, e.reward), (50_000, 0));
    assert_eq!(b.token_balance(&stranger.stake), 0);
    // ... while the job's user, a party the offender is not, earns the reward.
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.advance(30);
    let user = b.user_kp();
    let ixs = b.equivocation_ixs(&b.worker.clone(), &user.pubkey(), b.user.stake, job, first, second);
    let e: EquivocationSlashed = event(&b.as_user(&ixs));
    assert_eq!((e.slashed, e.reward, e.reporter_reward_bps), (50_000, 5_000, 1_000));
    assert_eq!(b.token_balance(&b.user.stake), 5_000);
}

/// The provider cannot strip the user of its reward by naming the user's pubkey as a worker key
/// (it holds no such key: only its owner and the keys that signed the evidence count as its own).
#[test]
fn provider_naming_the_users_key_as_worker_key_does_not_strip_the_reward() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.advance(30);
    let (first, second) = equivocating_pair(1, 30, b.now);
    let owner = b.owner_kp();
    let user = b.user_kp();
    let real_worker = worker_pubkey(&b.worker);
    b.as_owner(&[b.ix_rotate_worker_key(&owner.pubkey(), user.pubkey(), 0)]);
    b.as_owner(&[b.ix_rotate_worker_key(&owner.pubkey(), real_worker, 0)]);
    assert_eq!(b.provider_state().retired_keys[0].key, user.pubkey());
    let ixs = b.equivocation_ixs(&b.worker.clone(), &user.pubkey(), b.user.stake, job, first, second);
    let e: EquivocationSlashed = event(&b.as_user(&ixs));
    assert_eq!((e.slashed, e.reward), (50_000, 5_000));
}

/// The review's sequence: the provider pre-empts the real evidence with a self-report on an old
/// job whose terms carry a low slash rate. The real evidence of the same incident still brings
/// the punishment up to its higher rate.
#[test]
fn attack_self_report_at_a_low_rate_does_not_pre_empt_the_higher_rate() {
    let low = MarketParams { equivocation_slash_bps: 100, unbonding_seconds: 0, ..default_params() };
    let mut b = Bench::with_params(low);
    // The provider is the user of its own old job (1 % slash rate).
    let owner_party = Party { key: b.owner_kp(), payment: b.provider_owner.payment, stake: b.provider_owner.stake };
    b.mint_to(b.payment_mint, owner_party.payment, 100_000);
    b.as_owner(&[b.ix_create_job(&owner_party, 1, 1, 10_000)]);
    let (old, _) = b.job_address(&owner_party.key.pubkey(), 1);
    b.as_owner(&[b.ix_accept_job(&owner_party.key.pubkey(), old)]);
    // The authority raises the rate; an honest user's job carries 50 %.
    b.as_admin(&[b.ix_update_params(&b.admin.pubkey(), default_params())]);
    b.advance(gpu_market::state::MIN_PARAMS_DELAY_SECONDS);
    let (job, _) = b.running_job(7, 1, 10_000);
    assert_eq!(b.job_state(&job).terms.equivocation_slash_bps, 5_000);
    b.advance(30);
    // The worker equivocates on the user's job; the provider self-reports on its old job first.
    let (first, second) = equivocating_pair(1, 30, b.now);
    let owner = b.owner_kp();
    let ixs = b.equivocation_ixs(&b.worker.clone(), &owner.pubkey(), b.provider_owner.stake, old, first, second);
    let e: EquivocationSlashed = event(&b.as_owner(&ixs));
    assert_eq!(e.slashed, 1_000);
    // The user's evidence of the same incident tops the slash up to 50 % of the stake before it.
    let user = b.user_kp();
    let ixs = b.equivocation_ixs(&b.worker.clone(), &user.pubkey(), b.user.stake, job, first, second);
    let e: EquivocationSlashed = event(&b.as_user(&ixs));
    assert_eq!(e.slashed, 49_000);
    assert_eq!(e.reward, 4_900);
    let p = b.provider_state();
    assert_eq!(p.stake, STAKED - 50_000);
    assert_eq!(p.reputation.slashes, 1, "one incident, one slash");
    // Nothing higher applies any more: further evidence of the incident fails.
    let (first, second) = equivocating_pair(2, 30, b.now);
    let ixs = b.equivocation_ixs(&b.worker.clone(), &user.pubkey(), b.user.stake, job, first, second);
    assert_eq!(b.user_err(&ixs), program_err(1, E::EquivocationAlreadyPunished));
}

/// The offending validator lands the evidence against itself: slashed, reward burned.
#[test]
fn attack_validator_reporting_itself_earns_nothing() {
    let (mut b, job, others) = Bench::with_quorum(2);
    b.advance(60);
    let (byz, byz_account) = (&others[0].0, others[0].1);
    let byz_stake = b.token_accounts_of(&byz.pubkey(), &b.stake_mint)[0];
    let before = b.token_balance(&byz_stake);
    let r = receipt(1, 60, b.now);
    let ixs = b.validator_equivocation_ixs(&signing_key(byz), &byz.pubkey(), &byz.pubkey(), byz_stake, job, (r, 60), (r, 61));
    let e: ValidatorEquivocationSlashed = event(&b.send(&ixs, &[byz]).unwrap().logs);
    assert_eq!((e.slashed, e.reward, e.burned), (2_500, 0, 2_500));
    assert_eq!(b.token_balance(&byz_stake), before);
    assert_eq!(b.account::<Validator>(&byz_account).unwrap().slashes, 1);
    // Another member reporting it earns the reward.
    let honest = &others[1].0;
    let honest_stake = b.token_accounts_of(&honest.pubkey(), &b.stake_mint)[0];
    let r = receipt(2, 120, b.now);
    let ixs = b.validator_equivocation_ixs(&signing_key(byz), &byz.pubkey(), &honest.pubkey(), honest_stake, job, (r, 60), (r, 61));
    let e: ValidatorEquivocationSlashed = event(&b.send(&ixs, &[honest]).unwrap().logs);
    assert_eq!((e.slashed, e.reward), (1_250, 125));
    // So does the job's provider (its owner), the party a lying member hurts; a stranger not.
    let owner = b.owner_kp();
    let r = receipt(3, 180, b.now);
    let ixs = b.validator_equivocation_ixs(&signing_key(byz), &byz.pubkey(), &owner.pubkey(), b.provider_owner.stake, job, (r, 60), (r, 61));
    let e: ValidatorEquivocationSlashed = event(&b.as_owner(&ixs));
    assert_eq!((e.slashed, e.reward), (625, 62));
    let stranger = b.new_party(0, 0);
    let r = receipt(4, 240, b.now);
    let ixs = b.validator_equivocation_ixs(&signing_key(byz), &byz.pubkey(), &stranger.key.pubkey(), stranger.stake, job, (r, 60), (r, 61));
    let e: ValidatorEquivocationSlashed = event(&b.send(&ixs, &[&stranger.key]).unwrap().logs);
    assert_eq!((e.slashed, e.reward), (312, 0));
}

// ---- a member that leaves ---------------------------------------------------------------------

/// A running 1-GPU job (deposit 10_000, started at `T0`) with the committee [bench validator A,
/// B] and quorum 2; returns (bench, job, B's key, B's Validator account).
fn two_of_two() -> (Bench, Pubkey, Keypair, Pubkey) {
    let mut b = Bench::new();
    let (v, account) = b.add_validator(5_000);
    b.committee.push(v.key.pubkey());
    b.quorum = 2;
    let (job, _) = b.running_job(1, 1, 10_000);
    (b, job, v.key, account)
}

/// [Ed25519(worker over `r`, the bench validator A's attestation), settle submitted by `submitter`
/// (a member other than A) with A's Validator account]: the quorum-2 settle led by `submitter`.
fn settle_led_by(b: &Bench, submitter: &Pubkey, job: Pubkey, r: gpu_market::Receipt) -> Vec<gpum_localnet::solana_instruction::Instruction> {
    let msg = gpu_market::receipt::attestation_message(&b.receipt_digest(&job, &r), r.cumulative_seconds);
    let a = signing_key(&b.va_kp());
    let mut settle = b.ix_settle(submitter, job, r);
    settle.accounts.push(meta(b.validator, true));
    vec![ed25519_settle_ix(&b.worker, &[&a], &msg), settle]
}

/// The user's own validator B in a 2-of-2 committee [A, B] requests its exit (free: its bond
/// just unbonds) after the worker proved three windows. An exiting member still attests and
/// submits settlements of the jobs whose committee it is in, so the seconds proved before and
/// after the exit are paid, whoever of A and B leads.
#[test]
fn attack_member_exiting_cannot_stall_the_proved_seconds() {
    let (mut b, job, v, v_account) = two_of_two();
    b.advance(180);
    b.send(&[b.ix_request_validator_exit(&v.pubkey())], &[&v]).unwrap();
    let ixs = b.quorum_settle_ixs(job, receipt(3, 180, b.now), &[&v], &[v_account]);
    b.as_va(&ixs);
    assert_eq!(b.job_state(&job).paid_seconds, 180, "the exit stalls nothing");
    b.advance(60);
    let ixs = settle_led_by(&b, &v.pubkey(), job, receipt(4, 240, b.now));
    b.send(&ixs, &[&v]).unwrap();
    let j = b.job_state(&job);
    assert_eq!((j.claimed_seconds, j.paid_seconds, j.last_seq), (240, 240, 4));
    assert_eq!(b.token_balance(&b.provider_owner.payment), 240 * 10 - 240);
    let exiting: Validator = b.account(&v_account).unwrap();
    assert_eq!((exiting.status, exiting.bond, exiting.unbonding.amount, exiting.settlements), (ValidatorStatus::Exiting, 0, 5_000, 1));
}

/// A member force-exited by an equivocation slash still counts in its committees' quorums while
/// its bond unbonds (its co-members' pay for the provider does not hang on its status), and it
/// stays slashable: evidence of a second incident takes its share of what is still unbonding
/// and restarts the unbonding.
#[test]
fn attack_slashed_member_does_not_stall_its_co_members_and_stays_slashable() {
    let (mut b, job, v, v_account) = two_of_two();
    b.advance(120);
    let reporter = Party { key: b.user_kp(), payment: b.user.payment, stake: b.user.stake };
    let r1 = receipt(1, 60, T0 + 60);
    let ixs = b.validator_equivocation_ixs(&signing_key(&v), &v.pubkey(), &reporter.key.pubkey(), reporter.stake, job, (r1, 60), (r1, 59));
    b.send(&ixs, &[&reporter.key]).unwrap();
    let slashed: Validator = b.account(&v_account).unwrap();
    assert_eq!((slashed.status, slashed.unbonding.amount), (ValidatorStatus::Exiting, 2_500));
    let ixs = b.quorum_settle_ixs(job, receipt(2, 120, b.now), &[&v], &[v_account]);
    b.as_va(&ixs);
    assert_eq!(b.job_state(&job).paid_seconds, 120);
    b.advance(60);
    let r3 = receipt(3, 180, b.now);
    let ixs = b.validator_equivocation_ixs(&signing_key(&v), &v.pubkey(), &reporter.key.pubkey(), reporter.stake, job, (r3, 180), (r3, 170));
    b.send(&ixs, &[&reporter.key]).unwrap();
    let again: Validator = b.account(&v_account).unwrap();
    assert_eq!((again.unbonding.amount, again.unbonding.release_at, again.slashes), (1_250, b.now + 14 * 86_400, 2));
}

/// A member that withdrew its bond has no Validator account: it attests and submits nothing
/// (its unbonding period is how long the user has to replace it), and the user's replacement
/// settles again.
#[test]
fn fail_settle_with_a_member_whose_account_closed() {
    let (mut b, job, v, v_account) = two_of_two();
    let v_stake = b.token_accounts_of(&v.pubkey(), &b.stake_mint)[0];
    b.send(&[b.ix_request_validator_exit(&v.pubkey())], &[&v]).unwrap();
    b.advance(14 * 86_400);
    b.send(&[b.ix_withdraw_validator_bond(&v.pubkey(), v_stake)], &[&v]).unwrap();
    let r = receipt(1, 60, b.now);
    let ixs = b.quorum_settle_ixs(job, r, &[&v], &[v_account]);
    assert_eq!(b.va_err(&ixs), anchor_err(1, anchor_lang::error::ErrorCode::AccountNotInitialized));
    let ixs = settle_led_by(&b, &v.pubkey(), job, r);
    assert_eq!(b.send_err(&ixs, &[&v]), anchor_err(1, anchor_lang::error::ErrorCode::AccountNotInitialized));
    assert_eq!(b.job_state(&job).last_seq, 0);
    let (newcomer, newcomer_account) = b.add_validator(5_000);
    let user = b.user_kp();
    b.as_user(&[b.ix_replace_committee_member(&user.pubkey(), job, 1, &v.pubkey(), &newcomer.key.pubkey())]);
    let ixs = b.quorum_settle_ixs(job, r, &[&newcomer.key], &[newcomer_account]);
    b.as_va(&ixs);
    assert_eq!(b.job_state(&job).paid_seconds, 60);
}

// ---- rewards at bond withdrawal --------------------------------------------------------------

/// A validator with unclaimed rewards cannot close its account and strand them in the books:
/// it claims first, and the fee vault then holds exactly what the books owe.
#[test]
fn attack_withdrawing_the_bond_does_not_strand_rewards() {
    let mut b = Bench::with_params(MarketParams { validator_reward_bps: 5_000, ..default_params() });
    let (job, _) = b.running_job(1, 1, 100_000);
    b.advance(61);
    b.settle(job, receipt(1, 61, b.now)).unwrap();
    let va = b.va_kp();
    assert_eq!(b.validator_state().rewards_unclaimed, 30);
    b.as_va(&[b.ix_request_validator_exit(&va.pubkey())]);
    b.advance(default_params().unbonding_seconds);
    let withdraw = b.ix_withdraw_validator_bond(&va.pubkey(), b.validator_stake_account());
    assert_eq!(b.va_err(&[withdraw.clone()]), program_err(0, E::RewardsUnclaimed));
    let dest = b.create_token_account(b.payment_mint, &va.pubkey());
    b.as_va(&[b.ix_claim_validator_rewards(&va.pubkey(), dest), withdraw]);
    assert_eq!(b.token_balance(&dest), 30);
    assert!(b.account::<Validator>(&b.validator).is_none());
    let m = b.market_state();
    assert_eq!(m.totals.rewards_unclaimed, 0);
    let stranger = b.new_party(0, 0);
    b.send(&[b.ix_withdraw_fees()], &[&stranger.key]).unwrap();
    assert_eq!(b.token_balance(&b.fee_vault), 0, "nothing is left that nobody can move");
}

// ---- job terms the user signed for ----------------------------------------------------------

/// With `unbonding_seconds == 0` the authority announces a 25 % fee right before the user's
/// `create_job` lands: the change is not in force yet (minimum announcement delay), and once it
/// is, a `create_job` signed for the old parameters is refused.
#[test]
fn attack_authority_changes_terms_under_a_signed_create_job() {
    let mut b = Bench::with_params(MarketParams { unbonding_seconds: 0, ..default_params() });
    let read = b.market_state().params_at(b.now);
    let signed = b.ix_create_job(&b.user, 1, 1, 10_000);
    b.as_admin(&[b.ix_update_params(&b.admin.pubkey(), MarketParams { fee_bps: 2_500, unbonding_seconds: 0, ..default_params() })]);
    b.as_user(&[signed]);
    let (job, _) = b.job_address(&b.user.key.pubkey(), 1);
    assert_eq!(b.job_state(&job).terms.fee_bps, read.fee_bps, "the terms the user read");
    let signed = b.ix_create_job(&b.user, 2, 1, 10_000);
    b.advance(gpu_market::state::MIN_PARAMS_DELAY_SECONDS);
    assert_eq!(b.user_err(&[signed]), program_err(0, E::MarketParamsChanged));
    b.as_user(&[b.ix_create_job(&b.user, 2, 1, 10_000)]);
    let (job, _) = b.job_address(&b.user.key.pubkey(), 2);
    assert_eq!(b.job_state(&job).terms.fee_bps, 2_500);
    assert_eq!(b.provider_state().stake, STAKED);
}

/// `close_job` loads the job by hand (it leaves a tombstone, which Anchor's `Account<Job>`
/// cannot): copies of a closable Job owned by another program, or another account type, are
/// refused and nothing moves (their escrow PDA never exists; the owner and discriminator checks
/// stand behind that).
#[test]
fn fail_close_job_on_a_fake_or_foreign_job_account() {
    let mut b = Bench::new();
    let user = b.user_kp();
    let (job, escrow) = b.open_job(1, 1, 10_000);
    b.as_user(&[b.ix_cancel_job(&user.pubkey(), job, b.user.payment)]);
    for owner in [SYSTEM_PROGRAM, Pubkey::new_unique()] {
        let mut account = b.svm.get_account(&job).unwrap();
        account.owner = owner;
        let fake = Pubkey::new_unique();
        b.svm.set_account(fake, account).unwrap();
        let ix = swap_account(b.ix_close_job(&user.pubkey(), b.user.payment, job), job, fake);
        let ix = swap_account(ix, escrow, escrow_address(&fake));
        assert_eq!(b.user_err(&[ix]), anchor_err(0, anchor_lang::error::ErrorCode::AccountNotInitialized));
    }
    // The real escrow with another program account as the job: the escrow's seeds fail.
    let ix = swap_account(b.ix_close_job(&user.pubkey(), b.user.payment, job), job, b.provider);
    assert_eq!(b.user_err(&[ix]), anchor_err(0, anchor_lang::error::ErrorCode::ConstraintSeeds));
    assert!(b.account::<gpu_market::state::Job>(&job).is_some());
    b.as_user(&[b.ix_close_job(&user.pubkey(), b.user.payment, job)]);
    assert!(b.is_tombstone(&job));
}
