//! Every hole the outside security review confirmed, written as the attack. Each test fails on
//! the code before the hardening (the attack succeeded there) and passes now.
mod common;

use anchor_lang::prelude::Pubkey;
use common::*;
use ed25519_dalek::SigningKey;
use gpu_market::errors::GpuMarketError as E;
use gpu_market::events::{JobClosed, JobCompleted, Settled};
use gpu_market::state::{JobStatus, MarketParams, ProviderStatus};
use gpu_market::Receipt;
use gpum_localnet::solana_keypair::Keypair;
use gpum_localnet::solana_signer::Signer;

const UNBONDING: i64 = 14 * 86_400;
/// Default terms: 60 s windows, 10 missed windows, grace (10 + 2) windows.
const GRACE: i64 = 12 * 60;

fn close_ix(b: &Bench, job: Pubkey) -> gpum_localnet::solana_instruction::Instruction {
    b.ix_close_job(&b.user.key.pubkey(), b.user.payment, job)
}

// ---- 1. donations never block anything ------------------------------------------------------

#[test]
fn donation_to_escrow_blocks_no_settle_top_up_finish_or_close_and_goes_to_the_user() {
    let mut b = Bench::new();
    let (job, escrow) = b.running_job(1, 1, 10_000);
    b.donate(b.payment_mint, escrow, 1);
    b.advance(60);
    b.settle(job, receipt(1, 60, T0 + 60)).expect("settle with a donated escrow");
    let top_up = b.ix_top_up(&b.user.key.pubkey(), b.user.payment, job, 1_000);
    b.as_user(&[top_up]);
    b.donate(b.payment_mint, escrow, 5);
    b.finish(job);
    b.settle(job, receipt(2, 60, T0 + 60)).unwrap_err(); // WindowNotAfterLast: nothing new
    b.advance(GRACE + 1);
    let before = b.token_balance(&b.user.payment);
    let logs = b.as_user(&[close_ix(&b, job)]);
    // Booked: 11_000 - 600 paid; surplus 6 donated: all of it to the user.
    assert_eq!(b.token_balance(&b.user.payment) - before, 10_400 + 6);
    let closed: JobClosed = event(&logs);
    assert_eq!((closed.refunded, closed.surplus_returned), (10_400, 6));
}

#[test]
fn donation_to_escrow_is_never_paid_to_the_provider() {
    let mut b = Bench::new();
    let (job, escrow) = b.running_job(1, 1, 600); // exactly one window
    b.donate(b.payment_mint, escrow, 1_000_000);
    b.advance(120);
    let logs = b.settle(job, receipt(1, 120, T0 + 120)).unwrap().logs;
    let s: Settled = event(&logs);
    assert_eq!((s.billed_seconds, s.amount, s.escrow_remaining, s.exhausted), (60, 600, 0, true));
    assert_eq!(b.job_state(&job).status, JobStatus::Completed);
    let before = b.token_balance(&b.user.payment);
    b.as_user(&[close_ix(&b, job)]);
    assert_eq!(b.token_balance(&b.user.payment) - before, 1_000_000);
}

#[test]
fn donation_to_open_job_then_cancel_refunds_everything() {
    let mut b = Bench::new();
    let (job, escrow) = b.open_job(1, 1, 1_000);
    b.donate(b.payment_mint, escrow, 1);
    let before = b.token_balance(&b.user.payment);
    let ix = b.ix_cancel_job(&b.user.key.pubkey(), job, b.user.payment);
    b.as_user(&[ix]);
    assert_eq!(b.token_balance(&b.user.payment) - before, 1_001);
    b.as_user(&[close_ix(&b, job)]);
}

