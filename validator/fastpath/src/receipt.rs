//! The receipt message (docs/protocol.md, "Receipts and window proofs"; Python
//! `gpu_market.receipt.receipt_message`).

use sha2::{Digest, Sha256};

use crate::proof::Proof;

/// Domain separator prefixed to every receipt message (Python `RECEIPT_DOMAIN`).
pub const RECEIPT_DOMAIN: &[u8] = b"gpu-market/receipt/v1";
/// Length of a receipt message (Python `RECEIPT_MESSAGE_LEN`).
pub const RECEIPT_MESSAGE_LEN: usize = RECEIPT_DOMAIN.len() + 3 * 32 + 3 * 8 + 32;

/// sha256 of the proof bytes: the receipt's `proof_hash` and the next proof's chain link.
pub fn proof_hash(proof_bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(proof_bytes).into()
}

/// `domain || program_id || market || job || seq:u64le || cumulative_seconds:u64le ||
/// window_end:i64le || proof_hash` (Python `receipt_for_proof`).
pub fn receipt_message(p: &Proof<'_>, hash: &[u8; 32]) -> [u8; RECEIPT_MESSAGE_LEN] {
    let mut m = [0u8; RECEIPT_MESSAGE_LEN];
    let parts: [&[u8]; 8] = [
        RECEIPT_DOMAIN,
        p.program_id,
        p.market,
        p.job,
        &p.seq.to_le_bytes(),
        &p.cumulative_seconds.to_le_bytes(),
        &p.window_end.to_le_bytes(),
        hash,
    ];
    let mut at = 0;
    for part in parts {
        m[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    debug_assert_eq!(at, RECEIPT_MESSAGE_LEN);
    m
}

/// `sha256(receipt message)`: the 32 bytes the worker key signs (Python `receipt_digest`, the
/// program's `Receipt::digest`).
pub fn receipt_digest(message: &[u8; RECEIPT_MESSAGE_LEN]) -> [u8; 32] {
    Sha256::digest(message).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_is_173_bytes() {
        assert_eq!(RECEIPT_MESSAGE_LEN, 173);
    }
}
