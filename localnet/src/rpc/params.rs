//! Positional parameter parsing and the config objects, encodings and filters that requests
//! carry; every bad input becomes a `-32602` error whose message says what was expected.
use base64::{prelude::BASE64_STANDARD, Engine};
use serde::{de::DeserializeOwned, Deserialize};
use serde_json::{json, Value};
use solana_account::{AccountSharedData, ReadableAccount};
use solana_pubkey::Pubkey;
use solana_signature::Signature;

use super::RpcError;
use crate::token;

pub(crate) struct Params<'a>(&'a [Value]);

impl<'a> Params<'a> {
    pub(crate) fn from(v: &'a Value) -> Result<Self, RpcError> {
        match v {
            Value::Null => Ok(Params(&[])),
            Value::Array(a) => Ok(Params(a)),
            _ => Err(RpcError::invalid_params(
                "Invalid params: `params` must be an array of positional parameters",
            )),
        }
    }

    pub(crate) fn get(&self, i: usize) -> Option<&'a Value> {
        self.0.get(i).filter(|v| !v.is_null())
    }

    pub(crate) fn req<T: DeserializeOwned>(&self, i: usize, what: &str) -> Result<T, RpcError> {
        let v = self.get(i).ok_or_else(|| {
            RpcError::invalid_params(format!("Invalid params: missing parameter {i}: expected {what}"))
        })?;
        T::deserialize(v).map_err(|e| {
            RpcError::invalid_params(format!("Invalid params: parameter {i} ({what}): {e}"))
        })
    }

    pub(crate) fn opt<T: DeserializeOwned + Default>(&self, i: usize, what: &str) -> Result<T, RpcError> {
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
pub(crate) struct CommonCfg {
    #[allow(dead_code)]
    commitment: Option<String>,
    pub(crate) min_context_slot: Option<u64>,
}

#[derive(Deserialize, Clone, Copy)]
pub(crate) struct DataSlice {
    pub(crate) offset: usize,
    pub(crate) length: usize,
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

pub(crate) fn check_min_context_slot(min: Option<u64>, slot: u64) -> Result<(), RpcError> {
    match min {
        Some(min) if min > slot => Err(RpcError {
            code: -32016,
            message: "Minimum context slot has not been reached".into(),
            data: Some(json!({"contextSlot": slot})),
        }),
        _ => Ok(()),
    }
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
