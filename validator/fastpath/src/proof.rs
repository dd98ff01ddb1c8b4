//! The window proof's canonical borsh codec, a mirror of `clients/py/gpu_market/proof.py`.
//!
//! Guarantee: [`decode`] returns `Ok` for exactly the byte strings for which Python's
//! `decode_proof` succeeds, and its `Err` message is the text of the `ProofDecodeError` Python
//! raises (except that a duplicate uuid is quoted without Python's `repr` escapes). Every
//! check of `WindowProof.validate`, `GpuWindow.validate` and `WorkloadWindow.validate` is made,
//! in Python's order, after the whole input has been parsed. [`encode`] writes the canonical
//! bytes of a decoded proof, so `encode(&decode(b)?) == b` is the canonical check of
//! `verify.authenticate`.

use std::fmt;

/// Versions `decode` reads (Python `PROOF_VERSIONS`).
pub const PROOF_VERSIONS: [u8; 3] = [1, 2, 3];
/// Python `MAX_GPUS`.
pub const MAX_GPUS: usize = 64;
/// Python `MAX_UUID_BYTES`.
pub const MAX_UUID_BYTES: usize = 96;
/// Python `BP_MAX`: the most basis points a utilisation metric may hold.
pub const BP_MAX: u16 = 10_000;
/// Python `MAX_SAMPLE_INTERVAL_MS`.
pub const MAX_SAMPLE_INTERVAL_MS: u32 = 60_000;
/// Python `WORKLOAD_FAILED`, the highest workload state.
pub const WORKLOAD_FAILED: u8 = 5;
/// Fixed part of a proof (Python `_PROOF_FIXED`), with the version-3 workload checkpoint.
const PROOF_FIXED: usize =
    1 + 5 * 32 + 8 + 8 + 8 + 4 + 4 + 32 + 32 + 4 + 8 + 8 + (1 + 5 + 2 + 2) + (1 + 8 + 32 + 8 + 8);
/// Largest encoded GpuWindow (Python `_GPU_MAX`).
const GPU_MAX: usize = (4 + MAX_UUID_BYTES) + 4 + 4 + 3 * 3 + 3 * 5 + 2 * 3 + 9 + 4;
/// Python `MAX_PROOF_BYTES`: longer input is refused before parsing.
pub const MAX_PROOF_BYTES: usize = PROOF_FIXED + MAX_GPUS * GPU_MAX;

/// One GPU's aggregates over the window (Python `GpuWindow`, same field order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu<'a> {
    pub uuid: &'a str,
    pub samples: u32,
    pub covered_seconds: u32,
    pub util_gpu_avg_bp: Option<u16>,
    pub util_gpu_max_bp: Option<u16>,
    pub util_mem_avg_bp: Option<u16>,
    pub mem_used_max_mib: Option<u32>,
    pub mem_total_mib: Option<u32>,
    pub temp_max_c: Option<u16>,
    pub power_avg_mw: Option<u32>,
    pub fan_max_pct: Option<u16>,
    pub ecc_uncorrected_delta: Option<u64>,
    pub health_flags: u32,
}

/// The workload's last complete checkpoint as of the window's end (Python
/// `CheckpointRecord`, version-3 proofs only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    pub seq: u64,
    pub manifest_digest: [u8; 32],
    pub total_bytes: u64,
    pub created_at: i64,
}

/// What the job's container did in the window (Python `WorkloadWindow`); all zero/None for
/// a version-1 proof, which carries none (Python `NO_WORKLOAD_WINDOW`); `checkpoint` is
/// None in versions 1 and 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Workload {
    pub state: u8,
    pub exit_code: Option<i32>,
    pub job_processes: u16,
    pub foreign_processes: u16,
    pub checkpoint: Option<Checkpoint>,
}

/// A decoded window proof borrowing its keys, hashes and uuids from the input bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof<'a> {
    pub version: u8,
    pub program_id: &'a [u8; 32],
    pub market: &'a [u8; 32],
    pub job: &'a [u8; 32],
    pub provider: &'a [u8; 32],
    pub worker_key: &'a [u8; 32],
    pub seq: u64,
    pub window_start: i64,
    pub window_end: i64,
    pub sample_interval_ms: u32,
    pub gpus: Vec<Gpu<'a>>,
    pub process_list_hash: &'a [u8; 32],
    pub prev_proof_hash: &'a [u8; 32],
    pub health_flags: u32,
    pub billable_seconds: u64,
    pub cumulative_seconds: u64,
    pub workload: Workload,
}

