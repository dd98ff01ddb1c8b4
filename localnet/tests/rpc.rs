//! End-to-end tests of the `gpum-localnet` JSON-RPC server: each test starts the binary on an
//! ephemeral port and talks raw JSON-RPC over real HTTP.
mod common;

use std::{process::Command, time::Duration};

use common::*;

#[test]
fn version_health_batch_and_errors() {
    let n = Node::start();
    let v = n.ok("getVersion", json!([]));
    assert_eq!(v["solana-core"], "3.1.12");
    assert!(v["feature-set"].is_u64());
    assert_eq!(n.ok("getHealth", json!([])), "ok");
    assert_eq!(n.http("GET", "/health", "").1, "ok");

    let batch = n.raw(
        r#"[{"jsonrpc":"2.0","id":1,"method":"getHealth"},
            {"jsonrpc":"2.0","id":"two","method":"getSlot"},
            {"jsonrpc":"2.0","id":3,"method":"noSuchMethod"},
            {"jsonrpc":"2.0","method":"getSlot"},
            {"jsonrpc":"2.0","id":5,"method":"getBalance","params":["not-a-key"]},
            42]"#,
    );
    let batch = batch.as_array().unwrap();
    assert_eq!(batch.len(), 5, "the notification gets no response: {batch:?}");
    assert_eq!(batch[0]["result"], "ok");
    assert_eq!(batch[1]["id"], "two");
    assert!(batch[1]["result"].is_u64());
    assert_eq!(batch[2]["error"]["code"], -32601);
    assert_eq!(batch[3]["error"]["code"], -32602);
    assert!(batch[3]["error"]["message"].as_str().unwrap().contains("not-a-key"));
    assert_eq!(batch[4]["error"]["code"], -32600);

    assert_eq!(n.raw("{not json")["error"]["code"], -32700);
    assert_eq!(n.raw("[]")["error"]["code"], -32600);
    assert_eq!(n.raw(r#"{"id":1,"method":"getSlot"}"#)["error"]["code"], -32600);
    let e = n.err("getBalance", json!([]));
    assert_eq!(e["code"], -32602);
    assert!(e["message"].as_str().unwrap().contains("missing parameter 0"), "{e}");
    let e = n.err("getAccountInfo", json!(["SysvarC1ock11111111111111111111111111111111", {"encoding": "hex"}]));
    assert_eq!(e["code"], -32602);
    assert_eq!(n.err("getSlot", json!([{"minContextSlot": 1u64 << 40}]))["code"], -32016);
    // Still serving after all of that.
    assert_eq!(n.ok("getHealth", json!([])), "ok");
    assert!(n.ok("getGenesisHash", json!([])).as_str().unwrap().len() > 30);
    assert_eq!(n.ok("getRecentPrioritizationFees", json!([])), json!([]));
    assert_eq!(n.ok("getFirstAvailableBlock", json!([])), 0);
    assert!(n.ok("getIdentity", json!([]))["identity"].is_string());
    let info = n.ok("getEpochInfo", json!([]));
    assert_eq!(info["absoluteSlot"], info["blockHeight"]);
}

#[test]
fn airdrop_transfer_status_and_transaction() {
    let n = Node::start();
    let payer = Keypair::new();
    let sig = n.ok("requestAirdrop", json!([payer.pubkey().to_string(), 2 * SOL]));
    let bal = n.ok("getBalance", json!([payer.pubkey().to_string()]));
    assert_eq!(bal["value"], 2 * SOL);
    assert_eq!(bal["context"]["apiVersion"], "3.1.12");
    let st = n.ok("getSignatureStatuses", json!([[sig], {"searchTransactionHistory": true}]));
    assert_eq!(st["value"][0]["confirmationStatus"], "finalized");
    assert_eq!(st["value"][0]["confirmations"], Value::Null);
    assert_eq!(st["value"][0]["status"], json!({"Ok": null}));

    let to = Pubkey::new_unique();
    let sig = n.send_ok(&[system::transfer(&payer.pubkey(), &to, SOL / 2)], &payer, &[]);
    let st = n.ok("getSignatureStatuses", json!([[sig.clone(), bs58::encode([7u8; 64]).into_string()]]));
    assert_eq!(st["value"][0]["err"], Value::Null);
    assert_eq!(st["value"][1], Value::Null);
    assert_eq!(n.ok("getBalance", json!([to.to_string()]))["value"], SOL / 2);

    let tx = n.ok("getTransaction", json!([sig.clone(), {"encoding": "json", "maxSupportedTransactionVersion": 0}]));
    assert_eq!(tx["version"], "legacy");
    assert!(tx["blockTime"].is_i64());
    let meta = &tx["meta"];
    assert_eq!(meta["err"], Value::Null);
    assert_eq!(meta["status"], json!({"Ok": null}));
    assert_eq!(meta["fee"], 5000);
    assert_eq!(meta["preBalances"][0], 2 * SOL);
    assert_eq!(meta["postBalances"][0], 2 * SOL - SOL / 2 - 5000);
    assert_eq!(meta["postBalances"][1], SOL / 2);
    let logs: Vec<&str> = meta["logMessages"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert_eq!(logs, ["Program 11111111111111111111111111111111 invoke [1]", "Program 11111111111111111111111111111111 success"]);
    assert!(meta["computeUnitsConsumed"].as_u64().unwrap() > 0);
    assert_eq!(meta["loadedAddresses"], json!({"writable": [], "readonly": []}));
    assert_eq!(tx["transaction"]["signatures"][0], sig);
    assert_eq!(tx["transaction"]["message"]["accountKeys"][1], to.to_string());
    assert_eq!(tx["transaction"]["message"]["instructions"][0]["stackHeight"], Value::Null);

    // No version field without maxSupportedTransactionVersion; base64 round-trips.
    let tx = n.ok("getTransaction", json!([sig.clone(), {"encoding": "base64"}]));
    assert!(tx.get("version").is_none());
    let bytes = BASE64_STANDARD.decode(tx["transaction"][0].as_str().unwrap()).unwrap();
    let decoded: VersionedTransaction = bincode::deserialize(&bytes).unwrap();
    assert_eq!(decoded.signatures[0].to_string(), sig);
    let parsed = n.ok("getTransaction", json!([sig.clone(), {"encoding": "jsonParsed", "maxSupportedTransactionVersion": 0}]));
    assert_eq!(parsed["transaction"]["message"]["accountKeys"][0]["signer"], true);
    assert_eq!(parsed["transaction"]["message"]["instructions"][0]["programId"], "11111111111111111111111111111111");

    // Signatures for the payer, newest first, limit honored.
    let sig2 = n.send_ok(&[system::transfer(&payer.pubkey(), &to, 1)], &payer, &[]);
    let list = n.ok("getSignaturesForAddress", json!([payer.pubkey().to_string()]));
    assert_eq!(list.as_array().unwrap().len(), 3);
    assert_eq!(list[0]["signature"], sig2);
    assert_eq!(list[1]["signature"], sig);
    assert_eq!(list[0]["confirmationStatus"], "finalized");
    let list = n.ok("getSignaturesForAddress", json!([payer.pubkey().to_string(), {"limit": 1}]));
    assert_eq!(list.as_array().unwrap().len(), 1);
    let list = n.ok("getSignaturesForAddress", json!([payer.pubkey().to_string(), {"before": sig2}]));
    assert_eq!(list[0]["signature"], sig);
    assert!(n.ok("getBlockTime", json!([list[0]["slot"]])).is_i64());
    assert_eq!(n.ok("getTransaction", json!([bs58::encode([9u8; 64]).into_string()])), Value::Null);
}

#[test]
fn failing_transactions_report_like_agave() {
    let n = Node::start();
    let payer = n.funded(SOL);
    let to = Pubkey::new_unique();

    // System transfer of more than the balance: preflight failure, nothing committed.
    let e = n.send(&n.tx(&[system::transfer(&payer.pubkey(), &to, 5 * SOL)], &payer, &[], None));
    let e = &e["error"];
    assert_eq!(e["code"], -32002, "{e}");
    assert_eq!(e["message"], "Transaction simulation failed: Error processing Instruction 0: custom program error: 0x1");
    assert_eq!(e["data"]["err"], json!({"InstructionError": [0, {"Custom": 1}]}));
    assert_eq!(e["data"]["accounts"], Value::Null);
    assert!(e["data"]["logs"].as_array().unwrap().iter().any(|l| l.as_str().unwrap().contains("insufficient lamports")), "{e}");
    assert!(e["data"]["unitsConsumed"].is_u64());
    assert_eq!(e["data"]["returnData"], Value::Null);
    assert_eq!(n.ok("getBalance", json!([payer.pubkey().to_string()]))["value"], SOL, "no fee charged");

    // Our program with an unknown instruction: Anchor's InstructionFallbackNotFound (101).
    let bogus = Instruction::new_with_bytes(PROGRAM_ID, &[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0], vec![AccountMeta::new(payer.pubkey(), true)]);
    let e = n.send(&n.tx(&[system::transfer(&payer.pubkey(), &to, SOL / 10), bogus.clone()], &payer, &[], None));
    let e = &e["error"];
    assert_eq!(e["message"], "Transaction simulation failed: Error processing Instruction 1: custom program error: 0x65");
    assert_eq!(e["data"]["err"], json!({"InstructionError": [1, {"Custom": 101}]}));
    assert!(e["data"]["logs"].as_array().unwrap().iter().any(|l| l.as_str().unwrap().contains(&PROGRAM_ID.to_string())));

    // skipPreflight: it lands, fails, and pays its fee.
    let tx = n.tx(&[bogus], &payer, &[], None);
    let sig = n.call("sendTransaction", json!([tx, {"encoding": "base64", "skipPreflight": true}]))["result"].clone();
    let st = n.ok("getSignatureStatuses", json!([[sig.clone()]]));
    assert_eq!(st["value"][0]["err"], json!({"InstructionError": [0, {"Custom": 101}]}));
    assert_eq!(st["value"][0]["status"], json!({"Err": {"InstructionError": [0, {"Custom": 101}]}}));
    let t = n.ok("getTransaction", json!([sig]));
    assert_eq!(t["meta"]["err"], json!({"InstructionError": [0, {"Custom": 101}]}));
    assert!(!t["meta"]["logMessages"].as_array().unwrap().is_empty());
    assert_eq!(n.ok("getBalance", json!([payer.pubkey().to_string()]))["value"], SOL - 5000);

    // A bad signature (preflight), garbage bytes, wrong encoding.
    let mut bad: VersionedTransaction = bincode::deserialize(&BASE64_STANDARD.decode(n.tx(&[system::transfer(&payer.pubkey(), &to, 1)], &payer, &[], None)).unwrap()).unwrap();
    bad.signatures[0] = Keypair::new().sign_message(b"x");
    let e = n.send(&BASE64_STANDARD.encode(bincode::serialize(&bad).unwrap()));
    assert_eq!(e["error"]["code"], -32002);
    assert_eq!(e["error"]["data"]["err"], "SignatureFailure");
    let e = n.send(&BASE64_STANDARD.encode([1, 2, 3]));
    assert_eq!(e["error"]["code"], -32602);
    assert!(e["error"]["message"].as_str().unwrap().starts_with("failed to deserialize"), "{e}");
    let e = n.call("sendTransaction", json!(["!!!", {"encoding": "base58"}]));
    assert_eq!(e["error"]["code"], -32602);
}

#[test]
fn blockhash_lifetime_duplicates_and_base58() {
    let n = Node::start();
    let payer = n.funded(SOL);
    let to = Pubkey::new_unique();
    n.send_ok(&[system::transfer(&payer.pubkey(), &to, SOL / 10)], &payer, &[]);

    // Unknown blockhash.
    let e = n.send(&n.tx(&[system::transfer(&payer.pubkey(), &to, 1)], &payer, &[], Some(Hash::new_from_array([3; 32]))));
    assert_eq!(e["error"]["code"], -32002);
    assert_eq!(e["error"]["message"], "Transaction simulation failed: Blockhash not found");
    assert_eq!(e["error"]["data"]["err"], "BlockhashNotFound");

    // A blockhash stays valid across slots; the latest one changes as slots pass.
    let latest = n.ok("getLatestBlockhash", json!([]));
    let old: Hash = latest["value"]["blockhash"].as_str().unwrap().parse().unwrap();
    let lvbh = latest["value"]["lastValidBlockHeight"].as_u64().unwrap();
    let slot0 = latest["context"]["slot"].as_u64().unwrap();
    assert_eq!(lvbh, slot0 + 150);
    std::thread::sleep(Duration::from_millis(1300));
    assert!(n.ok("getSlot", json!([])).as_u64().unwrap() >= slot0 + 3);
    assert_ne!(n.blockhash(), old);
    assert_eq!(n.ok("isBlockhashValid", json!([old.to_string()]))["value"], true);
    let tx = n.tx(&[system::transfer(&payer.pubkey(), &to, 1)], &payer, &[], Some(old));
    assert!(n.send(&tx)["result"].is_string());

    // The same transaction again: already processed.
    let e = n.send(&tx);
    assert_eq!(e["error"]["data"]["err"], "AlreadyProcessed");
    assert_eq!(e["error"]["message"], "Transaction simulation failed: This transaction has already been processed");

    // Base58 wire encoding (the default).
    let tx = n.tx(&[system::transfer(&payer.pubkey(), &to, 2)], &payer, &[], Some(old));
    let b58 = bs58::encode(BASE64_STANDARD.decode(tx).unwrap()).into_string();
    assert!(n.ok("sendTransaction", json!([b58])).is_string());

    // 150 slots later the blockhash has expired.
    n.ok("gpum_warpTime", json!([61]));
    assert_eq!(n.ok("isBlockhashValid", json!([old.to_string()]))["value"], false);
    let e = n.send(&n.tx(&[system::transfer(&payer.pubkey(), &to, 3)], &payer, &[], Some(old)));
    assert_eq!(e["error"]["data"]["err"], "BlockhashNotFound");
    // skipPreflight: dropped as a cluster drops it (a signature, but never a status).
    let tx = n.tx(&[system::transfer(&payer.pubkey(), &to, 4)], &payer, &[], Some(old));
    let sig = n.ok("sendTransaction", json!([tx, {"encoding": "base64", "skipPreflight": true}]));
    assert_eq!(n.ok("getSignatureStatuses", json!([[sig]]))["value"][0], Value::Null);
    // A fresh blockhash works.
    n.send_ok(&[system::transfer(&payer.pubkey(), &to, 5)], &payer, &[]);
}

#[test]
fn warp_time_moves_the_clock() {
    let n = Node::start();
    let (slot0, t0) = n.clock();
    let w = n.ok("gpum_warpTime", json!([3600]));
    let (slot1, t1) = n.clock();
    assert!(t1 >= t0 + 3600, "{t0} -> {t1}");
    assert!(slot1 >= slot0 + 9000, "{slot0} -> {slot1}");
    assert_eq!(w["unixTimestamp"].as_i64().unwrap(), t1);
    assert!(w["slot"].as_u64().unwrap() <= slot1);
    assert!(n.ok("getBlockHeight", json!([])).as_u64().unwrap() >= slot1);
    assert_eq!(n.err("gpum_warpTime", json!([-5]))["code"], -32602);
    // Transactions after the warp still work (with a fresh blockhash).
    let payer = n.funded(SOL);
    n.send_ok(&[system::transfer(&payer.pubkey(), &Pubkey::new_unique(), SOL / 2)], &payer, &[]);
}

#[test]
fn tokens_program_accounts_and_encodings() {
    let n = Node::start();
    let payer = n.funded(10 * SOL);
    let alice = Pubkey::new_unique();
    let bob = Pubkey::new_unique();
    let (mint, alice_acc, sig) = n.token_setup(&payer, &alice, 1_500_000);
    let (_, bob_acc, _) = n.token_setup(&payer, &bob, 7);

    let b = n.ok("getTokenAccountBalance", json!([alice_acc.to_string()]))["value"].clone();
    assert_eq!(b, json!({"amount": "1500000", "decimals": 6, "uiAmount": 1.5, "uiAmountString": "1.5"}));
    let s = n.ok("getTokenSupply", json!([mint.to_string()]))["value"].clone();
    assert_eq!(s["amount"], "1500000");
    assert_eq!(n.err("getTokenAccountBalance", json!([mint.to_string()]))["message"], "Invalid param: not a Token account");

    // jsonParsed token account and mint.
    let acc = n.ok("getAccountInfo", json!([alice_acc.to_string(), {"encoding": "jsonParsed"}]))["value"].clone();
    assert_eq!(acc["data"]["program"], "spl-token");
    assert_eq!(acc["data"]["parsed"]["type"], "account");
    assert_eq!(acc["data"]["parsed"]["info"]["owner"], alice.to_string());
    assert_eq!(acc["data"]["parsed"]["info"]["tokenAmount"]["uiAmountString"], "1.5");
    assert_eq!(acc["data"]["space"], 165);
    let m = n.ok("getAccountInfo", json!([mint.to_string(), {"encoding": "jsonParsed"}]))["value"].clone();
    assert_eq!(m["data"]["parsed"]["info"]["decimals"], 6);
    assert_eq!(m["data"]["parsed"]["info"]["mintAuthority"], payer.pubkey().to_string());

    // Token balances in the transaction meta.
    let t = n.ok("getTransaction", json!([sig]));
    let post = t["meta"]["postTokenBalances"].as_array().unwrap();
    assert_eq!(post.len(), 1);
    assert_eq!(post[0]["mint"], mint.to_string());
    assert_eq!(post[0]["owner"], alice.to_string());
    assert_eq!(post[0]["uiTokenAmount"]["amount"], "1500000");
    assert_eq!(t["meta"]["preTokenBalances"], json!([]));
    // SPL Token ran as SBF through the runtime: logged and metered.
    assert!(t["meta"]["logMessages"].as_array().unwrap().iter().any(|l| l.as_str().unwrap().starts_with("Program TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA consumed")), "{t}");

    // getTokenAccountsByOwner by mint and by program.
    let by_mint = n.ok("getTokenAccountsByOwner", json!([alice.to_string(), {"mint": mint.to_string()}, {"encoding": "base64"}]));
    assert_eq!(by_mint["value"].as_array().unwrap().len(), 1);
    assert_eq!(by_mint["value"][0]["pubkey"], alice_acc.to_string());
    let by_prog = n.ok("getTokenAccountsByOwner", json!([bob.to_string(), {"programId": TOKEN.to_string()}, {"encoding": "jsonParsed"}]));
    assert_eq!(by_prog["value"][0]["pubkey"], bob_acc.to_string());
    assert_eq!(by_prog["value"][0]["account"]["data"]["parsed"]["info"]["tokenAmount"]["amount"], "7");

    // getProgramAccounts filters: dataSize + memcmp (base58 and base64), withContext.
    let owner_b58 = alice.to_string();
    let owner_b64 = BASE64_STANDARD.encode(alice.to_bytes());
    let all = n.ok("getProgramAccounts", json!([TOKEN.to_string(), {"encoding": "base64", "filters": [{"dataSize": 165}]}]));
    assert_eq!(all.as_array().unwrap().len(), 2);
    for enc in [json!({"offset": 32, "bytes": owner_b58}), json!({"offset": 32, "bytes": owner_b64, "encoding": "base64"})] {
        let r = n.ok("getProgramAccounts", json!([TOKEN.to_string(), {"encoding": "base64", "filters": [{"dataSize": 165}, {"memcmp": enc}]}]));
        assert_eq!(r.as_array().unwrap().len(), 1, "{r}");
        assert_eq!(r[0]["pubkey"], alice_acc.to_string());
    }
    let mints = n.ok("getProgramAccounts", json!([TOKEN.to_string(), {"encoding": "base64", "withContext": true, "filters": [{"dataSize": 82}]}]));
    assert!(mints["context"]["slot"].is_u64());
    assert_eq!(mints["value"].as_array().unwrap().len(), 2);
    assert_eq!(n.err("getProgramAccounts", json!([TOKEN.to_string(), {"filters": [{"bogus": 1}]}]))["code"], -32602);

    // base64+zstd round trip, base58 for small data, dataSlice.
    let plain = n.ok("getAccountInfo", json!([mint.to_string(), {"encoding": "base64"}]))["value"]["data"][0].as_str().unwrap().to_string();
    let z = n.ok("getAccountInfo", json!([mint.to_string(), {"encoding": "base64+zstd"}]))["value"]["data"].clone();
    assert_eq!(z[1], "base64+zstd");
    let unz = zstd::decode_all(&BASE64_STANDARD.decode(z[0].as_str().unwrap()).unwrap()[..]).unwrap();
    assert_eq!(unz, BASE64_STANDARD.decode(plain).unwrap());
    let multi = n.ok("getMultipleAccounts", json!([[mint.to_string(), Pubkey::new_unique().to_string()], {"encoding": "base64+zstd"}]));
    assert_eq!(multi["value"][1], Value::Null);
    assert_eq!(multi["value"][0]["data"], z);
    let b58 = n.ok("getAccountInfo", json!([mint.to_string(), {"encoding": "base58"}]))["value"]["data"].clone();
    assert_eq!(bs58::decode(b58[0].as_str().unwrap()).into_vec().unwrap(), unz);
    assert_eq!(n.err("getAccountInfo", json!([alice_acc.to_string(), {"encoding": "base58"}]))["code"], -32602);
    let sl = n.ok("getAccountInfo", json!([mint.to_string(), {"encoding": "base64", "dataSlice": {"offset": 44, "length": 1}}]))["value"].clone();
    assert_eq!(BASE64_STANDARD.decode(sl["data"][0].as_str().unwrap()).unwrap(), vec![6]);
    assert_eq!(sl["space"], 82);
}

#[test]
fn simulate_fee_and_v0() {
    let n = Node::start();
    let payer = n.funded(SOL);
    let to = Pubkey::new_unique();

    // Unsigned simulation with a replaced (bogus) blockhash.
    let msg = Message::new_with_blockhash(&[system::transfer(&payer.pubkey(), &to, SOL / 10)], Some(&payer.pubkey()), &Hash::new_from_array([1; 32]));
    let tx = VersionedTransaction { signatures: vec![Default::default()], message: VersionedMessage::Legacy(msg.clone()) };
    let b64 = BASE64_STANDARD.encode(bincode::serialize(&tx).unwrap());
    let r = n.ok("simulateTransaction", json!([b64, {"encoding": "base64", "replaceRecentBlockhash": true, "accounts": {"addresses": [to.to_string()], "encoding": "base64"}}]));
    let v = &r["value"];
    assert_eq!(v["err"], Value::Null, "{r}");
    assert!(v["unitsConsumed"].as_u64().unwrap() > 0);
    assert!(v["replacementBlockhash"]["blockhash"].is_string());
    assert_eq!(v["accounts"][0]["lamports"], SOL / 10);
    assert_eq!(n.ok("getBalance", json!([to.to_string()]))["value"], 0, "simulation commits nothing");
    // Without replacement, the bogus blockhash is reported in the result.
    let r = n.ok("simulateTransaction", json!([b64, {"encoding": "base64"}]));
    assert_eq!(r["value"]["err"], "BlockhashNotFound");
    assert_eq!(n.err("simulateTransaction", json!([b64, {"encoding": "base64", "sigVerify": true, "replaceRecentBlockhash": true}]))["code"], -32602);
    assert_eq!(n.err("simulateTransaction", json!([b64, {"encoding": "base64", "sigVerify": true}]))["code"], -32003);
    // A failing simulation returns logs and the error.
    let msg_fail = Message::new_with_blockhash(&[system::transfer(&payer.pubkey(), &to, 10 * SOL)], Some(&payer.pubkey()), &n.blockhash());
    let tx = VersionedTransaction::try_new(VersionedMessage::Legacy(msg_fail), &[&payer]).unwrap();
    let r = n.ok("simulateTransaction", json!([BASE64_STANDARD.encode(bincode::serialize(&tx).unwrap()), {"encoding": "base64", "sigVerify": true}]));
    assert_eq!(r["value"]["err"], json!({"InstructionError": [0, {"Custom": 1}]}));
    assert!(!r["value"]["logs"].as_array().unwrap().is_empty());

    // getFeeForMessage: one signature; null for an unknown blockhash.
    let mut msg = msg;
    msg.recent_blockhash = n.blockhash();
    let m64 = BASE64_STANDARD.encode(bincode::serialize(&VersionedMessage::Legacy(msg.clone())).unwrap());
    assert_eq!(n.ok("getFeeForMessage", json!([m64]))["value"], 5000);
    msg.recent_blockhash = Hash::new_from_array([1; 32]);
    let m64 = BASE64_STANDARD.encode(bincode::serialize(&VersionedMessage::Legacy(msg)).unwrap());
    assert_eq!(n.ok("getFeeForMessage", json!([m64]))["value"], Value::Null);

    // A v0 transaction: getTransaction needs maxSupportedTransactionVersion.
    let v0msg = v0::Message::try_compile(&payer.pubkey(), &[system::transfer(&payer.pubkey(), &to, SOL / 5)], &[], n.blockhash()).unwrap();
    let tx = VersionedTransaction::try_new(VersionedMessage::V0(v0msg), &[&payer]).unwrap();
    let sig = n.ok("sendTransaction", json!([BASE64_STANDARD.encode(bincode::serialize(&tx).unwrap()), {"encoding": "base64"}]));
    let e = n.err("getTransaction", json!([sig]));
    assert_eq!(e["code"], -32015);
    let t = n.ok("getTransaction", json!([sig, {"maxSupportedTransactionVersion": 0}]));
    assert_eq!(t["version"], 0);
    assert_eq!(t["transaction"]["message"]["addressTableLookups"], json!([]));
    assert_eq!(n.ok("getBalance", json!([to.to_string()]))["value"], SOL / 5);
}

#[test]
fn cli_bind_rules_and_clean_exit() {
    let n = Node::start();
    let bin = env!("CARGO_BIN_EXE_gpum-localnet");
    // Port in use: one line naming the port, exit 2.
    let out = Command::new(bin).args(["--port", &n.port.to_string(), "--quiet"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&n.port.to_string()) && err.contains("in use"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // Non-loopback without --allow-remote: refused.
    let out = Command::new(bin).args(["--bind", "0.0.0.0", "--port", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-remote"));
    // SIGTERM: exits 0.
    let mut n = n;
    let pid = n.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = n.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}
