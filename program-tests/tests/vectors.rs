//! Cross-language decode vectors: `docs/vectors/accounts.json` holds the bytes
//! of every account type (each status variant) and every event, serialized exactly as on chain
//! (accounts: `try_serialize` = discriminator + borsh, zero-padded to the allocated
//! `8 + INIT_SPACE`; events: `Event::data`), with the expected field values. Section `runtime`
//! holds a Job, Provider and Validator read from a real runtime run (fixed keys, so the bytes are
//! reproducible) and the events that run emitted. `clients/py/tests/test_rust_vectors.py`
//! decodes them all with the SDK.
//!
//! JSON: integers are decimal strings, pubkeys base58, byte arrays hex, enums their lower-case
//! variant name (`{"jailed": {"until": ...}}` with fields), object keys sorted.
//! `GPUM_WRITE_VECTORS=1 cargo test -p gpu_market_tests --test vectors` rewrites the file.
mod common;

use std::collections::BTreeMap;

use anchor_lang::{prelude::Pubkey, AccountDeserialize, AccountSerialize, Discriminator, Event, Space};
use common::*;
use gpu_market::{
    events::*,
    receipt::Receipt,
    state::{
        EquivocationRecord, GpuSpec, HardwareVerdict, Job, JobStatus, JobTerms, Market, MarketParams,
        MarketTotals, Provider, ProviderStatus, Ratings, Reputation, RetiredWorkerKey, Unbonding,
        Validator, ValidatorStatus, WrongAnswerRecord,
    },
};
use gpum_localnet::{solana_keypair::Keypair, solana_signer::Signer};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/vectors/accounts.json");

/// A JSON value whose objects keep sorted keys (deterministic output).
enum J {
    S(String),
    B(bool),
    O(BTreeMap<String, J>),
    A(Vec<J>),
}

