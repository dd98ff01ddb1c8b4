//! Account reads: balances, accounts, program accounts with filters, and the SPL Token
//! account, balance and supply methods.
use serde_json::{json, Value};
use solana_account::ReadableAccount;

use super::encode::{encode_account, with_context};
use super::params::{
    account_encoding, check_min_context_slot, parse_filters, parse_pubkey, AccountCfg, AccountEncoding, CommonCfg,
    Params, ProgramAccountsCfg,
};
use super::{RpcError, RpcResult};
use crate::ledger::Ledger;
use crate::token::{self, TOKEN_2022_PROGRAM, TOKEN_PROGRAM};

const MAX_MULTIPLE_ACCOUNTS: usize = 100;

/// The methods this group answers.
pub(super) const METHODS: &[&str] = &[
    "getBalance",
    "getAccountInfo",
    "getMultipleAccounts",
    "getProgramAccounts",
    "getTokenAccountsByOwner",
    "getTokenAccountBalance",
    "getTokenSupply",
];

/// Answers one of [`METHODS`]; `slot` is the ledger slot after `Ledger::refresh`.
pub(super) fn handle(l: &mut Ledger, method: &str, p: &Params<'_>, slot: u64) -> RpcResult {
    match method {
        "getBalance" => {
            let key = parse_pubkey(&p.req::<String>(0, "a base58 address")?)?;
            let cfg: CommonCfg = p.opt(1, "a config object")?;
            check_min_context_slot(cfg.min_context_slot, slot)?;
            Ok(with_context(slot, json!(l.account(&key).map_or(0, |a| a.lamports()))))
        }
        "getAccountInfo" => {
            let key = parse_pubkey(&p.req::<String>(0, "a base58 address")?)?;
            let cfg: AccountCfg = p.opt(1, "a config object")?;
            check_min_context_slot(cfg.min_context_slot, slot)?;
            let enc = account_encoding(cfg.encoding.as_deref(), AccountEncoding::Binary)?;
            let value = match l.account(&key) {
                Some(acc) => encode_account(l, &key, &acc, enc, cfg.data_slice)?,
                None => Value::Null,
            };
            Ok(with_context(slot, value))
        }
        "getMultipleAccounts" => {
            let keys: Vec<String> = p.req(0, "an array of base58 addresses")?;
            if keys.len() > MAX_MULTIPLE_ACCOUNTS {
                return Err(RpcError::invalid_params(format!(
                    "Too many inputs provided; max {MAX_MULTIPLE_ACCOUNTS}"
                )));
            }
            let cfg: AccountCfg = p.opt(1, "a config object")?;
            check_min_context_slot(cfg.min_context_slot, slot)?;
            let enc = account_encoding(cfg.encoding.as_deref(), AccountEncoding::Base64)?;
            let mut out = Vec::with_capacity(keys.len());
            for k in &keys {
                let key = parse_pubkey(k)?;
                out.push(match l.account(&key) {
                    Some(acc) => encode_account(l, &key, &acc, enc, cfg.data_slice)?,
                    None => Value::Null,
                });
            }
            Ok(with_context(slot, json!(out)))
        }
        "getProgramAccounts" => {
            let program = parse_pubkey(&p.req::<String>(0, "a base58 program id")?)?;
            let cfg: ProgramAccountsCfg = p.opt(1, "a config object")?;
            check_min_context_slot(cfg.account.min_context_slot, slot)?;
            let enc = account_encoding(cfg.account.encoding.as_deref(), AccountEncoding::Binary)?;
            let filters = parse_filters(cfg.filters.as_deref().unwrap_or(&[]))?;
            let mut out = Vec::new();
            for (key, acc) in l.program_accounts(&program) {
                if filters.iter().all(|f| f.matches(&acc)) {
                    out.push(json!({"pubkey": key.to_string(), "account": encode_account(l, &key, &acc, enc, cfg.account.data_slice)?}));
                }
            }
            Ok(if cfg.with_context.unwrap_or(false) { with_context(slot, json!(out)) } else { json!(out) })
        }
        "getTokenAccountsByOwner" => {
            let owner = parse_pubkey(&p.req::<String>(0, "a base58 owner address")?)?;
            let filter: Value = p.req(1, "{\"mint\": <address>} or {\"programId\": <address>}")?;
            let cfg: AccountCfg = p.opt(2, "a config object")?;
            check_min_context_slot(cfg.min_context_slot, slot)?;
            let enc = account_encoding(cfg.encoding.as_deref(), AccountEncoding::Binary)?;
            let (program, mint) = if let Some(m) = filter.get("mint").and_then(Value::as_str) {
                let mint = parse_pubkey(m)?;
                let acc = l
                    .account(&mint)
                    .ok_or_else(|| RpcError::invalid_params("Invalid param: could not find mint"))?;
                if *acc.owner() != TOKEN_PROGRAM && *acc.owner() != TOKEN_2022_PROGRAM {
                    return Err(RpcError::invalid_params("Invalid param: not a Token mint"));
                }
                (*acc.owner(), Some(mint))
            } else if let Some(pid) = filter.get("programId").and_then(Value::as_str) {
                let pid = parse_pubkey(pid)?;
                if pid != TOKEN_PROGRAM && pid != TOKEN_2022_PROGRAM {
                    return Err(RpcError::invalid_params("Invalid param: unrecognized Token program id"));
                }
                (pid, None)
            } else {
                return Err(RpcError::invalid_params(
                    "Invalid params: parameter 1 must be {\"mint\": <address>} or {\"programId\": <address>}",
                ));
            };
            let mut out = Vec::new();
            for (key, acc) in l.program_accounts(&program) {
                let Some(t) = token::parse_token_account(&acc) else { continue };
                if t.owner == owner && mint.is_none_or(|m| m == t.mint) {
                    out.push(json!({"pubkey": key.to_string(), "account": encode_account(l, &key, &acc, enc, cfg.data_slice)?}));
                }
            }
            Ok(with_context(slot, json!(out)))
        }
        "getTokenAccountBalance" => {
            let key = parse_pubkey(&p.req::<String>(0, "a base58 token account address")?)?;
            let acc = l
                .account(&key)
                .ok_or_else(|| RpcError::invalid_params("Invalid param: could not find account"))?;
            let t = token::parse_token_account(&acc)
                .ok_or_else(|| RpcError::invalid_params("Invalid param: not a Token account"))?;
            let decimals = l
                .mint_decimals(&t.mint)
                .ok_or_else(|| RpcError::invalid_params("Invalid param: could not find mint"))?;
            Ok(with_context(slot, token::ui_amount(t.amount, decimals)))
        }
        "getTokenSupply" => {
            let key = parse_pubkey(&p.req::<String>(0, "a base58 mint address")?)?;
            let acc = l
                .account(&key)
                .ok_or_else(|| RpcError::invalid_params("Invalid param: could not find mint"))?;
            let m = token::parse_mint(&acc)
                .ok_or_else(|| RpcError::invalid_params("Invalid param: not a Token mint"))?;
            Ok(with_context(slot, token::ui_amount(m.supply, m.decimals)))
        }
        _ => Err(RpcError::method_not_found()),
    }
}
