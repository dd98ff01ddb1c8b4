//! Receipt signatures under the chain's rule: ed25519-dalek 2.x `VerifyingKey::verify_strict`,
//! as Solana's Ed25519 program checks them.
//!
//! Every signature is checked with `verify_strict` itself, one by one; there is no batch
//! path. Batch verification (`ed25519_dalek::verify_batch`) is cofactorless over random
//! coefficients that it derives from its inputs, so a signature whose R has a small-order
//! component (a mixed-order point, which `verify_strict` does not refuse as such but whose
//! equation then fails) passes a batch once its coefficient is a multiple of 8, and a sender
//! finds such a message in a few tries (the test `verify_batch_accepts_what_verify_strict_refuses`).
//! Agreeing with `verify_strict` would need a prime-order-subgroup check of every R (and
//! key), a scalar multiplication that costs nearly as much as a whole `verify_strict`: on
//! the 2-core dev machine (`cargo run --release --example sigbench`) `verify_strict` takes
//! ~46 us, `verify_batch` ~23 us per signature at 64 (~18 us at 256) and the R check ~38 us,
//! so a batch that gives `verify_strict`'s answer (~61 us) is slower than no batch.
//! What is shared instead: a key repeated in one call is decompressed once, and a key that
//! has verified a signature is kept decompressed for later calls (`KNOWN_KEYS`: a worker
//! signs a window a minute, so its key recurs in every batch it is part of; decompression is
//! a field square root, about 15 us of the ~60 a signature costs).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use ed25519_dalek::{Signature, VerifyingKey};

/// Most keys `KNOWN_KEYS` holds (~200 bytes each); when full it starts over, so memory is
/// bounded whatever keys are sent. Only keys that verified a signature enter it.
pub const KNOWN_KEYS_CAPACITY: usize = 65_536;

static KNOWN_KEYS: OnceLock<Mutex<HashMap<[u8; 32], VerifyingKey>>> = OnceLock::new();

fn known_keys() -> &'static Mutex<HashMap<[u8; 32], VerifyingKey>> {
    KNOWN_KEYS.get_or_init(|| Mutex::new(HashMap::new()))
}

fn known(key: &[u8; 32]) -> Option<VerifyingKey> {
    known_keys().lock().ok()?.get(key).copied()
}

fn remember(key: &[u8; 32], vk: VerifyingKey) {
    if let Ok(mut keys) = known_keys().lock() {
        if keys.len() >= KNOWN_KEYS_CAPACITY {
            keys.clear();
        }
        keys.insert(*key, vk);
    }
}

/// `verify_strict` of `sig` over `msg` by `key`; false for a key that is not 32 bytes or not a
/// curve point, or a signature that is not 64 bytes (never panics).
pub fn verify_strict_one(key: &[u8], sig: &[u8], msg: &[u8]) -> bool {
    match <&[u8; 32]>::try_from(key) {
        Ok(k) => match VerifyingKey::from_bytes(k) {
            Ok(vk) => verify_with(&vk, sig, msg),
            Err(_) => false,
        },
        Err(_) => false,
    }
}

fn verify_with(vk: &VerifyingKey, sig: &[u8], msg: &[u8]) -> bool {
    match <&[u8; 64]>::try_from(sig) {
        Ok(s) => vk.verify_strict(msg, &Signature::from_bytes(s)).is_ok(),
        Err(_) => false,
    }
}

/// Decompressed keys of one call, most recent first (a request is usually one worker's),
/// each with whether it is in `KNOWN_KEYS` already.
#[derive(Default)]
pub struct KeyCache {
    keys: Vec<([u8; 32], Option<VerifyingKey>, bool)>,
}

impl KeyCache {
    const CAPACITY: usize = 16;

    /// `verify_strict_one(key, sig, msg)`, decompressing `key` at most once per cache life
    /// (and not at all when it verified a signature before, in any call).
    pub fn verify(&mut self, key: &[u8; 32], sig: &[u8], msg: &[u8]) -> bool {
        let i = match self.keys.iter().position(|(k, _, _)| k == key) {
            Some(i) => i,
            None => {
                let hit = known(key);
                let vk = hit.or_else(|| VerifyingKey::from_bytes(key).ok());
                if self.keys.len() == Self::CAPACITY {
                    self.keys.pop();
                }
                self.keys.insert(0, (*key, vk, hit.is_some()));
                0
            }
        };
        let (_, vk, is_known) = &mut self.keys[i];
        let ok = vk.is_some_and(|vk| verify_with(&vk, sig, msg));
        if ok && !*is_known {
            if let Some(vk) = vk {
                remember(key, *vk);
            }
            *is_known = true;
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT, EIGHT_TORSION};
    use curve25519_dalek::scalar::Scalar;
    use ed25519_dalek::{Signer, SigningKey};

    const L_BYTES: [u8; 32] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde,
        0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
    ];

