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
use std::{
    io::Read,
    net::TcpListener,
    panic::{catch_unwind, AssertUnwindSafe},
    sync::{Arc, Mutex, MutexGuard},
    thread,
};

use base64::{prelude::BASE64_STANDARD, Engine};
use serde::{de::DeserializeOwned, Deserialize};
use serde_json::{json, Value};
use solana_account::{AccountSharedData, ReadableAccount};
use solana_hash::Hash;
use solana_message::{compiled_instruction::CompiledInstruction, VersionedMessage};
use solana_pubkey::Pubkey;
use solana_signature::Signature;
use solana_transaction::versioned::VersionedTransaction;
use solana_transaction_error::TransactionError;

use crate::ledger::{Execution, Ledger, SendOutcome, TokenBalance, TxRecord, TOKEN_2022_PROGRAM, TOKEN_PROGRAM};
use crate::token;

/// The `solana-core` version reported by `getVersion` and in `apiVersion`.
pub const SOLANA_CORE_VERSION: &str = "3.1.12";
/// Agave's `PACKET_DATA_SIZE`: the largest wire transaction.
const PACKET_DATA_SIZE: usize = 1232;
const MAX_BASE58_SIZE: usize = 1683;
const MAX_BASE64_SIZE: usize = 1644;
/// Largest account data Agave encodes as base58.
const MAX_BASE58_BYTES: usize = 128;
const MAX_MULTIPLE_ACCOUNTS: usize = 100;
const MAX_SIGNATURE_STATUSES: usize = 256;
const MAX_GET_SIGNATURES_LIMIT: usize = 1000;
const MAX_BODY_BYTES: u64 = 50 * 1024 * 1024;

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
    fn internal(message: impl Into<String>) -> Self {
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

type RpcResult = Result<Value, RpcError>;

// ---------------------------------------------------------------------------------------------
// SPL Token layouts (the base layout shared by Token and Token-2022).

/// Byte-level parsing of SPL Token accounts and mints.
/// jsonParsed form of a token account or mint, or None when Agave would fall back to binary.
fn token_json_parsed(l: &Ledger, acc: &AccountSharedData) -> Option<Value> {
    let program = if *acc.owner() == TOKEN_PROGRAM { "spl-token" } else { "spl-token-2022" };
    let parsed = if let Some(t) = token::parse_token_account(acc) {
        if t.extended {
            return None;
        }
        let decimals = l.mint_decimals(&t.mint)?;
        let mut info = json!({
            "isNative": t.is_native.is_some(),
            "mint": t.mint.to_string(),
            "owner": t.owner.to_string(),
            "state": if t.state == 2 { "frozen" } else { "initialized" },
            "tokenAmount": token::ui_amount(t.amount, decimals),
        });
        if let Some(d) = t.delegate {
            info["delegate"] = json!(d.to_string());
            info["delegatedAmount"] = token::ui_amount(t.delegated_amount, decimals);
        }
        if let Some(r) = t.is_native {
            info["rentExemptReserve"] = token::ui_amount(r, decimals);
        }
        if let Some(c) = t.close_authority {
            info["closeAuthority"] = json!(c.to_string());
        }
        json!({"type": "account", "info": info})
    } else if let Some(m) = token::parse_mint(acc) {
        if m.extended {
            return None;
        }
        json!({"type": "mint", "info": {
            "mintAuthority": m.mint_authority.map(|p| p.to_string()),
            "supply": m.supply.to_string(),
            "decimals": m.decimals,
            "isInitialized": m.is_initialized,
            "freezeAuthority": m.freeze_authority.map(|p| p.to_string()),
        }})
    } else {
        return None;
    };
    Some(json!({"program": program, "parsed": parsed, "space": acc.data().len()}))
}

// ---------------------------------------------------------------------------------------------
// Parameter parsing.

struct Params<'a>(&'a [Value]);

impl<'a> Params<'a> {
    fn from(v: &'a Value) -> Result<Self, RpcError> {
        match v {
            Value::Null => Ok(Params(&[])),
            Value::Array(a) => Ok(Params(a)),
            _ => Err(RpcError::invalid_params(
                "Invalid params: `params` must be an array of positional parameters",
            )),
        }
    }