/// Why bytes are not a window proof: the message of Python's `ProofDecodeError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DecodeError {}

fn err<T>(msg: String) -> Result<T, DecodeError> {
    Err(DecodeError(msg))
}

/// Little-endian fixed-width integers read off the wire.
trait Wire: Sized {
    const SIZE: usize;
    fn from_le(b: &[u8]) -> Self;
}

macro_rules! wire {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn from_le(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
        }
    )*};
}
wire!(u8, u16, u32, u64, i32, i64);

/// Python's `_Reader`: the same reads with the same error texts.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &dyn fmt::Display) -> Result<&'a [u8], DecodeError> {
        let data: &'a [u8] = self.data;
        match data.get(self.pos..).and_then(|rest| rest.get(..n)) {
            Some(b) => {
                self.pos += n;
                Ok(b)
            }
            None => err(format!(
                "truncated proof: {what} needs {n} bytes at offset {}",
                self.pos
            )),
        }
    }

    fn num<T: Wire>(&mut self, what: &dyn fmt::Display) -> Result<T, DecodeError> {
        Ok(T::from_le(self.take(T::SIZE, what)?))
    }

    fn b32(&mut self, what: &str) -> Result<&'a [u8; 32], DecodeError> {
        let b = self.take(32, &what)?;
        Ok(b.try_into().expect("take returned 32 bytes"))
    }

    fn opt<T: Wire>(&mut self, what: &dyn fmt::Display) -> Result<Option<T>, DecodeError> {
        match self.take(1, what)?[0] {
            0 => Ok(None),
            1 => Ok(Some(self.num(what)?)),
            tag => err(format!(
                "bad Option tag {tag} for {what} at offset {}",
                self.pos - 1
            )),
        }
    }

    fn string(&mut self, what: &dyn fmt::Display, max_len: usize) -> Result<&'a str, DecodeError> {
        let n = self.num::<u32>(&format_args!("{what} length"))? as usize;
        if n > max_len {
            return err(format!(
                "{what} is {n} bytes, more than the limit {max_len}"
            ));
        }
        let raw = self.take(n, what)?;
        std::str::from_utf8(raw).or_else(|_| err(format!("{what} is not valid UTF-8")))
    }
}

/// `gpus[i].<field>`, formatted only when an error message needs it.
struct GpuField(usize, &'static str);

impl fmt::Display for GpuField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gpus[{}].{}", self.0, self.1)
    }
}

fn decode_gpu<'a>(r: &mut Reader<'a>, i: usize) -> Result<Gpu<'a>, DecodeError> {
    let w = |name| GpuField(i, name);
    Ok(Gpu {
        uuid: r.string(&w("uuid"), MAX_UUID_BYTES)?,
        samples: r.num(&w("samples"))?,
        covered_seconds: r.num(&w("covered_seconds"))?,
        util_gpu_avg_bp: r.opt(&w("util_gpu_avg_bp"))?,
        util_gpu_max_bp: r.opt(&w("util_gpu_max_bp"))?,
        util_mem_avg_bp: r.opt(&w("util_mem_avg_bp"))?,
        mem_used_max_mib: r.opt(&w("mem_used_max_mib"))?,
        mem_total_mib: r.opt(&w("mem_total_mib"))?,
        temp_max_c: r.opt(&w("temp_max_c"))?,
        power_avg_mw: r.opt(&w("power_avg_mw"))?,
        fan_max_pct: r.opt(&w("fan_max_pct"))?,
        ecc_uncorrected_delta: r.opt(&w("ecc_uncorrected_delta"))?,
        health_flags: r.num(&w("health_flags"))?,
    })
}

fn decode_checkpoint(r: &mut Reader<'_>) -> Result<Option<Checkpoint>, DecodeError> {
    match r.take(1, &"workload.checkpoint")?[0] {
        0 => Ok(None),
        1 => Ok(Some(Checkpoint {
            seq: r.num(&"workload.checkpoint.seq")?,
            manifest_digest: *r.b32("workload.checkpoint.manifest_digest")?,
            total_bytes: r.num(&"workload.checkpoint.total_bytes")?,
            created_at: r.num(&"workload.checkpoint.created_at")?,
        })),
        tag => err(format!(
            "bad Option tag {tag} for workload.checkpoint at offset {}",
            r.pos - 1
        )),
    }
}

