pub mod job;
pub mod market;
pub mod provider;
pub mod validator;

pub use job::*;
pub use market::*;
pub use provider::*;
pub use validator::*;
