#![allow(ambiguous_glob_reexports)]
//! One file per instruction (or per tightly coupled pair). Each module has a handler that
//! lib.rs calls by path; the globs bring the Accounts structs (and Anchor's generated client
//! modules) into scope for `#[program]`.
pub mod accept_job;
pub mod authority;
pub mod close_job;
pub mod committee;
pub mod create_job;
pub mod finish_job;
pub mod initialize_market;
pub mod refund;
pub mod register_provider;
pub mod register_validator;
pub mod rotate_worker_key;
pub mod set_paused;
pub mod settle;
pub mod slash;
pub mod stake;
pub mod top_up;
pub mod treasury;
pub mod unstake;
pub mod update_params;
pub mod update_provider;
pub mod validator_exit;

pub use accept_job::*;
pub use authority::*;
pub use close_job::*;
pub use committee::*;
pub use create_job::*;
pub use finish_job::*;
pub use initialize_market::*;
pub use refund::*;
pub use register_provider::*;
pub use register_validator::*;
pub use rotate_worker_key::*;
pub use set_paused::*;
pub use settle::*;
pub use slash::*;
pub use stake::*;
pub use top_up::*;
pub use treasury::*;
pub use unstake::*;
pub use update_params::*;
pub use update_provider::*;
pub use validator_exit::*;
