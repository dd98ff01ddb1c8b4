//! The messages of hardware challenges the chain reads, and the challenge's Merkle rule.
//!
//! Pure: no accounts, no runtime. The SDK spells the same bytes (`gpu_market.hardware`,
//! Merkle hashing in `gpu_market.challenge`); `docs/protocol.md` ("Hardware verdicts") holds
//! the layouts and `program-tests/tests/hardware.rs` pins byte vectors the Python tests share.
//!
//! Every message here is signed as its sha256 digest, like receipts: a 32-byte digest of a
//! domain-separated message, so no signature over one can be read as a signature over another
//! (receipt digests, attestation messages, other challenge messages) unless sha256 collides.
use anchor_lang::prelude::*;

use crate::state::GpuSpec;

pub const HARDWARE_DOMAIN: &[u8] = b"gpu-market/hardware/v1";
pub const ANSWER_DOMAIN: &[u8] = b"gpu-market/challenge-answer/v1";
pub const ROW_DOMAIN: &[u8] = b"gpu-market/challenge-row/v1";
/// Inner Merkle nodes: `sha256(NODE_DOMAIN || left || right)` (`challenge.NODE_DOMAIN`).
pub const NODE_DOMAIN: &[u8] = b"gpu-market/challenge/node/v1";
/// A result has at most 2^15 rows, so a Merkle path has at most 15 sibling hashes.
pub const MAX_MERKLE_DEPTH: usize = 15;
pub const MAX_LEAF_COUNT: u32 = 1 << MAX_MERKLE_DEPTH;

fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    solana_sha256_hasher::hashv(parts).to_bytes()
}

/// A verdict a quorum of validators signs (`attest_hardware`): the challenged worker key
/// passed (or failed) a challenge for this GPU model, count and VRAM.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct HardwareVerdictArgs {
    pub worker_key: Pubkey,
    pub gpu_model: [u8; 32],
    pub gpu_count: u16,
    pub vram_mib: u32,
    pub passed: bool,
    /// When the validators issued the challenge (unix seconds, their clock).
    pub challenged_at: i64,
    /// sha256 of the challenge's canonical bytes.
    pub challenge_digest: [u8; 32],
}

impl HardwareVerdictArgs {
    /// `HARDWARE_DOMAIN || program_id || market || provider || worker_key || gpu_model(32) ||
    /// gpu_count: u16 || vram_mib: u32 || passed: u8 || challenged_at: i64 ||
    /// challenge_digest(32)`, integers little-endian; validators sign its sha256.
    pub fn digest(&self, program_id: &Pubkey, market: &Pubkey, provider: &Pubkey) -> [u8; 32] {
        sha256(&[
            HARDWARE_DOMAIN,
            program_id.as_ref(),
            market.as_ref(),
            provider.as_ref(),
            self.worker_key.as_ref(),
            &self.gpu_model,
            &self.gpu_count.to_le_bytes(),
            &self.vram_mib.to_le_bytes(),
            &[u8::from(self.passed)],
            &self.challenged_at.to_le_bytes(),
            &self.challenge_digest,
        ])
    }

    /// Whether the verdict is about `spec`'s GPU model, count and VRAM.
    pub fn is_for(&self, spec: &GpuSpec) -> bool {
        self.gpu_model == spec.gpu_model && self.gpu_count == spec.gpu_count && self.vram_mib == spec.vram_mib
    }
}

/// sha256 of `keys` sorted by bytes and concatenated: who attested, in 32 bytes.
pub fn attesters_hash(keys: &mut [Pubkey]) -> [u8; 32] {
    keys.sort_unstable_by(|a, b| a.as_ref().cmp(b.as_ref()));
    let parts: Vec<&[u8]> = keys.iter().map(|k| k.as_ref()).collect();
    sha256(&parts)
}

