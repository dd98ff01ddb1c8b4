//! Randomized sequences of valid and invalid instructions against one market in the real
//! runtime: 3 users, 3 providers (different GPU counts, prices, stakes and worker
//! keys), 2 validators. A seeded `StdRng` picks every step; each instruction step has an exact
//! expected outcome computed from the chain state before it (an oracle of the documented rule
//! order), and after EVERY step, success or failure:
//! - all invariants hold (docs/protocol.md, "Invariants") (`Bench::send` -> `check_invariants`: per-job conservation, stake
//!   vault == providers' stake + unbonding + validators' bond + unbonding, gpus_in_use, token
//!   balances == supply), and payment tokens minted - supply == burned by settlements;
//! - `claimed_seconds`, `paid_seconds` and `last_seq` of every job never decrease, and
//!   `paid_seconds <= claimed_seconds`;
//! - a failed step changed no program account, token account or mint (data and lamports);
//! - a successful step moved payment tokens only as the jobs booked them: provider owners got
//!   their jobs' `paid_provider`, the treasury `paid_treasury`, the burn `burned`, users their
//!   `refunded` minus what they `deposited`.
//!
//! Hostile moves are part of every run: donations straight into escrows and the
//! stake vault (balances may exceed the books, never fall short), parameter announcements that
//! come into force mid-run (running jobs keep their terms), runs of short receipts claiming the
//! most the wall-time bound allows, key rotations (rate-limited), finishes that nobody closes
//! (`complete_job` by anyone), declines, vault sweeps.
//!
//! Failures print the seed and step; rerun one with `GPUM_RANDOM_SEED=<seed>`
//! (`GPUM_RANDOM_STEPS=<n>` changes the number of steps; `GPUM_RANDOM_DEBUG=1` prints each
//! step kind with its expected outcome).
mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use anchor_lang::prelude::Pubkey;
use common::*;
use ed25519_dalek::SigningKey;
use gpu_market::{
    errors::GpuMarketError as E,
    instructions::UpdateProviderArgs,
    receipt::Receipt,
    state::{Job, JobStatus, MarketParams, Provider, ProviderStatus, RETIRED_KEYS},
};
use gpum_localnet::{
    solana_account::ReadableAccount, solana_instruction::Instruction, solana_keypair::Keypair,
    solana_signer::Signer,
};
use rand::{rngs::StdRng, Rng, SeedableRng};

