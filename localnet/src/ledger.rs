//! [`Ledger`]: the LiteSVM runtime made to behave like a single-node cluster for RPC clients.
//!
//! Guarantees:
//! - **Clock.** Before every transaction, simulation and read, the Clock sysvar is set from wall
//!   time: `unix_timestamp = wall_now + offset`, `slot = elapsed_ms / 400 + warped_slots`, epoch
//!   from the EpochSchedule sysvar. Slot and time never go backwards. [`Ledger::warp_seconds`]
//!   (dev only) moves both forward.
//! - **Blockhashes.** LiteSVM's own "must equal the latest blockhash" check is off; instead a queue
//!   of issued blockhashes, each with the slot it was issued at, accepts a blockhash for 150 slots
//!   (`MAX_PROCESSING_AGE`), as a cluster does. A new blockhash is issued when the slot advanced.
//!   Durable-nonce transactions are accepted when the nonce account holds their blockhash.
//! - **Finality.** A transaction is executed when received; if it lands (succeeds, or fails after
//!   paying its fee) it is final at once and recorded with its slot, block time, error, logs, fee,
//!   compute units, balances, token balances and inner instructions.
//! - Block height equals slot.
use std::{
    collections::{HashMap, HashSet, VecDeque},
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use litesvm::{
    types::{FailedTransactionMetadata, TransactionMetadata},
    LiteSVM,
};
use solana_account::{AccountSharedData, ReadableAccount};
use solana_clock::Clock;
use solana_epoch_schedule::EpochSchedule;
use solana_slot_hashes::SlotHashes;
use solana_hash::Hash;
use solana_keypair::Keypair;
use solana_message::{
    inner_instruction::InnerInstructionsList,
    v0::LoadedAddresses,
    SanitizedMessage, VersionedMessage,
};
use solana_pubkey::Pubkey;
use solana_signature::Signature;
use solana_signer::Signer;
use solana_transaction::{
    sanitized::{MessageHash, SanitizedTransaction},
    versioned::VersionedTransaction,
};
use solana_transaction_context::TransactionReturnData;
use solana_transaction_error::TransactionError;

/// Milliseconds per slot, as on mainnet.
pub const MS_PER_SLOT: u64 = 400;
/// How many slots a blockhash stays valid (Agave's `MAX_PROCESSING_AGE`).
pub const MAX_PROCESSING_AGE: u64 = 150;
/// How many transactions LiteSVM remembers for duplicate detection.
pub const HISTORY_CAPACITY: usize = 100_000;

/// The largest single `warp_seconds` step (about 1000 years).
pub const MAX_WARP_SECONDS: u64 = 1000 * 365 * 86_400;
/// Fee per signature (the runtime's default fee structure).
pub const LAMPORTS_PER_SIGNATURE: u64 = 5_000;
/// Lamports the `requestAirdrop` faucet starts with (500 million SOL).
pub const FAUCET_LAMPORTS: u64 = 500_000_000 * 1_000_000_000;

const MEMO_V1: Pubkey = Pubkey::from_str_const("Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo");
const MEMO_V3: Pubkey = Pubkey::from_str_const("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr");

/// A token balance of one account of a transaction (Agave's `TransactionTokenBalance`).
#[derive(Clone, Debug)]
pub struct TokenBalance {
    pub account_index: u8,
    pub mint: Pubkey,
    pub owner: Pubkey,
    pub program_id: Pubkey,
    pub amount: u64,
    pub decimals: u8,
}

/// Everything kept about a landed transaction.
#[derive(Clone, Debug)]
pub struct TxRecord {
    pub signature: Signature,
    pub slot: u64,
    pub block_time: i64,
    pub err: Option<TransactionError>,
    pub logs: Vec<String>,
    pub fee: u64,
    pub compute_units: u64,
    pub tx: VersionedTransaction,
    /// Static keys followed by the keys loaded from lookup tables (writable, then readonly).
    pub account_keys: Vec<Pubkey>,
    pub writable: Vec<bool>,
    pub loaded: LoadedAddresses,
    pub pre_balances: Vec<u64>,
    pub post_balances: Vec<u64>,
    pub pre_token_balances: Vec<TokenBalance>,
    pub post_token_balances: Vec<TokenBalance>,
    pub inner_instructions: InnerInstructionsList,
    pub return_data: TransactionReturnData,
    pub memo: Option<String>,
}

/// What PubSub subscribers learn about a landed transaction (`Ledger::subscribe_landed`).
#[derive(Clone, Debug)]
pub struct LandedEvent {
    pub signature: Signature,
    pub slot: u64,
    pub err: Option<TransactionError>,
    pub logs: Vec<String>,
    /// Every account key of the transaction (static and loaded).
    pub accounts: Vec<Pubkey>,
    /// The writable ones: the only accounts the transaction can have changed.
    pub writable: Vec<Pubkey>,
}

/// The outcome of executing a transaction (sent or simulated).
#[derive(Clone, Debug, Default)]
pub struct Execution {
    pub err: Option<TransactionError>,
    pub logs: Vec<String>,
    pub units: u64,
    pub fee: Option<u64>,
    pub return_data: Option<TransactionReturnData>,
    pub inner_instructions: InnerInstructionsList,
    pub loaded_accounts_data_size: u32,
    /// Post-execution state of the writable accounts (simulation only).
    pub post_accounts: Vec<(Pubkey, AccountSharedData)>,
    pub account_keys: Vec<Pubkey>,
    pub pre_balances: Vec<u64>,
    pub post_balances: Vec<u64>,
}

impl Execution {
    fn rejected(err: TransactionError) -> Self {
        Self { err: Some(err), ..Default::default() }
    }
}

/// What `send` did with a transaction.
#[derive(Debug)]
pub enum SendOutcome {
    /// Preflight (simulation) failed; nothing was committed.
    PreflightFailed(Execution),
    /// Executed and recorded (possibly failed with `err`, fee charged).
    Landed { signature: Signature, err: Option<TransactionError> },
    /// Not landed, as a cluster drops it (skipPreflight only): the signature is returned to the
    /// client, and its status stays unknown.
    Dropped { signature: Signature, err: TransactionError },
}

/// A rejected request; the RPC layer maps it to `-32602 invalid params`.
#[derive(Debug)]
pub struct InvalidTransaction(pub String);

fn wall_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

/// The local chain state: the runtime plus the cluster-like bookkeeping around it.
pub struct Ledger {
    svm: LiteSVM,
    started: Instant,
    start_unix: i64,
    offset_seconds: i64,
    warped_slots: u64,
    last_slot: u64,
    last_unix: i64,
    /// (slot, unix) pairs from which the time of any past slot is derived.
    time_anchors: Vec<(u64, i64)>,
    blockhashes: VecDeque<(Hash, u64)>,
    txs: HashMap<Signature, TxRecord>,
    by_address: HashMap<Pubkey, Vec<Signature>>,
    tx_count: u64,
    genesis_hash: Hash,
    identity: Pubkey,
    reserved_keys: HashSet<Pubkey>,
    /// Mainnet features, as `new_svm` activates them (for fee calculation).
    feature_set: agave_feature_set::FeatureSet,
    /// Funds `requestAirdrop`.
    faucet: Keypair,
    /// Print one line per landed transaction to stderr.
    pub log_transactions: bool,
    /// Receivers of every landed transaction, in landing order (PubSub); a dropped receiver
    /// is forgotten at the next transaction.
    landed_listeners: Vec<std::sync::mpsc::Sender<LandedEvent>>,
}

impl Ledger {
    /// A fresh chain at slot 0 with the wall clock's current time.
    pub fn new(svm: LiteSVM) -> Self {
        let mut svm = svm.with_blockhash_check(false).with_transaction_history(HISTORY_CAPACITY);
        let faucet = Keypair::new();
        svm.set_account(
            faucet.pubkey(),
            solana_account::Account {
                lamports: FAUCET_LAMPORTS,
                owner: solana_sdk_ids::system_program::id(),
                ..Default::default()
            },
        )
        .expect("fund the faucet");
        let start_unix = (wall_ms() / 1000) as i64;
        let genesis_hash = svm.latest_blockhash();
        let mut ledger = Self {
            svm,
            started: Instant::now(),
            start_unix,
            offset_seconds: 0,
            warped_slots: 0,
            last_slot: 0,
            last_unix: start_unix,
            time_anchors: vec![(0, start_unix)],
            blockhashes: VecDeque::from([(genesis_hash, 0)]),
            txs: HashMap::new(),
            by_address: HashMap::new(),
            tx_count: 0,
            genesis_hash,
            identity: Keypair::new().pubkey(),
            reserved_keys: agave_reserved_account_keys::ReservedAccountKeys::new_all_activated()
                .active,
            feature_set: LiteSVM::mainnet_feature_set(),
            faucet,
            log_transactions: false,
            landed_listeners: Vec::new(),
        };
        ledger.refresh();
        ledger
    }

    /// The runtime, read-only.
    pub fn svm(&self) -> &LiteSVM {
        &self.svm
    }

    /// Brings slot and Clock sysvar up to wall time; returns the current slot.
    pub fn refresh(&mut self) -> u64 {
        let elapsed_slots = (self.started.elapsed().as_millis() / MS_PER_SLOT as u128) as u64;
        let slot = (elapsed_slots + self.warped_slots).max(self.last_slot);
        let unix = ((wall_ms() / 1000) as i64 + self.offset_seconds).max(self.last_unix);
        if slot != self.last_slot || unix != self.last_unix || slot == 0 {
            let previous = self.last_slot;
            self.last_slot = slot;
            self.last_unix = unix;
            self.set_clock();
            if slot > previous {
                self.record_slot_hashes(previous, slot);
            }
        }
        slot
    }

    /// SlotHashes gains an entry for every slot after `from` up to `to`, the newest 512 kept,
    /// as on a cluster (LiteSVM alone keeps slot 0's forever). So an address lookup table can
    /// be created from any of the last 512 slots (one per slot and authority), and a
    /// deactivated table becomes closable once its deactivation slot left the list, 512 slots
    /// later, as on a cluster.
    fn record_slot_hashes(&mut self, from: u64, to: u64) {
        let mut hashes: SlotHashes = self.svm.get_sysvar();
        let keep = solana_slot_hashes::MAX_ENTRIES as u64;
        let hash = self.svm.latest_blockhash();
        for slot in from.saturating_add(1).max(to.saturating_sub(keep - 1))..=to {
            hashes.add(slot, hash);
        }
        self.svm.set_sysvar(&hashes);
    }

    fn set_clock(&mut self) {
        let schedule: EpochSchedule = self.svm.get_sysvar();
        let (epoch, _) = schedule.get_epoch_and_slot_index(self.last_slot);
        let first = schedule.get_first_slot_in_epoch(epoch);
        let clock = Clock {
            slot: self.last_slot,
            epoch_start_timestamp: self.block_time(first).min(self.last_unix),
            epoch,
            leader_schedule_epoch: schedule.get_leader_schedule_epoch(self.last_slot),
            unix_timestamp: self.last_unix,
        };
        self.svm.set_sysvar(&clock);
    }

    /// The current slot (= block height).
    pub fn slot(&mut self) -> u64 {
        self.refresh()
    }

    /// The Unix time of the current slot.
    pub fn unix_timestamp(&mut self) -> i64 {
        self.refresh();
        self.last_unix
    }

    /// Dev only: moves the clock `seconds` forward, and the slot by `seconds / 0.4`.
    /// Returns (slot, unix_timestamp).
    pub fn warp_seconds(&mut self, seconds: u64) -> (u64, i64) {
        self.refresh();
        // At most ~1000 years per call, so the slot arithmetic cannot overflow.
        let seconds = seconds.min(MAX_WARP_SECONDS);
        self.offset_seconds += seconds as i64;
        self.warped_slots += seconds * 1000 / MS_PER_SLOT;
        let slot = self.refresh();
        self.time_anchors.push((slot, self.last_unix));
        (slot, self.last_unix)
    }

    /// The Unix time of `slot` (the recorded time for past slots, derived from the anchors).
    pub fn block_time(&self, slot: u64) -> i64 {
        let (a_slot, a_unix) = self
            .time_anchors
            .iter()
            .rev()
            .find(|(s, _)| *s <= slot)
            .copied()
            .unwrap_or((0, self.start_unix));
        a_unix + ((slot - a_slot) * MS_PER_SLOT / 1000) as i64
    }

    /// The newest blockhash, issuing a new one when the slot advanced since the last one.
    /// Returns (blockhash, last_valid_block_height).
    pub fn latest_blockhash(&mut self) -> (Hash, u64) {
        let slot = self.refresh();
        let newest_slot = self.blockhashes.back().map(|(_, s)| *s).unwrap_or(0);
        if slot > newest_slot || self.blockhashes.is_empty() {
            self.issue_blockhash(slot);
        }
        let (hash, issued) = *self.blockhashes.back().expect("at least one blockhash");
        (hash, issued + MAX_PROCESSING_AGE)
    }

    fn issue_blockhash(&mut self, slot: u64) {
        self.svm.expire_blockhash();
        self.blockhashes.push_back((self.svm.latest_blockhash(), slot));
        while self.blockhashes.len() > 1
            && self.blockhashes.front().is_some_and(|(_, s)| s + 2 * MAX_PROCESSING_AGE < slot)
        {
            self.blockhashes.pop_front();
        }
    }

    /// Whether `hash` was issued no more than 150 slots ago.
    pub fn is_blockhash_valid(&mut self, hash: &Hash) -> bool {
        let slot = self.refresh();
        self.blockhashes
            .iter()
            .any(|(h, issued)| h == hash && issued + MAX_PROCESSING_AGE >= slot)
    }

    /// The slot `hash` was issued at, if it is still valid.
    pub fn blockhash_last_valid(&mut self, hash: &Hash) -> Option<u64> {
        let slot = self.refresh();
        self.blockhashes
            .iter()
            .find(|(h, issued)| h == hash && issued + MAX_PROCESSING_AGE >= slot)
            .map(|(_, issued)| issued + MAX_PROCESSING_AGE)
    }

    pub fn genesis_hash(&self) -> Hash {
        self.genesis_hash
    }

    pub fn identity(&self) -> Pubkey {
        self.identity
    }

    /// Transactions landed so far.
    pub fn transaction_count(&self) -> u64 {
        self.tx_count
    }

    /// The account at `address`, if it exists (zero-lamport accounts do not).
    pub fn account(&self, address: &Pubkey) -> Option<AccountSharedData> {
        self.svm
            .accounts_db()
            .get_account_ref(address)
            .filter(|a| a.lamports() > 0 || !a.data().is_empty())
            .cloned()
    }

    /// All accounts owned by `program`, sorted by address.
    pub fn program_accounts(&self, program: &Pubkey) -> Vec<(Pubkey, AccountSharedData)> {
        let mut out: Vec<_> = self
            .svm
            .accounts_db()
            .inner
            .iter()
            .filter(|(_, a)| a.owner() == program && a.lamports() > 0)
            .map(|(k, a)| (*k, a.clone()))
            .collect();
        out.sort_by_key(|(k, _)| *k);
        out
    }

    pub fn minimum_balance_for_rent_exemption(&self, len: usize) -> u64 {
        self.svm.minimum_balance_for_rent_exemption(len)
    }

    pub fn transaction(&self, signature: &Signature) -> Option<&TxRecord> {
        self.txs.get(signature)
    }

    /// Signatures that touched `address`, newest first.
    pub fn signatures_for_address(&self, address: &Pubkey) -> Vec<&TxRecord> {
        self.by_address
            .get(address)
            .map(|sigs| sigs.iter().rev().filter_map(|s| self.txs.get(s)).collect())
            .unwrap_or_default()
    }

    /// Sanitizes `tx` (resolving lookup tables) as the RPC service does before anything else.
    pub fn sanitize(&self, tx: &VersionedTransaction) -> Result<SanitizedTransaction, InvalidTransaction> {
        SanitizedTransaction::try_create(
            tx.clone(),
            MessageHash::Compute,
            Some(false),
            self.svm.accounts_db(),
            &self.reserved_keys,
        )
        .map_err(|e| InvalidTransaction(format!("invalid transaction: {e}")))
    }

    /// The fee the runtime charges for `message`, or None when its blockhash is not valid.
    pub fn fee_for_message(&mut self, message: VersionedMessage) -> Result<Option<u64>, InvalidTransaction> {
        let blockhash = *message.recent_blockhash();
        let signatures = vec![Signature::default(); message.header().num_required_signatures as usize];
        let tx = VersionedTransaction { signatures, message };
        let sanitized = self.sanitize(&tx)?;
        if !self.is_blockhash_valid(&blockhash) && !self.nonce_ok(&sanitized) {
            return Ok(None);
        }
        Ok(Some(self.fee(&sanitized).map_err(|e| InvalidTransaction(format!("invalid message: {e}")))?))
    }

    fn fee(&self, tx: &SanitizedTransaction) -> Result<u64, TransactionError> {
        let limits = solana_compute_budget_instruction::instructions_processor::process_compute_budget_instructions(
            solana_svm_transaction::svm_message::SVMMessage::program_instructions_iter(tx),
            &self.feature_set,
        )?;
        Ok(solana_fee::calculate_fee(
            tx,
            false,
            LAMPORTS_PER_SIGNATURE,
            limits.get_prioritization_fee(),
            solana_fee::FeeFeatures::from(&self.feature_set),
        ))
    }

    /// Whether `tx` is a durable-nonce transaction whose nonce account holds its blockhash.
    fn nonce_ok(&self, tx: &SanitizedTransaction) -> bool {
        tx.get_durable_nonce()
            .and_then(|addr| self.svm.accounts_db().get_account_ref(addr))
            .and_then(|acc| solana_nonce_account::verify_nonce_account(acc, tx.message().recent_blockhash()))
            .is_some()
    }

    fn blockhash_or_nonce_ok(&mut self, tx: &SanitizedTransaction) -> bool {
        let hash = *tx.message().recent_blockhash();
        self.is_blockhash_valid(&hash) || self.nonce_ok(tx)
    }

    fn keys_of(message: &SanitizedMessage) -> (Vec<Pubkey>, Vec<bool>, LoadedAddresses) {
        let keys: Vec<Pubkey> = message.account_keys().iter().copied().collect();
        let writable = (0..keys.len()).map(|i| message.is_writable(i)).collect();
        let loaded = match message {
            SanitizedMessage::V0(m) => m.loaded_addresses.clone().into_owned(),
            SanitizedMessage::Legacy(_) => LoadedAddresses::default(),
        };
        (keys, writable, loaded)
    }

    fn balances(&self, keys: &[Pubkey]) -> Vec<u64> {
        keys.iter().map(|k| self.svm.get_balance(k).unwrap_or(0)).collect()
    }

    fn token_balances(&self, keys: &[Pubkey]) -> Vec<TokenBalance> {
        keys.iter()
            .enumerate()
            .filter_map(|(i, k)| {
                let acc = self.svm.accounts_db().get_account_ref(k)?;
                let t = crate::token::parse_token_account(acc)?;
                let decimals = self.mint_decimals(&t.mint)?;
                Some(TokenBalance {
                    account_index: i as u8,
                    mint: t.mint,
                    owner: t.owner,
                    program_id: *acc.owner(),
                    amount: t.amount,
                    decimals,
                })
            })
            .collect()
    }

    /// Decimals of `mint` (9 for the native mint).
    pub fn mint_decimals(&self, mint: &Pubkey) -> Option<u8> {
        if *mint == crate::token::NATIVE_MINT {
            return Some(9);
        }
        let acc = self.svm.accounts_db().get_account_ref(mint)?;
        crate::token::parse_mint(acc).map(|m| m.decimals)
    }

    fn loaded_size(&self, keys: &[Pubkey]) -> u32 {
        keys.iter()
            .map(|k| self.svm.accounts_db().get_account_ref(k).map_or(0, |a| a.data().len()) + 64)
            .sum::<usize>()
            .min(u32::MAX as usize) as u32
    }

    /// Runs `tx` without committing anything. `sig_verify` off skips signature checks (the
    /// runtime then also skips its duplicate check, which this does itself); `replace_blockhash`
    /// substitutes the latest blockhash and returns it with its last valid block height.
    pub fn simulate(
        &mut self,
        mut tx: VersionedTransaction,
        sig_verify: bool,
        replace_blockhash: bool,
    ) -> Result<(Execution, Option<(Hash, u64)>), InvalidTransaction> {
        self.refresh();
        let mut replacement = None;
        if replace_blockhash {
            let (hash, last_valid) = self.latest_blockhash();
            tx.message.set_recent_blockhash(hash);
            replacement = Some((hash, last_valid));
        }
        let sanitized = self.sanitize(&tx)?;
        Ok((self.simulate_sanitized(tx, &sanitized, sig_verify), replacement))
    }

    fn simulate_sanitized(
        &mut self,
        tx: VersionedTransaction,
        sanitized: &SanitizedTransaction,
        sig_verify: bool,
    ) -> Execution {
        if sig_verify && !tx.verify_with_results().iter().all(|ok| *ok) {
            return Execution::rejected(TransactionError::SignatureFailure);
        }
        if !self.blockhash_or_nonce_ok(sanitized) {
            return Execution::rejected(TransactionError::BlockhashNotFound);
        }
        if !sig_verify && self.txs.contains_key(sanitized.signature()) {
            return Execution::rejected(TransactionError::AlreadyProcessed);
        }
        let (keys, _, _) = Self::keys_of(sanitized.message());
        let pre_balances = self.balances(&keys);
        let loaded_accounts_data_size = self.loaded_size(&keys);
        if !sig_verify {
            self.set_sigverify(false);
        }
        let result = self.svm.simulate_transaction(tx);
        if !sig_verify {
            self.set_sigverify(true);
        }
        let (meta, err, post_accounts) = match result {
            Ok(info) => (info.meta, None, info.post_accounts),
            Err(FailedTransactionMetadata { err, meta }) => (meta, Some(err), Vec::new()),
        };
        let post: HashMap<Pubkey, &AccountSharedData> =
            post_accounts.iter().map(|(k, a)| (*k, a)).collect();
        let post_balances = keys
            .iter()
            .zip(&pre_balances)
            .map(|(k, pre)| post.get(k).map_or(*pre, |a| a.lamports()))
            .collect();
        let fee = self.fee(sanitized).ok();
        Execution {
            fee: Some(meta.fee).filter(|f| *f > 0).or(fee),
            err,
            logs: meta.logs,
            units: meta.compute_units_consumed,
            return_data: Some(meta.return_data).filter(|r| !r.data.is_empty()),
            inner_instructions: meta.inner_instructions,
            loaded_accounts_data_size,
            post_accounts,
            account_keys: keys,
            pre_balances,
            post_balances,
        }
    }

    fn set_sigverify(&mut self, on: bool) {
        if self.svm.get_sigverify() != on {
            let svm = std::mem::take(&mut self.svm);
            self.svm = svm.with_sigverify(on);
        }
    }

    /// Submits `tx` as `sendTransaction` does. With preflight, a transaction that would fail is
    /// reported and not committed; without, it lands (and pays its fee) or is dropped.
    pub fn send(&mut self, tx: VersionedTransaction, skip_preflight: bool) -> Result<SendOutcome, InvalidTransaction> {
        self.refresh();
        // Restores signature checks should a panicking simulation have left them off.
        self.set_sigverify(true);
        let sanitized = self.sanitize(&tx)?;
        let signature = *sanitized.signature();
        if !skip_preflight {
            let sim = self.simulate_sanitized(tx.clone(), &sanitized, true);
            if sim.err.is_some() {
                return Ok(SendOutcome::PreflightFailed(sim));
            }
        } else if !self.blockhash_or_nonce_ok(&sanitized) {
            return Ok(SendOutcome::Dropped { signature, err: TransactionError::BlockhashNotFound });
        }
        let already = self.txs.contains_key(&signature);
        let (keys, writable, loaded) = Self::keys_of(sanitized.message());
        let pre_balances = self.balances(&keys);
        let pre_token_balances = self.token_balances(&keys);
        let slot = self.last_slot;
        let result = self.svm.send_transaction(tx.clone());
        let (meta, err): (TransactionMetadata, Option<TransactionError>) = match result {
            Ok(meta) => (meta, None),
            Err(FailedTransactionMetadata { err, meta }) => (meta, Some(err)),
        };
        let landed = !already && self.svm.get_transaction(&signature).is_some();
        if !landed {
            let err = err.unwrap_or(TransactionError::AlreadyProcessed);
            self.log(&signature, Some(&err), 0, "dropped");
            return Ok(SendOutcome::Dropped { signature, err });
        }
        let record = TxRecord {
            signature,
            slot,
            block_time: self.last_unix,
            err: err.clone(),
            logs: meta.logs,
            fee: meta.fee,
            compute_units: meta.compute_units_consumed,
            memo: extract_memo(sanitized.message()),
            post_balances: self.balances(&keys),
            post_token_balances: self.token_balances(&keys),
            tx,
            account_keys: keys,
            writable,
            loaded,
            pre_balances,
            pre_token_balances,
            inner_instructions: meta.inner_instructions,
            return_data: meta.return_data,
        };
        self.log(&signature, err.as_ref(), record.compute_units, "landed");
        self.record(record);
        Ok(SendOutcome::Landed { signature, err })
    }

    fn log(&self, signature: &Signature, err: Option<&TransactionError>, units: u64, what: &str) {
        if self.log_transactions {
            match err {
                None => eprintln!("[info] tx {signature} {what} ok ({units} CU) slot {}", self.last_slot),
                Some(e) => eprintln!("[info] tx {signature} {what} err: {e} slot {}", self.last_slot),
            }
        }
    }

    /// A receiver of every transaction that lands from now on (never blocks the ledger).
    pub fn subscribe_landed(&mut self) -> std::sync::mpsc::Receiver<LandedEvent> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.landed_listeners.push(tx);
        rx
    }

    fn record(&mut self, record: TxRecord) {
        if !self.landed_listeners.is_empty() {
            let event = LandedEvent {
                signature: record.signature,
                slot: record.slot,
                err: record.err.clone(),
                logs: record.logs.clone(),
                accounts: record.account_keys.clone(),
                writable: record
                    .account_keys
                    .iter()
                    .zip(&record.writable)
                    .filter(|(_, w)| **w)
                    .map(|(k, _)| *k)
                    .collect(),
            };
            self.landed_listeners.retain(|l| l.send(event.clone()).is_ok());
        }
        let mut seen = HashSet::new();
        for key in &record.account_keys {
            if seen.insert(*key) {
                self.by_address.entry(*key).or_default().push(record.signature);
            }
        }
        self.tx_count += 1;
        self.txs.insert(record.signature, record);
    }

    /// The faucet that funds `requestAirdrop`.
    pub fn faucet(&self) -> Pubkey {
        self.faucet.pubkey()
    }

    /// Transfers `lamports` from the faucet account by a real, recorded transaction.
    pub fn airdrop(&mut self, to: &Pubkey, lamports: u64) -> Result<Signature, String> {
        let payer = self.faucet.insecure_clone();
        for _ in 0..3 {
            let (blockhash, _) = self.latest_blockhash();
            let message = solana_message::Message::new_with_blockhash(
                &[solana_system_interface::instruction::transfer(&payer.pubkey(), to, lamports)],
                Some(&payer.pubkey()),
                &blockhash,
            );
            let tx = VersionedTransaction::try_new(VersionedMessage::Legacy(message), &[&payer])
                .map_err(|e| format!("signing the airdrop: {e}"))?;
            if self.txs.contains_key(&tx.signatures[0]) {
                // The same airdrop again within one blockhash: issue a fresh blockhash.
                let slot = self.last_slot;
                self.issue_blockhash(slot);
                continue;
            }
            return match self.send(tx, false).map_err(|e| e.0)? {
                SendOutcome::Landed { signature, err: None } => Ok(signature),
                SendOutcome::Landed { err: Some(e), .. } | SendOutcome::Dropped { err: e, .. } => {
                    Err(format!("airdrop failed: {e}"))
                }
                SendOutcome::PreflightFailed(x) => Err(format!(
                    "airdrop failed: {}",
                    x.err.map(|e| e.to_string()).unwrap_or_default()
                )),
            };
        }
        Err("airdrop failed: could not obtain a fresh blockhash".into())
    }
}

/// Agave's `extract_and_fmt_memos`: "[len] text" per SPL Memo instruction, joined by "; ".
fn extract_memo(message: &SanitizedMessage) -> Option<String> {
    let keys = message.account_keys();
    let memos: Vec<String> = message
        .instructions()
        .iter()
        .filter(|ix| {
            keys.get(ix.program_id_index as usize)
                .is_some_and(|p| *p == MEMO_V1 || *p == MEMO_V3)
        })
        .map(|ix| {
            let text = std::str::from_utf8(&ix.data).map(str::to_string).unwrap_or_else(|_| "(unparseable)".into());
            format!("[{}] {}", ix.data.len(), text)
        })
        .collect();
    (!memos.is_empty()).then(|| memos.join("; "))
}