/// What a worker signed about one challenge: its commitment (`root`, in the answer) and one
/// opened row (`leaf_hash` and the sibling hashes of its Merkle path). The chain cannot
/// recompute a row (that is the validator's job), but it can recompute the path: a path
/// that does not lead to the root the same worker signed is a wrong answer by the worker's
/// own signatures (`slash_wrong_answer`).
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct WrongAnswerEvidence {
    pub challenge_digest: [u8; 32],
    /// When the challenge was issued (unix seconds), as the worker signed it: the keys that
    /// count are those that signed for this provider then.
    pub challenged_at: i64,
    pub root: [u8; 32],
    /// Rows of the result (the challenge's `n`): fixes the tree's shape.
    pub leaf_count: u32,
    pub row_index: u32,
    /// `sha256(ROW_LEAF_DOMAIN || row_index: u32 || row as int32 LE)` (`challenge.row_leaf`).
    pub leaf_hash: [u8; 32],
    /// From the leaf level up, one per level where the node has a sibling.
    pub siblings: Vec<[u8; 32]>,
}

impl WrongAnswerEvidence {
    /// `ANSWER_DOMAIN || program_id || market || provider || challenge_digest ||
    /// challenged_at: i64 || root`; the worker signs its sha256 with its answer.
    pub fn answer_digest(&self, program_id: &Pubkey, market: &Pubkey, provider: &Pubkey) -> [u8; 32] {
        sha256(&[
            ANSWER_DOMAIN,
            program_id.as_ref(),
            market.as_ref(),
            provider.as_ref(),
            &self.challenge_digest,
            &self.challenged_at.to_le_bytes(),
            &self.root,
        ])
    }

    /// `ROW_DOMAIN || program_id || market || provider || challenge_digest || root ||
    /// leaf_count: u32 || row_index: u32 || leaf_hash || sha256(siblings concatenated)`; the
    /// worker signs its sha256 with each opened row. It binds the path the worker sent, so
    /// nobody but the worker can make a path that misses the root.
    pub fn row_digest(&self, program_id: &Pubkey, market: &Pubkey, provider: &Pubkey) -> [u8; 32] {
        let siblings: Vec<&[u8]> = self.siblings.iter().map(|s| s.as_slice()).collect();
        let path = sha256(&siblings);
        sha256(&[
            ROW_DOMAIN,
            program_id.as_ref(),
            market.as_ref(),
            provider.as_ref(),
            &self.challenge_digest,
            &self.root,
            &self.leaf_count.to_le_bytes(),
            &self.row_index.to_le_bytes(),
            &self.leaf_hash,
            &path,
        ])
    }

    /// The root the opened row's path leads to, or None when the path is malformed (leaf count
    /// outside 1..=2^15, row index not below it, or not exactly one sibling per level where the
    /// node has one).
    pub fn computed_root(&self) -> Option<[u8; 32]> {
        root_from_proof(&self.leaf_hash, self.row_index, self.leaf_count, &self.siblings)
    }
}

/// `challenge.root_from_proof`: the root that `leaf` at `index` of `count` leaves and `proof`
/// lead to. A level with an odd number of nodes moves its last node up unchanged, so a node
/// without a sibling takes no proof hash. None for a malformed path.
pub fn root_from_proof(leaf: &[u8; 32], index: u32, count: u32, proof: &[[u8; 32]]) -> Option<[u8; 32]> {
    if !(1..=MAX_LEAF_COUNT).contains(&count) || index >= count || proof.len() > MAX_MERKLE_DEPTH {
        return None;
    }
    let (mut h, mut index, mut width) = (*leaf, index, count);
    let mut siblings = proof.iter();
    while width > 1 {
        if (index ^ 1) < width {
            let sibling = siblings.next()?;
            h = if index & 1 == 1 {
                sha256(&[NODE_DOMAIN, sibling, &h])
            } else {
                sha256(&[NODE_DOMAIN, &h, sibling])
            };
        }
        index >>= 1;
        width = (width >> 1).saturating_add(width & 1);
    }
    siblings.next().is_none().then_some(h)
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::integer_division)]
mod tests {
    use super::*;

    fn leaf(i: u32) -> [u8; 32] {
        sha256(&[b"leaf", &i.to_le_bytes()])
    }

    fn node(l: &[u8; 32], r: &[u8; 32]) -> [u8; 32] {
        sha256(&[NODE_DOMAIN, l, r])
    }

