//! Test bench for gpu_market in the real runtime (LiteSVM + SBF SPL Token), shared by the
//! Rust integration tests. Every helper that sends a transaction returns the runtime's result,
//! so tests assert exact error codes.
#![allow(dead_code)]

use anchor_lang::{prelude::Pubkey, AccountDeserialize, InstructionData, ToAccountMetas};
use ed25519_dalek::{Signer as _, SigningKey};
use gpu_market::{
    instructions::RegisterProviderArgs,
    receipt::{Receipt, ED25519_PROGRAM_ID},
    state::{GpuSpec, Job, Market, MarketParams, Provider, Validator},
};
use gpum_localnet::solana_account::ReadableAccount;
use gpum_localnet::{
    litesvm::{types::TransactionResult, LiteSVM},
    solana_clock::Clock,
    solana_instruction::{error::InstructionError, AccountMeta, Instruction},
    solana_keypair::Keypair,
    solana_pubkey::Pubkey as SPubkey,
    solana_signer::Signer,
    solana_transaction::Transaction,
    solana_transaction_error::TransactionError,
    spl_token_interface as spl_token,
};

pub const TOKEN_PROGRAM: Pubkey = spl_token::ID;
pub const SYSTEM_PROGRAM: Pubkey = anchor_lang::system_program::ID;
pub const INSTRUCTIONS_SYSVAR: Pubkey = solana_sdk_ids::sysvar::instructions::ID;
pub const T0: i64 = 1_750_000_000;
pub const DECIMALS: u8 = 6;
pub const MINT_LEN: usize = 82;
pub const TOKEN_ACCOUNT_LEN: usize = 165;

pub fn default_params() -> MarketParams {
    MarketParams {
        fee_bps: 1_000,
        burn_bps: 5_000,
        min_stake_per_gpu: 1_000,
        unbonding_seconds: 14 * 86_400,
        window_seconds: 60,
        min_quorum: 1,
        max_missed_windows: 10,
        downtime_slash_bps: 100,
        equivocation_slash_bps: 5_000,
        reporter_reward_bps: 1_000,
        validator_min_bond: 5_000,
        max_skew_seconds: 5,
        temp_critical_c: 95,
        ecc_uncorrected_max: 0,
        // Rewards are tested on their own (settle.rs); 0 keeps the other tests' figures simple.
        validator_reward_bps: 0,
        hardware_quorum: 2,
        hardware_attestation_max_age_seconds: 3_600,
        verified_record_seconds: 30 * 86_400,
    }
}

/// The endpoint every bench validator registers.
pub const ENDPOINT: &str = "http://127.0.0.1:8787";

/// Maps an Anchor error variant to the runtime error it produces in instruction `ix`.
pub fn custom(ix: u8, code: u32) -> TransactionError {
    TransactionError::InstructionError(ix, InstructionError::Custom(code))
}

pub fn err_code(e: gpu_market::errors::GpuMarketError) -> u32 {
    anchor_lang::error::ERROR_CODE_OFFSET + e as u32
}

pub struct Party {
    pub key: Keypair,
    pub payment: Pubkey,
    pub stake: Pubkey,
}

/// A market with one staked provider (4 GPUs), one validator, and a funded user.
pub struct Bench {
    pub svm: LiteSVM,
    pub admin: Keypair,
    pub stake_mint: Pubkey,
    pub payment_mint: Pubkey,
    pub market: Pubkey,
    pub stake_vault: Pubkey,
    pub treasury: Pubkey,
    /// `["fee_vault", market]`: settlements pay the treasury share here.
    pub fee_vault: Pubkey,
    pub provider_owner: Party,
    pub provider: Pubkey,
    pub worker: SigningKey,
    pub validator_authority: Keypair,
    pub validator: Pubkey,
    pub user: Party,
    pub now: i64,
    /// Committee (validator authorities) and quorum of the jobs `ix_create_job` creates.
    pub committee: Vec<Pubkey>,
    pub quorum: u8,
}

pub fn pda(seeds: &[&[u8]]) -> Pubkey {
    Pubkey::find_program_address(seeds, &gpu_market::ID).0
}

/// The escrow token account of `job`: `["escrow", job]`.
pub fn escrow_address(job: &Pubkey) -> Pubkey {
    pda(&[gpu_market::seeds::ESCROW, job.as_ref()])
}

pub fn worker_pubkey(k: &SigningKey) -> Pubkey {
    Pubkey::new_from_array(k.verifying_key().to_bytes())
}

impl Bench {
    pub fn new() -> Self {
        Self::with_params(default_params())
    }

    pub fn with_params(params: MarketParams) -> Self {
        Self::with_keys(params, [Keypair::new(), Keypair::new(), Keypair::new(), Keypair::new()])
    }

    /// `with_params` with chosen [admin, provider owner, validator authority, user] keys: fixed
    /// keys make the market, provider, validator and job addresses reproducible.
    pub fn with_keys(params: MarketParams, keys: [Keypair; 4]) -> Self {
        let [admin, owner_key, validator_key, user_key] = keys;
        let mut svm = gpum_localnet::new_svm();
        svm.airdrop(&admin.pubkey(), 100_000_000_000).unwrap();
        let mut b = Bench {
            svm,
            stake_mint: Pubkey::default(),
            payment_mint: Pubkey::default(),
            market: Pubkey::default(),
            stake_vault: Pubkey::default(),
            treasury: Pubkey::default(),
            fee_vault: Pubkey::default(),
            provider_owner: Party { key: owner_key, payment: Pubkey::default(), stake: Pubkey::default() },
            provider: Pubkey::default(),
            worker: SigningKey::from_bytes(&[7u8; 32]),
            validator_authority: validator_key,
            validator: Pubkey::default(),
            user: Party { key: user_key, payment: Pubkey::default(), stake: Pubkey::default() },
            now: T0,
            committee: vec![],
            quorum: 1,
            admin,
        };
        b.set_time(T0);
        b.stake_mint = b.create_mint();
        b.payment_mint = b.create_mint();
        b.treasury = b.create_token_account(b.payment_mint, &b.admin.pubkey());
        b.market = pda(&[gpu_market::seeds::MARKET, b.admin.pubkey().as_ref(), &0u64.to_le_bytes()]);
        b.stake_vault = pda(&[gpu_market::seeds::STAKE_VAULT, b.market.as_ref()]);
        b.fee_vault = pda(&[gpu_market::seeds::FEE_VAULT, b.market.as_ref()]);
        let ix = b.ix_initialize_market(0, params);
        b.send(&[ix], &[&b.admin.insecure_clone()]).unwrap();

        let owner = b.provider_owner.key.insecure_clone();
        b.provider_owner = b.fund_party(owner, 1_000_000, 0);
        let user = b.user.key.insecure_clone();
        b.user = b.fund_party(user, 0, 1_000_000_000);
        let va = b.validator_authority.insecure_clone();
        let v = b.fund_party(va, 1_000_000, 0);

        b.provider = pda(&[gpu_market::seeds::PROVIDER, b.market.as_ref(), b.provider_owner.key.pubkey().as_ref()]);
        let ix = b.ix_register_provider(&b.provider_owner.key.pubkey(), worker_pubkey(&b.worker), 4, 10);
        b.send(&[ix], &[&b.provider_owner.key.insecure_clone()]).unwrap();
        let ix = b.ix_stake(&b.provider_owner.key.pubkey(), b.provider_owner.stake, 100_000);
        b.send(&[ix], &[&b.provider_owner.key.insecure_clone()]).unwrap();

        b.validator = pda(&[gpu_market::seeds::VALIDATOR, b.market.as_ref(), v.key.pubkey().as_ref()]);
        let ix = b.ix_register_validator(&v.key.pubkey(), v.stake, 10_000);
        b.send(&[ix], &[&v.key]).unwrap();
        b.committee = vec![v.key.pubkey()];
        b
    }