#[test]
fn donation_to_stake_vault_blocks_no_stake_unstake_withdraw_registration_or_slash_and_is_swept() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.donate(b.stake_mint, b.stake_vault, 1);
    let owner = b.provider_owner.key.pubkey();
    let ix = b.ix_stake(&owner, b.provider_owner.stake, 10);
    b.as_owner(&[ix]);
    let ix = b.ix_request_unstake(&owner, 10);
    b.as_owner(&[ix]);
    b.add_validator(5_000);
    b.advance(UNBONDING);
    let ix = b.ix_withdraw_unstaked(&owner, b.provider_owner.stake);
    b.as_owner(&[ix]);
    let reporter = b.new_party(0, 0);
    let (first, second) = equivocating_pair(1, 1, b.started(&job) + 1);
    let ixs = b.equivocation_ixs(&b.worker.clone(), &reporter.key.pubkey(), reporter.stake, job, first, second);
    b.send(&ixs, &[&reporter.key]).expect("slash with a donated vault");

    // The surplus goes to a stake-mint account of the treasury's owner (the admin), by anyone.
    let admin_stake = b.create_token_account(b.stake_mint, &b.admin.pubkey());
    let wrong = b.create_token_account(b.stake_mint, &reporter.key.pubkey());
    let ix = b.ix_sweep_vault(wrong);
    assert_eq!(b.send_err(&[ix], &[&reporter.key]), program_err(0, E::InvalidSweepDestination));
    let ix = b.ix_sweep_vault(admin_stake);
    b.send(&[ix], &[&reporter.key]).unwrap();
    assert_eq!(b.token_balance(&admin_stake), 1);
    let m = b.market_state();
    assert_eq!(b.token_balance(&b.stake_vault), m.totals.staked + m.totals.bonded);
    let ix = b.ix_sweep_vault(admin_stake);
    assert_eq!(b.send_err(&[ix], &[&reporter.key]), program_err(0, E::NothingToSweep));
}

// ---- 2. the authority never reaches stake or running jobs ------------------------------------

fn hostile(p: MarketParams) -> MarketParams {
    MarketParams {
        window_seconds: 1,
        max_missed_windows: 1,
        downtime_slash_bps: 10_000,
        equivocation_slash_bps: 10_000,
        reporter_reward_bps: 5_000,
        min_quorum: 1,
        ..p
    }
}

#[test]
fn authority_cannot_seize_stake_with_a_parameter_change_and_its_own_validator() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    // The review's one transaction: 100 % reward is out of bounds now.
    let all = MarketParams { reporter_reward_bps: 10_000, ..hostile(default_params()) };
    let ix = b.ix_update_params(&b.admin.pubkey(), all);
    assert_eq!(b.admin_err(&[ix]), program_err(0, E::ReporterRewardTooHigh));
    let ix = b.ix_update_params(&b.admin.pubkey(), hostile(default_params()));
    b.as_admin(&[ix]);
    let m = b.market_state();
    assert_eq!(m.params, default_params(), "nothing changes before unbonding_seconds");
    assert_eq!(m.params_effective_at, T0 + UNBONDING);
    // The authority's own validator reports downtime two seconds later: the job's terms hold.
    let admin = b.admin_kp();
    let admin_party = b.fund_party(admin.insecure_clone(), 5_000, 0);
    let ix = b.ix_register_validator(&admin.pubkey(), admin_party.stake, 5_000);
    b.as_admin(&[ix]);
    b.advance(2);
    // Its validator is not in the committee the user chose: only members can report, so it can report nothing.
    let ix = b.ix_slash_downtime(&admin.pubkey(), admin_party.stake, job, &[]);
    assert_eq!(b.admin_err(&[ix]), program_err(0, E::NotCommitteeMember));
    // The job's own committee member cannot either, 2 seconds in: the job's terms hold.
    let va = b.va_kp();
    let stake = b.validator_stake_account();
    let ix = b.ix_slash_downtime(&va.pubkey(), stake, job, &[]);
    assert_eq!(b.va_err(&[ix]), program_err(0, E::NotEnoughMissedWindows));
    assert_eq!(b.provider_state().stake, 100_000);
    // Even once the change is in force, the running job keeps its terms.
    b.set_time(T0 + UNBONDING);
    let ix = b.ix_slash_downtime(&va.pubkey(), stake, job, &[]);
    b.as_va(&[ix]); // 14 days of silence is downtime under the job's own terms
    assert_eq!(b.provider_state().stake, 99_000, "1 % (the job's downtime_slash_bps), not 100 %");
}

