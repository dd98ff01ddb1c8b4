//! `jsonParsed` as Agave answers it, through Agave's own parsers: System, SPL Token, ATA and
//! Memo instructions (top-level and inner) in `getTransaction`, sysvars and token accounts in
//! `getAccountInfo`; a program no parser knows stays partially decoded.
mod common;

use common::*;

const ATA_PROGRAM: &str = "ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL";
const MEMO_PROGRAM: &str = "MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr";
const SYSTEM: &str = "11111111111111111111111111111111";

fn parsed_tx(n: &Node, sig: &str) -> Value {
    n.ok("getTransaction", json!([sig, {"encoding": "jsonParsed", "maxSupportedTransactionVersion": 0}]))
}

#[test]
fn system_token_and_memo_instructions_are_parsed() {
    let n = Node::start();
    let payer = n.funded(10 * SOL);
    let to = Pubkey::new_unique();
    let sig = n.send_ok(&[system::transfer(&payer.pubkey(), &to, SOL / 2)], &payer, &[]);
    let tx = parsed_tx(&n, &sig);
    assert_eq!(
        tx["transaction"]["message"]["instructions"][0],
        json!({
            "program": "system",
            "programId": SYSTEM,
            "parsed": {"type": "transfer", "info": {
                "source": payer.pubkey().to_string(),
                "destination": to.to_string(),
                "lamports": SOL / 2,
            }},
            "stackHeight": null,
        })
    );
    // The json encoding is unchanged: compiled instructions.
    let raw = n.ok("getTransaction", json!([sig, {"encoding": "json"}]));
    assert_eq!(raw["transaction"]["message"]["instructions"][0]["programIdIndex"], 2);

    let owner = Pubkey::new_unique();
    let (mint, account, sig) = n.token_setup(&payer, &owner, 1_500_000);
    let ixs = parsed_tx(&n, &sig)["transaction"]["message"]["instructions"].clone();
    let kinds: Vec<(String, String)> = ixs
        .as_array()
        .unwrap()
        .iter()
        .map(|ix| (ix["program"].as_str().unwrap().into(), ix["parsed"]["type"].as_str().unwrap().into()))
        .collect();
    let kind = |p: &str, t: &str| (p.to_string(), t.to_string());
    assert_eq!(
        kinds,
        [
            kind("system", "createAccount"),
            kind("spl-token", "initializeMint2"),
            kind("system", "createAccount"),
            kind("spl-token", "initializeAccount3"),
            kind("spl-token", "mintTo"),
        ]
    );
    assert_eq!(
        ixs[4]["parsed"]["info"],
        json!({"mint": mint.to_string(), "account": account.to_string(),
               "mintAuthority": payer.pubkey().to_string(), "amount": "1500000"})
    );

    let memo = Instruction::new_with_bytes(MEMO_PROGRAM.parse().unwrap(), b"rent 2 GPUs", vec![]);
    let sig = n.send_ok(&[memo], &payer, &[]);
    let ix = &parsed_tx(&n, &sig)["transaction"]["message"]["instructions"][0];
    assert_eq!((&ix["program"], &ix["parsed"]), (&json!("spl-memo"), &json!("rent 2 GPUs")));
}

