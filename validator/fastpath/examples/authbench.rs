//! Per-proof cost of `auth::authenticate_many` (no Python) against one `verify_strict`:
//! `cargo run --release --example authbench`. Best of several rounds, microseconds.

use ed25519_dalek::{Signer, SigningKey};
use gpum_fastpath::proof::{self, Gpu, Proof, Workload};
use gpum_fastpath::{auth, receipt, sig};
use std::hint::black_box;
use std::time::Instant;

const N: usize = 256;

/// Minimum over short rounds of microseconds per proof (robust to other load).
fn best(mut f: impl FnMut()) -> f64 {
    (0..40)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6 / 64.0
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let sk = SigningKey::from_bytes(&[42; 32]);
    let pk = sk.verifying_key().to_bytes();
    let (program, market, k) = ([1u8; 32], [7u8; 32], [9u8; 32]);
    let uuids = [
        "GPU-01b2c3d4-5e6f-7a8b-9c0d-1e2f3a4b5c6d",
        "GPU-11b2c3d4-5e6f-7a8b-9c0d-1e2f3a4b5c6d",
    ];
    let proofs: Vec<Vec<u8>> = (0..N as u64)
        .map(|s| {
            let gpus = uuids
                .iter()
                .map(|u| Gpu {
                    uuid: u,
                    samples: 60,
                    covered_seconds: 60,
                    util_gpu_avg_bp: Some(9000),
                    util_gpu_max_bp: Some(10_000),
                    util_mem_avg_bp: Some(4000),
                    mem_used_max_mib: Some(70_000),
                    mem_total_mib: Some(81_559),
                    temp_max_c: Some(70),
                    power_avg_mw: Some(350_000),
                    fan_max_pct: None,
                    ecc_uncorrected_delta: Some(0),
                    health_flags: 0,
                })
                .collect();
            proof::encode(&Proof {
                version: 2,
                program_id: &program,
                market: &market,
                job: &k,
                provider: &k,
                worker_key: &pk,
                seq: s + 1,
                window_start: 60 * s as i64,
                window_end: 60 * (s as i64 + 1),
                sample_interval_ms: 1000,
                gpus,
                process_list_hash: &k,
                prev_proof_hash: &k,
                health_flags: 0,
                billable_seconds: 60,
                cumulative_seconds: 60 * (s + 1),
                workload: Workload {
                    state: 2,
                    ..Workload::default()
                },
            })
        })
        .collect();
    let sigs: Vec<[u8; 64]> = proofs
        .iter()
        .map(|b| {
            let p = proof::decode(b).unwrap();
            sk.sign(&receipt::receipt_digest(&receipt::receipt_message(
                &p,
                &receipt::proof_hash(b),
            )))
            .to_bytes()
        })
        .collect();
    let items: Vec<auth::Item<'_>> = proofs
        .iter()
        .zip(&sigs)
        .map(|(b, s)| (b.as_slice(), s.as_slice(), pk.as_slice()))
        .collect();
    assert!(auth::authenticate_many(&program, &market, &items)
        .iter()
        .all(|r| r.is_ok()));

    let decode = best(|| {
        for b in &proofs[..64] {
            black_box(proof::decode(b).unwrap());
        }
    });
    let canonical = best(|| {
        for b in &proofs[..64] {
            let p = proof::decode(b).unwrap();
            assert!(proof::encode(&p) == *b);
        }
    });
    let hash = best(|| {
        for b in &proofs[..64] {
            black_box(receipt::proof_hash(b));
        }
    });
    let msg = {
        let p = proof::decode(&proofs[0]).unwrap();
        receipt::receipt_digest(&receipt::receipt_message(
            &p,
            &receipt::proof_hash(&proofs[0]),
        ))
    };
    let strict = best(|| {
        for _ in 0..64 {
            assert!(sig::verify_strict_one(&pk, &sigs[0], &msg));
        }
    });
    let all = best(|| {
        black_box(auth::authenticate_many(&program, &market, &items[..64]));
    });
    println!("decode                 {decode:7.2} us");
    println!("decode + canonical     {canonical:7.2} us");
    println!("sha256 of the proof    {hash:7.2} us");
    println!("verify_strict          {strict:7.2} us");
    println!("authenticate (batch 64) {all:7.2} us/proof");
    println!(
        "{{\"decode_us\": {decode:.2}, \"decode_canonical_us\": {canonical:.2}, \"hash_us\": {hash:.2}, \
         \"verify_strict_us\": {strict:.2}, \"authenticate_us\": {all:.2}}}"
    );
}