#[test]
fn parameter_change_applies_only_to_jobs_created_after_it_is_in_force() {
    let mut b = Bench::new();
    let new = MarketParams { fee_bps: 2_000, window_seconds: 30, ..default_params() };
    let ix = b.ix_update_params(&b.admin.pubkey(), new);
    b.as_admin(&[ix]);
    // A provider who disagrees unbonds in time: its release comes no later than the change.
    let owner = b.provider_owner.key.pubkey();
    let ix = b.ix_request_unstake(&owner, 1);
    b.as_owner(&[ix]);
    assert!(b.provider_state().unbonding.release_at <= b.market_state().params_effective_at);
    let (before, _) = b.running_job(1, 1, 10_000);
    assert_eq!((b.job_state(&before).terms.fee_bps, b.job_state(&before).terms.window_seconds), (1_000, 60));
    b.set_time(T0 + UNBONDING);
    let (after, _) = b.running_job(2, 1, 10_000);
    assert_eq!((b.job_state(&after).terms.fee_bps, b.job_state(&after).terms.window_seconds), (2_000, 30));
    assert_eq!(b.market_state().params, new, "create_job promoted the pending params");
    assert_eq!(b.job_state(&before).terms.fee_bps, 1_000);
}

#[test]
fn quorum_raise_cannot_stall_running_jobs() {
    // unbonding 0: changes apply after the minimum delay, and still the running job settles
    // with its quorum.
    let mut b = Bench::with_params(MarketParams { unbonding_seconds: 0, ..default_params() });
    let (job, _) = b.running_job(1, 1, 10_000);
    let ix = b.ix_update_params(&b.admin.pubkey(), MarketParams { unbonding_seconds: 0, min_quorum: 3, ..default_params() });
    b.as_admin(&[ix]);
    b.advance(gpu_market::state::MIN_PARAMS_DELAY_SECONDS);
    assert_eq!(b.market_state().params_at(b.now).min_quorum, 3);
    let started = b.started(&job);
    b.settle(job, receipt(1, 60, started + 60)).expect("the job's quorum of 1 still settles");
}

#[test]
fn every_parameter_keeps_a_usable_bound() {
    let mut b = Bench::new();
    let cases = [
        (MarketParams { min_quorum: 4, ..default_params() }, E::InvalidQuorum),
        (MarketParams { max_missed_windows: 1_441, ..default_params() }, E::InvalidMaxMissedWindows),
        (MarketParams { reporter_reward_bps: 5_001, ..default_params() }, E::ReporterRewardTooHigh),
        (MarketParams { temp_critical_c: 49, ..default_params() }, E::InvalidHealthThresholds),
        (MarketParams { ecc_uncorrected_max: 1_000_001, ..default_params() }, E::InvalidHealthThresholds),
    ];
    for (params, error) in cases {
        let ix = b.ix_update_params(&b.admin.pubkey(), params);
        assert_eq!(b.admin_err(&[ix]), program_err(0, error));
    }
}

// ---- 3. billing never exceeds wall time, in total ---------------------------------------------

#[test]
fn many_short_receipts_cannot_bill_more_than_wall_time() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 1_000_000);
    // Each 1-second receipt claims 6 s (1 s + the 5 s skew). Before: 60 of them billed 360 s.
    b.advance(1);
    b.settle(job, receipt(1, 6, T0 + 1)).unwrap(); // 6 <= 1 + 5: the skew once
    for seq in 2..=60u64 {
        b.advance(1);
        let err = b.settle(job, receipt(seq, 6 * seq, T0 + seq as i64)).unwrap_err().err;
        assert_eq!(err, program_err(1, E::BilledSecondsExceedWallTime));
    }
    b.settle(job, receipt(61, 65, T0 + 60)).unwrap();
    let j = b.job_state(&job);
    assert_eq!(j.paid_seconds, 65, "60 s of wall time + 5 s skew, in total");
}

