"""Hardware verdicts and wrong-answer evidence as the program's instructions take them (pure).

The signed bytes are spelled once, in :mod:`gpu_market.challenge_messages` (layouts there and
in ``docs/protocol.md``, "Hardware verdicts"; vectors ``docs/vectors/challenge.json``, which
``program-tests/tests/wrong_answer.rs`` checks against the program). This module adds what the
chain side needs on top: the instruction arguments of ``attest_hardware``
(:class:`HardwareVerdictArgs`) and ``slash_wrong_answer`` (:class:`WrongAnswerEvidence`),
whether evidence is slashable (:attr:`WrongAnswerEvidence.is_wrong`: a well-formed Merkle
path to another root than the one the worker signed), and :func:`attesters_hash`. A slow or
missing answer is not evidence: only a failing verdict (``passed=False``) follows from it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from solders.pubkey import Pubkey

from . import challenge_messages as messages
from .accounts import GPU_MODEL_LEN, encode_fixed_str

__all__ = [
    "ANSWER_DOMAIN",
    "HARDWARE_DOMAIN",
    "MAX_MERKLE_DEPTH",
    "ROW_DOMAIN",
    "HardwareVerdictArgs",
    "WrongAnswerEvidence",
    "attesters_hash",
]

HARDWARE_DOMAIN = messages.HARDWARE_DOMAIN
ANSWER_DOMAIN = messages.ANSWER_DOMAIN
ROW_DOMAIN = messages.ROW_DOMAIN
MAX_MERKLE_DEPTH = 15
"""A challenge result has at most 2^15 rows (``challenge.MAX_N`` is 2^14)."""


def _sha256(*parts: bytes) -> bytes:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.digest()


def _bytes32(value: bytes, name: str) -> bytes:
    value = bytes(value)
    if len(value) != 32:
        raise ValueError(f"{name} must be 32 bytes, got {len(value)}")
    return value


@dataclass(frozen=True)
class HardwareVerdictArgs:
    """What validators attest about a provider's hardware (``attest_hardware``'s argument).
    ``gpu_model`` is text (<= 32 UTF-8 bytes, as the provider's spec); ``challenged_at`` unix
    seconds of the validators' clock; ``challenge_digest`` the challenge's id."""

    worker_key: Pubkey
    gpu_model: str
    gpu_count: int
    vram_mib: int
    passed: bool
    challenged_at: int
    challenge_digest: bytes

    def message(self, program_id: Pubkey, market: Pubkey, provider: Pubkey) -> bytes:
        return messages.hardware_message(bytes(program_id), bytes(market), bytes(provider),
                                         bytes(self.worker_key), self.gpu_model, self.gpu_count,
                                         self.vram_mib, bool(self.passed), self.challenged_at,
                                         bytes(self.challenge_digest))  # fmt: skip

    def digest(self, program_id: Pubkey, market: Pubkey, provider: Pubkey) -> bytes:
        """What each attesting validator signs: sha256 of :meth:`message`."""
        return _sha256(self.message(program_id, market, provider))

    def args(self) -> dict[str, Any]:
        """The instruction argument (``HardwareVerdictArgs`` of the IDL)."""
        return {
            "worker_key": self.worker_key,
            "gpu_model": list(encode_fixed_str(self.gpu_model, GPU_MODEL_LEN, "gpu_model")),
            "gpu_count": int(self.gpu_count),
            "vram_mib": int(self.vram_mib),
            "passed": bool(self.passed),
            "challenged_at": int(self.challenged_at),
            "challenge_digest": list(_bytes32(self.challenge_digest, "challenge_digest")),
        }


def attesters_hash(keys: Iterable[Pubkey]) -> bytes:
    """sha256 of the attesters' keys sorted by bytes and concatenated
    (``HardwareVerdict.attesters_hash``): compare with the keys of a ``HardwareAttested``
    event."""
    return _sha256(*sorted(bytes(k) for k in keys))


@dataclass(frozen=True)
class WrongAnswerEvidence:
    """A worker's signed answer (``root``) and one signed opened row of one challenge
    (``slash_wrong_answer``'s argument). ``siblings``: the row's Merkle path from the leaf
    level up, one hash per level where the node has a sibling (``MerkleTree.proof``)."""

    challenge_digest: bytes
    challenged_at: int
    root: bytes
    leaf_count: int
    row_index: int
    leaf_hash: bytes
    siblings: tuple[bytes, ...]

    def answer_message(self, program_id: Pubkey, market: Pubkey, provider: Pubkey) -> bytes:
        return messages.answer_message(bytes(program_id), bytes(market), bytes(provider),
                                       bytes(self.challenge_digest), self.challenged_at,
                                       bytes(self.root))  # fmt: skip

    def answer_digest(self, program_id: Pubkey, market: Pubkey, provider: Pubkey) -> bytes:
        return _sha256(self.answer_message(program_id, market, provider))

    def row_message(self, program_id: Pubkey, market: Pubkey, provider: Pubkey) -> bytes:
        return messages.row_message(bytes(program_id), bytes(market), bytes(provider),
                                    bytes(self.challenge_digest), bytes(self.root),
                                    self.leaf_count, self.row_index, bytes(self.leaf_hash),
                                    [bytes(s) for s in self.siblings])  # fmt: skip

    def row_digest(self, program_id: Pubkey, market: Pubkey, provider: Pubkey) -> bytes:
        return _sha256(self.row_message(program_id, market, provider))

    def computed_root(self) -> bytes | None:
        """The root the opened row's path leads to (``challenge.root_from_proof``), None for a
        malformed path (the program's ``InvalidMerkleEvidence``)."""
        from .challenge import VerificationFailed, root_from_proof

        if not 1 <= self.leaf_count <= 1 << MAX_MERKLE_DEPTH or len(self.siblings) > MAX_MERKLE_DEPTH:
            return None
        try:
            return root_from_proof(bytes(self.leaf_hash), self.row_index, self.leaf_count,
                                   [bytes(s) for s in self.siblings])  # fmt: skip
        except VerificationFailed:
            return None

    @property
    def is_wrong(self) -> bool:
        """Whether ``slash_wrong_answer`` accepts it: a well-formed path to another root."""
        got = self.computed_root()
        return got is not None and got != bytes(self.root)

    def args(self) -> dict[str, Any]:
        """The instruction argument (``WrongAnswerEvidence`` of the IDL)."""
        return {
            "challenge_digest": list(_bytes32(self.challenge_digest, "challenge_digest")),
            "challenged_at": int(self.challenged_at),
            "root": list(_bytes32(self.root, "root")),
            "leaf_count": int(self.leaf_count),
            "row_index": int(self.row_index),
            "leaf_hash": list(_bytes32(self.leaf_hash, "leaf_hash")),
            "siblings": [list(_bytes32(s, "sibling")) for s in self.siblings],
        }

    @classmethod
    def from_opening(cls, challenge_digest: bytes, challenged_at: int, root: bytes,
                     leaf_count: int, index: int, leaf_hash: bytes,
                     proof: Sequence[bytes]) -> WrongAnswerEvidence:  # fmt: skip
        """Evidence from a challenge's row opening (``challenge.RowOpening``: its index, the
        leaf ``row_leaf(index, row)`` and its proof)."""
        return cls(bytes(challenge_digest), int(challenged_at), bytes(root), int(leaf_count),
                   int(index), bytes(leaf_hash), tuple(bytes(p) for p in proof))  # fmt: skip