const SEEDS: [u64; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
/// 8 seeds x 1,250 steps = 10,000 steps in CI.
const STEPS: usize = 1_250;

/// Short unbonding (= jail time) so withdrawals and un-jailing happen within a run.
fn params() -> MarketParams {
    MarketParams { unbonding_seconds: 900, ..default_params() }
}

#[derive(Clone, Copy, Debug)]
enum Expect {
    Ok,
    /// This program error in instruction `.0` of the transaction.
    Err(u8, E),
    /// Some error (a runtime or system-program error, e.g. an `init` of an existing account).
    AnyErr,
}

struct Prov {
    owner: Party,
    pda: Pubkey,
    /// Every worker key this provider ever registered, by public key.
    keys: HashMap<Pubkey, SigningKey>,
}

struct Val {
    auth: Keypair,
    stake: Pubkey,
}

struct Tx {
    kind: &'static str,
    ixs: Vec<Instruction>,
    signers: Vec<Keypair>,
    expect: Expect,
    on_ok: OnOk,
}

enum OnOk {
    Nothing,
    NewJob(Pubkey),
    /// (job, started_at of its incarnation, seq) slashed for equivocation.
    Record(Pubkey, i64, u64),
}

struct World {
    b: Bench,
    rng: StdRng,
    users: Vec<Party>,
    provs: Vec<Prov>,
    vals: Vec<Val>,
    outsider: Party,
    /// Every job ever created (closed ones stay; their accounts are gone).
    jobs: Vec<Pubkey>,
    /// Receipts signed by some provider worker key, per job: evidence for equivocation.
    signed: HashMap<Pubkey, Vec<(Receipt, SigningKey)>>,
    records: HashSet<(Pubkey, i64, u64)>,
    next_job_id: u64,
    /// (paid_seconds, last_seq, claimed_seconds) of every live job after the previous step.
    progress: HashMap<Pubkey, (u64, u64, u64)>,
    minted_payment: u64,
    /// The treasury owner's stake-mint account: where `sweep_vault` sends the vault's surplus.
    sweep_to: Pubkey,
    stats: BTreeMap<&'static str, [u32; 2]>,
}

fn keypair(rng: &mut StdRng) -> Keypair {
    Keypair::new_from_array(rng.gen())
}

fn clone_party(p: &Party) -> Party {
    Party { key: p.key.insecure_clone(), payment: p.payment, stake: p.stake }
}

/// Program and token accounts (data, lamports): what a failed transaction must leave untouched.
fn snapshot(b: &Bench) -> BTreeMap<Pubkey, (u64, Vec<u8>)> {
    b.svm
        .accounts_db()
        .inner
        .iter()
        .filter(|(_, a)| a.owner() == &gpu_market::ID || a.owner() == &TOKEN_PROGRAM)
        .map(|(k, a)| (*k, (a.lamports(), a.data().to_vec())))
        .collect()
}

impl World {
    fn new(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut b = Bench::with_params(params());
        let mut users = vec![clone_party(&b.user)];
        for _ in 0..2 {
            let k = keypair(&mut rng);
            users.push(b.fund_party(k, 0, 1_000_000_000));
        }
        let mut provs = vec![Prov {
            owner: clone_party(&b.provider_owner),
            pda: b.provider,
            keys: HashMap::from([(worker_pubkey(&b.worker), b.worker.clone())]),
        }];
        // (gpus, price, stake): the second one's stake covers only 6 of its 8 GPUs.
        for (gpus, price, stake) in [(8u16, 3u64, 6_000u64), (2, 25, 50_000)] {
            let k = keypair(&mut rng);
            let owner = b.fund_party(k, 1_000_000, 0);
            let worker = SigningKey::from_bytes(&rng.gen());
            let ix = b.ix_register_provider(&owner.key.pubkey(), worker_pubkey(&worker), gpus, price);
            b.send(&[ix], &[&owner.key]).unwrap();
            let ix = b.ix_stake(&owner.key.pubkey(), owner.stake, stake);
            b.send(&[ix], &[&owner.key]).unwrap();
            let pda = pda(&[gpu_market::seeds::PROVIDER, b.market.as_ref(), owner.key.pubkey().as_ref()]);
            provs.push(Prov { owner, pda, keys: HashMap::from([(worker_pubkey(&worker), worker)]) });
        }
        let va = b.validator_authority.insecure_clone();
        let va_stake = b.create_token_account(b.stake_mint, &va.pubkey());
        let mut vals = vec![Val { auth: va, stake: va_stake }];
        let k = keypair(&mut rng);
        let v = b.fund_party(k, 100_000, 0);
        let ix = b.ix_register_validator(&v.key.pubkey(), v.stake, 20_000);
        b.send(&[ix], &[&v.key]).unwrap();
        vals.push(Val { auth: v.key, stake: v.stake });
        let k = keypair(&mut rng);
        let outsider = b.fund_party(k, 0, 0);
        let minted_payment = b.mint_supply(&b.payment_mint);
        let admin = b.admin.pubkey();
        let sweep_to = b.create_token_account(b.stake_mint, &admin);
        World {
            sweep_to,
            b,
            rng,
            users,
            provs,
            vals,
            outsider,
            jobs: vec![],
            signed: HashMap::new(),
            records: HashSet::new(),
            next_job_id: 1,
            progress: HashMap::new(),
            minted_payment,
            stats: BTreeMap::new(),
        }
    }

    fn provider(&self, p: usize) -> Provider {
        self.b.account(&self.provs[p].pda).unwrap()
    }

    fn prov_index(&self, pda: &Pubkey) -> usize {
        self.provs.iter().position(|p| p.pda == *pda).unwrap()
    }

    fn user_index(&self, key: &Pubkey) -> usize {
        self.users.iter().position(|u| u.key.pubkey() == *key).unwrap()
    }

    fn live_jobs(&self) -> Vec<(Pubkey, Job)> {
        self.jobs.iter().filter_map(|k| self.b.account::<Job>(k).map(|j| (*k, j))).collect()
    }

    /// A live job, preferring (4 in 5) one that satisfies `pref`.
    fn pick_job(&mut self, pref: impl Fn(&Job) -> bool) -> Option<(Pubkey, Job)> {
        let live = self.live_jobs();
        if live.is_empty() {
            return None;
        }
        let preferred: Vec<_> = live.iter().filter(|(_, j)| pref(j)).cloned().collect();
        let pool = if !preferred.is_empty() && self.rng.gen_bool(0.8) { preferred } else { live };
        Some(pool[self.rng.gen_range(0..pool.len())].clone())
    }

    /// A party that is neither `a` nor `b` (another user or the outsider).
    fn stranger(&mut self, a: &Pubkey, b: &Pubkey) -> Keypair {
        let mut pool: Vec<&Keypair> = self.users.iter().map(|u| &u.key).collect();
        pool.push(&self.outsider.key);
        pool.retain(|k| k.pubkey() != *a && k.pubkey() != *b);
        pool[self.rng.gen_range(0..pool.len())].insecure_clone()
    }

    /// Retargets a bench builder's instruction from the bench provider to provider `p`.
    fn for_provider(&self, ix: Instruction, p: usize) -> Instruction {
        let ix = swap_account(ix, self.b.provider, self.provs[p].pda);
        if ix.accounts.iter().any(|m| m.pubkey == self.b.provider_owner.payment) {
            swap_account(ix, self.b.provider_owner.payment, self.provs[p].owner.payment)
        } else {
            ix
        }
    }

    /// Retargets a bench builder's instruction to `job`'s provider and user payment account.
    fn for_job(&self, ix: Instruction, job: &Job) -> Instruction {
        let ix = self.for_provider(ix, self.prov_index(&job.provider));
        let user_payment = self.users[self.user_index(&job.user)].payment;
        if ix.accounts.iter().any(|m| m.pubkey == self.b.user.payment) {
            swap_account(ix, self.b.user.payment, user_payment)
        } else {
            ix
        }
    }

    fn tx(kind: &'static str, ixs: Vec<Instruction>, signers: Vec<Keypair>, expect: Expect) -> Tx {
        Tx { kind, ixs, signers, expect, on_ok: OnOk::Nothing }
    }

    // ---- step generators: each returns the transaction and its exact expected outcome --------

    fn gen_create_job(&mut self) -> Tx {
        let u = self.rng.gen_range(0..self.users.len());
        let p = self.rng.gen_range(0..self.provs.len());
        let prov = self.provider(p);
        let m = self.b.market_state().params_at(self.b.now);
        let paused = self.b.market_state().paused;
        let free = prov.free_gpus();
        let variant = self.rng.gen_range(0..10);
        let gpus = if variant < 2 || free == 0 { free + self.rng.gen_range(1..=3) } else { self.rng.gen_range(1..=free) };
        let rate = prov.price_per_gpu_second * u64::from(gpus);
        let min = rate * u64::from(m.window_seconds);
        let deposit = if variant == 2 { min - 1 } else { min + self.rng.gen_range(0..=min * 4) };
        let required = m.min_stake_per_gpu * u64::from(prov.gpus_in_use + gpus);
        let expect = if paused {
            Expect::Err(0, E::MarketPaused)
        } else if prov.status != ProviderStatus::Active {
            Expect::Err(0, E::ProviderNotActive)
        } else if gpus > free {
            Expect::Err(0, E::NotEnoughFreeGpus)
        } else if prov.stake < required {
            Expect::Err(0, E::InsufficientStake)
        } else if deposit < min {
            Expect::Err(0, E::DepositTooSmall)
        } else {
            Expect::Ok
        };
        // A committee of one or both validators, quorum 1.
        let committee: Vec<Pubkey> = match self.rng.gen_range(0..3) {
            0 => vec![self.vals[0].auth.pubkey()],
            1 => vec![self.vals[1].auth.pubkey()],
            _ => vec![self.vals[1].auth.pubkey(), self.vals[0].auth.pubkey()],
        };
        let id = self.next_job_id;
        self.next_job_id += 1;
        let ix = self.b.ix_create_job_with(&self.users[u], id, gpus, deposit, u64::MAX, &committee, 1);
        let ix = self.for_provider(ix, p);
        let job = self.b.job_address(&self.users[u].key.pubkey(), id).0;
        Tx { on_ok: OnOk::NewJob(job), ..Self::tx("create_job", vec![ix], vec![self.users[u].key.insecure_clone()], expect) }
    }

    fn gen_accept_job(&mut self) -> Option<Tx> {
        let (job, j) = self.pick_job(|j| j.status == JobStatus::Open)?;
        let p = self.prov_index(&j.provider);
        let prov = self.provider(p);
        let signer = match self.rng.gen_range(0..6) {
            0 | 1 => self.provs[p].owner.key.insecure_clone(),
            2..=4 => {
                // The current worker key, or (if it has one) a retired one.
                let key = if self.rng.gen_bool(0.3) && prov.retired_keys[0].key != Pubkey::default() {
                    prov.retired_keys[0].key
                } else {
                    prov.worker_key
                };
                Keypair::new_from_array(self.provs[p].keys[&key].to_bytes())
            }
            _ => self.stranger(&prov.owner, &prov.owner),
        };
        let key = signer.pubkey();
        let expect = if key != prov.owner && key != prov.worker_key {
            Expect::Err(0, E::NotProviderSigner)
        } else if key != prov.owner && prov.current_key_expired_at(self.b.now) {
            Expect::Err(0, E::WorkerKeyExpired)
        } else if prov.status != ProviderStatus::Active {
            Expect::Err(0, E::ProviderNotActive)
        } else if j.status != JobStatus::Open {
            Expect::Err(0, E::InvalidJobStatus)
        } else {
            Expect::Ok
        };
        let ix = self.for_provider(self.b.ix_accept_job(&key, job), p);
        // The admin pays the fee: worker keys hold no lamports.
        Some(Self::tx("accept_job", vec![ix], vec![self.b.admin.insecure_clone(), signer], expect))
    }

    fn gen_settle(&mut self) -> Option<Tx> {
        let (job, j) = self.pick_job(|j| matches!(j.status, JobStatus::Running | JobStatus::Finishing))?;
        let p = self.prov_index(&j.provider);
        let prov = self.provider(p);
        let now = self.b.now;
        let skew = i64::from(j.terms.max_skew_seconds);
        let lwe = j.last_window_end;
        let mut upper = now + skew;
        if j.status == JobStatus::Finishing {
            upper = upper.min(j.ended_at);
        }
        // Often a short receipt (1-3 s after the last one) claiming all the bound allows: runs
        // of them are the review's 6x over-billing attack.
        let short = self.rng.gen_bool(0.3) && upper > lwe;
        let window_end = if short {
            (lwe + self.rng.gen_range(1..=3)).min(upper)
        } else if upper > lwe {
            self.rng.gen_range(lwe + 1..=upper)
        } else {
            lwe + 1
        };
        let bound = wall_bound(&j, window_end).max(j.claimed_seconds as i64) as u64;
        let cumulative = if short { bound } else { self.rng.gen_range(j.claimed_seconds..=bound) };
        let mut r = Receipt {
            seq: j.last_seq + self.rng.gen_range(1..=2),
            cumulative_seconds: cumulative,
            window_end,
            proof_hash: self.rng.gen(),
        };
        let mut key = self.provs[p].keys[&prov.worker_key].clone();
        let mut worker_signed = true;
        match self.rng.gen_range(0..12) {
            0 => {
                // Replay of the last settled receipt, exactly as the worker signed it.
                if let Some((old, k)) =
                    self.signed.get(&job).and_then(|v| v.iter().find(|(r, _)| r.seq == j.last_seq && j.last_seq > 0))
                {
                    (r, key) = (*old, k.clone());
                }
            }
            1 => r.cumulative_seconds = bound + self.rng.gen_range(1..=30),
            2 => {
                key = SigningKey::from_bytes(&self.rng.gen());
                worker_signed = false;
            }
            3 => r.window_end = now + skew + self.rng.gen_range(1..=100),
            4 if prov.retired_keys[0].key != Pubkey::default() => {
                let slot = self.rng.gen_range(0..RETIRED_KEYS);
                let retired = prov.retired_keys[slot].key;
                if retired != Pubkey::default() {
                    key = self.provs[p].keys[&retired].clone();
                }
            }
            _ => {}
        }
        let signer = worker_pubkey(&key);
        // The committee approves the whole claim, or less (a window it rejected), or (hostile)
        // less than already paid or more than claimed.
        let claim = r.cumulative_seconds.saturating_sub(j.claimed_seconds);
        let approved = match self.rng.gen_range(0..10) {
            0 => j.paid_seconds.saturating_sub(self.rng.gen_range(1..=10)),
            1 => j.paid_seconds + claim + self.rng.gen_range(1..=10),
            2 | 3 => j.paid_seconds + self.rng.gen_range(0..=claim),
            _ => j.paid_seconds + claim,
        };
        let v = self.rng.gen_range(0..self.vals.len());
        let va = self.vals[v].auth.insecure_clone();
        let expect = if !j.committee[..usize::from(j.committee_len)].contains(&va.pubkey()) {
            Expect::Err(1, E::NotCommitteeMember)
        } else {
            expect_settle(&j, &prov, &r, approved, &signer, now)
        };
        if worker_signed {
            self.signed.entry(job).or_default().push((r, key.clone()));
        }
        let msg = self.b.receipt_digest(&job, &r);
        let settle = self.for_provider(self.b.ix_settle_approved(&va.pubkey(), job, r, approved), p);
        Some(Self::tx("settle", vec![ed25519_ix(&key, &msg), settle], vec![va], expect))
    }

    fn gen_finish_job(&mut self) -> Option<Tx> {
        let (job, j) = self.pick_job(|j| j.status == JobStatus::Running)?;
        let p = self.prov_index(&j.provider);
        let owner = self.provs[p].owner.key.pubkey();
        let signer = match self.rng.gen_range(0..4) {
            0 | 1 => self.users[self.user_index(&j.user)].key.insecure_clone(),
            2 => self.provs[p].owner.key.insecure_clone(),
            _ => self.stranger(&j.user, &owner),
        };
        let key = signer.pubkey();
        let expect = if key != j.user && key != owner {
            Expect::Err(0, E::NotJobParty)
        } else if j.status != JobStatus::Running {
            Expect::Err(0, E::InvalidJobStatus)
        } else {
            Expect::Ok
        };
        let ix = self.for_provider(self.b.ix_finish_job(&key, job), p);
        Some(Self::tx("finish_job", vec![ix], vec![signer], expect))
    }

    /// The job's user (4 in 5) or a stranger, with that signer's own payment account.
    fn job_user_or_stranger(&mut self, j: &Job) -> (Keypair, Pubkey) {
        let u = self.user_index(&j.user);
        if self.rng.gen_bool(0.8) {
            (self.users[u].key.insecure_clone(), self.users[u].payment)
        } else {
            let others: Vec<usize> = (0..self.users.len()).filter(|i| *i != u).collect();
            let o = others[self.rng.gen_range(0..others.len())];
            (self.users[o].key.insecure_clone(), self.users[o].payment)
        }
    }

    fn gen_close_job(&mut self) -> Option<Tx> {
        let (job, j) = self.pick_job(|j| !j.status.holds_gpus() || j.status == JobStatus::Finishing)?;
        let (signer, payment) = self.job_user_or_stranger(&j);
        let expect = if signer.pubkey() != j.user {
            Expect::Err(0, E::NotJobUser)
        } else {
            match j.status {
                JobStatus::Finishing if self.b.now <= j.ended_at + j.terms.grace_seconds => {
                    Expect::Err(0, E::GracePeriodActive)
                }
                JobStatus::Open | JobStatus::Running => Expect::Err(0, E::InvalidJobStatus),
                _ => Expect::Ok,
            }
        };
        let ix = self.for_job(self.b.ix_close_job(&signer.pubkey(), payment, job), &j);
        Some(Self::tx("close_job", vec![ix], vec![signer], expect))
    }

    fn gen_top_up(&mut self) -> Option<Tx> {
        let (job, j) = self.pick_job(|j| matches!(j.status, JobStatus::Open | JobStatus::Running))?;
        let (signer, payment) = self.job_user_or_stranger(&j);
        let amount = if self.rng.gen_bool(0.15) { 0 } else { self.rng.gen_range(1..=20_000) };
        let expect = if signer.pubkey() != j.user {
            Expect::Err(0, E::NotJobUser)
        } else if amount == 0 {
            Expect::Err(0, E::ZeroAmount)
        } else if !matches!(j.status, JobStatus::Open | JobStatus::Running) {
            Expect::Err(0, E::InvalidJobStatus)
        } else {
            Expect::Ok
        };
        let ix = self.b.ix_top_up(&signer.pubkey(), payment, job, amount);
        Some(Self::tx("top_up", vec![ix], vec![signer], expect))
    }

    fn gen_cancel_job(&mut self) -> Option<Tx> {
        let (job, j) = self.pick_job(|j| j.status == JobStatus::Open)?;
        let (signer, _) = self.job_user_or_stranger(&j);
        let expect = if signer.pubkey() != j.user {
            Expect::Err(0, E::NotJobUser)
        } else if j.status != JobStatus::Open {
            Expect::Err(0, E::InvalidJobStatus)
        } else {
            Expect::Ok
        };
        let ix = self.for_job(self.b.ix_cancel_job(&signer.pubkey(), job, self.b.user.payment), &j);
        Some(Self::tx("cancel_job", vec![ix], vec![signer], expect))
    }

    fn gen_expire_job(&mut self) -> Option<Tx> {
        let (job, j) = self.pick_job(|j| j.status == JobStatus::Running)?;
        let signer = self.stranger(&Pubkey::default(), &Pubkey::default());
        let t = j.terms;
        let deadline = j.last_window_end + i64::from(t.window_seconds) * i64::from(t.max_missed_windows) + t.grace_seconds;
        let expect = if j.status != JobStatus::Running {
            Expect::Err(0, E::InvalidJobStatus)
        } else if self.b.now <= deadline {
            Expect::Err(0, E::JobNotExpired)
        } else {
            Expect::Ok
        };
        let ix = self.for_job(self.b.ix_expire_job(&signer.pubkey(), job), &j);
        Some(Self::tx("expire_job", vec![ix], vec![signer], expect))
    }

    fn gen_stake(&mut self) -> Tx {
        let p = self.rng.gen_range(0..self.provs.len());
        let amount = if self.rng.gen_bool(0.15) { 0 } else { self.rng.gen_range(1..=20_000) };
        let expect = if amount == 0 { Expect::Err(0, E::ZeroAmount) } else { Expect::Ok };
        let o = &self.provs[p].owner;
        let ix = self.b.ix_stake(&o.key.pubkey(), o.stake, amount);
        Self::tx("stake", vec![ix], vec![o.key.insecure_clone()], expect)
    }

    fn gen_request_unstake(&mut self) -> Tx {
        let p = self.rng.gen_range(0..self.provs.len());
        let prov = self.provider(p);
        let required = self.b.market_state().params_at(self.b.now).min_stake_per_gpu * u64::from(prov.gpus_in_use);
        let amount = match self.rng.gen_range(0..6) {
            0 => 0,
            1 => prov.stake + self.rng.gen_range(1..=1_000),
            2 => prov.stake.saturating_sub(required) + self.rng.gen_range(1..=1_000),
            _ => self.rng.gen_range(1..=prov.stake.saturating_sub(required).clamp(1, 5_000)),
        };
        let expect = if amount == 0 {
            Expect::Err(0, E::ZeroAmount)
        } else if amount > prov.stake {
            Expect::Err(0, E::UnstakeExceedsStake)
        } else if prov.stake - amount < required {
            Expect::Err(0, E::InsufficientStake)
        } else {
            Expect::Ok
        };
        let o = &self.provs[p].owner;
        let ix = self.b.ix_request_unstake(&o.key.pubkey(), amount);
        Self::tx("request_unstake", vec![ix], vec![o.key.insecure_clone()], expect)
    }

    fn gen_withdraw_unstaked(&mut self) -> Tx {
        let p = self.rng.gen_range(0..self.provs.len());
        let u = self.provider(p).unbonding;
        let expect = if u.amount == 0 {
            Expect::Err(0, E::NothingToWithdraw)
        } else if self.b.now < u.release_at {
            Expect::Err(0, E::UnbondingNotReleased)
        } else {
            Expect::Ok
        };
        let o = &self.provs[p].owner;
        let ix = self.b.ix_withdraw_unstaked(&o.key.pubkey(), o.stake);
        Self::tx("withdraw_unstaked", vec![ix], vec![o.key.insecure_clone()], expect)
    }

    fn gen_update_provider(&mut self) -> Tx {
        let p = self.rng.gen_range(0..self.provs.len());
        let prov = self.provider(p);
        let mut args = UpdateProviderArgs { price_per_gpu_second: None, spec: None, accepting_jobs: None, endpoint: None };
        if self.rng.gen_bool(0.5) {
            args.price_per_gpu_second = Some(self.rng.gen_range(0..=30));
        }
        if self.rng.gen_bool(0.3) {
            let count = if self.rng.gen_bool(0.1) { 0 } else { self.rng.gen_range(1..=10) };
            args.spec = Some(gpu_market::state::GpuSpec { gpu_count: count, ..prov.spec });
        }
        if self.rng.gen_bool(0.6) || args == (UpdateProviderArgs { price_per_gpu_second: None, spec: None, accepting_jobs: None, endpoint: None }) {
            args.accepting_jobs = Some(self.rng.gen_bool(0.8));
        }
        let expect = if args.price_per_gpu_second == Some(0) {
            Expect::Err(0, E::InvalidPrice)
        } else if args.spec.is_some_and(|s| s.gpu_count == 0) {
            Expect::Err(0, E::InvalidGpuCount)
        } else if args.spec.is_some_and(|s| s.gpu_count < prov.gpus_in_use) {
            Expect::Err(0, E::GpusInUse)
        } else if matches!(prov.status, ProviderStatus::Jailed { until } if args.accepting_jobs.is_some() && self.b.now < until) {
            Expect::Err(0, E::ProviderJailed)
        } else {
            Expect::Ok
        };
        let o = &self.provs[p].owner;
        let ix = self.b.ix_update_provider(&o.key.pubkey(), args);
        Self::tx("update_provider", vec![ix], vec![o.key.insecure_clone()], expect)
    }

    fn gen_rotate_worker_key(&mut self) -> Tx {
        let p = self.rng.gen_range(0..self.provs.len());
        let prov = self.provider(p);
        let now = self.b.now;
        let fresh = SigningKey::from_bytes(&self.rng.gen());
        self.provs[p].keys.insert(worker_pubkey(&fresh), fresh.clone());
        let (new_key, expires_at) = match self.rng.gen_range(0..8) {
            0 => (prov.worker_key, 0),
            1 => (worker_pubkey(&fresh), now - self.rng.gen_range(0..100)),
            2 => (worker_pubkey(&fresh), now + self.rng.gen_range(200..3_000)),
            _ => (worker_pubkey(&fresh), 0),
        };
        let oldest = prov.retired_keys[RETIRED_KEYS - 1];
        let retention = self.b.market_state().params_at(now).unbonding_seconds;
        let expect = if new_key == prov.worker_key || (expires_at != 0 && expires_at <= now) {
            Expect::Err(0, E::InvalidWorkerKey)
        } else if oldest.key != Pubkey::default() && now < oldest.retired_at + retention {
            Expect::Err(0, E::RotationTooSoon)
        } else {
            Expect::Ok
        };
        let o = &self.provs[p].owner;
        let ix = self.b.ix_rotate_worker_key(&o.key.pubkey(), new_key, expires_at);
        Self::tx("rotate_worker_key", vec![ix], vec![o.key.insecure_clone()], expect)
    }

    fn gen_slash_equivocation(&mut self) -> Option<Tx> {
        let live: Vec<(Pubkey, Job)> =
            self.live_jobs().into_iter().filter(|(k, _)| self.signed.get(k).is_some_and(|v| !v.is_empty())).collect();
        if live.is_empty() {
            return None;
        }
        let (job, j) = live[self.rng.gen_range(0..live.len())].clone();
        let evidence = &self.signed[&job];
        let (first, mut key) = evidence[self.rng.gen_range(0..evidence.len())].clone();
        let mut second = Receipt { proof_hash: self.rng.gen(), ..first };
        match self.rng.gen_range(0..10) {
            0 => second = first,
            1 => second.seq = first.seq + 1,
            2 => key = SigningKey::from_bytes(&self.rng.gen()),
            _ => {}
        }
        let prov = self.provider(self.prov_index(&j.provider));
        let signer = worker_pubkey(&key);
        let signs = prov.key_signs_window(&signer, first.window_end) && prov.key_signs_window(&signer, second.window_end);
        let incident_over = prov.last_equivocation_slash_at + i64::from(gpu_market::state::MAX_SKEW_SECONDS);
        let latest = self.b.now + i64::from(j.terms.max_skew_seconds);
        let expect = if self.records.contains(&(job, j.started_at, first.seq)) {
            Expect::AnyErr // the record's `init` fails: already slashed for (job, seq)
        } else if first.seq != second.seq {
            Expect::Err(1, E::EquivocationSeqMismatch)
        } else if first == second {
            Expect::Err(1, E::NotEquivocation)
        } else if j.status == JobStatus::Open {
            Expect::Err(1, E::InvalidJobStatus)
        } else if j.started_at == 0 {
            Expect::Err(1, E::JobNeverStarted)
        } else if first.window_end <= j.started_at || second.window_end <= j.started_at {
            Expect::Err(1, E::ReceiptBeforeJobStart)
        } else if prov.last_equivocation_slash_at != 0
            && (first.window_end <= incident_over || second.window_end <= incident_over)
            && j.terms.equivocation_slash_bps <= prov.last_equivocation_slash_bps
        {
            // The same incident, already punished at this job's rate or a higher one (a
            // higher rate tops the slash up).
            Expect::Err(1, E::EquivocationAlreadyPunished)
        } else if first.window_end > latest || second.window_end > latest {
            Expect::Err(1, E::EvidenceFromTheFuture)
        } else if !signs {
            Expect::Err(1, E::WrongReceiptSigner)
        } else {
            Expect::Ok
        };
        let u = self.rng.gen_range(0..self.users.len());
        let reporter = self.users[u].key.insecure_clone();
        let mut ixs = self.b.equivocation_ixs(&key, &reporter.pubkey(), self.users[u].stake, job, first, second);
        let slash = ixs.pop().unwrap();
        ixs.push(self.for_job(slash, &j));
        Some(Tx { on_ok: OnOk::Record(job, j.started_at, first.seq), ..Self::tx("slash_equivocation", ixs, vec![reporter], expect) })
    }

    fn gen_slash_downtime(&mut self) -> Option<Tx> {
        let (job, j) = self.pick_job(|j| matches!(j.status, JobStatus::Running | JobStatus::Finishing))?;
        let m = j.terms;
        let v = self.rng.gen_range(0..self.vals.len());
        let (signer, stake) = (self.vals[v].auth.insecure_clone(), self.vals[v].stake);
        let impostor = self.rng.gen_bool(0.15);
        // Missed windows count up to now while Running, up to `ended_at` once Finishing.
        let observed_until = if j.status == JobStatus::Running { self.b.now } else { j.ended_at };
        let (signer, expect) = if impostor {
            // An outsider presents a real validator's account.
            (self.outsider.key.insecure_clone(), Expect::Err(0, E::NotAValidator))
        } else if !j.committee[..usize::from(j.committee_len)].contains(&signer.pubkey()) {
            (signer, Expect::Err(0, E::NotCommitteeMember))
        } else if !matches!(j.status, JobStatus::Running | JobStatus::Finishing) {
            (signer, Expect::Err(0, E::InvalidJobStatus))
        } else if (observed_until - j.last_window_end) / i64::from(m.window_seconds) < i64::from(m.max_missed_windows) {
            (signer, Expect::Err(0, E::NotEnoughMissedWindows))
        } else {
            (signer, Expect::Ok)
        };
        let mut ix = self.for_job(self.b.ix_slash_downtime(&signer.pubkey(), stake, job, &[]), &j);
        if impostor {
            let real = pda(&[gpu_market::seeds::VALIDATOR, self.b.market.as_ref(), self.vals[v].auth.pubkey().as_ref()]);
            ix = swap_account(ix, pda(&[gpu_market::seeds::VALIDATOR, self.b.market.as_ref(), signer.pubkey().as_ref()]), real);
        }
        Some(Self::tx("slash_downtime", vec![ix], vec![signer], expect))
    }

    fn gen_decline_job(&mut self) -> Option<Tx> {
        let (job, j) = self.pick_job(|j| j.status == JobStatus::Open)?;
        let p = self.prov_index(&j.provider);
        let prov = self.provider(p);
        let signer = match self.rng.gen_range(0..4) {
            0 => self.provs[p].owner.key.insecure_clone(),
            1 | 2 => Keypair::new_from_array(self.provs[p].keys[&prov.worker_key].to_bytes()),
            _ => self.stranger(&prov.owner, &prov.owner),
        };
        let key = signer.pubkey();
        let expect = if key != prov.owner && !prov.current_key_valid_at(&key, self.b.now) {
            Expect::Err(0, E::NotProviderSigner)
        } else if j.status != JobStatus::Open {
            Expect::Err(0, E::InvalidJobStatus)
        } else {
            Expect::Ok
        };
        let ix = self.for_provider(self.b.ix_decline_job(&key, job), p);
        Some(Self::tx("decline_job", vec![ix], vec![self.b.admin.insecure_clone(), signer], expect))
    }

    /// Anyone completes a finished job nobody closed.
    fn gen_complete_job(&mut self) -> Option<Tx> {
        let (job, j) = self.pick_job(|j| j.status == JobStatus::Finishing)?;
        let signer = self.stranger(&Pubkey::default(), &Pubkey::default());
        let expect = if j.status != JobStatus::Finishing {
            Expect::Err(0, E::InvalidJobStatus)
        } else if self.b.now <= j.ended_at + j.terms.grace_seconds {
            Expect::Err(0, E::GracePeriodActive)
        } else {
            Expect::Ok
        };
        let ix = self.for_provider(self.b.ix_complete_job(&signer.pubkey(), job), self.prov_index(&j.provider));
        Some(Self::tx("complete_job", vec![ix], vec![signer], expect))
    }

    /// The authority announces new parameters (in force `max(unbonding_seconds,
    /// MIN_PARAMS_DELAY_SECONDS)` later): running
    /// jobs keep their terms. Sometimes out of bounds, sometimes by an outsider.
    fn gen_update_params(&mut self) -> Tx {
        let r = &mut self.rng;
        let mut new = MarketParams {
            fee_bps: r.gen_range(0..=2_500),
            burn_bps: r.gen_range(0..=10_000),
            min_stake_per_gpu: r.gen_range(500..=1_500),
            unbonding_seconds: r.gen_range(300..=1_200),
            window_seconds: r.gen_range(30..=120),
            max_missed_windows: r.gen_range(1..=12),
            downtime_slash_bps: r.gen_range(0..=500),
            equivocation_slash_bps: r.gen_range(0..=10_000),
            reporter_reward_bps: r.gen_range(0..=5_000),
            max_skew_seconds: r.gen_range(0..=10),
            ..params()
        };
        let mut expect = Expect::Ok;
        match r.gen_range(0..8) {
            0 => (new.min_quorum, expect) = (4, Expect::Err(0, E::InvalidQuorum)),
            1 => (new.reporter_reward_bps, expect) = (5_001, Expect::Err(0, E::ReporterRewardTooHigh)),
            _ => {}
        }
        let signer = if self.rng.gen_bool(0.15) {
            expect = Expect::Err(0, E::NotMarketAuthority);
            self.outsider.key.insecure_clone()
        } else {
            self.b.admin.insecure_clone()
        };
        let ix = self.b.ix_update_params(&signer.pubkey(), new);
        Self::tx("update_params", vec![ix], vec![signer], expect)
    }

    fn gen_sweep_vault(&mut self) -> Tx {
        let m = self.b.market_state();
        let surplus = self.b.token_balance(&m.stake_vault) - m.totals.staked - m.totals.bonded;
        let expect = if surplus == 0 { Expect::Err(0, E::NothingToSweep) } else { Expect::Ok };
        let signer = self.outsider.key.insecure_clone();
        Self::tx("sweep_vault", vec![self.b.ix_sweep_vault(self.sweep_to)], vec![signer], expect)
    }

    /// A stranger sends tokens straight into a live job's escrow or the stake vault.
    fn donate(&mut self) {
        let amount = self.rng.gen_range(1..=5_000);
        let live = self.live_jobs();
        if self.rng.gen_bool(0.5) && !live.is_empty() {
            let (job, _) = &live[self.rng.gen_range(0..live.len())];
            let escrow = escrow_address(job);
            let mint = self.b.payment_mint;
            self.b.donate(mint, escrow, amount);
            self.minted_payment += amount;
        } else {
            let (mint, vault) = (self.b.stake_mint, self.b.stake_vault);
            self.b.donate(mint, vault, amount);
        }
        self.stats.entry("donate").or_default()[0] += 1;
    }

    fn gen_set_paused(&mut self) -> Tx {
        let paused = self.rng.gen_bool(0.3);
        let (signer, expect) = if self.rng.gen_bool(0.2) {
            (self.outsider.key.insecure_clone(), Expect::Err(0, E::NotMarketAuthority))
        } else {
            (self.b.admin.insecure_clone(), Expect::Ok)
        };
        let ix = self.b.ix_set_paused(&signer.pubkey(), paused);
        Self::tx("set_paused", vec![ix], vec![signer], expect)
    }

    // ---- running and checking a step ------------------------------------------------------

    /// Payment-token balances of users, provider owners and the fee vault (the treasury share),
    /// and the payment supply.
    fn payment_balances(&self) -> (HashMap<Pubkey, u64>, u64) {
        let mut accounts: Vec<Pubkey> = self.users.iter().map(|u| u.payment).collect();
        accounts.extend(self.provs.iter().map(|p| p.owner.payment));
        accounts.push(self.b.fee_vault);
        let balances = accounts.into_iter().map(|a| (a, self.b.token_balance(&a))).collect();
        (balances, self.b.mint_supply(&self.b.payment_mint))
    }

    fn job_books(&self) -> HashMap<Pubkey, (Job, u64)> {
        self.live_jobs()
            .into_iter()
            .map(|(k, j)| (k, (j, self.b.token_balance(&escrow_address(&k)))))
            .collect()
    }

    fn run(&mut self, tx: Tx) {
        let before = snapshot(&self.b);
        let books_before = self.job_books();
        let balances_before = self.payment_balances();
        let signers: Vec<&Keypair> = tx.signers.iter().collect();
        let result = self.b.send(&tx.ixs, &signers);
        let (ok, logs) = match &result {
            Ok(meta) => (true, meta.logs.clone()),
            Err(failed) => (false, failed.meta.logs.clone()),
        };
        let matches = match (tx.expect, &result) {
            (Expect::Ok, Ok(_)) | (Expect::AnyErr, Err(_)) => true,
            (Expect::Err(ix, e), Err(failed)) => failed.err == custom(ix, err_code(e)),
            _ => false,
        };
        assert!(
            matches,
            "{}: expected {:?}, got {:?}\nlogs: {:#?}",
            tx.kind,
            tx.expect,
            result.as_ref().map(|_| ()).map_err(|f| f.err.clone()),
            logs
        );
        self.stats.entry(tx.kind).or_default()[usize::from(!ok)] += 1;
        if std::env::var_os("GPUM_RANDOM_DEBUG").is_some() {
            eprintln!("{} {:?}", tx.kind, tx.expect);
        }
        if ok {
            match tx.on_ok {
                OnOk::NewJob(job) => self.jobs.push(job),
                OnOk::Record(job, started_at, seq) => {
                    self.records.insert((job, started_at, seq));
                }
                OnOk::Nothing => {}
            }
            self.check_money_moves(&books_before, &balances_before);
        } else {
            assert!(snapshot(&self.b) == before, "{}: a failed transaction changed accounts", tx.kind);
        }
    }

    /// Every payment token that left or entered an escrow went where the jobs booked it.
    fn check_money_moves(&self, books_before: &HashMap<Pubkey, (Job, u64)>, before: &(HashMap<Pubkey, u64>, u64)) {
        let books_after = self.job_books();
        let mut expected: HashMap<Pubkey, i128> = HashMap::new();
        let mut supply_delta: i128 = 0;
        let keys: HashSet<&Pubkey> = books_before.keys().chain(books_after.keys()).collect();
        for k in keys {
            let d = |f: fn(&Job) -> u64| -> i128 {
                let a = books_after.get(k).map_or(0, |(j, _)| f(j)) as i128;
                let b = books_before.get(k).map_or(0, |(j, _)| f(j)) as i128;
                a - b
            };
            let job = &books_after.get(k).or(books_before.get(k)).unwrap().0;
            // Tokens above the books (donations) that left the escrow went to the user too.
            let surplus = |(j, balance): &(Job, u64)| *balance as i128 - j.booked_escrow().unwrap() as i128;
            let (pp, pt, burned, refunded, deposited) = match books_after.get(k) {
                // Closed this step: everything left in escrow went back to the user.
                None => (0, 0, 0, books_before[k].1 as i128, 0),
                Some(after) => {
                    let returned = books_before.get(k).map_or(0, surplus) - surplus(after);
                    (d(|j| j.paid_provider), d(|j| j.paid_treasury), d(|j| j.burned), d(|j| j.refunded) + returned, d(|j| j.deposited))
                }
            };
            *expected.entry(self.provs[self.prov_index(&job.provider)].owner.payment).or_default() += pp;
            *expected.entry(self.b.fee_vault).or_default() += pt;
            *expected.entry(self.users[self.user_index(&job.user)].payment).or_default() += refunded - deposited;
            supply_delta -= burned;
        }
        let (after, supply) = self.payment_balances();
        for (account, balance) in &after {
            let moved = *balance as i128 - before.0[account] as i128;
            assert_eq!(moved, expected.get(account).copied().unwrap_or(0), "payment delta of {account}");
        }
        assert_eq!(supply as i128 - before.1 as i128, supply_delta, "payment supply delta == -burned");
    }

    /// Checks that need the history of the run (after every step).
    fn check_history(&mut self) {
        let live = self.live_jobs();
        let mut progress = HashMap::new();
        for (k, j) in live {
            if let Some((paid, seq, claimed)) = self.progress.get(&k) {
                assert!(j.paid_seconds >= *paid, "paid_seconds decreased on {k}");
                assert!(j.claimed_seconds >= *claimed, "claimed_seconds decreased on {k}");
                assert!(j.last_seq >= *seq, "last_seq decreased on {k}");
            }
            assert!(j.paid_seconds <= j.claimed_seconds, "paid more than claimed on {k}");
            progress.insert(k, (j.paid_seconds, j.last_seq, j.claimed_seconds));
        }
        self.progress = progress;
        let burned = self.b.market_state().totals.burned;
        let supply = self.b.mint_supply(&self.b.payment_mint);
        assert_eq!(self.minted_payment - supply, burned, "payment minted - supply == burned by settlements");
    }

    fn step(&mut self) {
        let roll = self.rng.gen_range(0..100);
        let tx = match roll {
            0..=9 => Some(self.gen_create_job()),
            10..=19 => self.gen_accept_job(),
            20..=41 => self.gen_settle(),
            42..=45 => self.gen_finish_job(),
            46..=51 => self.gen_close_job(),
            52..=55 => self.gen_top_up(),
            56..=58 => self.gen_cancel_job(),
            59..=61 => self.gen_expire_job(),
            62..=64 => Some(self.gen_stake()),
            65..=67 => Some(self.gen_request_unstake()),
            68..=70 => Some(self.gen_withdraw_unstaked()),
            71..=73 => Some(self.gen_update_provider()),
            74..=75 => Some(self.gen_rotate_worker_key()),
            76 => self.gen_slash_equivocation(),
            77..=79 => self.gen_slash_downtime(),
            80..=81 => Some(self.gen_set_paused()),
            84..=85 => self.gen_decline_job(),
            86..=87 => self.gen_complete_job(),
            88 => Some(self.gen_update_params()),
            89 => Some(self.gen_sweep_vault()),
            90..=91 => {
                self.donate();
                None
            }
            82..=83 => {
                // Rare long silence: lets jobs expire and downtime be slashed.
                let t = self.rng.gen_range(600..=1_000);
                self.b.advance(t);
                self.stats.entry("warp_time").or_default()[0] += 1;
                None
            }
            _ => {
                let t = self.rng.gen_range(0..=200);
                self.b.advance(t);
                self.stats.entry("advance_time").or_default()[0] += 1;
                None
            }
        };
        if let Some(tx) = tx {
            self.run(tx);
        }
        self.check_history();
    }
}

/// The absolute wall-time bound of a receipt ending at `window_end` (docs/protocol.md,
/// "Receipts and window proofs"): seconds
/// ever paid <= `window_end - started_at + skew`, and <= `ended_at - started_at` once finished.
fn wall_bound(j: &Job, window_end: i64) -> i64 {
    let bound = window_end - j.started_at + i64::from(j.terms.max_skew_seconds);
    if j.status == JobStatus::Finishing { bound.min(j.ended_at - j.started_at) } else { bound }
}

/// The settle rules of docs/protocol.md ("Settlement") and `settle.rs`, in the program's order (instruction 1;
/// instruction 0 is the Ed25519 signature), with the job's own terms. The validator is always
/// an Active one here.
fn expect_settle(j: &Job, prov: &Provider, r: &Receipt, approved: u64, signer: &Pubkey, now: i64) -> Expect {
    let err = |e| Expect::Err(1, e);
    match j.status {
        JobStatus::Running => {}
        JobStatus::Finishing if r.window_end > j.ended_at => return err(E::WindowAfterJobEnd),
        JobStatus::Finishing if now > j.ended_at + j.terms.grace_seconds => return err(E::SettlementGraceOver),
        JobStatus::Finishing => {}
        _ => return err(E::InvalidJobStatus),
    }
    let skew = i64::from(j.terms.max_skew_seconds);
    if r.seq <= j.last_seq {
        err(E::StaleSequence)
    } else if r.cumulative_seconds < j.claimed_seconds {
        err(E::CumulativeDecreased)
    } else if r.window_end <= j.last_window_end {
        err(E::WindowNotAfterLast)
    } else if approved < j.paid_seconds {
        err(E::ApprovedDecreased)
    } else if approved > r.cumulative_seconds {
        err(E::ApprovedExceedsClaim)
    } else if approved as i64 > wall_bound(j, r.window_end) {
        err(E::BilledSecondsExceedWallTime)
    } else if r.window_end > now + skew {
        err(E::WindowEndInFuture)
    } else if *signer == prov.worker_key && prov.current_key_expired_at(r.window_end) {
        err(E::WorkerKeyExpired)
    } else if !prov.receipt_key_valid(signer, r.window_end, now, j.terms.key_rotation_grace_seconds()) {
        err(E::WrongReceiptSigner)
    } else {
        Expect::Ok
    }
}

static STEP: AtomicUsize = AtomicUsize::new(0);

fn run_seed(seed: u64, steps: usize) -> BTreeMap<&'static str, [u32; 2]> {
    let mut w = World::new(seed);
    for step in 0..steps {
        STEP.store(step, Ordering::Relaxed);
        w.step();
    }
    w.stats
}

