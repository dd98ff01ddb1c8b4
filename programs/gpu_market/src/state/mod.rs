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

/// What the unit tests of the account rules share.
#[cfg(test)]
pub(crate) mod testing {
    use anchor_lang::error::Error;
    use anchor_lang::{AnchorDeserialize, Space};

    use crate::errors::GpuMarketError;

    /// An account or type with every byte zero (Open, Active, zero keys and amounts), as a
    /// test's starting point: each test sets the fields its rule reads.
    pub fn zeroed<T: AnchorDeserialize + Space>() -> T {
        T::deserialize(&mut &vec![0u8; T::INIT_SPACE][..]).expect("all-zero bytes decode")
    }

    /// The custom error code a rule failed with.
    pub fn error_code(e: Error) -> u32 {
        match e {
            Error::AnchorError(e) => e.error_code_number,
            Error::ProgramError(e) => panic!("not a custom error: {e:?}"),
        }
    }

    /// `error_code` of a `GpuMarketError`, to compare with.
    pub fn code_of(e: GpuMarketError) -> u32 {
        error_code(e.into())
    }
}