    pub fn set_time(&mut self, unix: i64) {
        self.now = unix;
        let mut clock: Clock = self.svm.get_sysvar();
        clock.unix_timestamp = unix;
        clock.slot = clock.slot.max(1) + 1;
        self.svm.set_sysvar(&clock);
    }

    pub fn advance(&mut self, seconds: i64) {
        let t = self.now + seconds;
        self.set_time(t);
    }

    /// Sends one transaction (fee payer: the first signer) with a fresh blockhash.
    pub fn send(&mut self, ixs: &[Instruction], signers: &[&Keypair]) -> TransactionResult {
        self.svm.expire_blockhash();
        let tx = Transaction::new_signed_with_payer(
            ixs,
            Some(&signers[0].pubkey()),
            signers,
            self.svm.latest_blockhash(),
        );
        let result = self.svm.send_transaction(tx);
        self.check_invariants();
        result
    }

    pub fn send_err(&mut self, ixs: &[Instruction], signers: &[&Keypair]) -> TransactionError {
        match self.send(ixs, signers) {
            Ok(meta) => panic!("expected failure, got success: {:#?}", meta.logs),
            Err(failed) => failed.err,
        }
    }

    pub fn create_mint(&mut self) -> Pubkey {
        let mint = Keypair::new();
        let rent = self.svm.minimum_balance_for_rent_exemption(MINT_LEN);
        let admin = self.admin.insecure_clone();
        let ixs = [
            gpum_localnet::solana_system_interface::instruction::create_account(
                &admin.pubkey(), &mint.pubkey(), rent, MINT_LEN as u64, &TOKEN_PROGRAM,
            ),
            spl_token::instruction::initialize_mint2(&TOKEN_PROGRAM, &mint.pubkey(), &admin.pubkey(), None, DECIMALS).unwrap(),
        ];
        self.send(&ixs, &[&admin, &mint]).unwrap();
        mint.pubkey()
    }

    pub fn create_token_account(&mut self, mint: Pubkey, owner: &Pubkey) -> Pubkey {
        let account = Keypair::new();
        let rent = self.svm.minimum_balance_for_rent_exemption(TOKEN_ACCOUNT_LEN);
        let admin = self.admin.insecure_clone();
        let ixs = [
            gpum_localnet::solana_system_interface::instruction::create_account(
                &admin.pubkey(), &account.pubkey(), rent, TOKEN_ACCOUNT_LEN as u64, &TOKEN_PROGRAM,
            ),
            spl_token::instruction::initialize_account3(&TOKEN_PROGRAM, &account.pubkey(), &mint, owner).unwrap(),
        ];
        self.send(&ixs, &[&admin, &account]).unwrap();
        account.pubkey()
    }

    pub fn mint_to(&mut self, mint: Pubkey, to: Pubkey, amount: u64) {
        let admin = self.admin.insecure_clone();
        let ix = spl_token::instruction::mint_to(&TOKEN_PROGRAM, &mint, &to, &admin.pubkey(), &[], amount).unwrap();
        self.send(&[ix], &[&admin]).unwrap();
    }

    pub fn fund_party(&mut self, key: Keypair, stake: u64, payment: u64) -> Party {
        self.svm.airdrop(&key.pubkey(), 10_000_000_000).unwrap();
        let stake_account = self.create_token_account(self.stake_mint, &key.pubkey());
        let payment_account = self.create_token_account(self.payment_mint, &key.pubkey());
        if stake > 0 {
            self.mint_to(self.stake_mint, stake_account, stake);
        }
        if payment > 0 {
            self.mint_to(self.payment_mint, payment_account, payment);
        }
        Party { key, payment: payment_account, stake: stake_account }
    }

    pub fn token_balance(&self, account: &Pubkey) -> u64 {
        match self.svm.get_account(account) {
            Some(a) if a.owner == TOKEN_PROGRAM && a.data.len() >= 72 => {
                u64::from_le_bytes(a.data[64..72].try_into().unwrap())
            }
            _ => 0,
        }
    }

    pub fn mint_supply(&self, mint: &Pubkey) -> u64 {
        let a = self.svm.get_account(mint).unwrap();
        u64::from_le_bytes(a.data[36..44].try_into().unwrap())
    }

    pub fn account<T: AccountDeserialize>(&self, key: &Pubkey) -> Option<T> {
        let a = self.svm.get_account(key)?;
        if a.data.is_empty() {
            return None;
        }
        T::try_deserialize(&mut a.data.as_slice()).ok()
    }

    pub fn market_state(&self) -> Market { self.account(&self.market).unwrap() }
    pub fn provider_state(&self) -> Provider { self.account(&self.provider).unwrap() }
    pub fn validator_state(&self) -> Validator { self.account(&self.validator).unwrap() }
    pub fn job_state(&self, job: &Pubkey) -> Job { self.account(job).unwrap() }

    pub fn job_address(&self, user: &Pubkey, job_id: u64) -> (Pubkey, Pubkey) {
        let job = pda(&[gpu_market::seeds::JOB, self.market.as_ref(), user.as_ref(), &job_id.to_le_bytes()]);
        let escrow = escrow_address(&job);
        (job, escrow)
    }

    /// The invariants of docs/protocol.md, "Invariants", over every program account in the runtime, after every transaction.
    pub fn check_invariants(&self) {
        let Some(market) = self.account::<Market>(&self.market) else { return };
        market
            .invariant(self.token_balance(&market.stake_vault))
            .expect("market invariant: stake vault >= staked + bonded");
        let mut in_use: std::collections::HashMap<Pubkey, u16> = Default::default();
        let mut rated: std::collections::HashMap<Pubkey, u32> = Default::default();
        let mut providers = vec![];
        for (key, acc) in self.svm.accounts_db().inner.iter() {
            if acc.owner() != &gpu_market::ID {
                continue;
            }
            let data = acc.data();
            if let Ok(job) = Job::try_deserialize(&mut &data[..]) {
                let escrow = escrow_address(key);
                job.invariant(self.token_balance(&escrow)).expect("job conservation invariant");
                if job.status.holds_gpus() {
                    *in_use.entry(job.provider).or_default() += job.gpu_count;
                }
                assert!(!job.rated || job.paid_seconds > 0, "only a job that billed is rated");
                *rated.entry(job.provider).or_default() += u32::from(job.rated);
            } else if let Ok(t) = gpu_market::state::ClosedJob::try_deserialize(&mut &data[..]) {
                assert!(!t.rated || t.paid_seconds > 0, "only a job that billed is rated");
                *rated.entry(t.provider).or_default() += u32::from(t.rated);
            } else if let Ok(p) = Provider::try_deserialize(&mut &data[..]) {
                p.invariant().expect("provider invariant");
                providers.push((*key, p));
            }
        }
        for (key, p) in &providers {
            assert_eq!(p.gpus_in_use, in_use.get(key).copied().unwrap_or(0), "gpus_in_use == sum over open jobs");
            assert_eq!(p.ratings.count, rated.get(key).copied().unwrap_or(0), "ratings.count == rated jobs and tombstones");
        }
        self.inv_check_stake_vault_sum(&market, &providers);
        self.inv_check_token_supplies();
    }

