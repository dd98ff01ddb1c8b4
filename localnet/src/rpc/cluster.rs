//! Cluster, clock and faucet methods: health, version, slots, blockhashes, fees, rent,
//! `requestAirdrop` and the dev-only `gpum_warpTime`.
use base64::{prelude::BASE64_STANDARD, Engine};
use serde_json::json;
use solana_hash::Hash;
use solana_message::VersionedMessage;

use super::encode::with_context;
use super::params::{check_min_context_slot, parse_pubkey, CommonCfg, Params};
use super::{RpcError, RpcResult, SOLANA_CORE_VERSION};
use crate::ledger::Ledger;

/// The methods this group answers.
pub(super) const METHODS: &[&str] = &[
    "getHealth",
    "getVersion",
    "getSlot",
    "getBlockHeight",
    "getTransactionCount",
    "getGenesisHash",
    "getIdentity",
    "getFirstAvailableBlock",
    "getRecentPrioritizationFees",
    "getBlockTime",
    "getEpochInfo",
    "getLatestBlockhash",
    "isBlockhashValid",
    "getMinimumBalanceForRentExemption",
    "getFeeForMessage",
    "requestAirdrop",
    "gpum_warpTime",
];

/// Answers one of [`METHODS`]; `slot` is the ledger slot after `Ledger::refresh`.
pub(super) fn handle(l: &mut Ledger, method: &str, p: &Params<'_>, slot: u64) -> RpcResult {
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
        "gpum_warpTime" => {
            let seconds: u64 = p.req(0, "a number of seconds (non-negative integer) to move the clock forward")?;
            let (slot, unix) = l.warp_seconds(seconds);
            Ok(json!({"slot": slot, "unixTimestamp": unix}))
        }
        _ => Err(RpcError::method_not_found()),
    }
}
