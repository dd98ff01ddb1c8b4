//! `screen_many`: the intake's fast lane, from raw SignedProof JSON objects to what the
//! window checks need, without building the Python dataclasses.
//!
//! Guarantee: an item is screened (`Some`) only if Python's `parse_signed_proof` followed by
//! `authenticate` accepts it, and then the fields returned equal theirs (the same bytes, the
//! same decoded proof). Anything else (a schema problem, non-canonical base64 or base58,
//! a bad signature, ...) is `None`, and the caller runs the reference path on that item, so
//! every refusal keeps the reference path's reason and message. Screening may refuse more
//! than Python (it never needs to accept), never less.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

use crate::auth::{self, Accepted};
use crate::proof::Proof;

/// The four SignedProof fields as sent (JSON strings).
pub struct RawFields {
    pub proof: String,
    pub proof_signature: String,
    pub receipt_signature: String,
    pub worker_key: String,
}

/// Decoded request fields of one item that passed the schema rules.
pub struct Decoded {
    pub proof: Vec<u8>,
    pub proof_signature: Vec<u8>,
    pub receipt_signature: Vec<u8>,
    pub worker_key: [u8; 32],
}

/// Strict, canonical padded base64 (Python: `b64decode(v, validate=True)` whose re-encoding
/// is `v`).
fn b64(s: &str) -> Option<Vec<u8>> {
    let raw = STANDARD.decode(s).ok()?;
    (STANDARD.encode(&raw) == s).then_some(raw)
}

/// A canonical base58 32-byte key (Python: `Pubkey.from_string(v)` with `str(pk) == v`).
fn b58_key(s: &str) -> Option<[u8; 32]> {
    let raw = bs58::decode(s).into_vec().ok()?;
    let key: [u8; 32] = raw.try_into().ok()?;
    (bs58::encode(key).into_string() == s).then_some(key)
}

/// `parse_signed_proof`'s field rules on already extracted strings.
pub fn decode_fields(f: &RawFields) -> Option<Decoded> {
    let proof = b64(&f.proof)?;
    if proof.is_empty() {
        return None;
    }
    let proof_signature = b64(&f.proof_signature)?;
    let receipt_signature = b64(&f.receipt_signature)?;
    if proof_signature.len() != 64 || receipt_signature.len() != 64 {
        return None;
    }
    Some(Decoded {
        proof,
        proof_signature,
        receipt_signature,
        worker_key: b58_key(&f.worker_key)?,
    })
}

/// What `verify.health_bound` needs of a proof's GPUs and workload, whatever the job's
/// thresholds: the bound is 0 when `!workload_billable`, `zero_samples`, `ecc_flag` or
/// `max_ecc` above the allowance; else `min(length, min_covered, length - 1 if max_temp >=
/// critical)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    pub workload_billable: bool,
    pub zero_samples: bool,
    pub max_ecc: Option<u64>,
    pub ecc_flag: bool,
    /// min over GPUs of min(covered_seconds, samples); None without GPUs.
    pub min_covered: Option<u32>,
    pub max_temp: Option<u16>,
}

/// `gpu_market.proof.HEALTH_ECC_UNCORRECTED`.
pub const HEALTH_ECC_UNCORRECTED: u32 = 1 << 4;
/// `gpu_market.proof.WORKLOAD_FAILED`.
pub const WORKLOAD_FAILED: u8 = 5;

pub fn health(p: &Proof<'_>) -> Health {
    let w = &p.workload;
    Health {
        workload_billable: w.state != WORKLOAD_FAILED && w.foreign_processes == 0,
        zero_samples: p.gpus.iter().any(|g| g.samples == 0),
        max_ecc: p.gpus.iter().filter_map(|g| g.ecc_uncorrected_delta).max(),
        ecc_flag: p
            .gpus
            .iter()
            .any(|g| g.health_flags & HEALTH_ECC_UNCORRECTED != 0),
        min_covered: p
            .gpus
            .iter()
            .map(|g| g.covered_seconds.min(g.samples))
            .min(),
        max_temp: p.gpus.iter().filter_map(|g| g.temp_max_c).max(),
    }
}

/// Screen every item: `None` where the schema rules or authentication refuse it.
pub fn screen_many<'a>(
    program_id: &[u8],
    market: &[u8],
    decoded: &'a [Option<Decoded>],
) -> Vec<Option<Accepted<'a>>> {
    let items: Vec<auth::Item<'a>> = decoded
        .iter()
        .flatten()
        .map(|d| {
            (
                d.proof.as_slice(),
                d.receipt_signature.as_slice(),
                &d.worker_key[..],
            )
        })
        .collect();
    let mut results = auth::authenticate_many(program_id, market, &items).into_iter();
    decoded
        .iter()
        .map(|d| d.as_ref().and_then(|_| results.next().and_then(Result::ok)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_must_be_canonical_and_padded() {
        assert_eq!(b64("AAE="), Some(vec![0, 1]));
        assert_eq!(b64("AAE"), None); // unpadded
        assert_eq!(b64("AAF="), None); // trailing bits set: not the canonical encoding
        assert_eq!(b64("AA E="), None);
        assert_eq!(b64("AAE=\n"), None);
    }

    #[test]
    fn base58_key_must_be_32_bytes_and_canonical() {
        let k = [7u8; 32];
        let s = bs58::encode(k).into_string();
        assert_eq!(b58_key(&s), Some(k));
        assert_eq!(b58_key(&format!("1{s}")), None); // a leading zero byte: 33 bytes
        assert_eq!(b58_key("11111111111111111111111111111111"), Some([0u8; 32]));
        assert_eq!(b58_key("0OIl"), None);
    }
}
