//! The natively hosted program's logs land in the transaction's logs, as on a cluster, never on
//! the node's stdout: Anchor's failed-constraint report (the error line, then `Left:` and
//! `Right:` each followed by its key, which Anchor's client parsers read) included.
mod common;

use anchor_lang::{InstructionData, ToAccountMetas};
use common::*;
use gpu_market::state::MarketParams;

fn params() -> MarketParams {
    MarketParams {
        fee_bps: 1_000,
        burn_bps: 5_000,
        min_stake_per_gpu: 1_000,
        unbonding_seconds: 14 * 86_400,
        window_seconds: 60,
        min_quorum: 1,
        max_missed_windows: 10,
        downtime_slash_bps: 100,
        equivocation_slash_bps: 5_000,
        reporter_reward_bps: 1_000,
        validator_min_bond: 5_000,
        max_skew_seconds: 5,
        temp_critical_c: 95,
        ecc_uncorrected_max: 0,
        validator_reward_bps: 0,
        hardware_quorum: 2,
        hardware_attestation_max_age_seconds: 3_600,
        verified_record_seconds: 30 * 86_400,
    }
}

/// Creates market 0 of `authority` and returns its address.
fn market(n: &Node, authority: &Keypair) -> Pubkey {
    let (stake_mint, _, _) = n.token_setup(authority, &authority.pubkey(), 1);
    let (payment_mint, treasury, _) = n.token_setup(authority, &authority.pubkey(), 1);
    let pda = |seeds: &[&[u8]]| Pubkey::find_program_address(seeds, &PROGRAM_ID).0;
    let market = pda(&[b"market", authority.pubkey().as_ref(), &0u64.to_le_bytes()]);
    let accounts = gpu_market::accounts::InitializeMarket {
        authority: authority.pubkey(),
        market,
        stake_mint,
        payment_mint,
        stake_vault: pda(&[b"stake_vault", market.as_ref()]),
        fee_vault: pda(&[b"fee_vault", market.as_ref()]),
        treasury,
        token_program: TOKEN,
        system_program: Pubkey::default(),
    };
    let ix = Instruction {
        program_id: PROGRAM_ID,
        accounts: accounts.to_account_metas(None),
        data: gpu_market::instruction::InitializeMarket { id: 0, params: params() }.data(),
    };
    n.send_ok(&[ix], authority, &[]);
    market
}

fn logs(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect()
}

/// The lines from Anchor's error report on: the error, then `Left:` / key / `Right:` / key.
fn constraint_report(logs: &[String]) -> &[String] {
    let at = logs
        .iter()
        .position(|l| l.starts_with("Program log: AnchorError caused by account: market."))
        .unwrap_or_else(|| panic!("no AnchorError line in {logs:#?}"));
    logs.get(at..at + 5).unwrap_or_else(|| panic!("the report is cut short: {logs:#?}"))
}

#[test]
fn failed_has_one_logs_both_keys_in_the_transaction_logs() {
    let n = Node::start();
    let authority = n.funded(10 * SOL);
    let stranger = n.funded(SOL);
    let market = market(&n, &authority);
    let propose = Instruction {
        program_id: PROGRAM_ID,
        accounts: gpu_market::accounts::ProposeAuthority { authority: stranger.pubkey(), market }
            .to_account_metas(None),
        data: gpu_market::instruction::ProposeAuthority { new_authority: stranger.pubkey() }.data(),
    };
    let expected = [
        "Program log: Left:".to_string(),
        format!("Program log: {}", authority.pubkey()),
        "Program log: Right:".to_string(),
        format!("Program log: {}", stranger.pubkey()),
    ];

    // Preflight: the simulation's logs, as Agave's -32002 error carries them.
    let e = n.send(&n.tx(std::slice::from_ref(&propose), &stranger, &[], None));
    assert_eq!(e["error"]["code"], -32002, "{e}");
    let preflight = logs(&e["error"]["data"]["logs"]);
    let report = constraint_report(&preflight);
    assert!(report[0].contains("Error Code: NotMarketAuthority."), "{report:?}");
    assert_eq!(report[1..], expected, "{preflight:#?}");

    // Landed (skipPreflight): the same lines in getTransaction's logMessages.
    let tx = n.tx(&[propose], &stranger, &[], None);
    let sig = n.ok("sendTransaction", json!([tx, {"encoding": "base64", "skipPreflight": true}]));
    let landed = n.ok("getTransaction", json!([sig]));
    let landed = logs(&landed["meta"]["logMessages"]);
    assert_eq!(constraint_report(&landed)[1..], expected, "{landed:#?}");

    // Nothing of it on the node's stdout (only the ready line, read by Node::start).
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(n.stdout_lines(), Vec::<String>::new());
}