    /// Stake vault balance == sum over this market's providers of stake + unbonding plus sum over
    /// its validators of bond + unbonding; the market totals split the same sum exactly.
    fn inv_check_stake_vault_sum(&self, market: &Market, providers: &[(Pubkey, Provider)]) {
        let staked: u64 = providers
            .iter()
            .filter(|(_, p)| p.market == self.market)
            .map(|(_, p)| p.stake + p.unbonding.amount)
            .sum();
        let bonded: u64 = self
            .svm
            .accounts_db()
            .inner
            .values()
            .filter(|acc| acc.owner() == &gpu_market::ID)
            .filter_map(|acc| Validator::try_deserialize(&mut &acc.data()[..]).ok())
            .filter(|v| v.market == self.market)
            .map(|v| v.bond + v.unbonding.amount)
            .sum();
        assert_eq!(market.totals.staked, staked, "totals.staked == sum of provider stake + unbonding");
        assert_eq!(market.totals.bonded, bonded, "totals.bonded == sum of validator bond + unbonding");
        // Donations may push the vault above the books; it never falls short.
        assert!(
            self.token_balance(&market.stake_vault) >= staked + bonded,
            "stake vault >= providers' stake + unbonding + validators' bond + unbonding"
        );
    }

    /// Token conservation per mint: the balances of all token accounts add up to the supply.
    fn inv_check_token_supplies(&self) {
        for mint in [self.stake_mint, self.payment_mint] {
            let held: u64 = self
                .svm
                .accounts_db()
                .inner
                .values()
                .filter(|a| a.owner() == &TOKEN_PROGRAM && a.data().len() == TOKEN_ACCOUNT_LEN)
                .filter(|a| a.data()[..32] == mint.to_bytes())
                .map(|a| u64::from_le_bytes(a.data()[64..72].try_into().unwrap()))
                .sum();
            assert_eq!(held, self.mint_supply(&mint), "sum of token balances == supply of {mint}");
        }
    }

    // ---- instruction builders -------------------------------------------------------------

    pub fn ix(data: impl InstructionData, accounts: impl ToAccountMetas) -> Instruction {
        Instruction { program_id: gpu_market::ID, accounts: accounts.to_account_metas(None), data: data.data() }
    }

    pub fn ix_initialize_market(&self, id: u64, params: MarketParams) -> Instruction {
        let market = pda(&[gpu_market::seeds::MARKET, self.admin.pubkey().as_ref(), &id.to_le_bytes()]);
        Self::ix(
            gpu_market::instruction::InitializeMarket { id, params },
            gpu_market::accounts::InitializeMarket {
                authority: self.admin.pubkey(),
                market,
                stake_mint: self.stake_mint,
                payment_mint: self.payment_mint,
                stake_vault: pda(&[gpu_market::seeds::STAKE_VAULT, market.as_ref()]),
                fee_vault: pda(&[gpu_market::seeds::FEE_VAULT, market.as_ref()]),
                treasury: self.treasury,
                token_program: TOKEN_PROGRAM,
                system_program: SYSTEM_PROGRAM,
            },
        )
    }

    pub fn ix_register_provider(&self, owner: &Pubkey, worker_key: Pubkey, gpus: u16, price: u64) -> Instruction {
        let args = RegisterProviderArgs {
            worker_key,
            worker_key_expires_at: 0,
            spec: gpu_spec(gpus),
            price_per_gpu_second: price,
            endpoint: String::new(),
        };
        self.ix_register_provider_with(owner, args)
    }

    pub fn ix_register_provider_with(&self, owner: &Pubkey, args: RegisterProviderArgs) -> Instruction {
        Self::ix(
            gpu_market::instruction::RegisterProvider { args },
            gpu_market::accounts::RegisterProvider {
                owner: *owner,
                market: self.market,
                provider: self.provider_address(owner),
                system_program: SYSTEM_PROGRAM,
            },
        )
    }

    pub fn ix_stake(&self, owner: &Pubkey, from: Pubkey, amount: u64) -> Instruction {
        Self::ix(
            gpu_market::instruction::Stake { amount },
            gpu_market::accounts::Stake {
                owner: *owner,
                market: self.market,
                provider: self.provider_address(owner),
                stake_mint: self.stake_mint,
                owner_stake_account: from,
                stake_vault: self.stake_vault,
                token_program: TOKEN_PROGRAM,
            },
        )
    }

    pub fn ix_register_validator(&self, authority: &Pubkey, from: Pubkey, bond: u64) -> Instruction {
        self.ix_register_validator_at(authority, from, bond, ENDPOINT)
    }

    pub fn ix_register_validator_at(&self, authority: &Pubkey, from: Pubkey, bond: u64, endpoint: &str) -> Instruction {
        Self::ix(
            gpu_market::instruction::RegisterValidator { bond, endpoint: endpoint.into() },
            gpu_market::accounts::RegisterValidator {
                authority: *authority,
                market: self.market,
                validator: self.validator_address(authority),
                stake_mint: self.stake_mint,
                authority_stake_account: from,
                stake_vault: self.stake_vault,
                token_program: TOKEN_PROGRAM,
                system_program: SYSTEM_PROGRAM,
            },
        )
    }

    /// `create_job` accepting any price (`max_price_per_gpu_second = u64::MAX`), with the bench's
    /// committee and quorum.
    pub fn ix_create_job(&self, user: &Party, job_id: u64, gpu_count: u16, deposit: u64) -> Instruction {
        self.ix_create_job_capped(user, job_id, gpu_count, deposit, u64::MAX)
    }

    pub fn ix_create_job_capped(&self, user: &Party, job_id: u64, gpu_count: u16, deposit: u64, max_price_per_gpu_second: u64) -> Instruction {
        self.ix_create_job_with(user, job_id, gpu_count, deposit, max_price_per_gpu_second, &self.committee.clone(), self.quorum)
    }

    /// `create_job` with the bench's committee and a workload hash.
    pub fn ix_create_job_workload(&self, user: &Party, job_id: u64, gpu_count: u16, deposit: u64, workload_hash: [u8; 32]) -> Instruction {
        self.ix_create_job_full(user, job_id, gpu_count, deposit, u64::MAX, &self.committee.clone(), self.quorum, workload_hash)
    }

    /// `create_job` with `committee` (their Validator accounts as remaining accounts) and `quorum`.
    #[allow(clippy::too_many_arguments)]
    pub fn ix_create_job_with(&self, user: &Party, job_id: u64, gpu_count: u16, deposit: u64, max_price_per_gpu_second: u64, committee: &[Pubkey], quorum: u8) -> Instruction {
        self.ix_create_job_full(user, job_id, gpu_count, deposit, max_price_per_gpu_second, committee, quorum, [0; 32])
    }

    /// The market parameters in force at the bench's clock: what a user reads and signs for.
    pub fn params_in_force(&self) -> MarketParams {
        self.market_state().params_at(self.now)
    }

    /// `create_job` signed for the parameters in force now (`params_in_force`).
    #[allow(clippy::too_many_arguments)]
    pub fn ix_create_job_full(&self, user: &Party, job_id: u64, gpu_count: u16, deposit: u64, max_price_per_gpu_second: u64, committee: &[Pubkey], quorum: u8, workload_hash: [u8; 32]) -> Instruction {
        let (job, escrow) = self.job_address(&user.key.pubkey(), job_id);
        let expected_params = self.params_in_force();
        let mut ix = Self::ix(
            gpu_market::instruction::CreateJob { job_id, gpu_count, deposit, max_price_per_gpu_second, committee: committee.to_vec(), quorum, workload_hash, expected_params },
            gpu_market::accounts::CreateJob {
                user: user.key.pubkey(),
                market: self.market,
                provider: self.provider,
                job,
                escrow,
                payment_mint: self.payment_mint,
                user_payment_account: user.payment,
                token_program: TOKEN_PROGRAM,
                system_program: SYSTEM_PROGRAM,
            },
        );
        ix.accounts.extend(committee.iter().map(|a| meta(self.validator_address(a), false)));
        ix
    }