#[test]
fn finished_job_bills_at_most_its_running_time() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 1_000_000);
    b.advance(100);
    b.finish(job);
    b.advance(10);
    let err = b.settle(job, receipt(1, 101, T0 + 100)).unwrap_err().err;
    assert_eq!(err, program_err(1, E::BilledSecondsExceedWallTime));
    b.settle(job, receipt(1, 100, T0 + 100)).unwrap();
}

// ---- 4. nobody holds a provider hostage -------------------------------------------------------

#[test]
fn finished_job_never_closed_by_its_user_is_completed_by_anyone_after_the_grace() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 2, 10_000);
    b.finish(job);
    let stranger = Keypair::new();
    b.svm.airdrop(&stranger.pubkey(), 1_000_000_000).unwrap();
    b.advance(GRACE);
    let ix = b.ix_complete_job(&stranger.pubkey(), job);
    assert_eq!(b.send_err(&[ix.clone()], &[&stranger]), program_err(0, E::GracePeriodActive));
    b.advance(1);
    let logs = b.send(&[ix.clone()], &[&stranger]).unwrap().logs;
    assert_event(&logs, JobCompleted { job, by: stranger.pubkey(), paid_seconds: 0 });
    let p = b.provider_state();
    assert_eq!((p.gpus_in_use, p.reputation.jobs_completed), (0, 0), "GPUs free; nothing billed, nothing earned");
    assert_eq!(b.send_err(&[ix], &[&stranger]), program_err(0, E::InvalidJobStatus));
    // The provider can now leave with all its stake.
    let ix = b.ix_request_unstake(&b.provider_owner.key.pubkey(), 100_000);
    b.as_owner(&[ix]);
    // The user still gets its money back.
    b.as_user(&[close_ix(&b, job)]);
}

#[test]
fn provider_declines_an_open_job_and_the_user_gets_everything_back() {
    let mut b = Bench::new();
    let (job, _) = b.open_job(1, 3, 5_000);
    let stranger = b.new_party(0, 0);
    let ix = b.ix_decline_job(&stranger.key.pubkey(), job);
    assert_eq!(b.send_err(&[ix], &[&stranger.key]), program_err(0, E::NotProviderSigner));
    let worker = b.worker_kp();
    b.svm.airdrop(&worker.pubkey(), 1_000_000_000).unwrap();
    let ix = b.ix_decline_job(&worker.pubkey(), job);
    b.send(&[ix.clone()], &[&worker]).unwrap();
    let (j, p) = (b.job_state(&job), b.provider_state());
    assert_eq!((j.status, p.gpus_in_use, p.reputation.jobs_failed), (JobStatus::Declined, 0, 0));
    assert_eq!(b.send_err(&[ix], &[&worker]), program_err(0, E::InvalidJobStatus));
    let before = b.token_balance(&b.user.payment);
    b.as_user(&[close_ix(&b, job)]);
    assert_eq!(b.token_balance(&b.user.payment) - before, 5_000);
}

#[test]
fn decline_of_a_running_job_fails() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 5_000);
    let ix = b.ix_decline_job(&b.provider_owner.key.pubkey(), job);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::InvalidJobStatus));
}

#[test]
fn expire_needs_no_account_of_the_user() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 5_000);
    b.advance(10 * 60 + GRACE + 1);
    let stranger = b.new_party(0, 0);
    let ix = b.ix_expire_job(&stranger.key.pubkey(), job);
    b.send(&[ix], &[&stranger.key]).unwrap();
    assert_eq!((b.job_state(&job).status, b.provider_state().gpus_in_use), (JobStatus::Failed, 0));
}

// ---- 5. retired worker keys --------------------------------------------------------------------