fn write_json(v: &J, indent: usize, out: &mut String) {
    let pad = "  ".repeat(indent + 1);
    match v {
        J::S(s) => out.push_str(&format!("{s:?}")),
        J::B(b) => out.push_str(&b.to_string()),
        J::O(m) if m.is_empty() => out.push_str("{}"),
        J::O(m) => {
            out.push_str("{\n");
            for (i, (k, v)) in m.iter().enumerate() {
                out.push_str(&format!("{pad}{k:?}: "));
                write_json(v, indent + 1, out);
                out.push_str(if i + 1 < m.len() { ",\n" } else { "\n" });
            }
            out.push_str(&format!("{}}}", "  ".repeat(indent)));
        }
        J::A(items) => {
            out.push_str("[\n");
            for (i, v) in items.iter().enumerate() {
                out.push_str(&pad);
                write_json(v, indent + 1, out);
                out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
            }
            out.push_str(&format!("{}]", "  ".repeat(indent)));
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn obj<const N: usize>(fields: [(&str, J); N]) -> J {
    J::O(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// Field values as the vectors spell them.
trait ToJ {
    fn j(&self) -> J;
}

macro_rules! to_j_int {
    ($($t:ty),*) => { $(impl ToJ for $t { fn j(&self) -> J { J::S(self.to_string()) } })* };
}
to_j_int!(u8, u16, u32, u64, i64);

impl ToJ for String {
    fn j(&self) -> J {
        J::S(self.clone())
    }
}

impl ToJ for bool {
    fn j(&self) -> J {
        J::B(*self)
    }
}

impl ToJ for Pubkey {
    fn j(&self) -> J {
        J::S(self.to_string())
    }
}

impl<const N: usize> ToJ for [u8; N] {
    fn j(&self) -> J {
        J::S(hex(self))
    }
}

/// `impl ToJ` for a struct: an object of exactly the listed fields (the Python test checks the
/// list against the IDL, so a forgotten field fails there).
macro_rules! to_j_struct {
    ($t:ty { $($f:ident),* $(,)? }) => {
        impl ToJ for $t {
            fn j(&self) -> J { obj([$((stringify!($f), self.$f.j())),*]) }
        }
    };
}

to_j_struct!(MarketParams { fee_bps, burn_bps, min_stake_per_gpu, unbonding_seconds, window_seconds, min_quorum, max_missed_windows, downtime_slash_bps, equivocation_slash_bps, reporter_reward_bps, validator_min_bond, max_skew_seconds, temp_critical_c, ecc_uncorrected_max, validator_reward_bps, hardware_quorum, hardware_attestation_max_age_seconds, verified_record_seconds });
to_j_struct!(MarketTotals { staked, bonded, burned, fees, slashed, jobs, rewards_unclaimed, rewards });
to_j_struct!(Market { authority, creator, pending_authority, id, stake_mint, payment_mint, stake_vault, treasury, params, pending_params, params_effective_at, paused, totals, bump, stake_vault_bump, fee_vault, fee_vault_bump });
to_j_struct!(GpuSpec { gpu_model, gpu_count, vram_mib, region });
to_j_struct!(Unbonding { amount, release_at });
to_j_struct!(Reputation { verified_seconds, windows_missed, jobs_completed, jobs_failed, slashes });
to_j_struct!(Provider { market, owner, worker_key, worker_key_expires_at, retired_keys, last_equivocation_slash_at, spec, price_per_gpu_second, status, stake, unbonding, gpus_in_use, reputation, bump, endpoint, last_equivocation_slash_bps, registered_at, last_slash_at, hardware, ratings });
to_j_struct!(HardwareVerdict { verified, passed, gpu_model, gpu_count, vram_mib, challenged_at, attested_at, challenge_digest, attesters, attesters_hash });
to_j_struct!(Ratings { count, sum });
to_j_struct!(RetiredWorkerKey { key, retired_at });
to_j_struct!(JobTerms { rate_per_second, fee_bps, burn_bps, window_seconds, max_missed_windows, grace_seconds, max_skew_seconds, quorum, downtime_slash_bps, equivocation_slash_bps, reporter_reward_bps, temp_critical_c, ecc_uncorrected_max, validator_reward_bps });
to_j_struct!(Validator { market, authority, bond, unbonding, status, settlements, bump, endpoint, rewards_earned, rewards_unclaimed, slashes });
to_j_struct!(Job { market, user, provider, job_id, gpu_count, terms, committee, committee_len, deposited, claimed_seconds, paid_seconds, paid_provider, paid_validators, paid_treasury, burned, refunded, status, created_at, started_at, ended_at, last_seq, last_receipt_hash, last_window_end, bump, escrow_bump, workload_hash, rated });
to_j_struct!(EquivocationRecord { job, seq, offender, reporter, slashed, bump });
to_j_struct!(WrongAnswerRecord { provider, challenge_digest, reporter, slashed, bump });

to_j_struct!(MarketInitialized { market, authority, id, stake_mint, payment_mint, treasury, params });
to_j_struct!(ProviderRegistered { market, provider, owner, worker_key, gpu_count, price_per_gpu_second });
to_j_struct!(Staked { provider, amount, stake });
to_j_struct!(ValidatorRegistered { market, validator, authority, bond, endpoint });
to_j_struct!(ValidatorUpdated { validator, endpoint });
to_j_struct!(ValidatorRewardsClaimed { validator, destination, amount });
to_j_struct!(CommitteeMemberReplaced { job, index, previous, member });
to_j_struct!(ValidatorEquivocationSlashed { validator, job, seq, first_approved, second_approved, reporter, slash_bps, reporter_reward_bps, slashed, reward, burned });
to_j_struct!(JobCreated { market, job, user, provider, job_id, gpu_count, price_per_gpu_second, rate_per_second, deposit, workload_hash });
to_j_struct!(JobAccepted { job, provider, signer, started_at });
to_j_struct!(Settled { job, provider, validator, seq, cumulative_seconds, window_end, proof_hash, claimed_seconds, approved_seconds, billed_seconds, rate_per_second, fee_bps, burn_bps, amount, fee, reward, validator_reward_bps, attesters, burned, to_provider, to_treasury, escrow_remaining, exhausted });
to_j_struct!(JobFinished { job, by, ended_at });
to_j_struct!(JobClosed { job, user, refunded, surplus_returned, deposited, paid_provider, paid_treasury, burned });
to_j_struct!(ParamsAnnounced { market, current, pending, effective_at });
to_j_struct!(TreasurySet { market, previous, treasury });
to_j_struct!(VaultSwept { market, amount, destination });
to_j_struct!(FeesWithdrawn { market, treasury, amount });
to_j_struct!(JobDeclined { job, provider, by });
to_j_struct!(JobCompleted { job, by, paid_seconds });
to_j_struct!(PausedSet { market, paused });
to_j_struct!(AuthorityProposed { market, current, proposed });
to_j_struct!(AuthorityAccepted { market, previous, authority });
to_j_struct!(ProviderUpdated { provider, price_per_gpu_second, gpu_count, status });
to_j_struct!(WorkerKeyRotated { provider, previous, current, expires_at, retired_at });
to_j_struct!(UnstakeRequested { provider, amount, stake, unbonding, release_at });
to_j_struct!(StakeWithdrawn { provider, amount });
to_j_struct!(ValidatorExitRequested { validator, amount, release_at });
to_j_struct!(ValidatorBondWithdrawn { validator, amount });
to_j_struct!(JobToppedUp { job, amount, deposited });
to_j_struct!(JobCancelled { job, refunded, surplus_returned });
to_j_struct!(JobExpired { job, by, last_window_end, missed_windows });
to_j_struct!(EquivocationSlashed { provider, job, seq, first_proof_hash, second_proof_hash, reporter, slash_bps, reporter_reward_bps, slashed, reward, burned, jailed_until });
to_j_struct!(HardwareAttested { provider, worker_key, gpu_model, gpu_count, vram_mib, passed, challenged_at, challenge_digest, attested_at, attesters, submitter });
to_j_struct!(WrongAnswerSlashed { provider, challenge_digest, challenged_at, root, row_index, leaf_hash, computed_root, answer_signer, row_signer, reporter, slash_bps, slashed, burned });
to_j_struct!(JobRated { job, provider, user, score, closed, count, sum });
to_j_struct!(DowntimeSlashed { provider, job, missed_windows, last_proof_window_end, validators, slash_bps, reporter_reward_bps, slashed, reward, burned });

impl ToJ for JobStatus {
    fn j(&self) -> J {
        J::S(format!("{self:?}").to_lowercase())
    }
}

impl ToJ for [RetiredWorkerKey; gpu_market::state::RETIRED_KEYS] {
    fn j(&self) -> J {
        J::A(self.iter().map(ToJ::j).collect())
    }
}

impl ToJ for [Pubkey; gpu_market::state::MAX_COMMITTEE] {
    fn j(&self) -> J {
        J::A(self.iter().map(ToJ::j).collect())
    }
}

impl ToJ for Vec<Pubkey> {
    fn j(&self) -> J {
        J::A(self.iter().map(ToJ::j).collect())
    }
}

impl ToJ for ValidatorStatus {
    fn j(&self) -> J {
        J::S(format!("{self:?}").to_lowercase())
    }
}

impl ToJ for ProviderStatus {
    fn j(&self) -> J {
        match self {
            ProviderStatus::Active => J::S("active".into()),
            ProviderStatus::Paused => J::S("paused".into()),
            ProviderStatus::Jailed { until } => obj([("jailed", obj([("until", until.j())]))]),
        }
    }
}

// ---- distinctive values ---------------------------------------------------------------------

/// A pubkey whose 32 bytes all differ from every other `key(n)`'s.
fn key(n: u8) -> Pubkey {
    Pubkey::new_from_array(std::array::from_fn(|i| n.wrapping_mul(37).wrapping_add(i as u8 * 3)))
}

fn bytes32(n: u8) -> [u8; 32] {
    std::array::from_fn(|i| n ^ (i as u8).wrapping_mul(11))
}

fn params() -> MarketParams {
    MarketParams {
        fee_bps: 1_234,
        burn_bps: 4_321,
        min_stake_per_gpu: 1_000_000_007,
        unbonding_seconds: 1_209_601,
        window_seconds: 61,
        min_quorum: 3,
        max_missed_windows: 11,
        downtime_slash_bps: 101,
        equivocation_slash_bps: 5_001,
        reporter_reward_bps: 1_001,
        validator_min_bond: 5_000_000_003,
        max_skew_seconds: 7,
        temp_critical_c: 93,
        ecc_uncorrected_max: 2,
        validator_reward_bps: 1_999,
        hardware_quorum: 3,
        hardware_attestation_max_age_seconds: 3_601,
        verified_record_seconds: 2_592_001,
    }
}

fn market() -> Market {
    Market {
        authority: key(1),
        creator: key(2),
        pending_authority: key(3),
        id: 0x0102_0304_0506_0708,
        stake_mint: key(4),
        payment_mint: key(5),
        stake_vault: key(6),
        treasury: key(7),
        params: params(),
        pending_params: MarketParams { fee_bps: 17, temp_critical_c: 120, ..params() },
        params_effective_at: 1_751_209_601,
        paused: true,
        totals: MarketTotals { staked: 11, bonded: 22, burned: 33, fees: 44, slashed: 55, jobs: 66, rewards_unclaimed: 77, rewards: 88 },
        bump: 254,
        stake_vault_bump: 253,
        fee_vault: key(8),
        fee_vault_bump: 252,
    }
}

fn provider(status: ProviderStatus) -> Provider {
    let mut gpu_model = [0u8; 32];
    gpu_model[..9].copy_from_slice(b"H100-SXM5");
    let mut region = [0u8; 16];
    region[..9].copy_from_slice(b"us-east-1");
    Provider {
        market: key(10),
        owner: key(11),
        worker_key: key(12),
        worker_key_expires_at: 1_800_000_001,
        retired_keys: [
            RetiredWorkerKey { key: key(13), retired_at: 1_750_000_600 },
            RetiredWorkerKey { key: key(14), retired_at: 1_740_000_600 },
            RetiredWorkerKey::default(),
            RetiredWorkerKey::default(),
        ],
        last_equivocation_slash_at: 1_745_000_000,
        spec: GpuSpec { gpu_model, gpu_count: 257, vram_mib: 81_921, region },
        price_per_gpu_second: u64::MAX - 1,
        status,
        stake: 9_000_000_000_000_000_001,
        unbonding: Unbonding { amount: 12_345, release_at: -17 },
        gpus_in_use: 3,
        reputation: Reputation { verified_seconds: 600_001, windows_missed: 7, jobs_completed: 42, jobs_failed: 2, slashes: 1 },
        bump: 251,
        endpoint: gpu_market::state::encode_endpoint("http://203.0.113.9:7070").unwrap(),
        last_equivocation_slash_bps: 4_999,
        registered_at: 1_700_000_003,
        last_slash_at: 1_745_000_001,
        hardware: HardwareVerdict {
            verified: true,
            passed: true,
            gpu_model,
            gpu_count: 257,
            vram_mib: 81_921,
            challenged_at: 1_750_000_500,
            attested_at: 1_750_000_530,
            challenge_digest: bytes32(0x5c),
            attesters: 3,
            attesters_hash: bytes32(0xc5),
        },
        ratings: Ratings { count: 17, sum: 71 },
    }
}

fn validator(status: ValidatorStatus) -> Validator {
    Validator {
        market: key(20),
        authority: key(21),
        bond: 10_000_000_019,
        unbonding: Unbonding { amount: 77, release_at: 1_751_209_600 },
        status,
        settlements: 123_456_789,
        bump: 250,
        endpoint: gpu_market::state::encode_endpoint("https://validator-1.example.org:8443/gpum").unwrap(),
        rewards_earned: 4_321,
        rewards_unclaimed: 1_234,
        slashes: 1,
    }
}

fn job(status: JobStatus) -> Job {
    Job {
        market: key(30),
        user: key(31),
        provider: key(32),
        job_id: u64::MAX,
        gpu_count: 2,
        terms: JobTerms::new(&params(), 20, 2),
        deposited: 12_001,
        committee: [key(33), key(34), key(35), Pubkey::default(), Pubkey::default()],
        committee_len: 3,
        claimed_seconds: 185,
        paid_seconds: 180,
        paid_validators: 17,
        paid_provider: 3_240,
        paid_treasury: 180,
        burned: 180,
        refunded: 5,
        status,
        created_at: 1_750_000_000,
        started_at: 1_750_000_010,
        ended_at: i64::MIN + 1,
        last_seq: 3,
        last_receipt_hash: bytes32(0xa5),
        last_window_end: 1_750_000_190,
        bump: 249,
        escrow_bump: 248,
        workload_hash: bytes32(0x77),
        rated: true,
    }
}

/// Discriminator + borsh, zero-padded to the `8 + INIT_SPACE` bytes the program allocates.
fn account_bytes<T: AccountSerialize + Space>(value: &T) -> Vec<u8> {
    let mut data = Vec::new();
    value.try_serialize(&mut data).unwrap();
    assert!(data.len() <= 8 + T::INIT_SPACE);
    data.resize(8 + T::INIT_SPACE, 0);
    data
}

fn account_vector<T: AccountSerialize + Space + ToJ>(name: &str, ty: &str, value: &T) -> J {
    obj([("name", J::S(name.into())), ("type", J::S(ty.into())), ("hex", J::S(hex(&account_bytes(value)))), ("fields", value.j())])
}

fn event_vector<E: Event + ToJ>(ty: &str, value: &E) -> J {
    obj([("name", J::S(ty.into())), ("type", J::S(ty.into())), ("hex", J::S(hex(&value.data()))), ("fields", value.j())])
}

fn synthetic_accounts() -> Vec<J> {
    let mut v = vec![account_vector("market", "Market", &market())];
    for (name, s) in [
        ("provider_active", ProviderStatus::Active),
        ("provider_paused", ProviderStatus::Paused),
        ("provider_jailed", ProviderStatus::Jailed { until: 1_751_209_999 }),
    ] {
        v.push(account_vector(name, "Provider", &provider(s)));
    }
    for (name, s) in [("validator_active", ValidatorStatus::Active), ("validator_exiting", ValidatorStatus::Exiting)] {
        v.push(account_vector(name, "Validator", &validator(s)));
    }
    for s in [JobStatus::Open, JobStatus::Running, JobStatus::Finishing, JobStatus::Completed, JobStatus::Cancelled, JobStatus::Failed, JobStatus::Declined] {
        v.push(account_vector(&format!("job_{}", format!("{s:?}").to_lowercase()), "Job", &job(s)));
    }
    let record = EquivocationRecord { job: key(40), seq: 9, offender: key(41), reporter: key(42), slashed: 50_000_000_001, bump: 247 };
    v.push(account_vector("equivocation_record", "EquivocationRecord", &record));
    let wrong = WrongAnswerRecord { provider: key(43), challenge_digest: bytes32(0x4d), reporter: key(44), slashed: 50_000_000_002, bump: 246 };
    v.push(account_vector("wrong_answer_record", "WrongAnswerRecord", &wrong));
    v
}

fn synthetic_events() -> Vec<J> {
    let p = params();
    let other = MarketParams { fee_bps: 0, min_quorum: 1, ..p };
    vec![
        event_vector("MarketInitialized", &MarketInitialized { market: key(50), authority: key(51), id: 7, stake_mint: key(52), payment_mint: key(53), treasury: key(54), params: p }),
        event_vector("ProviderRegistered", &ProviderRegistered { market: key(50), provider: key(55), owner: key(56), worker_key: key(57), gpu_count: 8, price_per_gpu_second: 10_000_000_001 }),
        event_vector("Staked", &Staked { provider: key(55), amount: 100_001, stake: 200_002 }),
        event_vector("ValidatorRegistered", &ValidatorRegistered { market: key(50), validator: key(58), authority: key(59), bond: 10_003, endpoint: "https://v.example:8443".into() }),
        event_vector("ValidatorUpdated", &ValidatorUpdated { validator: key(58), endpoint: "http://10.0.0.7:8787".into() }),
        event_vector("ValidatorRewardsClaimed", &ValidatorRewardsClaimed { validator: key(58), destination: key(67), amount: 4_444 }),
        event_vector("CommitteeMemberReplaced", &CommitteeMemberReplaced { job: key(60), index: 2, previous: key(58), member: key(68) }),
        event_vector("ValidatorEquivocationSlashed", &ValidatorEquivocationSlashed {
            validator: key(58), job: key(60), seq: 6, first_approved: 300, second_approved: 301, reporter: key(64),
            slash_bps: 5_001, reporter_reward_bps: 1_001, slashed: 5_002, reward: 500, burned: 4_502,
        }),
        event_vector("JobCreated", &JobCreated { market: key(50), job: key(60), user: key(61), provider: key(55), job_id: 42, gpu_count: 3, price_per_gpu_second: 11, rate_per_second: 33, deposit: 19_801, workload_hash: bytes32(0x5a) }),
        event_vector("JobAccepted", &JobAccepted { job: key(60), provider: key(55), signer: key(57), started_at: 1_750_000_061 }),
        event_vector("Settled", &Settled {
            job: key(60), provider: key(55), validator: key(58), seq: 5, cumulative_seconds: 301, window_end: 1_750_000_362,
            proof_hash: bytes32(0x3c), claimed_seconds: 61, approved_seconds: 299, billed_seconds: 60, rate_per_second: 33,
            fee_bps: 1_234, burn_bps: 4_321, amount: 1_980, fee: 245, reward: 48, validator_reward_bps: 1_999, attesters: 2,
            burned: 85, to_provider: 1_735, to_treasury: 112,
            escrow_remaining: 13, exhausted: true,
        }),
        event_vector("JobFinished", &JobFinished { job: key(60), by: key(61), ended_at: 1_750_000_400 }),
        event_vector("JobClosed", &JobClosed { job: key(60), user: key(61), refunded: 13, surplus_returned: 3, deposited: 19_801, paid_provider: 17_000, paid_treasury: 1_500, burned: 1_288 }),
        event_vector("ParamsAnnounced", &ParamsAnnounced { market: key(50), current: p, pending: other, effective_at: 1_751_209_605 }),
        event_vector("TreasurySet", &TreasurySet { market: key(50), previous: key(54), treasury: key(65) }),
        event_vector("VaultSwept", &VaultSwept { market: key(50), amount: 77, destination: key(66) }),
        event_vector("FeesWithdrawn", &FeesWithdrawn { market: key(50), treasury: key(54), amount: 1_234_567 }),
        event_vector("JobDeclined", &JobDeclined { job: key(60), provider: key(55), by: key(57) }),
        event_vector("JobCompleted", &JobCompleted { job: key(60), by: key(64), paid_seconds: 3_601 }),
        event_vector("PausedSet", &PausedSet { market: key(50), paused: true }),
        event_vector("AuthorityProposed", &AuthorityProposed { market: key(50), current: key(51), proposed: key(62) }),
        event_vector("AuthorityAccepted", &AuthorityAccepted { market: key(50), previous: key(51), authority: key(62) }),
        event_vector("ProviderUpdated", &ProviderUpdated { provider: key(55), price_per_gpu_second: 12, gpu_count: 6, status: ProviderStatus::Jailed { until: -5 } }),
        event_vector("WorkerKeyRotated", &WorkerKeyRotated { provider: key(55), previous: key(57), current: key(63), expires_at: 1_760_000_000, retired_at: 1_750_000_900 }),
        event_vector("UnstakeRequested", &UnstakeRequested { provider: key(55), amount: 501, stake: 99_500, unbonding: 1_001, release_at: 1_751_209_601 }),
        event_vector("StakeWithdrawn", &StakeWithdrawn { provider: key(55), amount: 1_001 }),
        event_vector("ValidatorExitRequested", &ValidatorExitRequested { validator: key(58), amount: 10_003, release_at: 1_751_209_602 }),
        event_vector("ValidatorBondWithdrawn", &ValidatorBondWithdrawn { validator: key(58), amount: 10_003 }),
        event_vector("JobToppedUp", &JobToppedUp { job: key(60), amount: 999, deposited: 20_800 }),
        event_vector("JobCancelled", &JobCancelled { job: key(60), refunded: 20_800, surplus_returned: 1 }),
        event_vector("JobExpired", &JobExpired { job: key(60), by: key(64), last_window_end: 1_750_000_362, missed_windows: 13 }),
        event_vector("EquivocationSlashed", &EquivocationSlashed {
            provider: key(55), job: key(60), seq: 5, first_proof_hash: bytes32(0x11), second_proof_hash: bytes32(0x22),
            reporter: key(64), slash_bps: 5_001, reporter_reward_bps: 1_001, slashed: 50_010, reward: 5_006, burned: 45_004,
            jailed_until: 1_751_209_603,
        }),
        event_vector("HardwareAttested", &HardwareAttested {
            provider: key(55), worker_key: key(57), gpu_model: bytes32(0x48), gpu_count: 8, vram_mib: 81_559, passed: true,
            challenged_at: 1_750_000_700, challenge_digest: bytes32(0x6d), attested_at: 1_750_000_701,
            attesters: vec![key(58), key(68), key(69)], submitter: key(58),
        }),
        event_vector("WrongAnswerSlashed", &WrongAnswerSlashed {
            provider: key(55), challenge_digest: bytes32(0x6d), challenged_at: 1_750_000_700, root: bytes32(0x70), row_index: 4_097,
            leaf_hash: bytes32(0x71), computed_root: bytes32(0x72), answer_signer: key(57), row_signer: key(63), reporter: key(64),
            slash_bps: 5_001, slashed: 50_010, burned: 50_010,
        }),
        event_vector("JobRated", &JobRated { job: key(60), provider: key(55), user: key(61), score: 4, closed: true, count: 18, sum: 75 }),
        event_vector("DowntimeSlashed", &DowntimeSlashed {
            provider: key(55), job: key(60), missed_windows: 12, last_proof_window_end: 1_750_000_300, validators: 3, slash_bps: 101, reporter_reward_bps: 1_001,
            slashed: 1_010, reward: 101, burned: 909,
        }),
    ]
}

// ---- real runtime bytes ---------------------------------------------------------------------

/// Decodes account bytes read from the runtime and checks that re-serializing the value (as the
/// synthetic vectors are made) gives back exactly those bytes.
fn runtime_account<T: AccountSerialize + AccountDeserialize + Space + ToJ>(b: &Bench, name: &str, ty: &str, address: &Pubkey) -> J {
    let data = b.svm.get_account(address).unwrap().data;
    let value = T::try_deserialize(&mut data.as_slice()).unwrap();
    assert_eq!(account_bytes(&value), data, "{name}: runtime bytes == discriminator + borsh + zero padding");
    obj([("name", J::S(name.into())), ("type", J::S(ty.into())), ("hex", J::S(hex(&data))), ("fields", value.j())])
}

/// The event `E` as the runtime logged it (`Program data:`), checked against `Event::data`.
fn runtime_event<E: Event + ToJ>(logs: &[String], ty: &str) -> J {
    use anchor_lang::__private::base64::{engine::general_purpose::STANDARD, Engine as _};
    let logged = logs
        .iter()
        .filter_map(|l| l.strip_prefix("Program data: "))
        .map(|d| STANDARD.decode(d).unwrap())
        .find(|bytes| bytes.starts_with(E::DISCRIMINATOR))
        .unwrap_or_else(|| panic!("no {ty} in {logs:#?}"));
    let value: E = event(logs);
    assert_eq!(value.data(), logged, "{ty}: logged bytes == Event::data");
    obj([("name", J::S(ty.into())), ("type", J::S(ty.into())), ("hex", J::S(hex(&logged))), ("fields", value.j())])
}

/// A job created, accepted and settled once on a bench with fixed keys.
fn runtime_vectors() -> (Vec<J>, Vec<J>) {
    let keys = [1u8, 2, 3, 4].map(|n| Keypair::new_from_array([n; 32]));
    let mut b = Bench::with_keys(default_params(), keys);
    let user = b.user.key.insecure_clone();
    let owner = b.provider_owner.key.insecure_clone();
    let create = b.ix_create_job(&b.user, 1, 2, 12_000);
    let created = b.send(&[create], &[&user]).unwrap().logs;
    let (job, _) = b.job_address(&user.pubkey(), 1);
    let accepted = b.send(&[b.ix_accept_job(&owner.pubkey(), job)], &[&owner]).unwrap().logs;
    b.advance(60);
    let r = Receipt { seq: 1, cumulative_seconds: 58, window_end: b.now - 1, proof_hash: bytes32(0x77) };
    let settled = b.settle(job, r).unwrap().logs;
    let accounts = vec![
        runtime_account::<Job>(&b, "runtime_job_running", "Job", &job),
        runtime_account::<Provider>(&b, "runtime_provider_active", "Provider", &b.provider),
        runtime_account::<Validator>(&b, "runtime_validator_active", "Validator", &b.validator),
    ];
    let events = vec![
        runtime_event::<JobCreated>(&created, "JobCreated"),
        runtime_event::<JobAccepted>(&accepted, "JobAccepted"),
        runtime_event::<Settled>(&settled, "Settled"),
    ];
    (accounts, events)
}

fn render() -> String {
    let (runtime_accounts, runtime_events) = runtime_vectors();
    let doc = obj([
        ("description", J::S(
            "gpu_market account and event decode vectors, written by program-tests/tests/vectors.rs \
             (GPUM_WRITE_VECTORS=1). hex: account data exactly as stored on chain (8-byte \
             discriminator + borsh, zero-padded to 8 + INIT_SPACE) or event data exactly as logged \
             after 'Program data:' (discriminator + borsh). fields: integers as decimal strings, \
             pubkeys base58, byte arrays hex, enums as their lower-case variant name or \
             {variant: {fields}}. 'runtime' entries were read from a real runtime run."
                .into(),
        )),
        ("accounts", J::A(synthetic_accounts())),
        ("events", J::A(synthetic_events())),
        ("runtime", obj([("accounts", J::A(runtime_accounts)), ("events", J::A(runtime_events))])),
    ]);
    let mut out = String::new();
    write_json(&doc, 0, &mut out);
    out.push('\n');
    out
}

#[test]
fn vectors_file_matches_the_program_serialization() {
    let rendered = render();
    assert_eq!(render(), rendered, "vector output is deterministic");
    if std::env::var("GPUM_WRITE_VECTORS").as_deref() == Ok("1") {
        std::fs::write(PATH, &rendered).unwrap();
    }
    let committed = std::fs::read_to_string(PATH).unwrap_or_default();
    assert!(
        committed == rendered,
        "{PATH} is stale: regenerate with GPUM_WRITE_VECTORS=1 cargo test -p gpu_market_tests --test vectors"
    );
}

#[test]
fn every_event_and_account_type_has_a_vector() {
    // Event names from events.rs's discriminators: one vector per event struct.
    let names: Vec<&[u8]> = vec![
        MarketInitialized::DISCRIMINATOR, ProviderRegistered::DISCRIMINATOR, Staked::DISCRIMINATOR,
        ValidatorRegistered::DISCRIMINATOR, JobCreated::DISCRIMINATOR, JobAccepted::DISCRIMINATOR,
        Settled::DISCRIMINATOR, JobFinished::DISCRIMINATOR, JobClosed::DISCRIMINATOR, ParamsAnnounced::DISCRIMINATOR,
        TreasurySet::DISCRIMINATOR, VaultSwept::DISCRIMINATOR, FeesWithdrawn::DISCRIMINATOR, JobDeclined::DISCRIMINATOR, JobCompleted::DISCRIMINATOR,
        PausedSet::DISCRIMINATOR, AuthorityProposed::DISCRIMINATOR, AuthorityAccepted::DISCRIMINATOR,
        ProviderUpdated::DISCRIMINATOR, WorkerKeyRotated::DISCRIMINATOR, UnstakeRequested::DISCRIMINATOR,
        StakeWithdrawn::DISCRIMINATOR, ValidatorExitRequested::DISCRIMINATOR, ValidatorBondWithdrawn::DISCRIMINATOR,
        ValidatorUpdated::DISCRIMINATOR, ValidatorRewardsClaimed::DISCRIMINATOR, CommitteeMemberReplaced::DISCRIMINATOR,
        ValidatorEquivocationSlashed::DISCRIMINATOR, JobToppedUp::DISCRIMINATOR, JobCancelled::DISCRIMINATOR, JobExpired::DISCRIMINATOR,
        EquivocationSlashed::DISCRIMINATOR, DowntimeSlashed::DISCRIMINATOR, HardwareAttested::DISCRIMINATOR,
        WrongAnswerSlashed::DISCRIMINATOR, JobRated::DISCRIMINATOR,
    ];
    let source = include_str!("../../programs/gpu_market/src/events.rs");
    assert_eq!(source.matches("#[event]").count(), names.len(), "events.rs has an event without a vector");
    let rendered = render();
    for d in names {
        assert!(rendered.contains(&format!("\"hex\": \"{}", hex(d))), "no vector for discriminator {}", hex(d));
    }
    for d in [Market::DISCRIMINATOR, Provider::DISCRIMINATOR, Validator::DISCRIMINATOR, Job::DISCRIMINATOR, EquivocationRecord::DISCRIMINATOR, WrongAnswerRecord::DISCRIMINATOR] {
        assert!(rendered.contains(&format!("\"hex\": \"{}", hex(d))), "no vector for account discriminator {}", hex(d));
    }
}
