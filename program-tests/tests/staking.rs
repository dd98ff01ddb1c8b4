//! stake, request_unstake, withdraw_unstaked.
mod common;

use common::*;
use gpu_market::errors::GpuMarketError as E;
use gpu_market::events::*;
use gpu_market::state::Unbonding;
use gpum_localnet::solana_signer::Signer;
use gpum_localnet::solana_transaction_error::TransactionError;

const STAKED: u64 = 100_000; // the bench provider's stake
const UNBONDING: i64 = 14 * 86_400;

fn stake_err(b: &mut Bench, ix: gpum_localnet::solana_instruction::Instruction) -> TransactionError {
    let err = b.owner_err(&[ix]);
    assert_eq!(b.provider_state().stake, STAKED);
    err
}

#[test]
fn success_stake_moves_tokens_and_books_them() {
    let mut b = Bench::new();
    let owner = b.owner_kp();
    let logs = b.as_owner(&[b.ix_stake(&owner.pubkey(), b.provider_owner.stake, 2_500)]);
    assert_eq!(b.provider_state().stake, STAKED + 2_500);
    assert_eq!(b.market_state().totals.staked, STAKED + 2_500);
    assert_eq!(b.token_balance(&b.stake_vault), STAKED + 2_500 + 10_000);
    assert_eq!(b.token_balance(&b.provider_owner.stake), 1_000_000 - STAKED - 2_500);
    assert_event(&logs, Staked { provider: b.provider, amount: 2_500, stake: STAKED + 2_500 });
}

#[test]
fn fail_stake_zero() {
    let mut b = Bench::new();
    let ix = b.ix_stake(&b.provider_owner.key.pubkey(), b.provider_owner.stake, 0);
    assert_eq!(stake_err(&mut b, ix), program_err(0, E::ZeroAmount));
}

#[test]
fn fail_stake_more_than_owner_holds() {
    let mut b = Bench::new();
    let ix = b.ix_stake(&b.provider_owner.key.pubkey(), b.provider_owner.stake, 1_000_000);
    // SPL Token's InsufficientFunds (1), reported for the program's instruction.
    assert_eq!(stake_err(&mut b, ix), custom(0, 1));
}

#[test]
fn fail_stake_on_provider_of_other_owner() {
    let mut b = Bench::new();
    let user = b.user_kp();
    let ix = swap_account(b.ix_stake(&user.pubkey(), b.user.stake, 1), b.provider_address(&user.pubkey()), b.provider);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotProviderSigner));
}

#[test]
fn fail_stake_with_another_market() {
    let mut b = Bench::new();
    let other = b.second_market(1);
    let ix = swap_account(b.ix_stake(&b.provider_owner.key.pubkey(), b.provider_owner.stake, 1), b.market, other);
    assert_eq!(stake_err(&mut b, ix), program_err(0, E::ProviderMarketMismatch));
}

#[test]
fn fail_stake_wrong_stake_mint() {
    let mut b = Bench::new();
    let ix = swap_account(b.ix_stake(&b.provider_owner.key.pubkey(), b.provider_owner.stake, 1), b.stake_mint, b.payment_mint);
    assert_eq!(stake_err(&mut b, ix), program_err(0, E::InvalidMint));
}

#[test]
fn fail_stake_from_account_of_another_mint() {
    let mut b = Bench::new();
    let ix = b.ix_stake(&b.provider_owner.key.pubkey(), b.provider_owner.payment, 1);
    assert_eq!(stake_err(&mut b, ix), program_err(0, E::InvalidMint));
}

#[test]
fn fail_stake_into_other_vault() {
    let mut b = Bench::new();
    let fake_vault = b.create_token_account(b.stake_mint, &b.market.clone());
    let ix = swap_account(b.ix_stake(&b.provider_owner.key.pubkey(), b.provider_owner.stake, 1), b.stake_vault, fake_vault);
    assert_eq!(stake_err(&mut b, ix), program_err(0, E::InvalidStakeVault));
}

// ---- request_unstake -------------------------------------------------------------------------

fn unstake(b: &mut Bench, amount: u64) -> Vec<String> {
    let ix = b.ix_request_unstake(&b.provider_owner.key.pubkey(), amount);
    b.as_owner(&[ix])
}

fn unstake_err(b: &mut Bench, amount: u64) -> TransactionError {
    let before = b.provider_state();
    let ix = b.ix_request_unstake(&b.provider_owner.key.pubkey(), amount);
    let err = b.owner_err(&[ix]);
    assert_eq!((b.provider_state().stake, b.provider_state().unbonding), (before.stake, before.unbonding));
    err
}

#[test]
fn success_request_unstake_moves_stake_to_unbonding_and_restarts_release() {
    let mut b = Bench::new();
    let logs = unstake(&mut b, 30_000);
    let p = b.provider_state();
    assert_eq!((p.stake, p.unbonding), (70_000, Unbonding { amount: 30_000, release_at: T0 + UNBONDING }));
    assert_event(&logs, UnstakeRequested { provider: b.provider, amount: 30_000, stake: 70_000, unbonding: 30_000, release_at: T0 + UNBONDING });
    // No tokens move; the vault still holds the unbonding stake.
    assert_eq!(b.market_state().totals.staked, STAKED);
    b.advance(10);
    unstake(&mut b, 5_000);
    assert_eq!(b.provider_state().unbonding, Unbonding { amount: 35_000, release_at: T0 + 10 + UNBONDING });
}

