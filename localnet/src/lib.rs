//! gpum-localnet: the gpu_market program hosted natively in the real Solana runtime.
//! [`runtime`] is the harness shared by the Rust tests and the JSON-RPC local chain.
pub mod ledger;
pub mod pubsub;
pub mod rpc;
pub mod runtime;
pub mod token;

pub use runtime::{new_svm, PROGRAM_ID};
// Re-exported so tests and tools build transactions against the exact same crates.
pub use {
    litesvm, solana_account, solana_clock, solana_hash, solana_instruction, solana_keypair,
    solana_message, solana_pubkey, solana_signature, solana_signer, solana_transaction,
    solana_system_interface, solana_transaction_error, spl_token_interface,
};