/// Parse canonical proof bytes: Python `decode_proof`, checks and error texts included.
pub fn decode(data: &[u8]) -> Result<Proof<'_>, DecodeError> {
    if data.len() > MAX_PROOF_BYTES {
        return err(format!(
            "proof is {} bytes, more than {MAX_PROOF_BYTES}",
            data.len()
        ));
    }
    let mut r = Reader { data, pos: 0 };
    let version: u8 = r.num(&"version")?;
    if !PROOF_VERSIONS.contains(&version) {
        return err(format!(
            "unsupported proof version {version} (expected one of (1, 2, 3))"
        ));
    }
    let program_id = r.b32("program_id")?;
    let market = r.b32("market")?;
    let job = r.b32("job")?;
    let provider = r.b32("provider")?;
    let worker_key = r.b32("worker_key")?;
    let seq = r.num(&"seq")?;
    let window_start = r.num(&"window_start")?;
    let window_end = r.num(&"window_end")?;
    let sample_interval_ms = r.num(&"sample_interval_ms")?;
    let n = r.num::<u32>(&"gpus length")? as usize;
    if n > MAX_GPUS {
        return err(format!(
            "proof lists {n} GPUs, more than the limit {MAX_GPUS}"
        ));
    }
    let gpus = (0..n)
        .map(|i| decode_gpu(&mut r, i))
        .collect::<Result<Vec<_>, _>>()?;
    let process_list_hash = r.b32("process_list_hash")?;
    let prev_proof_hash = r.b32("prev_proof_hash")?;
    let health_flags = r.num(&"health_flags")?;
    let billable_seconds = r.num(&"billable_seconds")?;
    let cumulative_seconds = r.num(&"cumulative_seconds")?;
    let workload = if version >= 2 {
        Workload {
            state: r.num(&"workload.state")?,
            exit_code: r.opt(&"workload.exit_code")?,
            job_processes: r.num(&"workload.job_processes")?,
            foreign_processes: r.num(&"workload.foreign_processes")?,
            checkpoint: if version >= 3 {
                decode_checkpoint(&mut r)?
            } else {
                None
            },
        }
    } else {
        Workload::default()
    };
    if r.pos != data.len() {
        return err(format!(
            "{} trailing bytes after the proof",
            data.len() - r.pos
        ));
    }
    let p = Proof {
        version,
        program_id,
        market,
        job,
        provider,
        worker_key,
        seq,
        window_start,
        window_end,
        sample_interval_ms,
        gpus,
        process_list_hash,
        prev_proof_hash,
        health_flags,
        billable_seconds,
        cumulative_seconds,
        workload,
    };
    validate(&p)?;
    Ok(p)
}

fn bp(name: &str, v: Option<u16>) -> Result<(), DecodeError> {
    match v {
        Some(x) if x > BP_MAX => err(format!("{name}={x} out of range [0, {BP_MAX}]")),
        _ => Ok(()),
    }
}

