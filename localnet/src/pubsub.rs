//! Solana PubSub (JSON-RPC over WebSocket) for the local chain, served on the RPC port + 1 as a
//! cluster does, so wallets and the official clients (`@solana/web3.js` confirmations,
//! `onAccountChange`, `onLogs`, ...) work against it.
//!
//! Methods: `signatureSubscribe`, `accountSubscribe`, `programSubscribe`, `logsSubscribe`,
//! `slotSubscribe` and their `*Unsubscribe`. Notification shapes follow Agave 3.1.
//!
//! Guarantees:
//! - Every transaction that lands is delivered to the matching subscriptions in landing order
//!   (`Ledger::subscribe_landed`): a signature subscription fires once, with the transaction's
//!   error, and is then removed (also when the signature had already landed at subscribe
//!   time); an account subscription fires after each transaction that had the account
//!   writable, with the account as it is then; a program subscription likewise for accounts
//!   owned by the program that pass its filters; a logs subscription for every transaction
//!   (`all`) or those that mention its address (`{"mentions": [address]}`).
//! - Slot notifications follow the ledger's slot (wall-clock driven), at most every 100 ms.
//! - A bad request gets a JSON-RPC error on its connection; no client can take the server
//!   down or block the ledger (notifications are queued per connection; at most
//!   `MAX_CONNECTIONS` connections and `MAX_SUBSCRIPTIONS_PER_CONNECTION` subscriptions each).
//!   Commitment levels are accepted and ignored: every landed transaction is final here.
use std::{
    collections::HashMap,
    net::{TcpListener, TcpStream},
    str::FromStr,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc::{channel, Receiver, RecvTimeoutError, Sender},
        Arc, Mutex, MutexGuard,
    },
    thread,
    time::Duration,
};

use serde_json::{json, Value};
use solana_account::ReadableAccount;
use solana_pubkey::Pubkey;
use solana_signature::Signature;
use tungstenite::{Message, WebSocket};

use crate::ledger::{LandedEvent, Ledger};
use crate::rpc::{
    account_encoding, context, encode_account, err_json, error_response, lock, parse_filters, parse_pubkey, AccountCfg,
    AccountEncoding, DataSlice, Filter, ProgramAccountsCfg, RpcError,
};

pub const MAX_CONNECTIONS: usize = 256;
pub const MAX_SUBSCRIPTIONS_PER_CONNECTION: usize = 1024;
const READ_POLL: Duration = Duration::from_millis(20);
const SLOT_POLL: Duration = Duration::from_millis(100);

enum Kind {
    Signature(Signature),
    Account { key: Pubkey, enc: AccountEncoding, slice: Option<DataSlice> },
    Program { program: Pubkey, enc: AccountEncoding, slice: Option<DataSlice>, filters: Vec<Filter> },
    Logs { mentions: Option<Pubkey> },
    Slot,
}

struct Sub {
    conn: u64,
    kind: Kind,
    out: Sender<String>,
}

#[derive(Default)]
struct Registry {
    subs: HashMap<u64, Sub>,
    next_id: u64,
    connections: usize,
}

fn reg(r: &Mutex<Registry>) -> MutexGuard<'_, Registry> {
    r.lock().unwrap_or_else(|p| p.into_inner())
}

fn notification(method: &str, sub: u64, result: Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": {"result": result, "subscription": sub}})
        .to_string()
}

/// The signature notification of a landed transaction (Agave's `RpcSignatureResult`).
fn signature_note(sub: u64, slot: u64, err: &Option<solana_transaction_error::TransactionError>) -> String {
    let err = err.as_ref().map(err_json).unwrap_or(Value::Null);
    notification("signatureNotification", sub, json!({"context": context(slot), "value": {"err": err}}))
}

/// A running PubSub server.
pub struct PubSubServer {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
    addr: std::net::SocketAddr,
}

