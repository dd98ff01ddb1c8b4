//! Transaction methods: send, simulate, signature statuses, transaction history.
use base64::{prelude::BASE64_STANDARD, Engine};
use serde::Deserialize;
use serde_json::{json, Value};
use solana_account::ReadableAccount;

use super::encode::{
    decode_transaction, encode_account, err_json, message_json, meta_json, preflight_error, sigs_json, simulation_json,
    status_json, with_context,
};
use super::params::{account_encoding, check_min_context_slot, parse_pubkey, parse_signature, AccountEncoding, Params};
use super::{RpcError, RpcResult};
use crate::ledger::{Ledger, SendOutcome};

const MAX_SIGNATURE_STATUSES: usize = 256;
const MAX_GET_SIGNATURES_LIMIT: usize = 1000;

/// The methods this group answers.
pub(super) const METHODS: &[&str] = &[
    "sendTransaction",
    "simulateTransaction",
    "getSignatureStatuses",
    "getTransaction",
    "getSignaturesForAddress",
];

/// Answers one of [`METHODS`]; `slot` is the ledger slot after `Ledger::refresh`.
pub(super) fn handle(l: &mut Ledger, method: &str, p: &Params<'_>, slot: u64) -> RpcResult {
    match method {
        "sendTransaction" => {
            #[derive(Deserialize, Default)]
            #[serde(rename_all = "camelCase")]
            struct Cfg {
                skip_preflight: Option<bool>,
                encoding: Option<String>,
                min_context_slot: Option<u64>,
            }
            let data: String = p.req(0, "a signed, encoded transaction")?;
            let cfg: Cfg = p.opt(1, "a config object")?;
            check_min_context_slot(cfg.min_context_slot, slot)?;
            let (_, tx) = decode_transaction(&data, cfg.encoding.as_deref().unwrap_or("base58"))?;
            match l.send(tx, cfg.skip_preflight.unwrap_or(false)).map_err(|e| RpcError::invalid_params(e.0))? {
                SendOutcome::PreflightFailed(ex) => Err(preflight_error(&ex)),
                SendOutcome::Landed { signature, .. } | SendOutcome::Dropped { signature, .. } => {
                    Ok(json!(signature.to_string()))
                }
            }
        }
        "simulateTransaction" => {
            #[derive(Deserialize, Default)]
            #[serde(rename_all = "camelCase")]
            struct AccountsCfg {
                addresses: Vec<String>,
                encoding: Option<String>,
            }
            #[derive(Deserialize, Default)]
            #[serde(rename_all = "camelCase")]
            struct Cfg {
                sig_verify: Option<bool>,
                replace_recent_blockhash: Option<bool>,
                encoding: Option<String>,
                accounts: Option<AccountsCfg>,
                inner_instructions: Option<bool>,
                min_context_slot: Option<u64>,
            }
            let data: String = p.req(0, "an encoded transaction")?;
            let cfg: Cfg = p.opt(1, "a config object")?;
            check_min_context_slot(cfg.min_context_slot, slot)?;
            let sig_verify = cfg.sig_verify.unwrap_or(false);
            let replace = cfg.replace_recent_blockhash.unwrap_or(false);
            if sig_verify && replace {
                return Err(RpcError::invalid_params("sigVerify may not be used with replaceRecentBlockhash"));
            }
            let (_, tx) = decode_transaction(&data, cfg.encoding.as_deref().unwrap_or("base58"))?;
            if sig_verify && !tx.verify_with_results().iter().all(|ok| *ok) {
                return Err(RpcError::new(-32003, "Transaction signature verification failure"));
            }
            let (ex, replacement) = l.simulate(tx, sig_verify, replace).map_err(|e| RpcError::invalid_params(e.0))?;
            let accounts = match &cfg.accounts {
                None => None,
                Some(ac) => {
                    let enc = account_encoding(ac.encoding.as_deref(), AccountEncoding::Base64)?;
                    if matches!(enc, AccountEncoding::Binary | AccountEncoding::Base58) {
                        return Err(RpcError::invalid_params(
                            "base58 encoding not supported; use base64, base64+zstd or jsonParsed",
                        ));
                    }
                    let mut out = Vec::new();
                    for a in &ac.addresses {
                        let key = parse_pubkey(a)?;
                        let post = ex.post_accounts.iter().find(|(k, _)| *k == key).map(|(_, a)| a.clone());
                        let acc = post.or_else(|| l.account(&key)).filter(|a| a.lamports() > 0);
                        out.push(match acc {
                            Some(acc) => encode_account(l, &key, &acc, enc, None)?,
                            None => Value::Null,
                        });
                    }
                    Some(json!(out))
                }
            };
            let value = simulation_json(&ex, accounts, replacement, cfg.inner_instructions.unwrap_or(false));
            Ok(with_context(slot, value))
        }
        "getSignatureStatuses" => {
            let sigs: Vec<String> = p.req(0, "an array of base58 signatures")?;
            if sigs.len() > MAX_SIGNATURE_STATUSES {
                return Err(RpcError::invalid_params(format!(
                    "Too many inputs provided; max {MAX_SIGNATURE_STATUSES}"
                )));
            }
            let mut out = Vec::with_capacity(sigs.len());
            for s in &sigs {
                let sig = parse_signature(s)?;
                out.push(match l.transaction(&sig) {
                    Some(rec) => json!({
                        "slot": rec.slot,
                        "confirmations": null,
                        "status": status_json(&rec.err),
                        "err": rec.err.as_ref().map(err_json),
                        "confirmationStatus": "finalized",
                    }),
                    None => Value::Null,
                });
            }
            Ok(with_context(slot, json!(out)))
        }
        "getTransaction" => {
            let sig = parse_signature(&p.req::<String>(0, "a base58 signature")?)?;
            #[derive(Deserialize, Default)]
            #[serde(rename_all = "camelCase")]
            struct Cfg {
                encoding: Option<String>,
                max_supported_transaction_version: Option<u8>,
            }
            let cfg: Cfg = match p.get(1) {
                Some(Value::String(enc)) => Cfg { encoding: Some(enc.clone()), ..Default::default() },
                _ => p.opt(1, "a config object")?,
            };
            let Some(rec) = l.transaction(&sig) else { return Ok(Value::Null) };
            let version = rec.tx.version();
            let is_v0 = matches!(version, solana_transaction::versioned::TransactionVersion::Number(_));
            if is_v0 && cfg.max_supported_transaction_version.is_none() {
                return Err(RpcError::new(
                    -32015,
                    "Transaction version (0) is not supported by the requesting client. Please try the request again with the following configuration parameter: \"maxSupportedTransactionVersion\": 0",
                ));
            }
            let encoding = cfg.encoding.as_deref().unwrap_or("json");
            let (transaction, parsed) = match encoding {
                "json" => (json!({"signatures": sigs_json(&rec.tx), "message": message_json(rec, false)}), false),
                "jsonParsed" => (json!({"signatures": sigs_json(&rec.tx), "message": message_json(rec, true)}), true),
                "base64" => (json!([BASE64_STANDARD.encode(bincode::serialize(&rec.tx).unwrap_or_default()), "base64"]), false),
                "base58" | "binary" => {
                    let s = bs58::encode(bincode::serialize(&rec.tx).unwrap_or_default()).into_string();
                    (if encoding == "binary" { json!(s) } else { json!([s, "base58"]) }, false)
                }
                other => {
                    return Err(RpcError::invalid_params(format!(
                        "Invalid params: unknown transaction encoding {other:?}; use \"json\", \"jsonParsed\", \"base64\" or \"base58\""
                    )))
                }
            };
            let mut out = json!({
                "slot": rec.slot,
                "transaction": transaction,
                "meta": meta_json(rec, parsed),
                "blockTime": rec.block_time,
            });
            if cfg.max_supported_transaction_version.is_some() {
                out["version"] = if is_v0 { json!(0) } else { json!("legacy") };
            }
            Ok(out)
        }
        "getSignaturesForAddress" => {
            let key = parse_pubkey(&p.req::<String>(0, "a base58 address")?)?;
            #[derive(Deserialize, Default)]
            #[serde(rename_all = "camelCase")]
            struct Cfg {
                limit: Option<usize>,
                before: Option<String>,
                until: Option<String>,
                min_context_slot: Option<u64>,
            }
            let cfg: Cfg = p.opt(1, "a config object")?;
            check_min_context_slot(cfg.min_context_slot, slot)?;
            let limit = cfg.limit.unwrap_or(MAX_GET_SIGNATURES_LIMIT);
            if limit == 0 || limit > MAX_GET_SIGNATURES_LIMIT {
                return Err(RpcError::invalid_params(format!(
                    "Invalid limit; max {MAX_GET_SIGNATURES_LIMIT}"
                )));
            }
            let before = cfg.before.as_deref().map(parse_signature).transpose()?;
            let until = cfg.until.as_deref().map(parse_signature).transpose()?;
            let mut out = Vec::new();
            let mut started = before.is_none();
            for rec in l.signatures_for_address(&key) {
                if !started {
                    started = Some(rec.signature) == before;
                    continue;
                }
                if Some(rec.signature) == until || out.len() >= limit {
                    break;
                }
                out.push(json!({
                    "signature": rec.signature.to_string(),
                    "slot": rec.slot,
                    "err": rec.err.as_ref().map(err_json),
                    "memo": rec.memo,
                    "blockTime": rec.block_time,
                    "confirmationStatus": "finalized",
                }));
            }
            Ok(json!(out))
        }
        _ => Err(RpcError::method_not_found()),
    }
}
