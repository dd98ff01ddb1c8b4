//! Checked arithmetic on the books (stake, totals, counters): an overflow or underflow is
//! `MathOverflow`, never a wrap or a panic. Below `state` and `ops`, which both use it.
use anchor_lang::prelude::*;

use crate::errors::GpuMarketError;

pub fn add(a: u64, b: u64) -> Result<u64> {
    a.checked_add(b).ok_or_else(|| GpuMarketError::MathOverflow.into())
}

pub fn add32(a: u32, b: u32) -> Result<u32> {
    a.checked_add(b).ok_or_else(|| GpuMarketError::MathOverflow.into())
}

pub fn sub(a: u64, b: u64) -> Result<u64> {
    a.checked_sub(b).ok_or_else(|| GpuMarketError::MathOverflow.into())
}