fn rotate(b: &mut Bench, new: &SigningKey) {
    let ix = b.ix_rotate_worker_key(&b.provider_owner.key.pubkey(), worker_pubkey(new), 0);
    b.as_owner(&[ix]);
}

fn slash_with(b: &mut Bench, signer: &SigningKey, job: Pubkey, seq: u64, window_end: i64) -> Result<(), gpum_localnet::solana_transaction_error::TransactionError> {
    let reporter = b.new_party(0, 0);
    let (first, second) = equivocating_pair(seq, 1, window_end);
    let ixs = b.equivocation_ixs(signer, &reporter.key.pubkey(), reporter.stake, job, first, second);
    b.send(&ixs, &[&reporter.key]).map(|_| ()).map_err(|e| e.err)
}

#[test]
fn retired_key_cannot_slash_for_windows_after_its_retirement() {
    let mut b = Bench::new();
    let old = b.worker.clone();
    b.advance(10);
    rotate(&mut b, &SigningKey::from_bytes(&[9; 32]));
    b.advance(10);
    let (job, _) = b.running_job(1, 1, 10_000);
    b.advance(60);
    let now = b.now;
    let err = slash_with(&mut b, &old, job, 1, now).unwrap_err();
    assert_eq!(err, program_err(1, E::WrongReceiptSigner));
    assert_eq!(b.provider_state().stake, 100_000);
}

#[test]
fn one_incident_is_punished_once_whatever_the_seq_or_job() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let (other, _) = b.running_job(2, 1, 10_000);
    b.advance(60);
    let worker = b.worker.clone();
    slash_with(&mut b, &worker, job, 1, T0 + 30).unwrap();
    let slashed = b.provider_state().stake;
    assert_eq!(slashed, 50_000);
    for (j, seq) in [(job, 2), (job, 3), (other, 1)] {
        let err = slash_with(&mut b, &worker, j, seq, T0 + 40).unwrap_err();
        assert_eq!(err, program_err(1, E::EquivocationAlreadyPunished));
    }
    assert_eq!(b.provider_state().stake, slashed);
    assert_eq!(b.provider_state().reputation.slashes, 1);
}

#[test]
fn rotating_twice_in_one_transaction_does_not_erase_evidence() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.advance(60);
    let cheater = b.worker.clone();
    let (k2, k3) = (SigningKey::from_bytes(&[2; 32]), SigningKey::from_bytes(&[3; 32]));
    let owner = b.provider_owner.key.pubkey();
    let ixs = [
        b.ix_rotate_worker_key(&owner, worker_pubkey(&k2), 0),
        b.ix_rotate_worker_key(&owner, worker_pubkey(&k3), 0),
    ];
    b.as_owner(&ixs);
    slash_with(&mut b, &cheater, job, 1, T0 + 60).expect("evidence by a key retired twice over");
    assert!(matches!(b.provider_state().status, ProviderStatus::Jailed { .. }));
}

#[test]
fn rotations_that_would_drop_recent_evidence_keys_are_refused() {
    let mut b = Bench::new();
    for i in 0..4u8 {
        rotate(&mut b, &SigningKey::from_bytes(&[20 + i; 32]));
    }
    let ix = b.ix_rotate_worker_key(&b.provider_owner.key.pubkey(), worker_pubkey(&SigningKey::from_bytes(&[30; 32])), 0);
    assert_eq!(b.owner_err(&[ix.clone()]), program_err(0, E::RotationTooSoon));
    b.advance(UNBONDING);
    b.as_owner(&[ix]);
}

#[test]
fn slashed_job_yields_no_further_slash_for_its_old_windows() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.advance(600);
    let worker = b.worker.clone();
    slash_with(&mut b, &worker, job, 1, T0 + 60).unwrap();
    assert_eq!(b.job_state(&job).status, JobStatus::Failed);
    for seq in 2..=10u64 {
        let err = slash_with(&mut b, &worker, job, seq, T0 + 60 * seq as i64).unwrap_err();
        assert_eq!(err, program_err(1, E::EquivocationAlreadyPunished));
    }
    assert_eq!(b.provider_state().stake, 50_000);
}