    pub fn ix_accept_job(&self, signer: &Pubkey, job: Pubkey) -> Instruction {
        Self::ix(
            gpu_market::instruction::AcceptJob {},
            gpu_market::accounts::AcceptJob { signer: *signer, provider: self.provider, job },
        )
    }

    pub fn ix_finish_job(&self, signer: &Pubkey, job: Pubkey) -> Instruction {
        Self::ix(
            gpu_market::instruction::FinishJob {},
            gpu_market::accounts::FinishJob { signer: *signer, provider: self.provider, job },
        )
    }

    pub fn ix_close_job(&self, user: &Pubkey, user_payment: Pubkey, job: Pubkey) -> Instruction {
        Self::ix(
            gpu_market::instruction::CloseJob {},
            gpu_market::accounts::CloseJob {
                user: *user,
                market: self.market,
                provider: self.provider,
                job,
                escrow: escrow_address(&job),
                payment_mint: self.payment_mint,
                user_payment_account: user_payment,
                token_program: TOKEN_PROGRAM,
            },
        )
    }

    /// `settle` of `receipt` approving its whole claim (`approved = cumulative_seconds`).
    pub fn ix_settle(&self, validator_authority: &Pubkey, job: Pubkey, receipt: Receipt) -> Instruction {
        self.ix_settle_approved(validator_authority, job, receipt, receipt.cumulative_seconds)
    }

    pub fn ix_settle_approved(&self, validator_authority: &Pubkey, job: Pubkey, receipt: Receipt, approved_seconds: u64) -> Instruction {
        Self::ix(
            gpu_market::instruction::Settle { receipt, approved_seconds },
            gpu_market::accounts::Settle {
                validator_authority: *validator_authority,
                market: self.market,
                validator: self.validator_address(validator_authority),
                provider: self.provider,
                job,
                escrow: escrow_address(&job),
                provider_payment_account: self.provider_owner.payment,
                fee_vault: self.fee_vault,
                payment_mint: self.payment_mint,
                instructions: INSTRUCTIONS_SYSVAR,
                token_program: TOKEN_PROGRAM,
            },
        )
    }

    /// What the worker key signs for `r`: sha256 of its receipt message.
    pub fn receipt_digest(&self, job: &Pubkey, r: &Receipt) -> [u8; 32] {
        r.digest(&gpu_market::ID, &self.market, job)
    }

    /// [Ed25519(worker over receipt), settle] signed by the bench validator.
    pub fn settle_ixs(&self, signer: &SigningKey, job: Pubkey, r: Receipt) -> Vec<Instruction> {
        let msg = self.receipt_digest(&job, &r);
        vec![ed25519_ix(signer, &msg), self.ix_settle(&self.validator_authority.pubkey(), job, r)]
    }

    pub fn settle(&mut self, job: Pubkey, r: Receipt) -> TransactionResult {
        let ixs = self.settle_ixs(&self.worker.clone(), job, r);
        let va = self.validator_authority.insecure_clone();
        self.send(&ixs, &[&va])
    }

    /// Creates and accepts job `job_id` for the bench user; returns (job, escrow).
    pub fn running_job(&mut self, job_id: u64, gpus: u16, deposit: u64) -> (Pubkey, Pubkey) {
        let ix = self.ix_create_job(&self.user, job_id, gpus, deposit);
        let user = self.user.key.insecure_clone();
        self.send(&[ix], &[&user]).unwrap();
        let (job, escrow) = self.job_address(&user.pubkey(), job_id);
        let owner = self.provider_owner.key.insecure_clone();
        let ix = self.ix_accept_job(&owner.pubkey(), job);
        self.send(&[ix], &[&owner]).unwrap();
        (job, escrow)
    }
}

/// The wire size of a legacy transaction of `ixs` signed by `signers` (a cluster accepts at
/// most `PACKET_DATA_SIZE`; LiteSVM does not check it, so tests do).
pub fn wire_size(ixs: &[Instruction], signers: &[&Keypair]) -> usize {
    let tx = Transaction::new_signed_with_payer(ixs, Some(&signers[0].pubkey()), signers, Default::default());
    bincode::serialize(&tx).expect("transaction serializes").len()
}

pub const PACKET_DATA_SIZE: usize = 1232;

/// An Ed25519-program instruction with one signature, all data inside it (indexes u16::MAX).
pub fn ed25519_ix(signer: &SigningKey, message: &[u8]) -> Instruction {
    let sig = signer.sign(message).to_bytes();
    ed25519_ix_raw(&signer.verifying_key().to_bytes(), &sig, message, [u16::MAX; 3])
}

/// Layout: [count=1, pad, offsets(14)] [pubkey 32] [signature 64] [message].
pub fn ed25519_ix_raw(pubkey: &[u8; 32], sig: &[u8; 64], message: &[u8], ix_indexes: [u16; 3]) -> Instruction {
    let pk_off: u16 = 16;
    let sig_off: u16 = 48;
    let msg_off: u16 = 112;
    let mut data = vec![1u8, 0];
    for v in [sig_off, ix_indexes[0], pk_off, ix_indexes[1], msg_off, message.len() as u16, ix_indexes[2]] {
        data.extend_from_slice(&v.to_le_bytes());
    }
    data.extend_from_slice(pubkey);
    data.extend_from_slice(sig);
    data.extend_from_slice(message);
    Instruction { program_id: ED25519_PROGRAM_ID, accounts: vec![], data }
}

pub fn receipt(seq: u64, cumulative_seconds: u64, window_end: i64) -> Receipt {
    Receipt { seq, cumulative_seconds, window_end, proof_hash: [seq as u8; 32] }
}

pub fn meta(pubkey: Pubkey, writable: bool) -> AccountMeta {
    if writable { AccountMeta::new(pubkey, false) } else { AccountMeta::new_readonly(pubkey, false) }
}

pub type Key = SPubkey;

// ---- added for the per-instruction and attack suites -----------------------------------------

use anchor_lang::error::ErrorCode as AnchorError;
use gpu_market::instructions::UpdateProviderArgs;

/// The runtime error Anchor's own `code` produces in instruction `ix`.
pub fn anchor_err(ix: u8, code: AnchorError) -> TransactionError {
    custom(ix, code as u32)
}

/// The program's error `e` in instruction `ix`.
pub fn program_err(ix: u8, e: gpu_market::errors::GpuMarketError) -> TransactionError {
    custom(ix, err_code(e))
}

/// Decodes `Program data:` lines (base64 of discriminator + borsh) into the first event of type `E`.
pub fn event<E: anchor_lang::Event>(logs: &[String]) -> E {
    use anchor_lang::__private::base64::{engine::general_purpose::STANDARD, Engine as _};
    logs.iter()
        .filter_map(|l| l.strip_prefix("Program data: "))
        .filter_map(|d| STANDARD.decode(d).ok())
        .find(|bytes| bytes.starts_with(E::DISCRIMINATOR))
        .map(|bytes| E::deserialize(&mut &bytes[E::DISCRIMINATOR.len()..]).expect("event borsh"))
        .unwrap_or_else(|| panic!("no {} event in logs: {logs:#?}", std::any::type_name::<E>()))
}

