//! Per-signature cost of `verify_strict` against batch verification, on this machine.
//!
//! `cargo run --release --example sigbench` prints the best of several rounds (microseconds
//! per signature) for: `verify_strict`; `ed25519_dalek::verify_batch` at several sizes; and
//! the batch with the pre-check that would make its answer equal `verify_strict`'s
//! (canonical R, R and key neither small-order nor with a torsion component), which is why
//! `src/sig.rs` verifies one by one. Last line: one JSON object.

use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use std::hint::black_box;
use std::time::Instant;

const N: usize = 256;
/// Rounds, each timing every variant once over a few milliseconds of work; the minimum
/// over rounds is reported, so that other load on a shared machine disturbs little.
const ROUNDS: usize = 40;

/// Microseconds per item of one `f()` covering `items` items.
fn time_us(items: usize, f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64() * 1e6 / items as f64
}

/// What `verify_batch` needs to agree with `verify_strict` on a key or an R.
fn prime_order_canonical(bytes: &[u8; 32]) -> bool {
    let c = CompressedEdwardsY(*bytes);
    c.decompress().is_some_and(|p: EdwardsPoint| {
        // [L]P = 0, as [L-1]P = -P: the vartime multiplication uses the scalar's bits.
        p.compress() == c
            && !p.is_small_order()
            && EdwardsPoint::vartime_double_scalar_mul_basepoint(&-Scalar::ONE, &p, &Scalar::ZERO)
                == -p
    })
}

fn main() {
    let keys: Vec<SigningKey> = (0..N)
        .map(|i| SigningKey::from_bytes(&[i as u8 ^ 0x5a; 32]))
        .collect();
    let msgs: Vec<Vec<u8>> = (0..N).map(|i| vec![i as u8; 173]).collect();
    let sigs: Vec<Signature> = keys.iter().zip(&msgs).map(|(k, m)| k.sign(m)).collect();
    let vks: Vec<VerifyingKey> = keys.iter().map(|k| k.verifying_key()).collect();
    let refs: Vec<&[u8]> = msgs.iter().map(|m| m.as_slice()).collect();

    const SIZES: [usize; 4] = [1, 16, 64, 256];
    let mut strict = f64::INFINITY;
    let mut batch = [f64::INFINITY; SIZES.len()];
    let mut precheck = f64::INFINITY;
    let mut key_check = f64::INFINITY;
    for round in 0..ROUNDS {
        let part = (round * 64) % N..(round * 64) % N + 64;
        strict = strict.min(time_us(64, || {
            for i in part.clone() {
                assert!(vks[i].verify_strict(&msgs[i], &sigs[i]).is_ok());
            }
        }));
        for (j, &b) in SIZES.iter().enumerate() {
            let r = if b <= 64 {
                part.start..part.start + b
            } else {
                0..N
            };
            batch[j] = batch[j].min(time_us(b, || {
                let ok = ed25519_dalek::verify_batch(&refs[r.clone()], &sigs[r.clone()], &vks[r]);
                assert!(ok.is_ok());
            }));
        }
        precheck = precheck.min(time_us(64, || {
            for s in &sigs[part.clone()] {
                black_box(prime_order_canonical(s.r_bytes()));
            }
        }));
        key_check = key_check.min(time_us(64, || {
            for vk in &vks[part.clone()] {
                black_box(prime_order_canonical(vk.as_bytes()));
            }
        }));
    }
    println!("verify_strict                         {strict:8.2} us/sig");
    for (b, us) in SIZES.iter().zip(batch) {
        println!("verify_batch({b:3})                     {us:8.2} us/sig");
    }
    println!("pre-check of R (per sig)              {precheck:8.2} us/sig");
    println!("pre-check of a key (cacheable)        {key_check:8.2} us/key");
    let (b64, b256) = (batch[2], batch[3]);
    println!(
        "sound batch(64), keys cached          {:8.2} us/sig",
        b64 + precheck
    );
    println!(
        "{{\"verify_strict_us\": {strict:.2}, \"verify_batch_64_us\": {b64:.2}, \
         \"verify_batch_256_us\": {b256:.2}, \"r_precheck_us\": {precheck:.2}, \
         \"key_precheck_us\": {key_check:.2}, \"sound_batch_64_us\": {:.2}}}",
        b64 + precheck
    );
}
