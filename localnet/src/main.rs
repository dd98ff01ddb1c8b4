//! `gpum-localnet`: a single-node Solana JSON-RPC chain on 127.0.0.1 running `gpu_market`
//! natively inside LiteSVM. Prints `gpum-localnet ready on http://HOST:PORT program=<id>` on
//! stdout once it accepts requests; exits 0 on SIGINT/SIGTERM, 2 on a bad bind.
use std::{
    net::{IpAddr, SocketAddr, TcpListener},
    process::ExitCode,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use clap::Parser;
use gpum_localnet::{ledger::Ledger, new_svm, pubsub::PubSubServer, rpc::RpcServer, PROGRAM_ID};

#[derive(Parser)]
#[command(name = "gpum-localnet", version, about = "Local Solana JSON-RPC chain hosting gpu_market natively (LiteSVM)")]
struct Cli {
    /// Address to listen on. Loopback only unless --allow-remote.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Port to listen on (0 picks a free one; the ready line shows it).
    #[arg(long, default_value_t = 8899)]
    port: u16,
    /// Do not log transactions.
    #[arg(long)]
    quiet: bool,
    /// Allow a non-loopback --bind (the chain has a free faucet and a dev clock warp: never expose
    /// it to a network you do not control).
    #[arg(long)]
    allow_remote: bool,
    /// Worker threads serving HTTP requests.
    #[arg(long, default_value_t = 4)]
    threads: usize,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !cli.bind.is_loopback() && !cli.allow_remote {
        eprintln!(
            "gpum-localnet: refusing to listen on non-loopback address {}; pass --allow-remote if you really mean it",
            cli.bind
        );
        return ExitCode::from(2);
    }
    let addr = SocketAddr::new(cli.bind, cli.port);
    let listener = match TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            eprintln!(
                "gpum-localnet: port {} is already in use on {}; stop the other process or pick another with --port",
                cli.port, cli.bind
            );
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("gpum-localnet: cannot listen on {addr}: {e}");
            return ExitCode::from(2);
        }
    };
    let bound = listener.local_addr().unwrap_or(addr);
    let mut ledger = Ledger::new(new_svm());
    ledger.log_transactions = !cli.quiet;
    let server = match RpcServer::start(listener, ledger, cli.threads) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gpum-localnet: cannot start the RPC server on {bound}: {e}");
            return ExitCode::from(2);
        }
    };
    // PubSub on the RPC port + 1, where Solana clients look for it (web3.js, wallets).
    let ws_addr = SocketAddr::new(bound.ip(), bound.port().wrapping_add(1));
    let pubsub = match TcpListener::bind(ws_addr).and_then(|l| PubSubServer::start(l, server.ledger.clone())) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!(
                "gpum-localnet: PubSub is off: cannot listen on {ws_addr} ({e}); clients fall back to polling. \
                 Pick a --port whose next port is free to get subscriptions"
            );
            None
        }
    };
    let ws_url = pubsub.as_ref().map(|p| format!(" pubsub=ws://{}", p.local_addr())).unwrap_or_default();
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    println!("gpum-localnet ready on http://{bound} program={PROGRAM_ID}{ws_url}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    if !cli.quiet {
        eprintln!("gpum-localnet: shutting down");
    }
    if let Some(p) = pubsub {
        p.shutdown();
    }
    server.shutdown();
    ExitCode::SUCCESS
}