    fn get(&self, i: usize) -> Option<&'a Value> {
        self.0.get(i).filter(|v| !v.is_null())
    }

    fn req<T: DeserializeOwned>(&self, i: usize, what: &str) -> Result<T, RpcError> {
        let v = self.get(i).ok_or_else(|| {
            RpcError::invalid_params(format!("Invalid params: missing parameter {i}: expected {what}"))
        })?;
        T::deserialize(v).map_err(|e| {
            RpcError::invalid_params(format!("Invalid params: parameter {i} ({what}): {e}"))
        })
    }

    fn opt<T: DeserializeOwned + Default>(&self, i: usize, what: &str) -> Result<T, RpcError> {
        match self.get(i) {
            None => Ok(T::default()),
            Some(_) => self.req(i, what),
        }
    }
}

pub(crate) fn parse_pubkey(s: &str) -> Result<Pubkey, RpcError> {
    s.parse().map_err(|e| {
        RpcError::invalid_params(format!(
            "Invalid param: {e:?}: {s:?} is not a base58-encoded 32-byte address"
        ))
    })
}

pub(crate) fn parse_signature(s: &str) -> Result<Signature, RpcError> {
    s.parse().map_err(|e| {
        RpcError::invalid_params(format!(
            "Invalid param: {e:?}: {s:?} is not a base58-encoded 64-byte signature"
        ))
    })
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct CommonCfg {
    #[allow(dead_code)]
    commitment: Option<String>,
    min_context_slot: Option<u64>,
}

#[derive(Deserialize, Clone, Copy)]
pub(crate) struct DataSlice {
    offset: usize,
    length: usize,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AccountCfg {
    pub(crate) encoding: Option<String>,
    pub(crate) data_slice: Option<DataSlice>,
    #[allow(dead_code)]
    pub(crate) commitment: Option<String>,
    pub(crate) min_context_slot: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProgramAccountsCfg {
    #[serde(flatten)]
    pub(crate) account: AccountCfg,
    pub(crate) filters: Option<Vec<Value>>,
    pub(crate) with_context: Option<bool>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum AccountEncoding {
    Binary,
    Base58,
    Base64,
    Base64Zstd,
    JsonParsed,
}

pub(crate) fn account_encoding(s: Option<&str>, default: AccountEncoding) -> Result<AccountEncoding, RpcError> {
    Ok(match s {
        None => default,
        Some("binary") => AccountEncoding::Binary,
        Some("base58") => AccountEncoding::Base58,
        Some("base64") => AccountEncoding::Base64,
        Some("base64+zstd") => AccountEncoding::Base64Zstd,
        Some("jsonParsed") => AccountEncoding::JsonParsed,
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "Invalid params: unknown account encoding {other:?}; use one of \"base58\", \"base64\", \"base64+zstd\", \"jsonParsed\""
            )))
        }
    })
}

fn check_min_context_slot(min: Option<u64>, slot: u64) -> Result<(), RpcError> {
    match min {
        Some(min) if min > slot => Err(RpcError {
            code: -32016,
            message: "Minimum context slot has not been reached".into(),
            data: Some(json!({"contextSlot": slot})),
        }),
        _ => Ok(()),
    }
}

pub(crate) fn context(slot: u64) -> Value {
    json!({"slot": slot, "apiVersion": SOLANA_CORE_VERSION})
}

fn with_context(slot: u64, value: Value) -> Value {
    json!({"context": context(slot), "value": value})
}

/// Agave's JSON form of a `TransactionError` (serde of the enum; `UiTransactionError`).
pub fn err_json(err: &TransactionError) -> Value {
    serde_json::to_value(err).unwrap_or_else(|_| json!(err.to_string()))
}

fn status_json(err: &Option<TransactionError>) -> Value {
    match err {
        None => json!({"Ok": null}),
        Some(e) => json!({"Err": err_json(e)}),
    }
}

// ---------------------------------------------------------------------------------------------
// Account encoding.

fn slice(data: &[u8], s: Option<DataSlice>) -> &[u8] {
    match s {
        None => data,
        Some(DataSlice { offset, length }) => {
            if offset >= data.len() {
                &[]
            } else {
                &data[offset..data.len().min(offset.saturating_add(length))]
            }
        }
    }
}

