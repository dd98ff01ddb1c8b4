//! initialize_market, update_params, set_paused, propose_authority, accept_authority, and what a
//! pause blocks (new business) and does not block (everything else).
mod common;

use common::*;
use gpu_market::errors::GpuMarketError as E;
use gpu_market::events::*;
use gpu_market::state::{
    Market, MarketParams, MarketTotals, MAX_HARDWARE_QUORUM, MAX_UNBONDING_SECONDS, MAX_VERIFIED_RECORD_SECONDS,
    MIN_PARAMS_DELAY_SECONDS,
};
use gpum_localnet::solana_keypair::Keypair;
use gpum_localnet::solana_signer::Signer;
use gpum_localnet::solana_instruction::error::InstructionError;
use gpum_localnet::solana_transaction_error::TransactionError;

fn market_at(b: &Bench, id: u64) -> anchor_lang::prelude::Pubkey {
    pda(&[gpu_market::seeds::MARKET, b.admin.pubkey().as_ref(), &id.to_le_bytes()])
}

#[test]
fn success_initialize_market_creates_market_vault_and_event() {
    let mut b = Bench::new();
    let params = MarketParams { fee_bps: 250, ..default_params() };
    let logs = b.as_admin(&[b.ix_initialize_market(7, params)]);
    let market = market_at(&b, 7);
    let vault = pda(&[gpu_market::seeds::STAKE_VAULT, market.as_ref()]);
    let m: Market = b.account(&market).unwrap();
    assert_eq!((m.authority, m.creator, m.pending_authority, m.id), (b.admin.pubkey(), b.admin.pubkey(), Default::default(), 7));
    assert_eq!((m.stake_mint, m.payment_mint, m.stake_vault, m.treasury), (b.stake_mint, b.payment_mint, vault, b.treasury));
    assert_eq!((m.params, m.paused, m.totals), (params, false, MarketTotals::default()));
    assert_eq!(m.bump, anchor_lang::prelude::Pubkey::find_program_address(&[gpu_market::seeds::MARKET, b.admin.pubkey().as_ref(), &7u64.to_le_bytes()], &gpu_market::ID).1);
    // The vault is a stake-mint token account whose authority is the market PDA.
    let v = b.svm.get_account(&vault).unwrap();
    assert_eq!(v.owner, TOKEN_PROGRAM);
    assert_eq!(&v.data[0..32], b.stake_mint.as_ref());
    assert_eq!(&v.data[32..64], market.as_ref());
    // So is the fee vault, of the payment mint.
    let fee_vault = pda(&[gpu_market::seeds::FEE_VAULT, market.as_ref()]);
    assert_eq!(m.fee_vault, fee_vault);
    let f = b.svm.get_account(&fee_vault).unwrap();
    assert_eq!((&f.data[0..32], &f.data[32..64]), (b.payment_mint.as_ref(), market.as_ref()));
    assert_event(&logs, MarketInitialized {
        market, authority: b.admin.pubkey(), id: 7, stake_mint: b.stake_mint,
        payment_mint: b.payment_mint, treasury: b.treasury, params,
    });
}

#[test]
fn fail_initialize_market_invalid_params() {
    let mut b = Bench::new();
    let ix = b.ix_initialize_market(1, MarketParams { fee_bps: 2_501, ..default_params() });
    assert_eq!(b.admin_err(&[ix]), program_err(0, E::FeeTooHigh));
    assert!(b.svm.get_account(&market_at(&b, 1)).is_none());
}

#[test]
fn fail_initialize_market_treasury_of_another_mint() {
    let mut b = Bench::new();
    let wrong = b.create_token_account(b.stake_mint, &b.admin.pubkey());
    let ix = swap_account(b.ix_initialize_market(1, default_params()), b.treasury, wrong);
    assert_eq!(b.admin_err(&[ix]), program_err(0, E::InvalidTreasury));
}