#[test]
fn fail_request_unstake_zero() {
    let mut b = Bench::new();
    assert_eq!(unstake_err(&mut b, 0), program_err(0, E::ZeroAmount));
}

#[test]
fn fail_request_unstake_more_than_stake() {
    let mut b = Bench::new();
    assert_eq!(unstake_err(&mut b, STAKED + 1), program_err(0, E::UnstakeExceedsStake));
    unstake(&mut b, STAKED);
}

#[test]
fn fail_request_unstake_below_stake_for_gpus_in_use() {
    let mut b = Bench::new();
    b.running_job(1, 3, 100_000); // needs 3 x 1000 of stake
    assert_eq!(unstake_err(&mut b, STAKED - 2_999), program_err(0, E::InsufficientStake));
    unstake(&mut b, STAKED - 3_000);
    assert_eq!(b.provider_state().stake, 3_000);
}

#[test]
fn fail_request_unstake_by_other_than_owner() {
    let mut b = Bench::new();
    let user = b.user_kp();
    let ix = swap_account(b.ix_request_unstake(&user.pubkey(), 1), b.provider_address(&user.pubkey()), b.provider);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotProviderSigner));
}

#[test]
fn fail_request_unstake_with_another_market() {
    let mut b = Bench::new();
    let other = b.second_market(1);
    let ix = swap_account(b.ix_request_unstake(&b.provider_owner.key.pubkey(), 1), b.market, other);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::ProviderMarketMismatch));
}

// ---- withdraw_unstaked -----------------------------------------------------------------------

fn withdraw_ix(b: &Bench) -> gpum_localnet::solana_instruction::Instruction {
    b.ix_withdraw_unstaked(&b.provider_owner.key.pubkey(), b.provider_owner.stake)
}

/// The bench provider with 30_000 unbonding, released at `T0 + UNBONDING`.
fn unbonding_bench() -> Bench {
    let mut b = Bench::new();
    unstake(&mut b, 30_000);
    b
}

#[test]
fn success_withdraw_unstaked_at_release_at() {
    let mut b = unbonding_bench();
    b.set_time(T0 + UNBONDING);
    let before = b.token_balance(&b.provider_owner.stake);
    let logs = b.as_owner(&[withdraw_ix(&b)]);
    assert_eq!(b.token_balance(&b.provider_owner.stake), before + 30_000);
    assert_eq!(b.provider_state().unbonding, Unbonding::default());
    assert_eq!(b.market_state().totals.staked, 70_000);
    assert_eq!(b.token_balance(&b.stake_vault), 70_000 + 10_000);
    assert_event(&logs, StakeWithdrawn { provider: b.provider, amount: 30_000 });
}

#[test]
fn success_withdraw_unstaked_after_release_at() {
    let mut b = unbonding_bench();
    b.set_time(T0 + UNBONDING + 1);
    b.as_owner(&[withdraw_ix(&b)]);
    assert_eq!(b.provider_state().unbonding.amount, 0);
}

#[test]
fn fail_withdraw_unstaked_one_second_before_release() {
    let mut b = unbonding_bench();
    b.set_time(T0 + UNBONDING - 1);
    assert_eq!(b.owner_err(&[withdraw_ix(&b)]), program_err(0, E::UnbondingNotReleased));
    assert_eq!(b.provider_state().unbonding.amount, 30_000);
}

#[test]
fn fail_withdraw_unstaked_nothing_unbonding() {
    let mut b = Bench::new();
    b.advance(UNBONDING);
    assert_eq!(b.owner_err(&[withdraw_ix(&b)]), program_err(0, E::NothingToWithdraw));
}

#[test]
fn fail_withdraw_unstaked_to_account_of_someone_else() {
    let mut b = unbonding_bench();
    b.set_time(T0 + UNBONDING);
    let ix = swap_account(withdraw_ix(&b), b.provider_owner.stake, b.user.stake);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::NotProviderSigner));
}

#[test]
fn fail_withdraw_unstaked_by_other_than_owner() {
    let mut b = unbonding_bench();
    b.set_time(T0 + UNBONDING);
    let user = b.user_kp();
    let ix = swap_account(b.ix_withdraw_unstaked(&user.pubkey(), b.user.stake), b.provider_address(&user.pubkey()), b.provider);
    assert_eq!(b.user_err(&[ix]), program_err(0, E::NotProviderSigner));
}

#[test]
fn fail_withdraw_unstaked_with_another_market() {
    let mut b = unbonding_bench();
    b.set_time(T0 + UNBONDING);
    let other = b.second_market(1);
    let ix = swap_account(withdraw_ix(&b), b.market, other);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::ProviderMarketMismatch));
}

#[test]
fn fail_withdraw_unstaked_wrong_mint_or_vault() {
    let mut b = unbonding_bench();
    b.set_time(T0 + UNBONDING);
    let ix = swap_account(withdraw_ix(&b), b.stake_mint, b.payment_mint);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::InvalidMint));
    let ix = swap_account(withdraw_ix(&b), b.provider_owner.stake, b.provider_owner.payment);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::InvalidMint));
    let fake_vault = b.create_token_account(b.stake_mint, &b.market.clone());
    b.mint_to(b.stake_mint, fake_vault, 30_000);
    let ix = swap_account(withdraw_ix(&b), b.stake_vault, fake_vault);
    assert_eq!(b.owner_err(&[ix]), program_err(0, E::InvalidStakeVault));
}