impl PubSubServer {
    /// Serves PubSub for `ledger` on `listener`.
    pub fn start(listener: TcpListener, ledger: Arc<Mutex<Ledger>>) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let registry = Arc::new(Mutex::new(Registry::default()));
        let landed = lock(&ledger).subscribe_landed();
        let conn_ids = Arc::new(AtomicU64::new(1));
        let mut threads = Vec::new();
        {
            let (ledger, registry, stop) = (ledger.clone(), registry.clone(), stop.clone());
            threads.push(thread::Builder::new().name("pubsub-dispatch".into()).spawn(move || {
                dispatch_loop(landed, &ledger, &registry, &stop)
            })?);
        }
        {
            let (ledger, registry, stop) = (ledger.clone(), registry.clone(), stop.clone());
            threads.push(thread::Builder::new().name("pubsub-slots".into()).spawn(move || {
                slot_loop(&ledger, &registry, &stop)
            })?);
        }
        {
            let stop = stop.clone();
            threads.push(thread::Builder::new().name("pubsub-accept".into()).spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            {
                                let mut r = reg(&registry);
                                if r.connections >= MAX_CONNECTIONS {
                                    continue; // dropped: the client sees the connection close
                                }
                                r.connections += 1;
                            }
                            let id = conn_ids.fetch_add(1, Ordering::SeqCst);
                            let (ledger, conn_registry, stop) = (ledger.clone(), registry.clone(), stop.clone());
                            let spawned = thread::Builder::new().name(format!("pubsub-{id}")).spawn(move || {
                                serve_connection(stream, id, &ledger, &conn_registry, &stop);
                                let mut r = reg(&conn_registry);
                                r.subs.retain(|_, s| s.conn != id);
                                r.connections -= 1;
                            });
                            if spawned.is_err() {
                                reg(&registry).connections -= 1;
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            thread::sleep(Duration::from_millis(20))
                        }
                        Err(_) => thread::sleep(Duration::from_millis(20)),
                    }
                }
            })?);
        }
        Ok(Self { stop, threads, addr })
    }

    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Stops accepting and notifying; open connections end at their next read.
    pub fn shutdown(self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn dispatch_loop(landed: Receiver<LandedEvent>, ledger: &Mutex<Ledger>, registry: &Mutex<Registry>, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let event = match landed.recv_timeout(Duration::from_millis(100)) {
            Ok(e) => e,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let l = lock(ledger);
        let mut r = reg(registry);
        let mut done = Vec::new();
        for (id, sub) in r.subs.iter() {
            let msgs = notes_for(&l, &event, *id, &sub.kind);
            if matches!(sub.kind, Kind::Signature(s) if s == event.signature) {
                done.push(*id);
            }
            for m in msgs {
                let _ = sub.out.send(m);
            }
        }
        for id in done {
            r.subs.remove(&id);
        }
    }
}

fn notes_for(l: &Ledger, e: &LandedEvent, id: u64, kind: &Kind) -> Vec<String> {
    match kind {
        Kind::Signature(s) if *s == e.signature => vec![signature_note(id, e.slot, &e.err)],
        Kind::Account { key, enc, slice } if e.writable.contains(key) => {
            let value = match l.account(key) {
                Some(acc) => encode_account(l, key, &acc, *enc, *slice).unwrap_or(Value::Null),
                // A closed account: Agave notifies its default (empty) state.
                None => json!({"data": ["", "base64"], "executable": false, "lamports": 0,
                    "owner": "11111111111111111111111111111111", "rentEpoch": 0, "space": 0}),
            };
            vec![notification("accountNotification", id, json!({"context": context(e.slot), "value": value}))]
        }
        Kind::Program { program, enc, slice, filters } => e
            .writable
            .iter()
            .filter_map(|key| {
                let acc = l.account(key)?;
                if acc.owner() != program || !filters.iter().all(|f| f.matches(&acc)) {
                    return None;
                }
                let account = encode_account(l, key, &acc, *enc, *slice).ok()?;
                Some(notification("programNotification", id, json!({
                    "context": context(e.slot),
                    "value": {"pubkey": key.to_string(), "account": account},
                })))
            })
            .collect(),
        Kind::Logs { mentions } if mentions.is_none_or(|m| e.accounts.contains(&m)) => {
            let err = e.err.as_ref().map(err_json).unwrap_or(Value::Null);
            vec![notification("logsNotification", id, json!({
                "context": context(e.slot),
                "value": {"signature": e.signature.to_string(), "err": err, "logs": e.logs},
            }))]
        }
        _ => Vec::new(),
    }
}

fn slot_loop(ledger: &Mutex<Ledger>, registry: &Mutex<Registry>, stop: &AtomicBool) {
    let mut last = lock(ledger).slot();
    while !stop.load(Ordering::SeqCst) {
        thread::sleep(SLOT_POLL);
        let slot = lock(ledger).slot();
        if slot == last {
            continue;
        }
        let parent = last;
        last = slot;
        let r = reg(registry);
        for (id, sub) in r.subs.iter() {
            if matches!(sub.kind, Kind::Slot) {
                let _ = sub.out.send(notification("slotNotification", *id,
                    json!({"parent": parent, "root": slot, "slot": slot})));
            }
        }
    }
}

fn serve_connection(stream: TcpStream, conn: u64, ledger: &Mutex<Ledger>, registry: &Mutex<Registry>, stop: &AtomicBool) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let Ok(mut ws) = tungstenite::accept(stream) else { return };
    let _ = ws.get_ref().set_read_timeout(Some(READ_POLL));
    let (out_tx, out_rx) = channel::<String>();
    while !stop.load(Ordering::SeqCst) {
        match ws.read() {
            Ok(Message::Text(text)) => {
                for reply in handle_text(text.as_str(), conn, ledger, registry, &out_tx) {
                    if ws.send(Message::text(reply)).is_err() {
                        return;
                    }
                }
            }
            Ok(Message::Binary(_)) => {
                let e = RpcError::new(-32700, "Parse error: send JSON-RPC requests as text frames");
                if ws.send(Message::text(error(Value::Null, &e))).is_err() {
                    return;
                }
            }
            Ok(Message::Close(_)) => return,
            Ok(_) => {} // ping/pong: answered by tungstenite on the next write/flush
            Err(tungstenite::Error::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
        while let Ok(msg) = out_rx.try_recv() {
            if ws.send(Message::text(msg)).is_err() {
                return;
            }
        }
        if ws.flush().is_err() {
            return;
        }
    }
    let _ = ws.close(None);
    flush_close(&mut ws);
}

fn flush_close(ws: &mut WebSocket<TcpStream>) {
    for _ in 0..5 {
        if ws.flush().is_ok() {
            return;
        }
    }
}

fn error(id: Value, e: &RpcError) -> String {
    error_response(id, e).to_string()
}

/// Replies to one text frame (a request or a batch), followed by any immediate notification.
fn handle_text(text: &str, conn: u64, ledger: &Mutex<Ledger>, registry: &Mutex<Registry>, out: &Sender<String>) -> Vec<String> {
    let Ok(v) = serde_json::from_str::<Value>(text) else {
        return vec![error(Value::Null, &RpcError::new(-32700, "Parse error"))];
    };
    let reqs = match v {
        Value::Array(a) if !a.is_empty() => a,
        Value::Array(_) => return vec![error(Value::Null, &RpcError::new(-32600, "Invalid request"))],
        other => vec![other],
    };
    let mut replies = Vec::new();
    let mut after = Vec::new();
    for req in reqs {
        let id = req.get("id").cloned().unwrap_or(Value::Null);
        let (Some(method), true) = (req.get("method").and_then(Value::as_str), req.get("jsonrpc") == Some(&json!("2.0"))) else {
            replies.push(error(id, &RpcError::new(-32600, "Invalid request")));
            continue;
        };
        let params = req.get("params").cloned().unwrap_or(Value::Array(vec![]));
        match call(method, &params, conn, ledger, registry, out) {
            Ok((result, immediate)) => {
                replies.push(json!({"jsonrpc": "2.0", "result": result, "id": id}).to_string());
                after.extend(immediate);
            }
            Err(e) => replies.push(error(id, &e)),
        }
    }
    replies.extend(after);
    replies
}

fn param(params: &Value, i: usize) -> Option<&Value> {
    params.as_array().and_then(|a| a.get(i)).filter(|v| !v.is_null())
}

fn cfg<T: serde::de::DeserializeOwned + Default>(params: &Value, i: usize) -> Result<T, RpcError> {
    match param(params, i) {
        None => Ok(T::default()),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| RpcError::invalid_params(format!("Invalid params: config object: {e}"))),
    }
}

fn address(params: &Value, what: &str) -> Result<Pubkey, RpcError> {
    let s = param(params, 0)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("Invalid params: expected {what} as the first parameter")))?;
    parse_pubkey(s)
}