#[test]
fn inner_instructions_are_parsed() {
    let n = Node::start();
    let payer = n.funded(10 * SOL);
    let wallet = Pubkey::new_unique();
    let (mint, _, _) = n.token_setup(&payer, &payer.pubkey(), 1);
    let ata_program: Pubkey = ATA_PROGRAM.parse().unwrap();
    let ata = Pubkey::find_program_address(&[wallet.as_ref(), TOKEN.as_ref(), mint.as_ref()], &ata_program).0;
    let create = Instruction::new_with_bytes(
        ata_program,
        &[0],
        vec![
            AccountMeta::new(payer.pubkey(), true),
            AccountMeta::new(ata, false),
            AccountMeta::new_readonly(wallet, false),
            AccountMeta::new_readonly(mint, false),
            AccountMeta::new_readonly(SYSTEM.parse().unwrap(), false),
            AccountMeta::new_readonly(TOKEN, false),
        ],
    );
    let sig = n.send_ok(&[create], &payer, &[]);
    let tx = parsed_tx(&n, &sig);
    let ix = &tx["transaction"]["message"]["instructions"][0];
    assert_eq!(ix["program"], "spl-associated-token-account");
    assert_eq!(ix["parsed"]["type"], "create");
    assert_eq!(ix["parsed"]["info"]["wallet"], wallet.to_string());
    let inner = &tx["meta"]["innerInstructions"][0];
    assert_eq!(inner["index"], 0);
    let inner: Vec<(String, String)> = inner["instructions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ix| (ix["program"].as_str().unwrap().into(), ix["parsed"]["type"].as_str().unwrap().into()))
        .collect();
    assert!(inner.contains(&("system".into(), "createAccount".into())), "{inner:?}");
    assert!(inner.contains(&("spl-token".into(), "initializeAccount3".into())), "{inner:?}");
    assert_eq!(tx["meta"]["innerInstructions"][0]["instructions"][0]["stackHeight"], 2);
}

#[test]
fn sysvars_and_token_accounts_are_parsed_and_unknown_programs_are_not() {
    let n = Node::start();
    let clock = n.ok("getAccountInfo", json!(["SysvarC1ock11111111111111111111111111111111", {"encoding": "jsonParsed"}]));
    let data = &clock["value"]["data"];
    assert_eq!((&data["program"], &data["parsed"]["type"]), (&json!("sysvar"), &json!("clock")));
    let (slot, unix_timestamp) = n.clock();
    assert!(data["parsed"]["info"]["slot"].as_u64().unwrap() <= slot);
    assert!(data["parsed"]["info"]["unixTimestamp"].as_i64().unwrap() <= unix_timestamp);
    let rent = n.ok("getAccountInfo", json!(["SysvarRent111111111111111111111111111111111", {"encoding": "jsonParsed"}]));
    assert_eq!(rent["value"]["data"]["parsed"]["type"], "rent");
    assert!(rent["value"]["data"]["parsed"]["info"]["lamportsPerByteYear"].is_string());

    // A token account whose mint is on chain: parsed with the mint's decimals, dataSlice ignored.
    let payer = n.funded(10 * SOL);
    let owner = Pubkey::new_unique();
    let (_, account, _) = n.token_setup(&payer, &owner, 2_500_000);
    let acc = n.ok("getAccountInfo", json!([account.to_string(), {"encoding": "jsonParsed", "dataSlice": {"offset": 0, "length": 4}}]));
    assert_eq!(acc["value"]["data"]["parsed"]["info"]["tokenAmount"]["uiAmountString"], "2.5");
    assert_eq!(acc["value"]["data"]["space"], 165);

    // The program account of a native builtin, and a plain wallet: no parser, base64 as Agave.
    let wallet = n.ok("getAccountInfo", json!([payer.pubkey().to_string(), {"encoding": "jsonParsed"}]));
    assert_eq!(wallet["value"]["data"], json!(["", "base64"]));
    let bogus = Instruction::new_with_bytes(PROGRAM_ID, &[1, 2, 3, 4, 5, 6, 7, 8], vec![]);
    let tx = n.tx(&[bogus], &payer, &[], None);
    let sig = n.ok("sendTransaction", json!([tx, {"encoding": "base64", "skipPreflight": true}]));
    let ix = &parsed_tx(&n, sig.as_str().unwrap())["transaction"]["message"]["instructions"][0];
    assert_eq!(
        ix,
        &json!({"programId": PROGRAM_ID.to_string(), "accounts": [],
                "data": bs58::encode([1, 2, 3, 4, 5, 6, 7, 8]).into_string(), "stackHeight": null})
    );
}