/// The checks of Python's `WindowProof.validate` that a parsed proof can still fail, in the
/// same order (the type ranges of the wire already hold).
fn validate(p: &Proof<'_>) -> Result<(), DecodeError> {
    if p.workload.state > WORKLOAD_FAILED {
        return err(format!(
            "workload.state={} out of range [0, {WORKLOAD_FAILED}]",
            p.workload.state
        ));
    }
    if let Some(c) = &p.workload.checkpoint {
        if c.seq == 0 {
            return err(format!(
                "workload.checkpoint.seq=0 out of range [1, {}]",
                u64::MAX
            ));
        }
    }
    if p.window_end <= p.window_start {
        return err("window_end must be after window_start".into());
    }
    if !(1..=MAX_SAMPLE_INTERVAL_MS).contains(&p.sample_interval_ms) {
        return err(format!(
            "sample_interval_ms={} out of range [1, {MAX_SAMPLE_INTERVAL_MS}]",
            p.sample_interval_ms
        ));
    }
    if p.gpus.is_empty() {
        return err(format!("a proof covers 1..{MAX_GPUS} GPUs, got 0"));
    }
    // Python ints: the length of an i64 window can exceed i64.
    let length = i128::from(p.window_end) - i128::from(p.window_start);
    for (i, g) in p.gpus.iter().enumerate() {
        let n = g.uuid.len();
        if !(1..=MAX_UUID_BYTES).contains(&n) {
            return err(format!(
                "uuid must be 1..{MAX_UUID_BYTES} UTF-8 bytes, got {n}"
            ));
        }
        bp("util_gpu_avg_bp", g.util_gpu_avg_bp)?;
        bp("util_gpu_max_bp", g.util_gpu_max_bp)?;
        bp("util_mem_avg_bp", g.util_mem_avg_bp)?;
        // At most MAX_GPUS items: a quadratic scan beats hashing.
        if p.gpus[..i].iter().any(|h| h.uuid == g.uuid) {
            return err(format!("duplicate GPU uuid {}", py_str_repr(g.uuid)));
        }
        if i128::from(g.covered_seconds) > length {
            return err(format!(
                "covered_seconds of {} exceeds the window length {length}",
                g.uuid
            ));
        }
    }
    if i128::from(p.billable_seconds) > length {
        return err(format!(
            "billable_seconds {} exceeds window length {length}",
            p.billable_seconds
        ));
    }
    if p.cumulative_seconds < p.billable_seconds {
        return err("cumulative_seconds must be >= billable_seconds".into());
    }
    Ok(())
}

/// Python's `repr(str)` for printable ASCII; other characters are written as they are.
fn py_str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

fn put_opt<const N: usize>(out: &mut Vec<u8>, v: Option<[u8; N]>) {
    match v {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            out.extend_from_slice(&b);
        }
    }
}

