use anchor_lang::prelude::*;

/// One variant per failure reason; clients match on the code.
#[error_code]
pub enum GpuMarketError {
    // -- parameters and market --
    #[msg("fee_bps must be at most 2500")]
    FeeTooHigh,
    #[msg("a basis-point parameter must be at most 10000")]
    BpsOutOfRange,
    #[msg("window_seconds must be between 1 and 3600")]
    InvalidWindowSeconds,
    #[msg("min_quorum must be between 1 and 3")]
    InvalidQuorum,
    #[msg("unbonding_seconds must be between 0 and 365 days")]
    InvalidUnbondingSeconds,
    #[msg("max_skew_seconds must be at most 300")]
    InvalidSkew,
    #[msg("max_missed_windows must be between 1 and 1440")]
    InvalidMaxMissedWindows,
    #[msg("the market is paused: no new business until the authority unpauses it")]
    MarketPaused,
    #[msg("the token account does not belong to this market")]
    InvalidTreasury,
    #[msg("wrong mint for this market")]
    InvalidMint,
    #[msg("the stake vault is not this market's")]
    InvalidStakeVault,
    // -- provider --
    #[msg("gpu_count must be between 1 and 256")]
    InvalidGpuCount,
    #[msg("price_per_gpu_second must be greater than zero")]
    InvalidPrice,
    #[msg("the worker key must not be the default key")]
    InvalidWorkerKey,
    #[msg("amount must be greater than zero")]
    ZeroAmount,
    #[msg("the provider is not active")]
    ProviderNotActive,
    #[msg("the provider does not have enough free GPUs")]
    NotEnoughFreeGpus,
    #[msg("the provider's stake does not cover min_stake_per_gpu for the GPUs in use")]
    InsufficientStake,
    #[msg("the provider account belongs to another market")]
    ProviderMarketMismatch,
    #[msg("the worker key has expired; rotate it")]
    WorkerKeyExpired,
    // -- validator --
    #[msg("the bond is below the market's validator_min_bond")]
    BondTooSmall,
    #[msg("the transaction signer is not a registered validator of this market")]
    NotAValidator,
    #[msg("the validator is not active")]
    ValidatorNotActive,
    // -- job --
    #[msg("the deposit must cover at least one window at the job's rate")]
    DepositTooSmall,
    #[msg("the job is not in a state that allows this")]
    InvalidJobStatus,
    #[msg("only the job's user may do this")]
    NotJobUser,
    #[msg("only the provider's worker key or owner may do this")]
    NotProviderSigner,
    #[msg("only the job's user or the provider's owner may do this")]
    NotJobParty,
    #[msg("the job belongs to another provider")]
    JobProviderMismatch,
    #[msg("the job belongs to another market")]
    JobMarketMismatch,
    #[msg("the job's grace period has not ended yet")]
    GracePeriodActive,
    #[msg("the payment account is not owned by the provider's owner")]
    InvalidProviderPaymentAccount,
    // -- settle --
    #[msg("receipt seq must be greater than the last settled seq")]
    StaleSequence,
    #[msg("receipt cumulative_seconds is below the settled seconds")]
    CumulativeDecreased,
    #[msg("receipt window_end must be after the last settled window_end")]
    WindowNotAfterLast,
    #[msg("receipt bills more seconds than wall time allows")]
    BilledSecondsExceedWallTime,
    #[msg("receipt window_end is in the future")]
    WindowEndInFuture,
    #[msg("receipt window_end is after the job ended")]
    WindowAfterJobEnd,
    #[msg("the job's settlement grace period is over")]
    SettlementGraceOver,
    #[msg("the instructions sysvar account is not the real one")]
    InvalidInstructionsSysvar,
    #[msg("no Ed25519 signature instruction precedes settle")]
    MissingEd25519Instruction,
    #[msg("the Ed25519 instruction is malformed (count, offsets or instruction indexes)")]
    MalformedEd25519Instruction,
    #[msg("the receipt is not signed by the provider's worker key")]
    WrongReceiptSigner,
    #[msg("the signed message is not this receipt")]
    ReceiptMessageMismatch,
    #[msg("the job's quorum needs one Ed25519 attestation and one Validator account per extra committee member")]
    QuorumNotMet,
    #[msg("a validator may attest a receipt only once")]
    DuplicateValidator,
    // -- governance, stake, slashing --
    #[msg("only the market authority may do this")]
    NotMarketAuthority,
    #[msg("only the proposed authority may accept the market authority")]
    NotPendingAuthority,
    #[msg("the provider is jailed until its jail time has passed")]
    ProviderJailed,
    #[msg("gpu_count cannot drop below the GPUs in use")]
    GpusInUse,
    #[msg("cannot unstake more than the active stake")]
    UnstakeExceedsStake,
    #[msg("nothing is unbonding")]
    NothingToWithdraw,
    #[msg("the unbonding period has not ended yet")]
    UnbondingNotReleased,
    #[msg("the validator has not requested an exit")]
    ValidatorNotExiting,
    #[msg("the job has not missed enough windows to expire yet")]
    JobNotExpired,
    #[msg("the provider has not missed enough windows to be slashed for downtime")]
    NotEnoughMissedWindows,
    #[msg("equivocation evidence must be two receipts for the same seq")]
    EquivocationSeqMismatch,
    #[msg("the two receipts are identical: no equivocation")]
    NotEquivocation,
    #[msg("a receipt ends before this job started")]
    ReceiptBeforeJobStart,
    // -- math --
    #[msg("arithmetic overflow")]
    MathOverflow,
    #[msg("an account invariant does not hold")]
    InvariantViolated,
    // -- v2 hardening (appended: existing codes keep their numbers) --
    #[msg("reporter_reward_bps must be at most 5000 (a reporter never earns half a slash)")]
    ReporterRewardTooHigh,
    #[msg("temp_critical_c must be 50..=150 and ecc_uncorrected_max at most 1000000")]
    InvalidHealthThresholds,
    #[msg("every retired-key slot holds a key retired less than unbonding_seconds ago; rotate later")]
    RotationTooSoon,
    #[msg("this evidence belongs to an equivocation incident that was already slashed")]
    EquivocationAlreadyPunished,
    #[msg("the treasury must be an initialized, unfrozen token account of the payment mint")]
    TreasuryNotUsable,
    #[msg("the stake vault holds no more than the booked stake and bonds")]
    NothingToSweep,
    #[msg("the sweep destination must be a stake-mint account owned by the treasury's owner")]
    InvalidSweepDestination,
    #[msg("a receipt's window_end is too far in the future to be evidence")]
    EvidenceFromTheFuture,
    #[msg("the fee vault is not this market's")]
    InvalidFeeVault,
    #[msg("the provider's price is above the max_price_per_gpu_second the user signed")]
    PriceAboveLimit,
    #[msg("the fee vault holds nothing to withdraw")]
    NothingToWithdrawFees,
    #[msg("the endpoint must be an http:// or https:// URL of at most 96 printable bytes")]
    InvalidEndpoint,
    #[msg("a committee names 1 to 5 distinct Active validators of this market, none of them the provider")]
    InvalidCommittee,
    #[msg("the quorum must be at least the market's min_quorum, at most 3 and at most the committee size")]
    InvalidJobQuorum,
    #[msg("the signer is not a member of this job's committee")]
    NotCommitteeMember,
    #[msg("approved seconds are below those already paid")]
    ApprovedDecreased,
    #[msg("approved seconds exceed the receipt's cumulative claim")]
    ApprovedExceedsClaim,
    #[msg("the committee member to replace is still Active")]
    MemberStillActive,
    #[msg("no validator rewards to claim")]
    NothingToClaim,
    #[msg("equivocation evidence must be two different attestations for one seq")]
    NotValidatorEquivocation,
    #[msg("the job never started: it cannot be the subject of a slash")]
    JobNeverStarted,
    #[msg("the market parameters in force differ from those the user signed for; read the market again")]
    MarketParamsChanged,
    #[msg("the validator has unclaimed rewards: claim_validator_rewards before withdrawing the bond")]
    RewardsUnclaimed,
    // -- hardware verdicts, wrong answers, ratings (appended: existing codes keep their numbers) --
    #[msg("hardware_quorum must be between 1 and 5")]
    InvalidHardwareQuorum,
    #[msg("hardware_attestation_max_age_seconds must be between 60 and 86400")]
    InvalidHardwareAttestationAge,
    #[msg("verified_record_seconds must be at most 365 days")]
    InvalidVerifiedRecord,
    #[msg("a hardware verdict needs signatures of at least hardware_quorum distinct validators, one Validator account per signature in the same order")]
    HardwareQuorumNotMet,
    #[msg("a signed message is not this hardware verdict")]
    HardwareVerdictMismatch,
    #[msg("the verdict is for another worker key than the provider's current one")]
    HardwareWorkerKeyMismatch,
    #[msg("a passing verdict must be for the provider's declared GPU model, count and VRAM")]
    HardwareSpecMismatch,
    #[msg("the challenge was issued in the future")]
    HardwareChallengeInFuture,
    #[msg("the challenge is older than hardware_attestation_max_age_seconds")]
    HardwareVerdictStale,
    #[msg("the challenge is not newer than the provider's last attested one")]
    HardwareVerdictReplayed,
    #[msg("the provider's owner or worker key cannot attest its own hardware")]
    HardwareAttesterIsProvider,
    #[msg("a signed message is not this challenge answer or row opening")]
    ChallengeMessageMismatch,
    #[msg("the challenge answer is not signed by a key of the provider valid when it was challenged")]
    WrongChallengeSigner,
    #[msg("the Merkle evidence is malformed: leaf count 1..=32768, row index below it, one sibling hash per level with a sibling")]
    InvalidMerkleEvidence,
    #[msg("the opened row's Merkle path leads to the signed root: the answer is consistent")]
    NotAWrongAnswer,
    #[msg("a rating is 1 to 5 stars")]
    InvalidRating,
    #[msg("only a job that billed something can be rated")]
    JobNotBilled,
    #[msg("this job was already rated")]
    JobAlreadyRated,
}
