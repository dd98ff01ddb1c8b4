//! Solana JSON-RPC 2.0 over HTTP for the local chain.
//!
//! Guarantees:
//! - Request and response shapes, encodings and error codes follow Agave 3.1 (`solana-core`
//!   3.1.12), so solana-py, solana-web3.js and the Rust `RpcClient` work unchanged. Differences
//!   are listed in `localnet/README.md`.
//! - Single and batch requests; `-32700` parse error, `-32600` invalid request, `-32601` method
//!   not found, `-32602` invalid params (the message says what is wrong).
//! - A bad request never takes the server down: each request runs under `catch_unwind`, and a
//!   poisoned lock is recovered.
//! - `gpum_warpTime` is a dev-only extension, not a Solana method.
//!
//! Layout: `params` (positional parameters, configs, filters), `encode` (JSON of accounts and
//! transactions), one module per method group (`cluster`, `accounts`, `transactions`), and
//! `server` (HTTP). A new method goes in its group's `METHODS` and `handle`.
use std::sync::{Mutex, MutexGuard};
use std::panic::{catch_unwind, AssertUnwindSafe};

use serde_json::{json, Value};

use crate::ledger::Ledger;

mod accounts;
mod cluster;
mod encode;
mod params;
mod server;
mod transactions;

pub use encode::err_json;
pub(crate) use encode::{context, encode_account};
pub(crate) use params::{
    account_encoding, parse_filters, parse_pubkey, AccountCfg, AccountEncoding, DataSlice, Filter, ProgramAccountsCfg,
};
pub use server::RpcServer;

/// The `solana-core` version reported by `getVersion` and in `apiVersion`.
pub const SOLANA_CORE_VERSION: &str = "3.1.12";

/// A JSON-RPC error object.
#[derive(Debug, Clone)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(-32602, message)
    }
    pub(crate) fn method_not_found() -> Self {
        Self::new(-32601, "Method not found")
    }
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(-32603, message)
    }
    fn to_json(&self) -> Value {
        let mut e = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            e["data"] = data.clone();
        }
        e
    }
}

pub(crate) type RpcResult = Result<Value, RpcError>;

/// Every method this server answers (for `README.md` and error messages).
pub const METHODS: &[&str] = &[
    "getAccountInfo", "getBalance", "getBlockHeight", "getBlockTime", "getEpochInfo",
    "getFeeForMessage", "getFirstAvailableBlock", "getGenesisHash", "getHealth", "getIdentity",
    "getLatestBlockhash", "getMinimumBalanceForRentExemption", "getMultipleAccounts",
    "getProgramAccounts", "getRecentPrioritizationFees", "getSignatureStatuses",
    "getSignaturesForAddress", "getSlot", "getTokenAccountBalance", "getTokenAccountsByOwner",
    "getTokenSupply", "getTransaction", "getTransactionCount", "getVersion", "isBlockhashValid",
    "requestAirdrop", "sendTransaction", "simulateTransaction", "gpum_warpTime",
];

/// Each method group: the methods it answers and its handler.
type Group = (&'static [&'static str], fn(&mut Ledger, &str, &params::Params<'_>, u64) -> RpcResult);
const GROUPS: [Group; 3] = [
    (cluster::METHODS, cluster::handle),
    (accounts::METHODS, accounts::handle),
    (transactions::METHODS, transactions::handle),
];

fn dispatch(l: &mut Ledger, method: &str, params: &Value) -> RpcResult {
    let p = params::Params::from(params)?;
    let slot = l.refresh();
    match GROUPS.iter().find(|(methods, _)| methods.contains(&method)) {
        Some((_, handle)) => handle(l, method, &p, slot),
        None => Err(RpcError::method_not_found()),
    }
}

// ---------------------------------------------------------------------------------------------
// JSON-RPC envelope and HTTP.

pub(crate) fn lock(ledger: &Mutex<Ledger>) -> MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub(crate) fn error_response(id: Value, err: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "error": err.to_json(), "id": id})
}

/// Handles one request object; None for a notification (no `id`).
fn handle_one(ledger: &Mutex<Ledger>, req: &Value) -> Option<Value> {
    let Some(obj) = req.as_object() else {
        return Some(error_response(Value::Null, &RpcError::new(-32600, "Invalid request")));
    };
    let id = obj.get("id").cloned();
    let valid_id = matches!(id, None | Some(Value::Null | Value::Number(_) | Value::String(_)));
    let method = obj.get("method").and_then(Value::as_str);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") || method.is_none() || !valid_id {
        return Some(error_response(id.unwrap_or(Value::Null), &RpcError::new(-32600, "Invalid request")));
    }
    let id = id?;
    let method = method.unwrap_or_default();
    let params = obj.get("params").cloned().unwrap_or(Value::Null);
    let result = catch_unwind(AssertUnwindSafe(|| {
        let mut l = lock(ledger);
        dispatch(&mut l, method, &params)
    }))
    .unwrap_or_else(|_| Err(RpcError::internal(format!("Internal error: the server panicked while handling {method}; the request was not applied"))));
    Some(match result {
        Ok(value) => json!({"jsonrpc": "2.0", "result": value, "id": id}),
        Err(e) => error_response(id, &e),
    })
}

/// Handles a request body (single or batch); None when there is nothing to answer.
pub fn handle_body(ledger: &Mutex<Ledger>, body: &[u8]) -> Option<String> {
    let parsed: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => {
            return Some(error_response(Value::Null, &RpcError::new(-32700, "Parse error")).to_string())
        }
    };
    let out = match &parsed {
        Value::Array(batch) if batch.is_empty() => {
            error_response(Value::Null, &RpcError::new(-32600, "Invalid request"))
        }
        Value::Array(batch) => {
            let responses: Vec<Value> = batch.iter().filter_map(|r| handle_one(ledger, r)).collect();
            if responses.is_empty() {
                return None;
            }
            Value::Array(responses)
        }
        single => handle_one(ledger, single)?,
    };
    Some(out.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_groups_answer_exactly_the_listed_methods() {
        let mut grouped: Vec<&str> = GROUPS.iter().flat_map(|(methods, _)| methods.iter().copied()).collect();
        let mut listed = METHODS.to_vec();
        grouped.sort_unstable();
        listed.sort_unstable();
        assert_eq!(grouped, listed);
        let before = grouped.len();
        grouped.dedup();
        assert_eq!(grouped.len(), before, "a method is in two groups");
    }
}