    #[test]
    fn good_and_bad() {
        let sk = SigningKey::from_bytes(&[1; 32]);
        let pk = sk.verifying_key().to_bytes();
        let sig = sk.sign(b"m").to_bytes();
        assert!(verify_strict_one(&pk, &sig, b"m"));
        assert!(!verify_strict_one(&pk, &sig, b"n"));
        assert!(!verify_strict_one(&pk[..31], &sig, b"m"));
        assert!(!verify_strict_one(&pk, &sig[..63], b"m"));
        let mut cache = KeyCache::default();
        for _ in 0..3 {
            assert!(cache.verify(&pk, &sig, b"m"));
            assert!(!cache.verify(&pk, &sig, b"n"));
        }
    }

    #[test]
    fn small_order_key_and_non_canonical_s_are_refused() {
        // The identity key with R = identity, S = 0 satisfies the cofactorless equation for
        // every message; verify_strict (and the chain) refuse it.
        let ident = EIGHT_TORSION[0].compress().to_bytes();
        let mut sig = [0u8; 64];
        sig[..32].copy_from_slice(&ident);
        assert!(!verify_strict_one(&ident, &sig, b"anything"));
        // S + L encodes the same scalar non-canonically.
        let sk = SigningKey::from_bytes(&[2; 32]);
        let pk = sk.verifying_key().to_bytes();
        let mut sig = sk.sign(b"m").to_bytes();
        let s = Scalar::from_canonical_bytes(sig[32..].try_into().unwrap()).unwrap();
        let mut carry = 0u16;
        let mut out = [0u8; 32];
        for i in 0..32 {
            let v = u16::from(s.as_bytes()[i]) + u16::from(L_BYTES[i]) + carry;
            out[i] = v as u8;
            carry = v >> 8;
        }
        assert!(
            carry == 0 && out[31] & 0xe0 == 0,
            "S + L fits the 253 bits S may use"
        );
        sig[32..].copy_from_slice(&out);
        assert!(!verify_strict_one(&pk, &sig, b"m"));
    }

    /// Why there is no batch path: with R = rB + T (T of order 8), S = r + H(R||A||m)a
    /// satisfies the batch equation whenever its coefficient z is a multiple of 8, and z is
    /// derived from the inputs, so a few messages suffice to find one that a batch accepts
    /// and `verify_strict` refuses.
    #[test]
    fn verify_batch_accepts_what_verify_strict_refuses() {
        use sha2::{Digest, Sha512};
        let a = Scalar::from_bytes_mod_order([3; 32]);
        let r = Scalar::from_bytes_mod_order([4; 32]);
        let pk = (a * ED25519_BASEPOINT_POINT).compress().to_bytes();
        let vk = VerifyingKey::from_bytes(&pk).unwrap();
        let big_r = (r * ED25519_BASEPOINT_POINT + EIGHT_TORSION[1])
            .compress()
            .to_bytes();
        let mut found = false;
        for i in 0..256u32 {
            let msg = i.to_le_bytes();
            let k = Scalar::from_bytes_mod_order_wide(
                &Sha512::new()
                    .chain_update(big_r)
                    .chain_update(pk)
                    .chain_update(msg)
                    .finalize()
                    .into(),
            );
            let mut sig = [0u8; 64];
            sig[..32].copy_from_slice(&big_r);
            sig[32..].copy_from_slice((r + k * a).as_bytes());
            assert!(!verify_strict_one(&pk, &sig, &msg));
            let s = Signature::from_bytes(&sig);
            if ed25519_dalek::verify_batch(&[&msg[..]], &[s], &[vk]).is_ok() {
                found = true;
                break;
            }
        }
        assert!(
            found,
            "a batch of one accepts a mixed-order R for some message"
        );
    }
}