pub(crate) fn encode_account(
    l: &Ledger,
    acc: &AccountSharedData,
    enc: AccountEncoding,
    data_slice: Option<DataSlice>,
) -> RpcResult {
    let data = slice(acc.data(), data_slice);
    let encoded = match enc {
        AccountEncoding::Binary | AccountEncoding::Base58 => {
            if data.len() > MAX_BASE58_BYTES {
                return Err(RpcError::invalid_params(format!(
                    "Encoded binary (base 58) data should be less than {MAX_BASE58_BYTES} bytes, please use Base64 encoding."
                )));
            }
            let s = bs58::encode(data).into_string();
            if enc == AccountEncoding::Binary {
                json!(s)
            } else {
                json!([s, "base58"])
            }
        }
        AccountEncoding::Base64 => json!([BASE64_STANDARD.encode(data), "base64"]),
        AccountEncoding::Base64Zstd => {
            let compressed = zstd::encode_all(data, 0)
                .map_err(|e| RpcError::internal(format!("zstd compression failed: {e}")))?;
            json!([BASE64_STANDARD.encode(compressed), "base64+zstd"])
        }
        AccountEncoding::JsonParsed => token_json_parsed(l, acc)
            .unwrap_or_else(|| json!([BASE64_STANDARD.encode(data), "base64"])),
    };
    Ok(json!({
        "data": encoded,
        "executable": acc.executable(),
        "lamports": acc.lamports(),
        "owner": acc.owner().to_string(),
        "rentEpoch": acc.rent_epoch(),
        "space": acc.data().len(),
    }))
}

// ---------------------------------------------------------------------------------------------
// Transactions: decoding and encoding.

fn decode_transaction(data: &str, encoding: &str) -> Result<(Vec<u8>, VersionedTransaction), RpcError> {
    const TYPE: &str = "solana_transaction::versioned::VersionedTransaction";
    let wire = match encoding {
        "base58" | "binary" => {
            if data.len() > MAX_BASE58_SIZE {
                return Err(RpcError::invalid_params(format!(
                    "base58 encoded {TYPE} too large: {} bytes (max: encoded/raw {MAX_BASE58_SIZE}/{PACKET_DATA_SIZE})",
                    data.len()
                )));
            }
            bs58::decode(data)
                .into_vec()
                .map_err(|e| RpcError::invalid_params(format!("invalid base58 encoding: {e:?}")))?
        }
        "base64" => {
            if data.len() > MAX_BASE64_SIZE {
                return Err(RpcError::invalid_params(format!(
                    "base64 encoded {TYPE} too large: {} bytes (max: encoded/raw {MAX_BASE64_SIZE}/{PACKET_DATA_SIZE})",
                    data.len()
                )));
            }
            BASE64_STANDARD
                .decode(data)
                .map_err(|e| RpcError::invalid_params(format!("invalid base64 encoding: {e:?}")))?
        }
        other => {
            return Err(RpcError::invalid_params(format!(
                "unsupported encoding: {other}. Supported encodings: base58, base64"
            )))
        }
    };
    if wire.len() > PACKET_DATA_SIZE {
        return Err(RpcError::invalid_params(format!(
            "decoded {TYPE} too large: {} bytes (max: {PACKET_DATA_SIZE} bytes)",
            wire.len()
        )));
    }
    use bincode::Options;
    let tx = bincode::options()
        .with_limit(PACKET_DATA_SIZE as u64)
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .deserialize_from::<_, VersionedTransaction>(&wire[..])
        .map_err(|e| RpcError::invalid_params(format!("failed to deserialize {TYPE}: {e}")))?;
    Ok((wire, tx))
}

fn compiled_ix_json(ix: &CompiledInstruction, stack_height: Option<u32>) -> Value {
    json!({
        "programIdIndex": ix.program_id_index,
        "accounts": ix.accounts,
        "data": bs58::encode(&ix.data).into_string(),
        "stackHeight": stack_height,
    })
}

fn parsed_ix_json(ix: &CompiledInstruction, keys: &[Pubkey], stack_height: Option<u32>) -> Value {
    let key = |i: u8| keys.get(i as usize).map(|k| k.to_string()).unwrap_or_default();
    json!({
        "programId": key(ix.program_id_index),
        "accounts": ix.accounts.iter().map(|i| key(*i)).collect::<Vec<_>>(),
        "data": bs58::encode(&ix.data).into_string(),
        "stackHeight": stack_height,
    })
}

fn lookups_json(message: &VersionedMessage) -> Option<Value> {
    message.address_table_lookups().map(|lookups| {
        json!(lookups
            .iter()
            .map(|l| json!({
                "accountKey": l.account_key.to_string(),
                "writableIndexes": l.writable_indexes,
                "readonlyIndexes": l.readonly_indexes,
            }))
            .collect::<Vec<_>>())
    })
}

