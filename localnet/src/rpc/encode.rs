//! JSON encodings of accounts, transactions, statuses and simulations, and the decoding of
//! wire transactions, byte for byte as Agave 3.1 answers them.
use base64::{prelude::BASE64_STANDARD, Engine};
use serde_json::{json, Value};
use solana_account::{AccountSharedData, ReadableAccount};
use solana_account_decoder::{
    encode_ui_account,
    parse_account_data::{AccountAdditionalDataV3, SplTokenAdditionalDataV2},
    parse_token::{get_token_account_mint, is_known_spl_token_id},
    UiAccountEncoding, UiDataSliceConfig,
};
use solana_hash::Hash;
use solana_message::{compiled_instruction::CompiledInstruction, AccountKeys, VersionedMessage};
use solana_pubkey::Pubkey;
use solana_transaction::versioned::VersionedTransaction;
use solana_transaction_context::TransactionReturnData;
use solana_transaction_error::TransactionError;
use solana_transaction_status::parse_ui_instruction;

use super::params::{AccountEncoding, DataSlice};
use super::{RpcError, RpcResult, SOLANA_CORE_VERSION};
use crate::ledger::{Execution, Ledger, TokenBalance, TxRecord};
use crate::token;

/// Agave's `PACKET_DATA_SIZE`: the largest wire transaction.
const PACKET_DATA_SIZE: usize = 1232;
const MAX_BASE58_SIZE: usize = 1683;
const MAX_BASE64_SIZE: usize = 1644;
/// Largest account data Agave encodes as base58.
const MAX_BASE58_BYTES: usize = 128;

/// What Agave's RPC adds to a token account or mint before parsing it: the mint's decimals and
/// its interest-bearing / scaled-UI-amount configuration (at the current clock), or None when
/// the account names no mint this chain holds (Agave then answers base64).
fn token_additional_data(l: &Ledger, acc: &AccountSharedData) -> Option<AccountAdditionalDataV3> {
    use spl_token_2022_interface::extension::{
        interest_bearing_mint::InterestBearingConfig, scaled_ui_amount::ScaledUiAmountConfig,
        BaseStateWithExtensions, StateWithExtensions,
    };
    use spl_token_2022_interface::state::Mint;
    let mint_key = get_token_account_mint(acc.data())?;
    let mint_account = l.account(&mint_key)?;
    let mint = StateWithExtensions::<Mint>::unpack(mint_account.data()).ok()?;
    let now = l.svm().get_sysvar::<solana_clock::Clock>().unix_timestamp;
    Some(AccountAdditionalDataV3 {
        spl_token_additional_data: Some(SplTokenAdditionalDataV2 {
            decimals: mint.base.decimals,
            interest_bearing_config: mint.get_extension::<InterestBearingConfig>().ok().map(|c| (*c, now)),
            scaled_ui_amount_config: mint.get_extension::<ScaledUiAmountConfig>().ok().map(|c| (*c, now)),
        }),
    })
}

/// The `jsonParsed` form of an account's data, through Agave's own account decoder (SPL Token
/// and Token-2022 with extensions, sysvars, nonce, stake, vote, config, lookup tables,
/// upgradeable loader): `{"program", "parsed", "space"}`, or `[base64, "base64"]` where Agave
/// falls back to binary (unknown owners, a token account whose mint is missing).
fn json_parsed_data(l: &Ledger, key: &Pubkey, acc: &AccountSharedData, data_slice: Option<DataSlice>) -> Value {
    let (additional, slice) = if is_known_spl_token_id(acc.owner()) {
        // Agave parses token accounts whole: dataSlice does not apply to them.
        (token_additional_data(l, acc), None)
    } else {
        (None, data_slice.map(|s| UiDataSliceConfig { offset: s.offset, length: s.length }))
    };
    let ui = encode_ui_account(key, acc, UiAccountEncoding::JsonParsed, additional, slice);
    serde_json::to_value(ui.data).unwrap_or(Value::Null)
}

pub(crate) fn context(slot: u64) -> Value {
    json!({"slot": slot, "apiVersion": SOLANA_CORE_VERSION})
}

pub(crate) fn with_context(slot: u64, value: Value) -> Value {
    json!({"context": context(slot), "value": value})
}

/// Agave's JSON form of a `TransactionError` (serde of the enum; `UiTransactionError`).
pub fn err_json(err: &TransactionError) -> Value {
    serde_json::to_value(err).unwrap_or_else(|_| json!(err.to_string()))
}

pub(crate) fn status_json(err: &Option<TransactionError>) -> Value {
    match err {
        None => json!({"Ok": null}),
        Some(e) => json!({"Err": err_json(e)}),
    }
}

pub(crate) fn slice(data: &[u8], s: Option<DataSlice>) -> &[u8] {
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
    key: &Pubkey,
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
        AccountEncoding::JsonParsed => json_parsed_data(l, key, acc, data_slice),
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

pub(crate) fn decode_transaction(data: &str, encoding: &str) -> Result<(Vec<u8>, VersionedTransaction), RpcError> {
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

pub(crate) fn compiled_ix_json(ix: &CompiledInstruction, stack_height: Option<u32>) -> Value {
    json!({
        "programIdIndex": ix.program_id_index,
        "accounts": ix.accounts,
        "data": bs58::encode(&ix.data).into_string(),
        "stackHeight": stack_height,
    })
}

/// An instruction in `jsonParsed` form, as Agave answers it: parsed by Agave's parsers where the
/// program is one they know (System, SPL Token/Token-2022, ATA, Memo, stake, vote, loaders,
/// lookup tables) and the data is valid for it, else partially decoded (`programId`,
/// `accounts`, `data`).
pub(crate) fn parsed_ix_json(ix: &CompiledInstruction, keys: &[Pubkey], stack_height: Option<u32>) -> Value {
    serde_json::to_value(parse_ui_instruction(ix, &AccountKeys::new(keys, None), stack_height))
        .unwrap_or(Value::Null)
}

pub(crate) fn lookups_json(message: &VersionedMessage) -> Option<Value> {
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

pub(crate) fn message_json(rec: &TxRecord, parsed: bool) -> Value {
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

pub(crate) fn inner_instructions_json(
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

pub(crate) fn token_balances_json(list: &[TokenBalance]) -> Value {
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

pub(crate) fn meta_json(rec: &TxRecord, parsed: bool) -> Value {
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
        meta["returnData"] = return_data_json(&rec.return_data);
    }
    meta
}

/// A program's return data as the RPC reports it (`returnData` of a transaction's meta, of a
/// simulation and of a preflight error).
fn return_data_json(r: &TransactionReturnData) -> Value {
    json!({
        "programId": r.program_id.to_string(),
        "data": [BASE64_STANDARD.encode(&r.data), "base64"],
    })
}

pub(crate) fn simulation_json(ex: &Execution, accounts: Option<Value>, replacement: Option<(Hash, u64)>, inner: bool) -> Value {
    json!({
        "err": ex.err.as_ref().map(err_json),
        "logs": ex.logs,
        "accounts": accounts,
        "unitsConsumed": ex.units,
        "loadedAccountsDataSize": ex.loaded_accounts_data_size,
        "returnData": ex.return_data.as_ref().map(return_data_json),
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

pub(crate) fn preflight_error(ex: &Execution) -> RpcError {
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
            "returnData": ex.return_data.as_ref().map(return_data_json),
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

pub(crate) fn sigs_json(tx: &VersionedTransaction) -> Vec<String> {
    tx.signatures.iter().map(|s| s.to_string()).collect()
}