/// Asserts that the logs carry exactly `expected` (every field, byte for byte).
pub fn assert_event<E: anchor_lang::Event>(logs: &[String], expected: E) {
    let got: E = event(logs);
    assert_eq!(
        anchor_lang::Event::data(&got),
        anchor_lang::Event::data(&expected),
        "{} differs",
        std::any::type_name::<E>()
    );
}

/// Replaces every occurrence of account `old` in `ix` by `new`.
pub fn swap_account(mut ix: Instruction, old: Pubkey, new: Pubkey) -> Instruction {
    let mut found = false;
    for m in ix.accounts.iter_mut().filter(|m| m.pubkey == old) {
        m.pubkey = new;
        found = true;
    }
    assert!(found, "account {old} not in instruction");
    ix
}

/// Marks account `key` of `ix` as not signing.
pub fn unsign(mut ix: Instruction, key: Pubkey) -> Instruction {
    let m = ix.accounts.iter_mut().find(|m| m.pubkey == key).expect("account in instruction");
    m.is_signer = false;
    ix
}

/// The ed25519 signing key behind a Solana keypair (validators attest with their authority).
pub fn signing_key(k: &Keypair) -> SigningKey {
    SigningKey::from_bytes(&k.to_bytes()[..32].try_into().unwrap())
}

/// One Ed25519-program instruction with one signature per signer over one shared copy of
/// `message`. Layout: [count, pad, offsets x n] [pubkeys x n] [signatures x n] [message].
/// One Ed25519 instruction carrying `(signer, message)` entries, each message stored once per
/// entry, everything inside the instruction (the layout `slash_equivocation` expects).
pub fn ed25519_entries_ix(entries: &[(&SigningKey, &[u8])]) -> Instruction {
    let n = entries.len() as u16;
    let mut body = Vec::new();
    let mut offsets = Vec::new();
    let header = 2 + 14 * n;
    for (signer, message) in entries {
        let pk_off = header + body.len() as u16;
        body.extend_from_slice(&signer.verifying_key().to_bytes());
        let sig_off = header + body.len() as u16;
        body.extend_from_slice(&signer.sign(message).to_bytes());
        let msg_off = header + body.len() as u16;
        body.extend_from_slice(message);
        for v in [sig_off, u16::MAX, pk_off, u16::MAX, msg_off, message.len() as u16, u16::MAX] {
            offsets.extend_from_slice(&v.to_le_bytes());
        }
    }
    let mut data = vec![n as u8, 0];
    data.extend_from_slice(&offsets);
    data.extend_from_slice(&body);
    Instruction { program_id: ED25519_PROGRAM_ID, accounts: vec![], data }
}

pub fn ed25519_multi_ix(signers: &[&SigningKey], message: &[u8]) -> Instruction {
    let n = signers.len() as u16;
    let header = 2 + 14 * n;
    let msg_off = header + 96 * n;
    let mut data = vec![n as u8, 0];
    for i in 0..n {
        let (pk_off, sig_off) = (header + 32 * i, header + 32 * n + 64 * i);
        for v in [sig_off, u16::MAX, pk_off, u16::MAX, msg_off, message.len() as u16, u16::MAX] {
            data.extend_from_slice(&v.to_le_bytes());
        }
    }
    for s in signers {
        data.extend_from_slice(&s.verifying_key().to_bytes());
    }
    for s in signers {
        data.extend_from_slice(&s.sign(message).to_bytes());
    }
    data.extend_from_slice(message);
    Instruction { program_id: ED25519_PROGRAM_ID, accounts: vec![], data }
}

/// The compact settle signature instruction: one copy of the attestation message (receipt
/// digest || approved); the worker signs its first `RECEIPT_DIGEST_LEN` bytes, each attester
/// all of it.
pub fn ed25519_settle_ix(worker: &SigningKey, attesters: &[&SigningKey], attestation: &[u8]) -> Instruction {
    let receipt_len = gpu_market::receipt::RECEIPT_DIGEST_LEN;
    let n = 1 + attesters.len() as u16;
    let header = 2 + 14 * n;
    let msg_off = header + 96 * n;
    let mut data = vec![n as u8, 0];
    let mut signed: Vec<(&SigningKey, &[u8])> = vec![(worker, &attestation[..receipt_len])];
    signed.extend(attesters.iter().map(|k| (*k, attestation)));
    for (i, (_, m)) in signed.iter().enumerate() {
        let i = i as u16;
        let (pk_off, sig_off) = (header + 32 * i, header + 32 * n + 64 * i);
        for v in [sig_off, u16::MAX, pk_off, u16::MAX, msg_off, m.len() as u16, u16::MAX] {
            data.extend_from_slice(&v.to_le_bytes());
        }
    }
    for (k, _) in &signed {
        data.extend_from_slice(&k.verifying_key().to_bytes());
    }
    for (k, m) in &signed {
        data.extend_from_slice(&k.sign(m).to_bytes());
    }
    data.extend_from_slice(attestation);
    Instruction { program_id: ED25519_PROGRAM_ID, accounts: vec![], data }
}

/// `gpu_spec` with the bench's model and region and `gpus` GPUs.
pub fn gpu_spec(gpus: u16) -> GpuSpec {
    let mut gpu_model = [0u8; 32];
    gpu_model[..4].copy_from_slice(b"H100");
    let mut region = [0u8; 16];
    region[..7].copy_from_slice(b"eu-west");
    GpuSpec { gpu_model, gpu_count: gpus, vram_mib: 81_920, region }
}

pub fn no_update() -> UpdateProviderArgs {
    UpdateProviderArgs { price_per_gpu_second: None, spec: None, accepting_jobs: None, endpoint: None }
}

impl Bench {
    pub fn admin_kp(&self) -> Keypair { self.admin.insecure_clone() }
    pub fn user_kp(&self) -> Keypair { self.user.key.insecure_clone() }
    pub fn owner_kp(&self) -> Keypair { self.provider_owner.key.insecure_clone() }
    pub fn va_kp(&self) -> Keypair { self.validator_authority.insecure_clone() }
    /// The worker key as a Solana keypair (it may sign `accept_job`).
    pub fn worker_kp(&self) -> Keypair { Keypair::new_from_array(self.worker.to_bytes()) }

    /// The bench validator's stake token account (created by `fund_party`, owner = its authority).
    pub fn validator_stake_account(&self) -> Pubkey {
        let va = self.validator_authority.pubkey();
        self.token_accounts_of(&va, &self.stake_mint)[0]
    }

    /// Token accounts of `mint` owned by `owner`, sorted by address.
    pub fn token_accounts_of(&self, owner: &Pubkey, mint: &Pubkey) -> Vec<Pubkey> {
        let mut out: Vec<Pubkey> = self
            .svm
            .accounts_db()
            .inner
            .iter()
            .filter(|(_, a)| a.owner() == &TOKEN_PROGRAM && a.data().len() == TOKEN_ACCOUNT_LEN)
            .filter(|(_, a)| &a.data()[0..32] == mint.as_ref() && &a.data()[32..64] == owner.as_ref())
            .map(|(k, _)| *k)
            .collect();
        out.sort();
        out
    }

    pub fn new_party(&mut self, stake: u64, payment: u64) -> Party {
        self.fund_party(Keypair::new(), stake, payment)
    }

    pub fn provider_address(&self, owner: &Pubkey) -> Pubkey {
        pda(&[gpu_market::seeds::PROVIDER, self.market.as_ref(), owner.as_ref()])
    }

    pub fn validator_address(&self, authority: &Pubkey) -> Pubkey {
        pda(&[gpu_market::seeds::VALIDATOR, self.market.as_ref(), authority.as_ref()])
    }