fn message_json(rec: &TxRecord, parsed: bool) -> Value {
    let m = &rec.tx.message;
    let mut out = if parsed {
        let n_static = m.static_account_keys().len();
        let keys: Vec<Value> = rec
            .account_keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                json!({
                    "pubkey": k.to_string(),
                    "writable": rec.writable.get(i).copied().unwrap_or(false),
                    "signer": i < m.header().num_required_signatures as usize,
                    "source": if i < n_static { "transaction" } else { "lookupTable" },
                })
            })
            .collect();
        json!({
            "accountKeys": keys,
            "recentBlockhash": m.recent_blockhash().to_string(),
            "instructions": m.instructions().iter().map(|ix| parsed_ix_json(ix, &rec.account_keys, None)).collect::<Vec<_>>(),
        })
    } else {
        let h = m.header();
        json!({
            "accountKeys": m.static_account_keys().iter().map(|k| k.to_string()).collect::<Vec<_>>(),
            "header": {
                "numRequiredSignatures": h.num_required_signatures,
                "numReadonlySignedAccounts": h.num_readonly_signed_accounts,
                "numReadonlyUnsignedAccounts": h.num_readonly_unsigned_accounts,
            },
            "recentBlockhash": m.recent_blockhash().to_string(),
            "instructions": m.instructions().iter().map(|ix| compiled_ix_json(ix, None)).collect::<Vec<_>>(),
        })
    };
    if let Some(lookups) = lookups_json(m) {
        out["addressTableLookups"] = lookups;
    }
    out
}

fn inner_instructions_json(
    list: &solana_message::inner_instruction::InnerInstructionsList,
    keys: Option<&[Pubkey]>,
) -> Value {
    json!(list
        .iter()
        .enumerate()
        .filter(|(_, ixs)| !ixs.is_empty())
        .map(|(index, ixs)| json!({
            "index": index,
            "instructions": ixs.iter().map(|ix| {
                let h = Some(ix.stack_height as u32);
                match keys {
                    Some(keys) => parsed_ix_json(&ix.instruction, keys, h),
                    None => compiled_ix_json(&ix.instruction, h),
                }
            }).collect::<Vec<_>>(),
        }))
        .collect::<Vec<_>>())
}

fn token_balances_json(list: &[TokenBalance]) -> Value {
    json!(list
        .iter()
        .map(|b| json!({
            "accountIndex": b.account_index,
            "mint": b.mint.to_string(),
            "uiTokenAmount": token::ui_amount(b.amount, b.decimals),
            "owner": b.owner.to_string(),
            "programId": b.program_id.to_string(),
        }))
        .collect::<Vec<_>>())
}

fn meta_json(rec: &TxRecord, parsed: bool) -> Value {
    let mut meta = json!({
        "err": rec.err.as_ref().map(err_json),
        "status": status_json(&rec.err),
        "fee": rec.fee,
        "preBalances": rec.pre_balances,
        "postBalances": rec.post_balances,
        "innerInstructions": inner_instructions_json(&rec.inner_instructions, parsed.then_some(&rec.account_keys[..])),
        "logMessages": rec.logs,
        "preTokenBalances": token_balances_json(&rec.pre_token_balances),
        "postTokenBalances": token_balances_json(&rec.post_token_balances),
        "rewards": [],
        "computeUnitsConsumed": rec.compute_units,
    });
    if !parsed {
        meta["loadedAddresses"] = json!({
            "writable": rec.loaded.writable.iter().map(|k| k.to_string()).collect::<Vec<_>>(),
            "readonly": rec.loaded.readonly.iter().map(|k| k.to_string()).collect::<Vec<_>>(),
        });
    }
    if !rec.return_data.data.is_empty() {
        meta["returnData"] = json!({
            "programId": rec.return_data.program_id.to_string(),
            "data": [BASE64_STANDARD.encode(&rec.return_data.data), "base64"],
        });
    }
    meta
}