// ---- 6. finish does not cancel earned pay ---------------------------------------------------

#[test]
fn user_cannot_close_away_signed_unsettled_seconds() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 100_000);
    b.advance(130);
    b.finish(job);
    // Before: close was allowed 2 windows + 1 s after the end and refunded 120 signed seconds.
    b.advance(2 * 60 + 1);
    assert_eq!(b.user_err(&[close_ix(&b, job)]), program_err(0, E::GracePeriodActive));
    // A validator back from an outage of several windows still settles them.
    b.advance(5 * 60);
    b.settle(job, receipt(2, 120, T0 + 120)).unwrap();
    assert_eq!(b.job_state(&job).paid_provider, 1_080);
    b.set_time(T0 + 130 + GRACE + 1);
    b.as_user(&[close_ix(&b, job)]);
    assert_eq!(b.provider_state().reputation.jobs_completed, 1);
}

// ---- 7. smaller ones --------------------------------------------------------------------------

#[test]
fn jobs_completed_counts_only_jobs_that_billed_something() {
    let mut b = Bench::new();
    for id in 1..=3 {
        let (job, _) = b.running_job(id, 1, 1_000);
        b.finish(job);
        b.advance(GRACE + 1);
        b.as_user(&[close_ix(&b, job)]);
    }
    assert_eq!(b.provider_state().reputation.jobs_completed, 0);
}

#[test]
fn tiny_settlements_pay_the_fee() {
    let mut b = Bench::new();
    let ix = b.ix_update_provider(&b.provider_owner.key.pubkey(), gpu_market::instructions::UpdateProviderArgs { price_per_gpu_second: Some(1), ..no_update() });
    b.as_owner(&[ix]);
    let (job, _) = b.running_job(1, 1, 1_000);
    for seq in 1..=5u64 {
        b.advance(1);
        let logs = b.settle(job, receipt(seq, seq, T0 + seq as i64)).unwrap().logs;
        let s: Settled = event(&logs);
        assert_eq!((s.amount, s.fee), (1, 1), "ceil(1 * 10 %) = 1; before: 0");
    }
    assert_eq!(b.market_state().totals.fees, 5);
}

#[test]
fn authority_closing_its_treasury_cannot_stall_settlement() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    // Before: settle paid the treasury account directly, so an authority that closed it (or a
    // treasury frozen by the mint) stopped every settlement. Now fees wait in the fee vault.
    let admin = b.admin_kp();
    let ix = gpum_localnet::spl_token_interface::instruction::close_account(&TOKEN_PROGRAM, &b.treasury, &admin.pubkey(), &admin.pubkey(), &[]).unwrap();
    b.as_admin(&[ix]);
    b.advance(60);
    b.settle(job, receipt(1, 60, T0 + 60)).expect("settlement does not touch the treasury");
    assert_eq!(b.token_balance(&b.fee_vault), 30);
    let stranger = b.new_party(0, 0);
    let ix = b.ix_withdraw_fees();
    assert!(b.send(&[ix], &[&stranger.key]).is_err(), "nowhere to withdraw to until set_treasury");
    // set_treasury: authority only, payment mint, not frozen.
    let fresh = b.create_token_account(b.payment_mint, &admin.pubkey());
    let ix = b.ix_set_treasury(&b.user.key.pubkey(), fresh);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotMarketAuthority));
    let wrong_mint = b.create_token_account(b.stake_mint, &admin.pubkey());
    let ix = b.ix_set_treasury(&admin.pubkey(), wrong_mint);
    assert_eq!(b.admin_err(&[ix]), program_err(0, E::InvalidTreasury));
    let frozen = b.create_token_account(b.payment_mint, &admin.pubkey());
    let mut acc = b.svm.get_account(&frozen).unwrap();
    acc.data[108] = 2; // AccountState::Frozen
    b.svm.set_account(frozen, acc).unwrap();
    let ix = b.ix_set_treasury(&admin.pubkey(), frozen);
    assert_eq!(b.admin_err(&[ix]), program_err(0, E::TreasuryNotUsable));
    let ix = b.ix_set_treasury(&admin.pubkey(), fresh);
    b.as_admin(&[ix]);
    // Anyone forwards the fees; an empty vault is refused.
    let logs = b.send(&[b.ix_withdraw_fees()], &[&stranger.key]).unwrap().logs;
    assert_event(&logs, gpu_market::events::FeesWithdrawn { market: b.market, treasury: fresh, amount: 30 });
    assert_eq!((b.token_balance(&fresh), b.token_balance(&b.fee_vault)), (30, 0));
    let ix = b.ix_withdraw_fees();
    assert_eq!(b.send_err(&[ix], &[&stranger.key]), program_err(0, E::NothingToWithdrawFees));
}