#[test]
fn fail_initialize_market_stake_mint_not_a_mint() {
    let mut b = Bench::new();
    // A token account is owned by the token program but does not unpack as a Mint.
    let ix = swap_account(b.ix_initialize_market(1, default_params()), b.stake_mint, b.treasury);
    assert_eq!(b.admin_err(&[ix]), TransactionError::InstructionError(0, InstructionError::InvalidAccountData));
}

// ---- update_params ---------------------------------------------------------------------------

#[test]
fn success_update_params_announces_and_applies_after_unbonding_seconds() {
    let mut b = Bench::new();
    let new = MarketParams { fee_bps: 2_500, burn_bps: 10_000, window_seconds: 3_600, max_skew_seconds: 300,
        unbonding_seconds: MAX_UNBONDING_SECONDS, min_quorum: 3, max_missed_windows: 1_440, validator_reward_bps: 10_000,
        reporter_reward_bps: 5_000, temp_critical_c: 150, ecc_uncorrected_max: 1_000_000, hardware_quorum: MAX_HARDWARE_QUORUM,
        hardware_attestation_max_age_seconds: 86_400, verified_record_seconds: MAX_VERIFIED_RECORD_SECONDS, ..default_params() };
    let logs = b.as_admin(&[b.ix_update_params(&b.admin.pubkey(), new)]);
    let effective_at = T0 + default_params().unbonding_seconds;
    let m = b.market_state();
    assert_eq!((m.params, m.pending_params, m.params_effective_at), (default_params(), new, effective_at));
    assert_eq!((m.params_at(effective_at - 1), m.params_at(effective_at)), (default_params(), new));
    assert_event(&logs, ParamsAnnounced { market: b.market, current: default_params(), pending: new, effective_at });
    // The other edges of the bounds are accepted too; the delay is the unbonding time in force
    // when announced (the new one here: a year).
    b.set_time(effective_at);
    let low = MarketParams { fee_bps: 0, burn_bps: 0, window_seconds: 1, max_skew_seconds: 0, unbonding_seconds: 0,
        min_quorum: 1, validator_reward_bps: 0, max_missed_windows: 1, temp_critical_c: 50, ecc_uncorrected_max: 0, reporter_reward_bps: 0,
        hardware_quorum: 1, hardware_attestation_max_age_seconds: 60, verified_record_seconds: 0, ..new };
    b.as_admin(&[b.ix_update_params(&b.admin.pubkey(), low)]);
    let m = b.market_state();
    assert_eq!((m.params, m.pending_params, m.params_effective_at), (new, low, effective_at + MAX_UNBONDING_SECONDS));
    // With unbonding_seconds == 0 in force, a change still waits MIN_PARAMS_DELAY_SECONDS.
    let now = effective_at + MAX_UNBONDING_SECONDS;
    b.set_time(now);
    let logs = b.as_admin(&[b.ix_update_params(&b.admin.pubkey(), default_params())]);
    let m = b.market_state();
    let due = now + MIN_PARAMS_DELAY_SECONDS;
    assert_eq!((m.params, m.pending_params, m.params_effective_at), (low, default_params(), due));
    assert_eq!((m.params_at(due - 1), m.params_at(due)), (low, default_params()));
    assert_event(&logs, ParamsAnnounced { market: b.market, current: low, pending: default_params(), effective_at: due });
}

#[test]
fn fail_update_params_not_authority() {
    let mut b = Bench::new();
    let owner = b.owner_kp();
    let ix = b.ix_update_params(&owner.pubkey(), MarketParams { fee_bps: 0, ..default_params() });
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::NotMarketAuthority));
    assert_eq!(b.market_state().params, default_params());
}

/// `update_params` with one field changed is rejected with `expected`; nothing changes.
fn assert_params_rejected(change: impl FnOnce(&mut MarketParams), expected: E) {
    let mut b = Bench::new();
    let mut params = default_params();
    change(&mut params);
    let ix = b.ix_update_params(&b.admin.pubkey(), params);
    assert_eq!(b.admin_err(&[ix]), program_err(0, expected));
    assert_eq!(b.market_state().params, default_params());
}