fn simulation_json(ex: &Execution, accounts: Option<Value>, replacement: Option<(Hash, u64)>, inner: bool) -> Value {
    json!({
        "err": ex.err.as_ref().map(err_json),
        "logs": ex.logs,
        "accounts": accounts,
        "unitsConsumed": ex.units,
        "loadedAccountsDataSize": ex.loaded_accounts_data_size,
        "returnData": ex.return_data.as_ref().map(|r| json!({
            "programId": r.program_id.to_string(),
            "data": [BASE64_STANDARD.encode(&r.data), "base64"],
        })),
        "innerInstructions": inner.then(|| inner_instructions_json(&ex.inner_instructions, None)),
        "replacementBlockhash": replacement.map(|(h, v)| json!({"blockhash": h.to_string(), "lastValidBlockHeight": v})),
        "fee": ex.fee,
        "preBalances": (!ex.account_keys.is_empty()).then_some(&ex.pre_balances),
        "postBalances": (!ex.account_keys.is_empty()).then_some(&ex.post_balances),
        "preTokenBalances": null,
        "postTokenBalances": null,
        "loadedAddresses": null,
    })
}

fn preflight_error(ex: &Execution) -> RpcError {
    let err = ex.err.clone().unwrap_or(TransactionError::AccountNotFound);
    RpcError {
        code: -32002,
        message: format!("Transaction simulation failed: {err}"),
        data: Some(json!({
            "err": err_json(&err),
            "logs": ex.logs,
            "accounts": null,
            "unitsConsumed": ex.units,
            "loadedAccountsDataSize": ex.loaded_accounts_data_size,
            "returnData": ex.return_data.as_ref().map(|r| json!({
                "programId": r.program_id.to_string(),
                "data": [BASE64_STANDARD.encode(&r.data), "base64"],
            })),
            "innerInstructions": null,
            "replacementBlockhash": null,
            "fee": ex.fee,
            "preBalances": null,
            "postBalances": null,
            "preTokenBalances": null,
            "postTokenBalances": null,
            "loadedAddresses": null,
        })),
    }
}

// ---------------------------------------------------------------------------------------------
// Methods.

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

fn dispatch(l: &mut Ledger, method: &str, params: &Value) -> RpcResult {
    let p = Params::from(params)?;
    let slot = l.refresh();
    match method {
        "getHealth" => Ok(json!("ok")),
        "getVersion" => {
            let id = agave_feature_set::ID.as_ref();
            let feature_set = u32::from_le_bytes([id[0], id[1], id[2], id[3]]);
            Ok(json!({"solana-core": SOLANA_CORE_VERSION, "feature-set": feature_set}))
        }
        "getSlot" | "getBlockHeight" => {
            let cfg: CommonCfg = p.opt(0, "a config object")?;
            check_min_context_slot(cfg.min_context_slot, slot)?;
            Ok(json!(slot))
        }
        "getTransactionCount" => Ok(json!(l.transaction_count())),
        "getGenesisHash" => Ok(json!(l.genesis_hash().to_string())),
        "getIdentity" => Ok(json!({"identity": l.identity().to_string()})),
        "getFirstAvailableBlock" => Ok(json!(0)),
        "getRecentPrioritizationFees" => Ok(json!([])),
        "getBlockTime" => {
            let s: u64 = p.req(0, "a slot number")?;
            if s > slot {
                return Err(RpcError::new(-32004, format!("Block not available for slot {s}")));
            }
            Ok(json!(l.block_time(s)))
        }
        "getEpochInfo" => {
            let schedule: solana_epoch_schedule::EpochSchedule = l.svm().get_sysvar();
            let (epoch, index) = schedule.get_epoch_and_slot_index(slot);
            Ok(json!({
                "absoluteSlot": slot,
                "blockHeight": slot,
                "epoch": epoch,
                "slotIndex": index,
                "slotsInEpoch": schedule.get_slots_in_epoch(epoch),
                "transactionCount": l.transaction_count(),
            }))
        }
        "getLatestBlockhash" => {
            let cfg: CommonCfg = p.opt(0, "a config object")?;
            check_min_context_slot(cfg.min_context_slot, slot)?;
            let (hash, last_valid) = l.latest_blockhash();
            Ok(with_context(slot, json!({"blockhash": hash.to_string(), "lastValidBlockHeight": last_valid})))
        }
        "isBlockhashValid" => {
            let s: String = p.req(0, "a base58 blockhash")?;
            let hash: Hash = s
                .parse()
                .map_err(|e| RpcError::invalid_params(format!("Invalid param: {e:?}: {s:?} is not a base58 blockhash")))?;
            Ok(with_context(slot, json!(l.is_blockhash_valid(&hash))))
        }
        "getMinimumBalanceForRentExemption" => {
            let len: usize = p.req(0, "a data length in bytes")?;
            if len > 10 * 1024 * 1024 {
                return Err(RpcError::invalid_params(
                    "Invalid params: data length must be at most 10485760 bytes (MAX_PERMITTED_DATA_LENGTH)",
                ));
            }
            Ok(json!(l.minimum_balance_for_rent_exemption(len)))
        }
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
                Some(acc) => encode_account(l, &acc, enc, cfg.data_slice)?,
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
                    Some(acc) => encode_account(l, &acc, enc, cfg.data_slice)?,
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
                    out.push(json!({"pubkey": key.to_string(), "account": encode_account(l, &acc, enc, cfg.account.data_slice)?}));
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
                    out.push(json!({"pubkey": key.to_string(), "account": encode_account(l, &acc, enc, cfg.data_slice)?}));
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
        "getFeeForMessage" => {
            let s: String = p.req(0, "a base64-encoded message")?;
            let bytes = BASE64_STANDARD
                .decode(&s)
                .map_err(|e| RpcError::invalid_params(format!("invalid base64 encoding: {e:?}")))?;
            let message: VersionedMessage = bincode::deserialize(&bytes).map_err(|e| {
                RpcError::invalid_params(format!("failed to deserialize solana_message::versions::VersionedMessage: {e}"))
            })?;
            let fee = l.fee_for_message(message).map_err(|e| RpcError::invalid_params(e.0))?;
            Ok(with_context(slot, json!(fee)))
        }
        "requestAirdrop" => {
            let key = parse_pubkey(&p.req::<String>(0, "a base58 address")?)?;
            let lamports: u64 = p.req(1, "an amount in lamports")?;
            let sig = l.airdrop(&key, lamports).map_err(RpcError::internal)?;
            Ok(json!(sig.to_string()))
        }
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
                            Some(acc) => encode_account(l, &acc, enc, None)?,
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
        "gpum_warpTime" => {
            let seconds: u64 = p.req(0, "a number of seconds (non-negative integer) to move the clock forward")?;
            let (slot, unix) = l.warp_seconds(seconds);
            Ok(json!({"slot": slot, "unixTimestamp": unix}))
        }
        _ => Err(RpcError::new(-32601, "Method not found")),
    }
}