#[test]
fn provider_cannot_front_run_a_job_with_a_price_rise() {
    let mut b = Bench::new();
    // The user saw 10 per GPU-second and signs that limit; the provider raises its price first.
    let ix = b.ix_update_provider(&b.provider_owner.key.pubkey(), gpu_market::instructions::UpdateProviderArgs { price_per_gpu_second: Some(1_000), ..no_update() });
    b.as_owner(&[ix]);
    let ix = b.ix_create_job_capped(&b.user, 1, 1, 60_000, 10);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::PriceAboveLimit));
    let ix = b.ix_create_job_capped(&b.user, 1, 1, 60_000, 1_000);
    b.as_user(&[ix]);
}

#[test]
fn expired_worker_key_reports_worker_key_expired() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let open = b.open_job(2, 1, 10_000).0;
    let owner = b.provider_owner.key.pubkey();
    let fresh = SigningKey::from_bytes(&[44; 32]);
    let ix = b.ix_rotate_worker_key(&owner, worker_pubkey(&fresh), T0 + 100);
    b.as_owner(&[ix]);
    b.worker = fresh.clone();
    b.set_time(T0 + 200);
    let err = b.settle(job, receipt(1, 150, T0 + 150)).unwrap_err().err;
    assert_eq!(err, program_err(1, E::WorkerKeyExpired));
    let worker = Keypair::new_from_array(fresh.to_bytes());
    b.svm.airdrop(&worker.pubkey(), 1_000_000_000).unwrap();
    let ix = b.ix_accept_job(&worker.pubkey(), open);
    assert_eq!(b.send_err(&[ix], &[&worker]), program_err(0, E::WorkerKeyExpired));
}

#[test]
fn slash_of_a_completed_job_does_not_count_it_failed() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 600);
    b.advance(60);
    b.settle(job, receipt(1, 60, T0 + 60)).unwrap();
    assert_eq!(b.job_state(&job).status, JobStatus::Completed);
    let worker = b.worker.clone();
    slash_with(&mut b, &worker, job, 2, T0 + 60).unwrap();
    let p = b.provider_state();
    assert_eq!((p.reputation.jobs_completed, p.reputation.jobs_failed, p.reputation.slashes), (1, 0, 1));
    assert_eq!(b.job_state(&job).status, JobStatus::Completed);
}

#[test]
fn retired_key_receipt_settles_within_the_rotation_grace() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    let old = b.worker.clone();
    b.advance(60);
    rotate(&mut b, &SigningKey::from_bytes(&[9; 32]));
    b.advance(30);
    let r: Receipt = receipt(1, 60, T0 + 60);
    let ixs = b.settle_ixs(&old, job, r);
    b.as_va(&ixs);
    // A window ending after the rotation is refused for the retired key.
    let ixs = b.settle_ixs(&old, job, receipt(2, 90, T0 + 90));
    assert_eq!(b.va_err(&ixs), program_err(1, E::WrongReceiptSigner));
}
