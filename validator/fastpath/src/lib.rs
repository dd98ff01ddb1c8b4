//! `gpum_fastpath`: the validator's hot path in Rust, a drop-in for the checks of
//! `gpum_validator.verify.authenticate` on a batch of proofs.
//!
//! # API (Python module `gpum_fastpath`)
//!
//! `authenticate_many(program_id: bytes, market: bytes, items: list[tuple[bytes, bytes,
//! bytes]]) -> list[tuple]`
//!
//! Each item is `(proof_bytes, receipt_signature, worker_key_from_request)`. Items are
//! judged independently; the result has one entry per item, in order:
//!
//! * `("ok", fields, proof_hash, receipt_message)`: `proof_hash` is sha256 of the proof bytes
//!   (32 bytes), `receipt_message` the 173-byte receipt message (`receipt_for_proof`), and
//!   `fields` the decoded proof as plain tuples in the field order of the Python dataclasses,
//!   so that `WindowProof(*fields[:9], tuple(GpuWindow(*g) for g in fields[9]),
//!   *fields[10:16], WorkloadWindow(*w[:4], w[4] and CheckpointRecord(*w[4])))`, with
//!   `w = fields[16]`, equals `decode_proof(proof_bytes)`:
//!
//!   ```text
//!   fields = (program_id, market, job, provider, worker_key,          # bytes(32) x5   [0:5]
//!             seq, window_start, window_end, sample_interval_ms,       # int x4         [5:9]
//!             gpus,                                                    # tuple of gpu   [9]
//!             process_list_hash, prev_proof_hash,                      # bytes(32) x2   [10:12]
//!             health_flags, billable_seconds, cumulative_seconds,      # int x3         [12:15]
//!             version,                                                 # int 1, 2 or 3  [15]
//!             workload)                                                # 5-tuple        [16]
//!   gpu      = (uuid: str, samples, covered_seconds, util_gpu_avg_bp, util_gpu_max_bp,
//!               util_mem_avg_bp, mem_used_max_mib, mem_total_mib, temp_max_c,
//!               power_avg_mw, fan_max_pct, ecc_uncorrected_delta, health_flags)
//!               # the optional metrics are int or None
//!   workload = (state, exit_code: int | None, job_processes, foreign_processes,
//!               checkpoint: (seq, manifest_digest: bytes(32), total_bytes, created_at) | None)
//!               # (0, None, 0, 0, None) for a version-1 proof (NO_WORKLOAD_WINDOW); the
//!               # checkpoint is None in versions 1 and 2
//!   ```
//!
//! * `("err", reason, message)`: the first check that fails, in the order and with the
//!   reason codes of Python's `authenticate`: `proof_malformed` (Python's `decode_proof`
//!   raises; the message is `"proof bytes do not decode: "` and the same error text),
//!   `proof_not_canonical` (it decodes but does not re-encode to the same bytes),
//!   `worker_key_mismatch`, `wrong_program`, `wrong_market`, `bad_receipt_signature`.
//!
//! The proof signature is not checked: the receipt signature commits to sha256 of the proof
//! bytes (and seq, cumulative seconds, window end, job, market, program), and the program and
//! the equivocation slash only ever use receipt signatures. The receipt signature is judged
//! by ed25519-dalek 2.x `verify_strict` (Solana's Ed25519-program rule): small-order or
//! non-canonical points and non-canonical S are refused, so the validator never approves a
//! receipt the chain would refuse. Decoding and verification run with the GIL released.
//!
//! `screen_many(program_id: bytes, market: bytes, objs: list) -> list[tuple | None]`: the
//! intake's fast lane on raw SignedProof JSON objects: `None` for an item unless
//! `parse_signed_proof` and `authenticate` both accept it, else `(job, seq, provider,
//! worker_key, window_start, window_end, cumulative_seconds, billable_seconds,
//! prev_proof_hash, proof_hash, sorted uuids, health, proof, proof_signature,
//! receipt_signature)` (layout and `health` in validator/fastpath/README.md; `screen`).
//!
//! `verify_strict_one(pubkey: bytes, sig: bytes, msg: bytes) -> bool`: `verify_strict` of one
//! signature; False for a key that is not a 32-byte curve point or a signature that is not 64
//! bytes. For tests and benchmarks.
//!
//! `MAX_PROOF_BYTES`, `RECEIPT_MESSAGE_LEN`: the limits the decoder applies, for tests to pin.
//!
//! Only `bytes` objects are accepted where bytes are expected (`TypeError` otherwise; an item
//! that is not a 3-tuple raises `ValueError`).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use pyo3::{intern, IntoPyObjectExt};

pub mod auth;
pub mod proof;
pub mod receipt;
pub mod screen;
pub mod sig;

use auth::Accepted;
use proof::{Gpu, Proof};

/// A Python tuple of heterogeneous values (PyO3 converts Rust tuples only up to 12 items).
macro_rules! py_tuple {
    ($py:expr; $($v:expr),* $(,)?) => {
        PyTuple::new($py, [$($v.into_bound_py_any($py)?),*])
    };
}

fn gpu_tuple<'py>(py: Python<'py>, g: &Gpu<'_>) -> PyResult<Bound<'py, PyTuple>> {
    py_tuple!(py; g.uuid, g.samples, g.covered_seconds, g.util_gpu_avg_bp, g.util_gpu_max_bp,
              g.util_mem_avg_bp, g.mem_used_max_mib, g.mem_total_mib, g.temp_max_c,
              g.power_avg_mw, g.fan_max_pct, g.ecc_uncorrected_delta, g.health_flags)
}