#[test]
fn random_valid_and_invalid_sequences_keep_every_invariant() {
    let seeds: Vec<u64> = match std::env::var("GPUM_RANDOM_SEED") {
        Ok(s) => vec![s.parse().expect("GPUM_RANDOM_SEED: an integer")],
        Err(_) => SEEDS.to_vec(),
    };
    let steps = std::env::var("GPUM_RANDOM_STEPS").map_or(STEPS, |s| s.parse().expect("GPUM_RANDOM_STEPS: an integer"));
    let started = std::time::Instant::now();
    let mut total: BTreeMap<&'static str, [u32; 2]> = BTreeMap::new();
    for seed in seeds {
        let outcome = std::panic::catch_unwind(|| run_seed(seed, steps));
        let stats = outcome.unwrap_or_else(|panic| {
            eprintln!(
                "random_ops FAILED: seed {seed} at step {}; rerun with GPUM_RANDOM_SEED={seed}",
                STEP.load(Ordering::Relaxed)
            );
            std::panic::resume_unwind(panic)
        });
        for (kind, [ok, failed]) in stats {
            let t = total.entry(kind).or_default();
            t[0] += ok;
            t[1] += failed;
        }
    }
    println!("{:<20} {:>8} {:>8}", "step", "ok", "failed");
    for (kind, [ok, failed]) in &total {
        println!("{kind:<20} {ok:>8} {failed:>8}");
    }
    println!("{} steps per seed in {:.1?}", steps, started.elapsed());
    const TX_KINDS: [&str; 20] = [
        "create_job", "accept_job", "settle", "finish_job", "close_job", "top_up", "cancel_job",
        "expire_job", "stake", "request_unstake", "withdraw_unstaked", "update_provider",
        "rotate_worker_key", "slash_equivocation", "slash_downtime", "set_paused",
        "decline_job", "complete_job", "update_params", "sweep_vault",
    ];
    for kind in TX_KINDS {
        let [ok, failed] = total.get(kind).copied().unwrap_or_default();
        assert!(ok > 0, "{kind} never succeeded: the run does not exercise its success path");
        assert!(failed > 0, "{kind} never failed: the run does not exercise its error paths");
    }
    assert!(total.get("advance_time").is_some_and(|s| s[0] > 0));
    assert!(total.get("donate").is_some_and(|s| s[0] > 0), "no donation was made");
}