fn sigs_json(tx: &VersionedTransaction) -> Vec<String> {
    tx.signatures.iter().map(|s| s.to_string()).collect()
}

pub(crate) enum Filter {
    DataSize(usize),
    Memcmp { offset: usize, bytes: Vec<u8> },
    TokenAccountState,
}

impl Filter {
    pub(crate) fn matches(&self, acc: &AccountSharedData) -> bool {
        let d = acc.data();
        match self {
            Filter::DataSize(n) => d.len() == *n,
            Filter::Memcmp { offset, bytes } => d.get(*offset..offset + bytes.len()) == Some(&bytes[..]),
            Filter::TokenAccountState => token::parse_token_account(acc).is_some(),
        }
    }
}

pub(crate) fn parse_filters(raw: &[Value]) -> Result<Vec<Filter>, RpcError> {
    if raw.len() > 4 {
        return Err(RpcError::invalid_params("Too many filters provided; max 4"));
    }
    raw.iter()
        .map(|f| {
            if let Some(n) = f.get("dataSize") {
                let n = n.as_u64().ok_or_else(|| RpcError::invalid_params("Invalid param: dataSize must be a non-negative integer"))?;
                return Ok(Filter::DataSize(n as usize));
            }
            if f.get("tokenAccountState").is_some() {
                return Ok(Filter::TokenAccountState);
            }
            let Some(m) = f.get("memcmp") else {
                return Err(RpcError::invalid_params(format!(
                    "Invalid param: unknown filter {f}; use {{\"memcmp\": {{\"offset\": n, \"bytes\": \"...\", \"encoding\": \"base58\"|\"base64\"}}}} or {{\"dataSize\": n}}"
                )));
            };
            let offset = m
                .get("offset")
                .and_then(Value::as_u64)
                .ok_or_else(|| RpcError::invalid_params("Invalid param: memcmp.offset must be a non-negative integer"))?
                as usize;
            let s = m
                .get("bytes")
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::invalid_params("Invalid param: memcmp.bytes must be a string"))?;
            let bytes = match m.get("encoding").and_then(Value::as_str).unwrap_or("base58") {
                "base58" => {
                    if s.len() > 175 {
                        return Err(RpcError::invalid_params("Invalid param: memcmp base58 bytes too large (max 175 characters); use base64"));
                    }
                    bs58::decode(s).into_vec().map_err(|e| {
                        RpcError::invalid_params(format!("Invalid param: memcmp.bytes is not valid base58: {e}"))
                    })?
                }
                "base64" => BASE64_STANDARD.decode(s).map_err(|e| {
                    RpcError::invalid_params(format!("Invalid param: memcmp.bytes is not valid base64: {e}"))
                })?,
                other => {
                    return Err(RpcError::invalid_params(format!(
                        "Invalid param: unknown memcmp encoding {other:?}; use \"base58\" or \"base64\""
                    )))
                }
            };
            if bytes.len() > 128 {
                return Err(RpcError::invalid_params("Invalid param: memcmp bytes too large (max 128 bytes)"));
            }
            Ok(Filter::Memcmp { offset, bytes })
        })
        .collect()
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

