pub mod equivocation;
pub mod job;
pub mod market;
pub mod provider;
pub mod validator;

pub use equivocation::*;
pub use job::*;
pub use market::*;
pub use provider::*;
pub use validator::*;