/// Canonical bytes of a proof (Python `encode_proof` of a decoded proof).
pub fn encode(p: &Proof<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(PROOF_FIXED + p.gpus.len() * GPU_MAX);
    out.push(p.version);
    for k in [p.program_id, p.market, p.job, p.provider, p.worker_key] {
        out.extend_from_slice(k);
    }
    out.extend_from_slice(&p.seq.to_le_bytes());
    out.extend_from_slice(&p.window_start.to_le_bytes());
    out.extend_from_slice(&p.window_end.to_le_bytes());
    out.extend_from_slice(&p.sample_interval_ms.to_le_bytes());
    out.extend_from_slice(&(p.gpus.len() as u32).to_le_bytes());
    for g in &p.gpus {
        out.extend_from_slice(&(g.uuid.len() as u32).to_le_bytes());
        out.extend_from_slice(g.uuid.as_bytes());
        out.extend_from_slice(&g.samples.to_le_bytes());
        out.extend_from_slice(&g.covered_seconds.to_le_bytes());
        put_opt(&mut out, g.util_gpu_avg_bp.map(u16::to_le_bytes));
        put_opt(&mut out, g.util_gpu_max_bp.map(u16::to_le_bytes));
        put_opt(&mut out, g.util_mem_avg_bp.map(u16::to_le_bytes));
        put_opt(&mut out, g.mem_used_max_mib.map(u32::to_le_bytes));
        put_opt(&mut out, g.mem_total_mib.map(u32::to_le_bytes));
        put_opt(&mut out, g.temp_max_c.map(u16::to_le_bytes));
        put_opt(&mut out, g.power_avg_mw.map(u32::to_le_bytes));
        put_opt(&mut out, g.fan_max_pct.map(u16::to_le_bytes));
        put_opt(&mut out, g.ecc_uncorrected_delta.map(u64::to_le_bytes));
        out.extend_from_slice(&g.health_flags.to_le_bytes());
    }
    out.extend_from_slice(p.process_list_hash);
    out.extend_from_slice(p.prev_proof_hash);
    out.extend_from_slice(&p.health_flags.to_le_bytes());
    out.extend_from_slice(&p.billable_seconds.to_le_bytes());
    out.extend_from_slice(&p.cumulative_seconds.to_le_bytes());
    if p.version >= 2 {
        let w = &p.workload;
        out.push(w.state);
        put_opt(&mut out, w.exit_code.map(i32::to_le_bytes));
        out.extend_from_slice(&w.job_processes.to_le_bytes());
        out.extend_from_slice(&w.foreign_processes.to_le_bytes());
        if p.version >= 3 {
            match &w.checkpoint {
                None => out.push(0),
                Some(c) => {
                    out.push(1);
                    out.extend_from_slice(&c.seq.to_le_bytes());
                    out.extend_from_slice(&c.manifest_digest);
                    out.extend_from_slice(&c.total_bytes.to_le_bytes());
                    out.extend_from_slice(&c.created_at.to_le_bytes());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(version: u8) -> Vec<u8> {
        let k = [5u8; 32];
        let gpu = Gpu {
            uuid: "GPU-aaaa",
            samples: 60,
            covered_seconds: 60,
            util_gpu_avg_bp: Some(9000),
            util_gpu_max_bp: Some(10_000),
            util_mem_avg_bp: None,
            mem_used_max_mib: None,
            mem_total_mib: Some(81_920),
            temp_max_c: Some(70),
            power_avg_mw: None,
            fan_max_pct: None,
            ecc_uncorrected_delta: Some(0),
            health_flags: 0,
        };
        let p = Proof {
            version,
            program_id: &k,
            market: &k,
            job: &k,
            provider: &k,
            worker_key: &k,
            seq: 1,
            window_start: 1_700_000_000,
            window_end: 1_700_000_060,
            sample_interval_ms: 1000,
            gpus: vec![
                gpu.clone(),
                Gpu {
                    uuid: "GPU-bbbb",
                    ..gpu
                },
            ],
            process_list_hash: &k,
            prev_proof_hash: &k,
            health_flags: 0,
            billable_seconds: 60,
            cumulative_seconds: 60,
            workload: if version >= 2 {
                Workload {
                    state: 2,
                    exit_code: Some(-1),
                    job_processes: 1,
                    foreign_processes: 0,
                    checkpoint: (version == 3).then_some(Checkpoint {
                        seq: 4,
                        manifest_digest: [9u8; 32],
                        total_bytes: 1 << 33,
                        created_at: 1_700_000_030,
                    }),
                }
            } else {
                Workload::default()
            },
        };
        encode(&p)
    }

    #[test]
    fn limits_match_python() {
        assert_eq!(PROOF_FIXED, 344);
        assert_eq!(GPU_MAX, 151);
        assert_eq!(MAX_PROOF_BYTES, 10_008);
    }

    #[test]
    fn round_trips_every_version() {
        for v in PROOF_VERSIONS {
            let b = sample(v);
            let p = decode(&b).unwrap();
            assert_eq!(p.version, v);
            assert_eq!(encode(&p), b);
        }
    }

    #[test]
    fn every_strict_prefix_is_truncated_and_extra_bytes_trail() {
        let b = sample(3);
        for n in 0..b.len() {
            let e = decode(&b[..n]).unwrap_err().0;
            assert!(e.starts_with("truncated proof: "), "{n}: {e}");
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(
            decode(&long).unwrap_err().0,
            "1 trailing bytes after the proof"
        );
    }

    #[test]
    fn bad_tags_and_versions() {
        let mut b = sample(2);
        b[0] = 4;
        assert_eq!(
            decode(&b).unwrap_err().0,
            "unsupported proof version 4 (expected one of (1, 2, 3))"
        );
        let mut b = sample(3);
        let tag = b.len() - (1 + 8 + 32 + 8 + 8);
        b[tag] = 2;
        assert_eq!(
            decode(&b).unwrap_err().0,
            format!("bad Option tag 2 for workload.checkpoint at offset {tag}")
        );
        b[tag] = 1;
        b[tag + 1..tag + 9].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(
            decode(&b).unwrap_err().0,
            "workload.checkpoint.seq=0 out of range [1, 18446744073709551615]"
        );
        let mut b = sample(2);
        let tag = 1 + 5 * 32 + 24 + 4 + 4 + 4 + 8 + 8; // gpus[0].util_gpu_avg_bp's tag
        b[tag] = 2;
        assert_eq!(
            decode(&b).unwrap_err().0,
            format!("bad Option tag 2 for gpus[0].util_gpu_avg_bp at offset {tag}")
        );
    }

    #[test]
    fn repr_quotes_like_python() {
        assert_eq!(py_str_repr("GPU-a"), "'GPU-a'");
        assert_eq!(py_str_repr("it's"), "\"it's\"");
        assert_eq!(py_str_repr("a'\"b"), "'a\\'\"b'");
    }
}