    /// Registers a new funded validator with `bond`; returns its party and Validator account.
    pub fn add_validator(&mut self, bond: u64) -> (Party, Pubkey) {
        let v = self.new_party(bond, 0);
        let ix = self.ix_register_validator(&v.key.pubkey(), v.stake, bond);
        self.send(&[ix], &[&v.key]).unwrap();
        let address = self.validator_address(&v.key.pubkey());
        (v, address)
    }

    /// Registers and stakes a second provider (`gpus` GPUs at `price`); returns (owner, provider).
    pub fn add_provider(&mut self, worker: &SigningKey, gpus: u16, price: u64, stake: u64) -> (Party, Pubkey) {
        let owner = self.new_party(stake, 0);
        let ix = self.ix_register_provider(&owner.key.pubkey(), worker_pubkey(worker), gpus, price);
        self.send(&[ix], &[&owner.key]).unwrap();
        if stake > 0 {
            let ix = self.ix_stake(&owner.key.pubkey(), owner.stake, stake);
            self.send(&[ix], &[&owner.key]).unwrap();
        }
        let provider = self.provider_address(&owner.key.pubkey());
        (owner, provider)
    }

    /// Creates (does not accept) job `job_id` for the bench user; returns (job, escrow).
    pub fn open_job(&mut self, job_id: u64, gpus: u16, deposit: u64) -> (Pubkey, Pubkey) {
        let ix = self.ix_create_job(&self.user, job_id, gpus, deposit);
        let user = self.user_kp();
        self.send(&[ix], &[&user]).unwrap();
        self.job_address(&user.pubkey(), job_id)
    }

    /// The job's user signs `finish_job`.
    pub fn finish(&mut self, job: Pubkey) {
        let user = self.user_kp();
        let ix = self.ix_finish_job(&user.pubkey(), job);
        self.send(&[ix], &[&user]).unwrap();
    }

    /// Sends `ixs` signed by the bench user/owner/validator/admin and returns the error.
    pub fn user_err(&mut self, ixs: &[Instruction]) -> TransactionError { let k = self.user_kp(); self.send_err(ixs, &[&k]) }
    pub fn owner_err(&mut self, ixs: &[Instruction]) -> TransactionError { let k = self.owner_kp(); self.send_err(ixs, &[&k]) }
    pub fn va_err(&mut self, ixs: &[Instruction]) -> TransactionError { let k = self.va_kp(); self.send_err(ixs, &[&k]) }
    pub fn admin_err(&mut self, ixs: &[Instruction]) -> TransactionError { let k = self.admin_kp(); self.send_err(ixs, &[&k]) }
    pub fn as_user(&mut self, ixs: &[Instruction]) -> Vec<String> { let k = self.user_kp(); self.send(ixs, &[&k]).unwrap().logs }
    pub fn as_owner(&mut self, ixs: &[Instruction]) -> Vec<String> { let k = self.owner_kp(); self.send(ixs, &[&k]).unwrap().logs }
    pub fn as_va(&mut self, ixs: &[Instruction]) -> Vec<String> { let k = self.va_kp(); self.send(ixs, &[&k]).unwrap().logs }
    pub fn as_admin(&mut self, ixs: &[Instruction]) -> Vec<String> { let k = self.admin_kp(); self.send(ixs, &[&k]).unwrap().logs }

    pub fn ix_update_params(&self, authority: &Pubkey, params: MarketParams) -> Instruction {
        Self::ix(
            gpu_market::instruction::UpdateParams { params },
            gpu_market::accounts::UpdateParams { authority: *authority, market: self.market },
        )
    }

    pub fn ix_set_paused(&self, authority: &Pubkey, paused: bool) -> Instruction {
        Self::ix(
            gpu_market::instruction::SetPaused { paused },
            gpu_market::accounts::SetPaused { authority: *authority, market: self.market },
        )
    }

    pub fn ix_propose_authority(&self, authority: &Pubkey, new_authority: Pubkey) -> Instruction {
        Self::ix(
            gpu_market::instruction::ProposeAuthority { new_authority },
            gpu_market::accounts::ProposeAuthority { authority: *authority, market: self.market },
        )
    }

    pub fn ix_accept_authority(&self, new_authority: &Pubkey) -> Instruction {
        Self::ix(
            gpu_market::instruction::AcceptAuthority {},
            gpu_market::accounts::AcceptAuthority { new_authority: *new_authority, market: self.market },
        )
    }

    pub fn ix_update_provider(&self, owner: &Pubkey, args: UpdateProviderArgs) -> Instruction {
        Self::ix(
            gpu_market::instruction::UpdateProvider { args },
            gpu_market::accounts::UpdateProvider { owner: *owner, provider: self.provider_address(owner) },
        )
    }

    pub fn ix_rotate_worker_key(&self, owner: &Pubkey, new_worker_key: Pubkey, expires_at: i64) -> Instruction {
        Self::ix(
            gpu_market::instruction::RotateWorkerKey { new_worker_key, expires_at },
            gpu_market::accounts::RotateWorkerKey {
                owner: *owner,
                market: self.market,
                provider: self.provider_address(owner),
            },
        )
    }

    pub fn ix_request_unstake(&self, owner: &Pubkey, amount: u64) -> Instruction {
        Self::ix(
            gpu_market::instruction::RequestUnstake { amount },
            gpu_market::accounts::RequestUnstake {
                owner: *owner,
                market: self.market,
                provider: self.provider_address(owner),
            },
        )
    }

    pub fn ix_withdraw_unstaked(&self, owner: &Pubkey, to: Pubkey) -> Instruction {
        Self::ix(
            gpu_market::instruction::WithdrawUnstaked {},
            gpu_market::accounts::WithdrawUnstaked {
                owner: *owner,
                market: self.market,
                provider: self.provider_address(owner),
                stake_mint: self.stake_mint,
                stake_vault: self.stake_vault,
                owner_stake_account: to,
                token_program: TOKEN_PROGRAM,
            },
        )
    }

    pub fn ix_request_validator_exit(&self, authority: &Pubkey) -> Instruction {
        Self::ix(
            gpu_market::instruction::RequestValidatorExit {},
            gpu_market::accounts::RequestValidatorExit {
                authority: *authority,
                market: self.market,
                validator: self.validator_address(authority),
            },
        )
    }

    pub fn ix_withdraw_validator_bond(&self, authority: &Pubkey, to: Pubkey) -> Instruction {
        Self::ix(
            gpu_market::instruction::WithdrawValidatorBond {},
            gpu_market::accounts::WithdrawValidatorBond {
                authority: *authority,
                market: self.market,
                validator: self.validator_address(authority),
                stake_mint: self.stake_mint,
                stake_vault: self.stake_vault,
                authority_stake_account: to,
                token_program: TOKEN_PROGRAM,
            },
        )
    }

    pub fn ix_top_up(&self, user: &Pubkey, from: Pubkey, job: Pubkey, amount: u64) -> Instruction {
        Self::ix(
            gpu_market::instruction::TopUp { amount },
            gpu_market::accounts::TopUp {
                user: *user,
                market: self.market,
                job,
                escrow: escrow_address(&job),
                payment_mint: self.payment_mint,
                user_payment_account: from,
                token_program: TOKEN_PROGRAM,
            },
        )
    }

    fn refund_accounts(&self, signer: &Pubkey, job: Pubkey, user_payment: Pubkey) -> gpu_market::accounts::RefundJob {
        gpu_market::accounts::RefundJob {
            signer: *signer,
            market: self.market,
            provider: self.provider,
            job,
            escrow: escrow_address(&job),
            payment_mint: self.payment_mint,
            user_payment_account: user_payment,
            token_program: TOKEN_PROGRAM,
        }
    }