fn fields<'py>(py: Python<'py>, p: &Proof<'_>) -> PyResult<Bound<'py, PyTuple>> {
    let gpus = PyTuple::new(
        py,
        p.gpus
            .iter()
            .map(|g| gpu_tuple(py, g))
            .collect::<PyResult<Vec<_>>>()?,
    )?;
    let w = &p.workload;
    let checkpoint = match &w.checkpoint {
        None => py.None().into_bound(py),
        Some(c) => py_tuple!(py; c.seq, PyBytes::new(py, &c.manifest_digest), c.total_bytes,
                             c.created_at)?
        .into_any(),
    };
    let workload = py_tuple!(py; w.state, w.exit_code, w.job_processes, w.foreign_processes,
                             checkpoint)?;
    let b = |k: &[u8; 32]| PyBytes::new(py, k);
    py_tuple!(py; b(p.program_id), b(p.market), b(p.job), b(p.provider), b(p.worker_key),
              p.seq, p.window_start, p.window_end, p.sample_interval_ms, gpus,
              b(p.process_list_hash), b(p.prev_proof_hash), p.health_flags,
              p.billable_seconds, p.cumulative_seconds, p.version, workload)
}

fn accepted<'py>(py: Python<'py>, a: &Accepted<'_>) -> PyResult<Bound<'py, PyTuple>> {
    py_tuple!(py; intern!(py, "ok"), fields(py, &a.proof)?, PyBytes::new(py, &a.hash),
              PyBytes::new(py, &a.receipt_message))
}

/// Authenticate window proofs (see the crate documentation for the result layout).
#[pyfunction]
fn authenticate_many<'py>(
    py: Python<'py>,
    program_id: &[u8],
    market: &[u8],
    items: Vec<(
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
    )>,
) -> PyResult<Bound<'py, PyList>> {
    // `bytes` are immutable and `items` keeps them alive while the GIL is released.
    let views: Vec<auth::Item<'_>> = items
        .iter()
        .map(|(p, s, k)| (p.as_bytes(), s.as_bytes(), k.as_bytes()))
        .collect();
    let results = py.detach(|| auth::authenticate_many(program_id, market, &views));
    let out = PyList::empty(py);
    for r in &results {
        match r {
            Ok(a) => out.append(accepted(py, a)?)?,
            Err(e) => {
                out.append(py_tuple!(py; intern!(py, "err"), e.reason, e.message.as_str())?)?
            }
        }
    }
    Ok(out)
}

/// The four fields of a SignedProof JSON object, if it is a dict of exactly those four keys
/// with string values (else the reference path judges it).
fn raw_fields(obj: &Bound<'_, PyAny>) -> Option<screen::RawFields> {
    let d = obj.cast::<PyDict>().ok()?;
    if d.len() != 4 {
        return None;
    }
    let get = |k: &str| -> Option<String> {
        let v = d.get_item(k).ok()??;
        let s = v.cast::<PyString>().ok()?;
        s.to_str().ok().map(str::to_owned)
    };
    Some(screen::RawFields {
        proof: get("proof")?,
        proof_signature: get("proof_signature")?,
        receipt_signature: get("receipt_signature")?,
        worker_key: get("worker_key")?,
    })
}

fn screened<'py>(
    py: Python<'py>,
    a: &Accepted<'_>,
    d: &screen::Decoded,
) -> PyResult<Bound<'py, PyTuple>> {
    let p = &a.proof;
    let mut uuids: Vec<&str> = p.gpus.iter().map(|g| g.uuid).collect();
    uuids.sort_unstable();
    let h = screen::health(p);
    let health = py_tuple!(py; h.workload_billable, h.zero_samples, h.max_ecc, h.ecc_flag,
                           h.min_covered, h.max_temp)?;
    let b = |k: &[u8]| PyBytes::new(py, k);
    py_tuple!(py; b(p.job), p.seq, b(p.provider), b(p.worker_key), p.window_start,
              p.window_end, p.cumulative_seconds, p.billable_seconds, b(p.prev_proof_hash),
              b(&a.hash), PyTuple::new(py, uuids)?, health, b(&d.proof),
              b(&d.proof_signature), b(&d.receipt_signature))
}

/// The intake's fast lane (see the crate documentation for the result layout).
#[pyfunction]
fn screen_many<'py>(
    py: Python<'py>,
    program_id: &[u8],
    market: &[u8],
    objs: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyList>> {
    let raw: Vec<Option<screen::RawFields>> = objs.iter().map(|o| raw_fields(&o)).collect();
    let decoded: Vec<Option<screen::Decoded>> = py.detach(|| {
        raw.iter()
            .map(|r| r.as_ref().and_then(screen::decode_fields))
            .collect()
    });
    let results = py.detach(|| screen::screen_many(program_id, market, &decoded));
    let out = PyList::empty(py);
    for (r, d) in results.iter().zip(&decoded) {
        match (r, d) {
            (Some(a), Some(d)) => out.append(screened(py, a, d)?)?,
            _ => out.append(py.None())?,
        }
    }
    Ok(out)
}

/// ed25519-dalek 2.x `verify_strict` of one signature (never raises).
#[pyfunction]
fn verify_strict_one(py: Python<'_>, pubkey: &[u8], sig: &[u8], msg: &[u8]) -> bool {
    py.detach(|| sig::verify_strict_one(pubkey, sig, msg))
}

#[pymodule]
fn gpum_fastpath(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(authenticate_many, m)?)?;
    m.add_function(wrap_pyfunction!(verify_strict_one, m)?)?;
    m.add_function(wrap_pyfunction!(screen_many, m)?)?;
    m.add("MAX_PROOF_BYTES", proof::MAX_PROOF_BYTES)?;
    m.add("RECEIPT_MESSAGE_LEN", receipt::RECEIPT_MESSAGE_LEN)?;
    Ok(())
}
