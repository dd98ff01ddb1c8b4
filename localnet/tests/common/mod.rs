//! The test node: the `gpum-localnet` binary on an ephemeral port, spoken to with raw JSON-RPC
//! over real HTTP. Everything it prints on stdout after the ready line is kept, so a test can
//! assert that nothing leaked there (program logs belong in the transaction's logs).
#![allow(dead_code, unused_imports)]
use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

pub use base64::{prelude::BASE64_STANDARD, Engine};
pub use gpum_localnet::{
    solana_hash::Hash,
    solana_instruction::{AccountMeta, Instruction},
    solana_keypair::Keypair,
    solana_message::{v0, Message, VersionedMessage},
    solana_pubkey::Pubkey,
    solana_signer::Signer,
    solana_system_interface::instruction as system,
    solana_transaction::versioned::VersionedTransaction,
    spl_token_interface, PROGRAM_ID,
};
pub use serde_json::{json, Value};

pub const SOL: u64 = 1_000_000_000;
pub const TOKEN: Pubkey = spl_token_interface::ID;

pub struct Node {
    pub child: Child,
    pub port: u16,
    stdout: Arc<Mutex<Vec<String>>>,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    pub fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpum-localnet"))
            .args(["--port", "0", "--quiet"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start gpum-localnet");
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(line.starts_with("gpum-localnet ready on http://127.0.0.1:"), "{line}");
        // "... program=<id>" then " pubsub=ws://127.0.0.1:<port + 1>" unless that port is taken.
        assert!(line.contains(&format!(" program={PROGRAM_ID}")), "{line}");
        let port = line
            .split("127.0.0.1:")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|p| p.parse().ok())
            .expect("port in the ready line");
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&stdout);
        std::thread::spawn(move || {
            for line in reader.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Node { child, port, stdout }
    }

    /// The lines printed on stdout after the ready line so far.
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    /// POSTs `body`, returns (status line, body).
    pub fn http(&self, method: &str, path: &str, body: &str) -> (String, String) {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_string(), body.to_string())
    }

    pub fn raw(&self, body: &str) -> Value {
        let (status, body) = self.http("POST", "/", body);
        assert!(status.contains("200"), "{status}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
    }

    pub fn call(&self, method: &str, params: Value) -> Value {
        self.raw(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string())
    }

    pub fn ok(&self, method: &str, params: Value) -> Value {
        let r = self.call(method, params);
        assert!(r.get("error").is_none(), "{method}: {r}");
        r["result"].clone()
    }

    pub fn err(&self, method: &str, params: Value) -> Value {
        let r = self.call(method, params);
        assert!(r.get("error").is_some(), "{method} should fail: {r}");
        r["error"].clone()
    }

    pub fn blockhash(&self) -> Hash {
        self.ok("getLatestBlockhash", json!([]))["value"]["blockhash"].as_str().unwrap().parse().unwrap()
    }

    pub fn funded(&self, lamports: u64) -> Keypair {
        let kp = Keypair::new();
        self.ok("requestAirdrop", json!([kp.pubkey().to_string(), lamports]));
        kp
    }

    pub fn tx(&self, ixs: &[Instruction], payer: &Keypair, signers: &[&Keypair], blockhash: Option<Hash>) -> String {
        let bh = blockhash.unwrap_or_else(|| self.blockhash());
        let msg = Message::new_with_blockhash(ixs, Some(&payer.pubkey()), &bh);
        let mut all: Vec<&Keypair> = vec![payer];
        all.extend_from_slice(signers);
        let tx = VersionedTransaction::try_new(VersionedMessage::Legacy(msg), &all).unwrap();
        BASE64_STANDARD.encode(bincode::serialize(&tx).unwrap())
    }

    pub fn send(&self, tx_b64: &str) -> Value {
        self.call("sendTransaction", json!([tx_b64, {"encoding": "base64"}]))
    }

    pub fn send_ok(&self, ixs: &[Instruction], payer: &Keypair, signers: &[&Keypair]) -> String {
        let r = self.send(&self.tx(ixs, payer, signers, None));
        assert!(r.get("error").is_none(), "{r}");
        r["result"].as_str().unwrap().to_string()
    }

    pub fn clock(&self) -> (u64, i64) {
        let v = self.ok("getAccountInfo", json!(["SysvarC1ock11111111111111111111111111111111", {"encoding": "base64"}]));
        let data = BASE64_STANDARD.decode(v["value"]["data"][0].as_str().unwrap()).unwrap();
        (
            u64::from_le_bytes(data[0..8].try_into().unwrap()),
            i64::from_le_bytes(data[32..40].try_into().unwrap()),
        )
    }

    /// Creates a mint (6 decimals) and a token account for `owner` holding `amount`.
    pub fn token_setup(&self, payer: &Keypair, owner: &Pubkey, amount: u64) -> (Pubkey, Pubkey, String) {
        let mint = Keypair::new();
        let account = Keypair::new();
        let rent_mint = self.ok("getMinimumBalanceForRentExemption", json!([82])).as_u64().unwrap();
        let rent_acc = self.ok("getMinimumBalanceForRentExemption", json!([165])).as_u64().unwrap();
        let ixs = vec![
            system::create_account(&payer.pubkey(), &mint.pubkey(), rent_mint, 82, &TOKEN),
            spl_token_interface::instruction::initialize_mint2(&TOKEN, &mint.pubkey(), &payer.pubkey(), None, 6).unwrap(),
            system::create_account(&payer.pubkey(), &account.pubkey(), rent_acc, 165, &TOKEN),
            spl_token_interface::instruction::initialize_account3(&TOKEN, &account.pubkey(), &mint.pubkey(), owner).unwrap(),
            spl_token_interface::instruction::mint_to(&TOKEN, &mint.pubkey(), &account.pubkey(), &payer.pubkey(), &[], amount).unwrap(),
        ];
        let sig = self.send_ok(&ixs, payer, &[&mint, &account]);
        (mint.pubkey(), account.pubkey(), sig)
    }
}