#[test]
fn fail_update_params_fee_bps_2501() { assert_params_rejected(|p| p.fee_bps = 2_501, E::FeeTooHigh) }
#[test]
fn fail_update_params_burn_bps_10001() { assert_params_rejected(|p| p.burn_bps = 10_001, E::BpsOutOfRange) }
#[test]
fn fail_update_params_downtime_slash_bps_10001() { assert_params_rejected(|p| p.downtime_slash_bps = 10_001, E::BpsOutOfRange) }
#[test]
fn fail_update_params_equivocation_slash_bps_10001() { assert_params_rejected(|p| p.equivocation_slash_bps = 10_001, E::BpsOutOfRange) }
#[test]
fn fail_update_params_reporter_reward_bps_5001() { assert_params_rejected(|p| p.reporter_reward_bps = 5_001, E::ReporterRewardTooHigh) }
#[test]
fn fail_update_params_quorum_4() { assert_params_rejected(|p| p.min_quorum = 4, E::InvalidQuorum) }
#[test]
fn fail_update_params_validator_reward_bps_10001() { assert_params_rejected(|p| p.validator_reward_bps = 10_001, E::BpsOutOfRange) }
#[test]
fn fail_update_params_max_missed_windows_1441() { assert_params_rejected(|p| p.max_missed_windows = 1_441, E::InvalidMaxMissedWindows) }
#[test]
fn fail_update_params_hardware_quorum_0() { assert_params_rejected(|p| p.hardware_quorum = 0, E::InvalidHardwareQuorum) }
#[test]
fn fail_update_params_hardware_quorum_6() { assert_params_rejected(|p| p.hardware_quorum = MAX_HARDWARE_QUORUM + 1, E::InvalidHardwareQuorum) }
#[test]
fn fail_update_params_hardware_attestation_max_age_59() { assert_params_rejected(|p| p.hardware_attestation_max_age_seconds = 59, E::InvalidHardwareAttestationAge) }
#[test]
fn fail_update_params_hardware_attestation_max_age_86401() { assert_params_rejected(|p| p.hardware_attestation_max_age_seconds = 86_401, E::InvalidHardwareAttestationAge) }
#[test]
fn fail_update_params_verified_record_over_a_year() { assert_params_rejected(|p| p.verified_record_seconds = MAX_VERIFIED_RECORD_SECONDS + 1, E::InvalidVerifiedRecord) }
#[test]
fn fail_update_params_temp_critical_151() { assert_params_rejected(|p| p.temp_critical_c = 151, E::InvalidHealthThresholds) }
#[test]
fn fail_update_params_window_0() { assert_params_rejected(|p| p.window_seconds = 0, E::InvalidWindowSeconds) }
#[test]
fn fail_update_params_window_3601() { assert_params_rejected(|p| p.window_seconds = 3_601, E::InvalidWindowSeconds) }
#[test]
fn fail_update_params_quorum_0() { assert_params_rejected(|p| p.min_quorum = 0, E::InvalidQuorum) }
#[test]
fn fail_update_params_unbonding_over_365_days() { assert_params_rejected(|p| p.unbonding_seconds = MAX_UNBONDING_SECONDS + 1, E::InvalidUnbondingSeconds) }
#[test]
fn fail_update_params_unbonding_negative() { assert_params_rejected(|p| p.unbonding_seconds = -1, E::InvalidUnbondingSeconds) }
#[test]
fn fail_update_params_skew_301() { assert_params_rejected(|p| p.max_skew_seconds = 301, E::InvalidSkew) }
#[test]
fn fail_update_params_max_missed_windows_0() { assert_params_rejected(|p| p.max_missed_windows = 0, E::InvalidMaxMissedWindows) }

