//! The receipt message and the Ed25519-program instructions that sign it.
//!
//! `settle` never verifies a signature itself: the runtime's Ed25519 precompile does, before any
//! instruction runs, and rejects the whole transaction if a signature is bad. What `settle` must
//! prove is that such a verified instruction exists and says what it needs: exactly one
//! signature, whose key, signature and message all live inside that same instruction, by the
//! expected key, over exactly the expected message bytes.
use anchor_lang::prelude::*;
use anchor_lang::solana_program::instruction::Instruction;
use solana_instructions_sysvar::{load_current_index_checked, load_instruction_at_checked};

use crate::errors::GpuMarketError;

pub const RECEIPT_DOMAIN: &[u8] = b"gpu-market/receipt/v1";
pub const RECEIPT_MESSAGE_LEN: usize = RECEIPT_DOMAIN.len() + 32 * 3 + 8 * 3 + 32;

/// The receipt a worker key signs for one window (DESIGN section 4).
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    pub seq: u64,
    pub cumulative_seconds: u64,
    pub window_end: i64,
    pub proof_hash: [u8; 32],
}

impl Receipt {
    /// `domain || program_id || market || job || seq || cumulative_seconds || window_end || proof_hash`,
    /// integers little-endian.
    pub fn message(&self, program_id: &Pubkey, market: &Pubkey, job: &Pubkey) -> Vec<u8> {
        let mut m = Vec::with_capacity(RECEIPT_MESSAGE_LEN);
        m.extend_from_slice(RECEIPT_DOMAIN);
        m.extend_from_slice(program_id.as_ref());
        m.extend_from_slice(market.as_ref());
        m.extend_from_slice(job.as_ref());
        m.extend_from_slice(&self.seq.to_le_bytes());
        m.extend_from_slice(&self.cumulative_seconds.to_le_bytes());
        m.extend_from_slice(&self.window_end.to_le_bytes());
        m.extend_from_slice(&self.proof_hash);
        m
    }

    /// The receipt digest, `sha256(message)`: the 32 bytes the worker key signs. It
    /// binds everything the message binds (domain, program, market, job, seq, cumulative,
    /// window end, proof hash) as long as sha256 is collision resistant, and lets an Ed25519
    /// instruction carry 32 bytes per receipt instead of 173.
    pub fn digest(&self, program_id: &Pubkey, market: &Pubkey, job: &Pubkey) -> [u8; RECEIPT_DIGEST_LEN] {
        solana_sha256_hasher::hash(&self.message(program_id, market, job)).to_bytes()
    }
}

/// Length of the receipt digest (sha256).
pub const RECEIPT_DIGEST_LEN: usize = 32;
/// Length of the attestation message: receipt digest then approved seconds.
pub const ATTESTATION_MESSAGE_LEN: usize = RECEIPT_DIGEST_LEN + 8;

/// The attestation message a committee member signs: the receipt digest followed by the
/// approved cumulative seconds (u64 le), 40 bytes. This is the shorter digest form the protocol
/// allows (docs/protocol.md, "Receipts and window proofs"): the digest binds everything the
/// receipt binds (its input starts with the receipt domain and the program, market and job
/// keys), and one copy of these bytes in the Ed25519 instruction serves the worker's signature
/// (its first 32 bytes, the digest) and every attestation. No other message a worker or
/// validator key signs is 32 or 40 bytes starting with a sha256 output, so neither signature
/// can be replayed as something else.
pub fn attestation_message(receipt_digest: &[u8; RECEIPT_DIGEST_LEN], approved_seconds: u64) -> [u8; ATTESTATION_MESSAGE_LEN] {
    let mut m = [0u8; ATTESTATION_MESSAGE_LEN];
    m[..RECEIPT_DIGEST_LEN].copy_from_slice(receipt_digest);
    m[RECEIPT_DIGEST_LEN..].copy_from_slice(&approved_seconds.to_le_bytes());
    m
}

pub const ED25519_PROGRAM_ID: Pubkey = solana_sdk_ids::ed25519_program::ID;
const HEADER_LEN: usize = 2;
const OFFSETS_LEN: usize = 14;
const PUBKEY_LEN: usize = 32;
const SIGNATURE_LEN: usize = 64;
/// Instruction index meaning "this same instruction" in Ed25519 offsets.
const THIS_INSTRUCTION: u16 = u16::MAX;

