//! `authenticate_many` without Python: the checks of `gpum_validator.verify.authenticate`,
//! except the proof signature (the receipt signature authenticates the proof bytes).

use crate::proof::{self, Proof};
use crate::receipt::{self, RECEIPT_MESSAGE_LEN};
use crate::sig::KeyCache;

/// One request item: (proof bytes, receipt signature, worker key named by the request).
pub type Item<'a> = (&'a [u8], &'a [u8], &'a [u8]);

/// A proof whose receipt signature `verify_strict`s under its worker key.
#[derive(Debug)]
pub struct Accepted<'a> {
    pub proof: Proof<'a>,
    pub hash: [u8; 32],
    pub receipt_message: [u8; RECEIPT_MESSAGE_LEN],
}

/// A refusal: the `Rejection.reason` and `Rejection.message` Python would give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub reason: &'static str,
    pub message: String,
}

fn reject<T>(reason: &'static str, message: &str) -> Result<T, Rejected> {
    Err(Rejected {
        reason,
        message: message.to_owned(),
    })
}

/// Everything but the signature, in Python's order.
fn check<'a>(
    program_id: &[u8],
    market: &[u8],
    (bytes, _, worker_key): Item<'a>,
) -> Result<Proof<'a>, Rejected> {
    let p = match proof::decode(bytes) {
        Ok(p) => p,
        Err(e) => {
            return reject(
                "proof_malformed",
                &format!("proof bytes do not decode: {e}"),
            );
        }
    };
    if proof::encode(&p) != bytes {
        return reject(
            "proof_not_canonical",
            "proof bytes are not the canonical encoding",
        );
    }
    if p.worker_key.as_slice() != worker_key {
        return reject(
            "worker_key_mismatch",
            "worker_key in the request differs from the proof's worker_key",
        );
    }
    if p.program_id.as_slice() != program_id {
        return reject(
            "wrong_program",
            "proof.program_id is not this validator's program",
        );
    }
    if p.market.as_slice() != market {
        return reject(
            "wrong_market",
            "proof.market is not this validator's market",
        );
    }
    Ok(p)
}

/// Authenticate each item independently; results are in item order.
pub fn authenticate_many<'a>(
    program_id: &[u8],
    market: &[u8],
    items: &[Item<'a>],
) -> Vec<Result<Accepted<'a>, Rejected>> {
    let mut keys = KeyCache::default();
    items
        .iter()
        .map(|&item| {
            let p = check(program_id, market, item)?;
            let hash = receipt::proof_hash(item.0);
            let msg = receipt::receipt_message(&p, &hash);
            if !keys.verify(p.worker_key, item.1, &receipt::receipt_digest(&msg)) {
                return reject(
                    "bad_receipt_signature",
                    "receipt_signature is not the worker key's signature over the receipt \
                     digest (sha256 of the receipt message) built from this proof",
                );
            }
            Ok(Accepted {
                proof: p,
                hash,
                receipt_message: msg,
            })
        })
        .collect()
}