#[test]
fn success_update_params_fee_change_applies_to_jobs_created_once_in_force() {
    let mut b = Bench::new();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.as_admin(&[b.ix_update_params(&b.admin.pubkey(), MarketParams { fee_bps: 2_000, burn_bps: 0, ..default_params() })]);
    b.advance(60);
    b.settle(job, receipt(1, 60, T0 + 60)).unwrap();
    let j = b.job_state(&job);
    assert_eq!((j.paid_provider, j.paid_treasury, j.burned), (540, 30, 30), "the running job keeps its fee");
    b.set_time(T0 + default_params().unbonding_seconds);
    let (later, _) = b.running_job(2, 1, 10_000);
    b.advance(60);
    b.settle(later, receipt(1, 60, b.now)).unwrap();
    let j = b.job_state(&later);
    assert_eq!((j.paid_provider, j.paid_treasury, j.burned), (480, 120, 0));
}

// ---- set_paused ------------------------------------------------------------------------------

#[test]
fn success_set_paused_and_resume() {
    let mut b = Bench::new();
    let logs = b.as_admin(&[b.ix_set_paused(&b.admin.pubkey(), true)]);
    assert!(b.market_state().paused);
    assert_event(&logs, PausedSet { market: b.market, paused: true });
    let logs = b.as_admin(&[b.ix_set_paused(&b.admin.pubkey(), false)]);
    assert!(!b.market_state().paused);
    assert_event(&logs, PausedSet { market: b.market, paused: false });
    // Business resumes.
    b.open_job(1, 1, 10_000);
}

#[test]
fn fail_set_paused_not_authority() {
    let mut b = Bench::new();
    let ix = b.ix_set_paused(&b.user.key.pubkey(), true);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotMarketAuthority));
    assert!(!b.market_state().paused);
}

fn paused_bench() -> Bench {
    let mut b = Bench::new();
    b.as_admin(&[b.ix_set_paused(&b.admin.pubkey(), true)]);
    b
}

#[test]
fn fail_pause_blocks_register_provider() {
    let mut b = paused_bench();
    let p = b.new_party(0, 0);
    let ix = b.ix_register_provider(&p.key.pubkey(), worker_pubkey(&b.worker), 1, 1);
    assert_eq!(b.send_err(&[ix], &[&p.key]), program_err(0, E::MarketPaused));
}

#[test]
fn fail_pause_blocks_register_validator() {
    let mut b = paused_bench();
    let p = b.new_party(10_000, 0);
    let ix = b.ix_register_validator(&p.key.pubkey(), p.stake, 10_000);
    assert_eq!(b.send_err(&[ix], &[&p.key]), program_err(0, E::MarketPaused));
}

#[test]
fn fail_pause_blocks_create_job() {
    let mut b = paused_bench();
    let ix = b.ix_create_job(&b.user, 1, 1, 10_000);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::MarketPaused));
}