/// A job PDA is `["job", market, user, job_id]` and receipts name only the job address. If a
/// closed job's address could be created again, the worker's honest seq-1 receipts of two
/// incarnations would be "two receipts for one job and seq". `close_job` leaves a tombstone, so
/// the second incarnation cannot exist: its `create_job` fails (the System program's
/// `AccountAlreadyInUse`), and the first incarnation's receipt cannot slash anyone.
#[test]
fn honest_receipts_of_two_incarnations_of_one_job_address_are_not_equivocation() {
    let mut b = Bench::with_params(params());
    let user = b.user.key.insecure_clone();
    let (job, _) = b.running_job(1, 1, 10_000);
    b.advance(60);
    let first = Receipt { seq: 1, cumulative_seconds: 60, window_end: b.now, proof_hash: [1; 32] };
    b.settle(job, first).unwrap();
    b.send(&[b.ix_finish_job(&user.pubkey(), job)], &[&user]).unwrap();
    b.advance(12 * 60 + 1);
    b.send(&[b.ix_close_job(&user.pubkey(), b.user.payment, job)], &[&user]).unwrap();
    // Same job_id again: same address, refused.
    let ix = b.ix_create_job(&b.user, 1, 1, 10_000);
    assert_eq!(b.send_err(&[ix], &[&user]), custom(0, 0));
    assert!(b.is_tombstone(&job));
    let stake_before = b.provider_state().stake;
    b.advance(60);
    let second = Receipt { seq: 1, cumulative_seconds: 60, window_end: b.now, proof_hash: [2; 32] };
    let ixs = b.equivocation_ixs(&b.worker.clone(), &user.pubkey(), b.user.stake, job, first, second);
    assert_eq!(b.send(&ixs, &[&user]).unwrap_err().err, anchor_err(1, anchor_lang::error::ErrorCode::AccountDiscriminatorMismatch));
    assert_eq!(b.provider_state().stake, stake_before);
}