    pub fn ix_cancel_job(&self, signer: &Pubkey, job: Pubkey, user_payment: Pubkey) -> Instruction {
        Self::ix(gpu_market::instruction::CancelJob {}, self.refund_accounts(signer, job, user_payment))
    }

    fn end_accounts(&self, signer: &Pubkey, job: Pubkey) -> gpu_market::accounts::EndJob {
        gpu_market::accounts::EndJob { signer: *signer, provider: self.provider, job }
    }

    pub fn ix_expire_job(&self, signer: &Pubkey, job: Pubkey) -> Instruction {
        Self::ix(gpu_market::instruction::ExpireJob {}, self.end_accounts(signer, job))
    }

    pub fn ix_decline_job(&self, signer: &Pubkey, job: Pubkey) -> Instruction {
        Self::ix(gpu_market::instruction::DeclineJob {}, self.end_accounts(signer, job))
    }

    pub fn ix_complete_job(&self, signer: &Pubkey, job: Pubkey) -> Instruction {
        Self::ix(gpu_market::instruction::CompleteJob {}, self.end_accounts(signer, job))
    }

    pub fn ix_set_treasury(&self, authority: &Pubkey, treasury: Pubkey) -> Instruction {
        Self::ix(
            gpu_market::instruction::SetTreasury {},
            gpu_market::accounts::SetTreasury { authority: *authority, market: self.market, treasury },
        )
    }

    pub fn ix_withdraw_fees(&self) -> Instruction {
        Self::ix(
            gpu_market::instruction::WithdrawFees {},
            gpu_market::accounts::WithdrawFees {
                market: self.market,
                payment_mint: self.payment_mint,
                fee_vault: self.fee_vault,
                treasury: self.market_state().treasury,
                token_program: TOKEN_PROGRAM,
            },
        )
    }

    pub fn ix_sweep_vault(&self, destination: Pubkey) -> Instruction {
        Self::ix(
            gpu_market::instruction::SweepVault {},
            gpu_market::accounts::SweepVault {
                market: self.market,
                stake_mint: self.stake_mint,
                stake_vault: self.stake_vault,
                treasury: self.market_state().treasury,
                destination,
                token_program: TOKEN_PROGRAM,
            },
        )
    }

    /// Anyone (here a fresh funded stranger) sends `amount` of `mint` straight to `to`, a
    /// program-owned token account: a donation, which must never break anything.
    pub fn donate(&mut self, mint: Pubkey, to: Pubkey, amount: u64) {
        let stranger = Keypair::new();
        self.svm.airdrop(&stranger.pubkey(), 1_000_000_000).unwrap();
        let from = self.create_token_account(mint, &stranger.pubkey());
        self.mint_to(mint, from, amount);
        let ix = spl_token::instruction::transfer(&TOKEN_PROGRAM, &from, &to, &stranger.pubkey(), &[], amount).unwrap();
        self.send(&[ix], &[&stranger]).unwrap();
    }

    fn slash_targets(&self, job: Pubkey, reporter_stake: Pubkey) -> gpu_market::accounts::SlashTargets {
        gpu_market::accounts::SlashTargets {
            market: self.market,
            provider: self.provider,
            job,
            stake_mint: self.stake_mint,
            stake_vault: self.stake_vault,
            reporter_stake_account: reporter_stake,
            token_program: TOKEN_PROGRAM,
        }
    }

    /// The record of (job incarnation, seq); reads the job's `started_at`.
    pub fn equivocation_record(&self, job: &Pubkey, seq: u64) -> Pubkey {
        let started_at = self.account::<Job>(job).map_or(0, |j| j.started_at);
        pda(&[gpu_market::seeds::EQUIVOCATION, job.as_ref(), &started_at.to_le_bytes(), &seq.to_le_bytes()])
    }

    /// `slash_equivocation` by `reporter` for the bench user's job (reward to `reporter_stake`).
    pub fn ix_slash_equivocation(&self, reporter: &Pubkey, reporter_stake: Pubkey, job: Pubkey, first: Receipt, second: Receipt) -> Instruction {
        Self::ix(
            gpu_market::instruction::SlashEquivocation { first, second },
            gpu_market::accounts::SlashEquivocation {
                reporter: *reporter,
                targets: self.slash_targets(job, reporter_stake),
                record: self.equivocation_record(&job, first.seq),
                instructions: INSTRUCTIONS_SYSVAR,
                system_program: SYSTEM_PROGRAM,
            },
        )
    }

    /// [Ed25519(first), Ed25519(second), slash_equivocation], both receipts signed by `signer`.
    pub fn equivocation_ixs(&self, signer: &SigningKey, reporter: &Pubkey, reporter_stake: Pubkey, job: Pubkey, first: Receipt, second: Receipt) -> Vec<Instruction> {
        let (m1, m2) = (self.receipt_digest(&job, &first), self.receipt_digest(&job, &second));
        vec![
            ed25519_entries_ix(&[(signer, &m1), (signer, &m2)]),
            self.ix_slash_equivocation(reporter, reporter_stake, job, first, second),
        ]
    }

    /// `slash_downtime` submitted by `validator_authority` (reward to `reporter_stake`); `others`
    /// are the extra quorum members, passed as (Validator account, its authority as signer).
    pub fn ix_slash_downtime(&self, validator_authority: &Pubkey, reporter_stake: Pubkey, job: Pubkey, others: &[Pubkey]) -> Instruction {
        self.ix_slash_downtime_seen(validator_authority, reporter_stake, job, others, 0)
    }

    /// `slash_downtime` attesting that the newest proof the signers accepted ended at
    /// `last_proof_window_end`.
    pub fn ix_slash_downtime_seen(&self, validator_authority: &Pubkey, reporter_stake: Pubkey, job: Pubkey, others: &[Pubkey], last_proof_window_end: i64) -> Instruction {
        let mut ix = Self::ix(
            gpu_market::instruction::SlashDowntime { last_proof_window_end },
            gpu_market::accounts::SlashDowntime {
                validator_authority: *validator_authority,
                validator: self.validator_address(validator_authority),
                targets: self.slash_targets(job, reporter_stake),
            },
        );
        for authority in others {
            ix.accounts.push(meta(self.validator_address(authority), false));
            ix.accounts.push(AccountMeta::new_readonly(*authority, true));
        }
        ix
    }

    /// [Ed25519(worker over the receipt, attesters over the attestation, one shared copy of the
    /// 181 attestation bytes), settle (approving the whole claim) + extra Validator accounts].
    pub fn quorum_settle_ixs(&self, job: Pubkey, r: Receipt, attesters: &[&Keypair], extra_validators: &[Pubkey]) -> Vec<Instruction> {
        self.quorum_settle_approved_ixs(job, r, r.cumulative_seconds, attesters, extra_validators)
    }

    pub fn quorum_settle_approved_ixs(&self, job: Pubkey, r: Receipt, approved: u64, attesters: &[&Keypair], extra_validators: &[Pubkey]) -> Vec<Instruction> {
        let msg = gpu_market::receipt::attestation_message(&self.receipt_digest(&job, &r), approved);
        let keys: Vec<SigningKey> = attesters.iter().map(|k| signing_key(k)).collect();
        let mut settle = self.ix_settle_approved(&self.validator_authority.pubkey(), job, r, approved);
        settle.accounts.extend(extra_validators.iter().map(|v| meta(*v, true)));
        vec![ed25519_settle_ix(&self.worker, &keys.iter().collect::<Vec<_>>(), &msg), settle]
    }

