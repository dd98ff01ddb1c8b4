pub mod accounts;
pub mod error;
pub mod program;