type CallResult = Result<(Value, Vec<String>), RpcError>;

fn call(method: &str, params: &Value, conn: u64, ledger: &Mutex<Ledger>, registry: &Mutex<Registry>, out: &Sender<String>) -> CallResult {
    if let Some(kind) = method.strip_suffix("Unsubscribe") {
        let id = param(params, 0)
            .and_then(Value::as_u64)
            .ok_or_else(|| RpcError::invalid_params("Invalid params: expected a subscription id"))?;
        let mut r = reg(registry);
        let ok = r.subs.get(&id).is_some_and(|s| s.conn == conn && kind_name(&s.kind) == kind);
        if !ok {
            return Err(RpcError::invalid_params("Invalid subscription id."));
        }
        r.subs.remove(&id);
        return Ok((json!(true), Vec::new()));
    }
    let kind = match method {
        "signatureSubscribe" => {
            let s = param(params, 0)
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::invalid_params("Invalid params: expected a base58 transaction signature"))?;
            Kind::Signature(Signature::from_str(s).map_err(|_| RpcError::invalid_params("Invalid param: not a valid signature"))?)
        }
        "accountSubscribe" => {
            let key = address(params, "a base58 account address")?;
            let c: AccountCfg = cfg(params, 1)?;
            Kind::Account { key, enc: account_encoding(c.encoding.as_deref(), AccountEncoding::Binary)?, slice: c.data_slice }
        }
        "programSubscribe" => {
            let program = address(params, "a base58 program id")?;
            let c: ProgramAccountsCfg = cfg(params, 1)?;
            Kind::Program {
                program,
                enc: account_encoding(c.account.encoding.as_deref(), AccountEncoding::Binary)?,
                slice: c.account.data_slice,
                filters: parse_filters(c.filters.as_deref().unwrap_or(&[]))?,
            }
        }
        "logsSubscribe" => {
            let filter = param(params, 0).ok_or_else(|| {
                RpcError::invalid_params("Invalid params: expected \"all\", \"allWithVotes\" or {\"mentions\": [address]}")
            })?;
            let mentions = match filter {
                Value::String(s) if s == "all" || s == "allWithVotes" => None,
                Value::Object(o) => match o.get("mentions").and_then(Value::as_array).map(Vec::as_slice) {
                    Some([Value::String(a)]) => Some(parse_pubkey(a)?),
                    _ => {
                        return Err(RpcError::invalid_params(
                            "Invalid Request: Only 1 address supported in the mentions filter",
                        ))
                    }
                },
                _ => return Err(RpcError::invalid_params("Invalid params: unknown logs filter; use \"all\" or {\"mentions\": [address]}")),
            };
            Kind::Logs { mentions }
        }
        "slotSubscribe" => Kind::Slot,
        _ => return Err(RpcError::new(-32601, "Method not found")),
    };
    // A signature that already landed is notified at once (the subscription then ends).
    let landed = match &kind {
        Kind::Signature(s) => lock(ledger).transaction(s).map(|t| (t.slot, t.err.clone())),
        _ => None,
    };
    let mut r = reg(registry);
    if r.subs.values().filter(|s| s.conn == conn).count() >= MAX_SUBSCRIPTIONS_PER_CONNECTION {
        return Err(RpcError::invalid_params(format!(
            "Too many subscriptions on this connection (max {MAX_SUBSCRIPTIONS_PER_CONNECTION})"
        )));
    }
    r.next_id += 1;
    let id = r.next_id;
    if let Some((slot, err)) = landed {
        return Ok((json!(id), vec![signature_note(id, slot, &err)]));
    }
    r.subs.insert(id, Sub { conn, kind, out: out.clone() });
    Ok((json!(id), Vec::new()))
}

fn kind_name(k: &Kind) -> &'static str {
    match k {
        Kind::Signature(_) => "signature",
        Kind::Account { .. } => "account",
        Kind::Program { .. } => "program",
        Kind::Logs { .. } => "logs",
        Kind::Slot => "slot",
    }
}