    /// Levels of the tree over `count` leaves (`challenge.MerkleTree.build`).
    fn tree(count: u32) -> Vec<Vec<[u8; 32]>> {
        let mut levels = vec![(0..count).map(leaf).collect::<Vec<_>>()];
        while levels.last().unwrap().len() > 1 {
            let cur = levels.last().unwrap();
            let mut next: Vec<[u8; 32]> = cur.chunks(2).filter(|c| c.len() == 2).map(|c| node(&c[0], &c[1])).collect();
            if cur.len() % 2 == 1 {
                next.push(*cur.last().unwrap());
            }
            levels.push(next);
        }
        levels
    }

    fn proof(levels: &[Vec<[u8; 32]>], mut index: usize) -> Vec<[u8; 32]> {
        let mut out = vec![];
        for level in &levels[..levels.len() - 1] {
            if let Some(s) = level.get(index ^ 1) {
                out.push(*s);
            }
            index /= 2;
        }
        out
    }

    #[test]
    fn every_leaf_of_every_shape_leads_to_the_root() {
        for count in [1u32, 2, 3, 5, 7, 8, 9, 31, 33, 100] {
            let levels = tree(count);
            let root = levels.last().unwrap()[0];
            for i in 0..count {
                let p = proof(&levels, i as usize);
                assert_eq!(root_from_proof(&leaf(i), i, count, &p), Some(root), "count {count} leaf {i}");
            }
        }
    }

    #[test]
    fn a_changed_leaf_or_sibling_leads_elsewhere() {
        let levels = tree(9);
        let root = levels.last().unwrap()[0];
        let mut p = proof(&levels, 4);
        assert_ne!(root_from_proof(&leaf(5), 4, 9, &p), Some(root));
        p[0][0] ^= 1;
        assert_ne!(root_from_proof(&leaf(4), 4, 9, &p).unwrap(), root);
    }

    #[test]
    fn malformed_paths_have_no_root() {
        let levels = tree(9);
        let p = proof(&levels, 8); // leaf 8 of 9: alone on the first three levels
        assert_eq!(p.len(), 1);
        assert!(root_from_proof(&leaf(8), 8, 9, &p).is_some());
        assert_eq!(root_from_proof(&leaf(8), 8, 9, &[]), None, "too short");
        assert_eq!(root_from_proof(&leaf(8), 8, 9, &[p[0], p[0]]), None, "too long");
        assert_eq!(root_from_proof(&leaf(8), 9, 9, &p), None, "index past the leaves");
        assert_eq!(root_from_proof(&leaf(0), 0, 0, &[]), None, "no leaves");
        assert_eq!(root_from_proof(&leaf(0), 0, MAX_LEAF_COUNT + 1, &[]), None, "too many leaves");
        assert_eq!(root_from_proof(&leaf(0), 0, 1, &[]), Some(leaf(0)), "one leaf is the root");
        assert_eq!(root_from_proof(&leaf(0), 0, 1, &[[0; 32]; MAX_MERKLE_DEPTH + 1]), None);
    }

    #[test]
    fn the_deepest_tree_takes_fifteen_siblings() {
        let p = [[7u8; 32]; MAX_MERKLE_DEPTH];
        assert!(root_from_proof(&leaf(0), MAX_LEAF_COUNT - 1, MAX_LEAF_COUNT, &p).is_some());
        assert_eq!(root_from_proof(&leaf(0), 0, MAX_LEAF_COUNT, &p[1..]), None);
    }

    #[test]
    fn attesters_hash_ignores_order() {
        let (a, b) = (Pubkey::new_from_array([1; 32]), Pubkey::new_from_array([2; 32]));
        assert_eq!(attesters_hash(&mut [a, b]), attesters_hash(&mut [b, a]));
        let mut both = [0u8; 64];
        both[..32].copy_from_slice(a.as_ref());
        both[32..].copy_from_slice(b.as_ref());
        assert_eq!(attesters_hash(&mut [b, a]), sha256(&[&both]));
    }
}
