#![allow(ambiguous_glob_reexports)]
//! One instruction, one file: `<instruction>.rs` holds its `#[derive(Accounts)]` struct (with
//! the guarantees it makes in its doc), its args and its `handler`, which `lib.rs` calls by
//! path. The globs bring the Accounts structs (and Anchor's generated client modules) into
//! scope for `#[program]`; every module exports a `handler`, hence the allowed ambiguity.
//!
//! Accounts structs that several instructions share live in files named after what they are,
//! not after one of their users, so no instruction file holds another's accounts:
//! - `end_job_accounts.rs`: `EndJob`, the job and its provider only (`expire_job`,
//!   `decline_job`, `complete_job`: no tokens move, so no account of the user can stop a job
//!   from ending);
//! - `slash_targets.rs`: `SlashTargets`, the accounts every provider slash touches and the
//!   `apply` step they share (`slash_equivocation`, `slash_downtime`).
//!
//! A new instruction: add `<name>.rs` here with its module line and glob below, and one
//! dispatching function (with its `///` line, which goes into the IDL) in `lib.rs`.
pub mod accept_authority;
pub mod accept_job;
pub mod attest_hardware;
pub mod cancel_job;
pub mod claim_validator_rewards;
pub mod close_job;
pub mod complete_job;
pub mod create_job;
pub mod decline_job;
pub mod end_job_accounts;
pub mod expire_job;
pub mod finish_job;
pub mod initialize_market;
pub mod propose_authority;
pub mod rate_job;
pub mod register_provider;
pub mod register_validator;
pub mod replace_committee_member;
pub mod request_unstake;
pub mod request_validator_exit;
pub mod rotate_worker_key;
pub mod set_paused;
pub mod set_treasury;
pub mod settle;
pub mod slash_downtime;
pub mod slash_equivocation;
pub mod slash_targets;
pub mod slash_validator_equivocation;
pub mod slash_wrong_answer;
pub mod stake;
pub mod sweep_vault;
pub mod top_up;
pub mod update_params;
pub mod update_provider;
pub mod update_validator;
pub mod withdraw_fees;
pub mod withdraw_unstaked;
pub mod withdraw_validator_bond;

pub use accept_authority::*;
pub use accept_job::*;
pub use attest_hardware::*;
pub use cancel_job::*;
pub use claim_validator_rewards::*;
pub use close_job::*;
pub use create_job::*;
pub use end_job_accounts::*;
pub use finish_job::*;
pub use initialize_market::*;
pub use propose_authority::*;
pub use rate_job::*;
pub use register_provider::*;
pub use register_validator::*;
pub use replace_committee_member::*;
pub use request_unstake::*;
pub use request_validator_exit::*;
pub use rotate_worker_key::*;
pub use set_paused::*;
pub use set_treasury::*;
pub use settle::*;
pub use slash_downtime::*;
pub use slash_equivocation::*;
pub use slash_targets::*;
pub use slash_validator_equivocation::*;
pub use slash_wrong_answer::*;
pub use stake::*;
pub use sweep_vault::*;
pub use top_up::*;
pub use update_params::*;
pub use update_provider::*;
pub use update_validator::*;
pub use withdraw_fees::*;
pub use withdraw_unstaked::*;
pub use withdraw_validator_bond::*;