#[test]
fn success_pause_does_not_block_existing_business() {
    let mut b = Bench::new();
    let (settled, _) = b.running_job(1, 1, 10_000);
    let (cancelled, _) = b.open_job(2, 1, 10_000);
    let (expired, _) = b.running_job(3, 1, 10_000);
    let (v2, _) = b.add_validator(5_000);
    let started = b.started(&settled);
    b.as_admin(&[b.ix_set_paused(&b.admin.pubkey(), true)]);

    let (owner, user) = (b.owner_kp(), b.user_kp());
    b.as_owner(&[b.ix_stake(&owner.pubkey(), b.provider_owner.stake, 100)]);
    b.as_user(&[b.ix_top_up(&user.pubkey(), b.user.payment, settled, 500)]);
    b.advance(60);
    b.settle(settled, receipt(1, 60, started + 60)).unwrap();
    b.finish(settled);
    b.as_user(&[b.ix_cancel_job(&user.pubkey(), cancelled, b.user.payment)]);
    b.as_user(&[b.ix_close_job(&user.pubkey(), b.user.payment, cancelled)]);
    b.as_owner(&[b.ix_request_unstake(&owner.pubkey(), 1_000)]);
    b.send(&[b.ix_request_validator_exit(&v2.key.pubkey())], &[&v2.key]).unwrap();

    b.advance(default_params().unbonding_seconds);
    b.as_user(&[b.ix_expire_job(&user.pubkey(), expired)]);
    b.as_user(&[b.ix_close_job(&user.pubkey(), b.user.payment, settled)]);
    b.as_owner(&[b.ix_withdraw_unstaked(&owner.pubkey(), b.provider_owner.stake)]);
    b.send(&[b.ix_withdraw_validator_bond(&v2.key.pubkey(), v2.stake)], &[&v2.key]).unwrap();

    assert!(b.market_state().paused);
    assert!(b.is_tombstone(&settled));
    assert_eq!(b.job_state(&expired).status, gpu_market::state::JobStatus::Failed);
    assert_eq!(b.token_balance(&v2.stake), 5_000);
    assert_eq!(b.token_balance(&b.provider_owner.stake), 1_000_000 - 100_000 - 100 + 1_000);
}

// ---- propose_authority / accept_authority ------------------------------------------------------

#[test]
fn success_authority_transfer_in_two_steps() {
    let mut b = Bench::new();
    let next = b.new_party(0, 0);
    let logs = b.as_admin(&[b.ix_propose_authority(&b.admin.pubkey(), next.key.pubkey())]);
    assert_event(&logs, AuthorityProposed { market: b.market, current: b.admin.pubkey(), proposed: next.key.pubkey() });
    let m = b.market_state();
    assert_eq!((m.authority, m.pending_authority), (b.admin.pubkey(), next.key.pubkey()));

    let logs = b.send(&[b.ix_accept_authority(&next.key.pubkey())], &[&next.key]).unwrap().logs;
    assert_event(&logs, AuthorityAccepted { market: b.market, previous: b.admin.pubkey(), authority: next.key.pubkey() });
    let m = b.market_state();
    assert_eq!((m.authority, m.pending_authority, m.creator), (next.key.pubkey(), Default::default(), b.admin.pubkey()));
    // The new authority governs; the old one no longer does; the market address is unchanged.
    b.send(&[b.ix_set_paused(&next.key.pubkey(), true)], &[&next.key]).unwrap();
    assert_eq!(b.admin_err(&[b.ix_set_paused(&b.admin.pubkey(), false)]), program_err(0, E::NotMarketAuthority));
}

#[test]
fn fail_propose_authority_not_authority() {
    let mut b = Bench::new();
    let user = b.user_kp();
    let ix = b.ix_propose_authority(&user.pubkey(), user.pubkey());
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotMarketAuthority));
    assert_eq!(b.market_state().pending_authority, Default::default());
}

#[test]
fn fail_accept_authority_by_other_than_proposed() {
    let mut b = Bench::new();
    let next = Keypair::new();
    b.as_admin(&[b.ix_propose_authority(&b.admin.pubkey(), next.pubkey())]);
    let ix = b.ix_accept_authority(&b.user.key.pubkey());
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotPendingAuthority));
    assert_eq!(b.market_state().authority, b.admin.pubkey());
}

#[test]
fn fail_accept_authority_after_proposal_cancelled() {
    let mut b = Bench::new();
    let next = b.new_party(0, 0);
    b.as_admin(&[b.ix_propose_authority(&b.admin.pubkey(), next.key.pubkey())]);
    b.as_admin(&[b.ix_propose_authority(&b.admin.pubkey(), Default::default())]);
    let err = b.send_err(&[b.ix_accept_authority(&next.key.pubkey())], &[&next.key]);
    assert_eq!(err, program_err(0, E::NotPendingAuthority));
    assert_eq!(b.market_state().authority, b.admin.pubkey());
}
