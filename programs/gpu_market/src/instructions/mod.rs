#![allow(ambiguous_glob_reexports)]
pub mod accept_job;
pub mod close_job;
pub mod create_job;
pub mod finish_job;
pub mod initialize_market;
pub mod register_provider;
pub mod register_validator;
pub mod settle;
pub mod stake;

// Each module has a `handler`; lib.rs calls them by path. The globs bring the Accounts
// structs (and Anchor's generated client modules) into scope for `#[program]`.
pub use accept_job::*;
pub use close_job::*;
pub use create_job::*;
pub use finish_job::*;
pub use initialize_market::*;
pub use register_provider::*;
pub use register_validator::*;
pub use settle::*;
pub use stake::*;