fn read_u16(data: &[u8], at: usize) -> Result<u16> {
    let bytes = data
        .get(at..at.saturating_add(2))
        .ok_or(GpuMarketError::MalformedEd25519Instruction)?;
    Ok(u16::from_le_bytes([bytes[0], bytes[1]]))
}

fn slice_in(data: &[u8], offset: u16, len: usize) -> Result<&[u8]> {
    let start = usize::from(offset);
    data.get(start..start.saturating_add(len))
        .ok_or_else(|| GpuMarketError::MalformedEd25519Instruction.into())
}

/// The most signatures one Ed25519 instruction may carry here (worker + quorum - 1).
pub const MAX_SIGNATURES: usize = 16;

/// One signature of an Ed25519-program instruction: its key and the exact signed bytes.
pub struct SignedMessage {
    pub signer: Pubkey,
    pub message: Vec<u8>,
}

/// Reads every signature of `ix`, found at absolute index `ix_index` of the transaction, which
/// must be an Ed25519-program instruction whose signature, key and message all lie inside `ix`
/// itself (instruction index `u16::MAX` or `ix_index`). The precompile has already verified
/// each signature, or the transaction would not be running; this only tells what was signed.
pub fn ed25519_entries(ix: &Instruction, ix_index: u16) -> Result<Vec<SignedMessage>> {
    require_keys_eq!(
        ix.program_id,
        ED25519_PROGRAM_ID,
        GpuMarketError::MissingEd25519Instruction
    );
    let data = &ix.data;
    let count = usize::from(*data.first().ok_or(GpuMarketError::MalformedEd25519Instruction)?);
    require!(
        (1..=MAX_SIGNATURES).contains(&count)
            && data.len() >= OFFSETS_LEN.saturating_mul(count).saturating_add(HEADER_LEN),
        GpuMarketError::MalformedEd25519Instruction
    );
    let mut entries = Vec::with_capacity(count);
    for i in 0..count {
        // Offsets record: seven u16 fields, in this order.
        let record = OFFSETS_LEN.saturating_mul(i).saturating_add(HEADER_LEN);
        let field = |k: usize| read_u16(data, record.saturating_add(k.saturating_mul(2)));
        let signature_offset = field(0)?;
        let signature_ix = field(1)?;
        let pubkey_offset = field(2)?;
        let pubkey_ix = field(3)?;
        let message_offset = field(4)?;
        let message_len = field(5)?;
        let message_ix = field(6)?;
        for index in [signature_ix, pubkey_ix, message_ix] {
            require!(
                index == THIS_INSTRUCTION || index == ix_index,
                GpuMarketError::MalformedEd25519Instruction
            );
        }
        slice_in(data, signature_offset, SIGNATURE_LEN)?;
        let signer = slice_in(data, pubkey_offset, PUBKEY_LEN)?;
        let message = slice_in(data, message_offset, usize::from(message_len))?;
        entries.push(SignedMessage {
            signer: Pubkey::try_from(signer)
                .map_err(|_| GpuMarketError::MalformedEd25519Instruction)?,
            message: message.to_vec(),
        });
    }
    Ok(entries)
}

/// The signers of `ix` (see [`ed25519_entries`]), each of which must have signed exactly
/// `expected_message`. Several signatures share one copy of the message, which keeps a quorum
/// settle within one packet.
pub fn ed25519_signers(ix: &Instruction, ix_index: u16, expected_message: &[u8]) -> Result<Vec<Pubkey>> {
    ed25519_entries(ix, ix_index)?
        .into_iter()
        .map(|entry| {
            require!(
                entry.message == expected_message,
                GpuMarketError::ReceiptMessageMismatch
            );
            Ok(entry.signer)
        })
        .collect()
}

/// The signatures of the Ed25519-program instruction right before the executing one, read
/// through the Instructions sysvar `sysvar` (whose address the caller's accounts check); see
/// [`ed25519_entries`] for what is guaranteed about each entry.
pub fn preceding_ed25519_entries(sysvar: &AccountInfo) -> Result<Vec<SignedMessage>> {
    let current = load_current_index_checked(sysvar)?;
    let index = current
        .checked_sub(1)
        .ok_or(GpuMarketError::MissingEd25519Instruction)?;
    let ix = load_instruction_at_checked(usize::from(index), sysvar)?;
    ed25519_entries(&ix, index)
}