/// Sets `TCP_NODELAY` on the listening socket; Linux copies it to every accepted connection.
/// tiny_http writes an answer's head and body separately and never sets it itself, so
/// without this every answer over one segment waited for the client's delayed ACK (~40 ms).
fn set_nodelay_inherited(listener: &TcpListener) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let one: libc::c_int = 1;
    // SAFETY: a valid socket fd owned by `listener`, and a pointer to a live c_int of the
    // length passed.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn respond(request: tiny_http::Request, ledger: &Mutex<Ledger>) {
    let json_header = tiny_http::Header::from_bytes("Content-Type", "application/json").expect("static header");
    let method = request.method().clone();
    let url = request.url().to_string();
    let mut request = request;
    let response = match method {
        tiny_http::Method::Get if url == "/health" => tiny_http::Response::from_string("ok"),
        tiny_http::Method::Post => {
            let mut body = Vec::new();
            match request.as_reader().take(MAX_BODY_BYTES + 1).read_to_end(&mut body) {
                Ok(_) if body.len() as u64 > MAX_BODY_BYTES => {
                    tiny_http::Response::from_string("request body too large").with_status_code(413)
                }
                Ok(_) => match handle_body(ledger, &body) {
                    Some(text) => tiny_http::Response::from_string(text).with_header(json_header),
                    None => tiny_http::Response::from_string("").with_status_code(200),
                },
                Err(e) => tiny_http::Response::from_string(format!("could not read the request body: {e}"))
                    .with_status_code(400),
            }
        }
        _ => tiny_http::Response::from_string("Used HTTP Method is not allowed. POST JSON-RPC requests to /")
            .with_status_code(405),
    };
    let _ = request.respond(response);
}

/// A running JSON-RPC server.
pub struct RpcServer {
    server: Arc<tiny_http::Server>,
    workers: Vec<thread::JoinHandle<()>>,
    pub ledger: Arc<Mutex<Ledger>>,
}

impl RpcServer {
    /// Serves `ledger` on `listener` with `threads` worker threads.
    pub fn start(listener: TcpListener, ledger: Ledger, threads: usize) -> std::io::Result<Self> {
        set_nodelay_inherited(&listener)?;
        let server = Arc::new(
            tiny_http::Server::from_listener(listener, None).map_err(std::io::Error::other)?,
        );
        let ledger = Arc::new(Mutex::new(ledger));
        let workers = (0..threads.max(1))
            .map(|i| {
                let server = server.clone();
                let ledger = ledger.clone();
                thread::Builder::new()
                    .name(format!("rpc-{i}"))
                    .spawn(move || {
                        while let Ok(request) = server.recv() {
                            let _ = catch_unwind(AssertUnwindSafe(|| respond(request, &ledger)));
                        }
                    })
                    .expect("spawn an RPC worker thread")
            })
            .collect();
        Ok(Self { server, workers, ledger })
    }

    /// The bound address.
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.server.server_addr().to_ip()
    }

    /// Stops accepting requests and joins the workers.
    pub fn shutdown(self) {
        for _ in &self.workers {
            self.server.unblock();
        }
        for w in self.workers {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_connections_inherit_tcp_nodelay_from_the_listener() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        let (before, _) = listener.accept().unwrap();
        assert!(!before.nodelay().unwrap(), "the kernel default is Nagle on");
        set_nodelay_inherited(&listener).unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        let (after, _) = listener.accept().unwrap();
        assert!(after.nodelay().unwrap());
    }
}