    /// Whether `job` holds the `ClosedJob` tombstone `close_job` leaves (program-owned, for good).
    pub fn is_tombstone(&self, job: &Pubkey) -> bool {
        self.svm.get_account(job).is_some_and(|a| a.owner == gpu_market::ID)
            && self.account::<gpu_market::state::ClosedJob>(job).is_some()
    }

    /// `started_at` of a job.
    pub fn started(&self, job: &Pubkey) -> i64 {
        self.job_state(job).started_at
    }
}

/// Two receipts for the same job and seq that differ only in their proof hash.
pub fn equivocating_pair(seq: u64, cumulative_seconds: u64, window_end: i64) -> (Receipt, Receipt) {
    let first = receipt(seq, cumulative_seconds, window_end);
    (first, Receipt { proof_hash: [0xEE; 32], ..first })
}

impl Bench {
    /// Creates market `id` of the bench admin with default params; returns its address.
    pub fn second_market(&mut self, id: u64) -> Pubkey {
        let ix = self.ix_initialize_market(id, default_params());
        self.as_admin(&[ix]);
        pda(&[gpu_market::seeds::MARKET, self.admin.pubkey().as_ref(), &id.to_le_bytes()])
    }

    /// The bench user reports the worker's equivocation on `job` at `seq` (reward to the
    /// user's stake account): the provider is slashed and jailed, the job Failed.
    pub fn report_equivocation(&mut self, job: Pubkey, seq: u64) -> Vec<String> {
        let (first, second) = equivocating_pair(seq, 1, self.started(&job) + 1);
        let user = self.user_kp();
        let ixs = self.equivocation_ixs(&self.worker.clone(), &user.pubkey(), self.user.stake, job, first, second);
        self.send(&ixs, &[&user]).unwrap().logs
    }
}

impl Bench {
    /// Registers the bench provider owner (bench worker key, 4 GPUs at 10) as a provider of
    /// another `market`; returns that Provider account.
    pub fn register_provider_in(&mut self, market: Pubkey) -> Pubkey {
        let owner = self.provider_owner.key.pubkey();
        let ix = self.ix_register_provider(&owner, worker_pubkey(&self.worker), 4, 10);
        let elsewhere = pda(&[gpu_market::seeds::PROVIDER, market.as_ref(), owner.as_ref()]);
        let ix = swap_account(swap_account(ix, self.provider_address(&owner), elsewhere), self.market, market);
        self.as_owner(&[ix]);
        elsewhere
    }
}

impl Bench {
    /// Registers `v` (bonding `bond` from its stake account) as a validator of another `market`;
    /// returns that Validator account.
    pub fn register_validator_in(&mut self, market: Pubkey, v: &Party, bond: u64) -> Pubkey {
        let authority = v.key.pubkey();
        let elsewhere = pda(&[gpu_market::seeds::VALIDATOR, market.as_ref(), authority.as_ref()]);
        let vault = pda(&[gpu_market::seeds::STAKE_VAULT, market.as_ref()]);
        let ix = self.ix_register_validator(&authority, v.stake, bond);
        let ix = swap_account(swap_account(ix, self.validator_address(&authority), elsewhere), self.stake_vault, vault);
        let ix = swap_account(ix, self.market, market);
        self.send(&[ix], &[&v.key]).unwrap();
        elsewhere
    }
}

impl Bench {
    /// A validator registered (bond 5_000) in a second market (id 1) of the bench admin.
    pub fn foreign_validator(&mut self) -> (Party, Pubkey) {
        let other = self.second_market(1);
        let stranger = self.new_party(5_000, 0);
        let elsewhere = self.register_validator_in(other, &stranger, 5_000);
        (stranger, elsewhere)
    }

    /// A bench with two more validators (bond 5_000), a committee of all three (the bench
    /// validator first) with `quorum`, and a running 1-GPU job (deposit 10_000) started at `T0`.
    pub fn with_quorum(quorum: u8) -> (Bench, Pubkey, Vec<(Keypair, Pubkey)>) {
        let mut b = Bench::new();
        let others: Vec<(Keypair, Pubkey)> = (1..3).map(|_| { let (v, a) = b.add_validator(5_000); (v.key, a) }).collect();
        b.committee.extend(others.iter().map(|(k, _)| k.pubkey()));
        b.quorum = quorum;
        let (job, _) = b.running_job(1, 1, 10_000);
        (b, job, others)
    }
}

impl Bench {
    pub fn ix_update_validator(&self, authority: &Pubkey, endpoint: &str) -> Instruction {
        Self::ix(
            gpu_market::instruction::UpdateValidator { endpoint: endpoint.into() },
            gpu_market::accounts::UpdateValidator { authority: *authority, validator: self.validator_address(authority) },
        )
    }

    pub fn ix_claim_validator_rewards(&self, authority: &Pubkey, destination: Pubkey) -> Instruction {
        Self::ix(
            gpu_market::instruction::ClaimValidatorRewards {},
            gpu_market::accounts::ClaimValidatorRewards {
                authority: *authority,
                market: self.market,
                validator: self.validator_address(authority),
                payment_mint: self.payment_mint,
                fee_vault: self.fee_vault,
                destination,
                token_program: TOKEN_PROGRAM,
            },
        )
    }

    pub fn ix_replace_committee_member(&self, user: &Pubkey, job: Pubkey, index: u8, previous: &Pubkey, new: &Pubkey) -> Instruction {
        Self::ix(
            gpu_market::instruction::ReplaceCommitteeMember { index },
            gpu_market::accounts::ReplaceCommitteeMember {
                user: *user,
                market: self.market,
                provider: self.provider,
                job,
                previous_validator: self.validator_address(previous),
                new_validator: self.validator_address(new),
            },
        )
    }

    /// [Ed25519(two attestations by `signer`), slash_validator_equivocation] against the
    /// Validator account of `authority`.
    #[allow(clippy::too_many_arguments)]
    pub fn validator_equivocation_ixs(&self, signer: &SigningKey, authority: &Pubkey, reporter: &Pubkey, reporter_stake: Pubkey, job: Pubkey, first: (Receipt, u64), second: (Receipt, u64)) -> Vec<Instruction> {
        let m1 = gpu_market::receipt::attestation_message(&self.receipt_digest(&job, &first.0), first.1);
        let m2 = gpu_market::receipt::attestation_message(&self.receipt_digest(&job, &second.0), second.1);
        let validator = self.validator_address(authority);
        let started_at = self.job_state(&job).started_at;
        let record = pda(&[gpu_market::seeds::VALIDATOR_EQUIVOCATION, validator.as_ref(), job.as_ref(), &started_at.to_le_bytes(), &first.0.seq.to_le_bytes()]);
        vec![
            ed25519_entries_ix(&[(signer, &m1), (signer, &m2)]),
            Self::ix(
                gpu_market::instruction::SlashValidatorEquivocation { first: first.0, first_approved: first.1, second: second.0, second_approved: second.1 },
                gpu_market::accounts::SlashValidatorEquivocation {
                    reporter: *reporter,
                    market: self.market,
                    job,
                    validator,
                    stake_mint: self.stake_mint,
                    stake_vault: self.stake_vault,
                    reporter_stake_account: reporter_stake,
                    record,
                    instructions: INSTRUCTIONS_SYSVAR,
                    token_program: TOKEN_PROGRAM,
                    system_program: SYSTEM_PROGRAM,
                },
            ),
        ]
    }
}
