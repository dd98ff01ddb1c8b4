"""Judging a worker's answer to a hardware challenge against what its provider declares
(pure: no I/O, no clock). The challenger (``challenger``) does the talking; the protocol is
``gpu_market.challenge``, the timing bounds ``gpu_market.challenge_verdict``, the signed
messages ``gpu_market.challenge_messages``.

``judge_hardware`` turns the worker's two replies into a verdict: ``passed`` iff no reason.
A reason is ``"<code>: <what>"``; the codes, each a failure:

* ``no_answer``: no reply, a refusal, or a reply after the total deadline;
* ``malformed``: a reply that is not the protocol's JSON;
* ``wrong_worker_key``: answered for another key than the provider's current one;
* ``bad_signature``: an answer or opened row without the worker key's signature over its
  message (``answer_message`` / ``row_message``);
* ``gpu_count``: answers for another number of GPUs than declared (or two with one UUID);
* ``unknown_model``: the bounds table has no row for the declared model;
* every code of ``challenge_verdict.judge``, per GPU: ``wrong_challenge``,
  ``wrong_indices``, ``bad_proof``, ``wrong_row``, ``wrong_chunk``, ``no_memory_answer``,
  ``too_slow``, ``implausible_timing``;
* ``uuid_shared``: a GPU UUID this validator saw another provider claim, in a verdict or in
  a window proof (``claims``); both providers then fail while they keep claiming it.

Signals that fail nothing, reported in ``detail["signals"]["notes"]``: an NVML library
digest outside ``known_nvml`` (when a list is configured), a non-empty ``LD_PRELOAD`` or
``/etc/ld.so.preload``, a device name that is not one of the declared model's names.

Evidence. An opened row whose signed Merkle path leads to another root than the one the
same key signed in its answer is a ``WrongAnswer`` (``slash_wrong_answer`` checks exactly
that on chain); a malformed path is not (the chain refuses it as evidence).
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_market.challenge import (
    Answer,
    Challenge,
    ChallengeError,
    Openings,
    RowOpening,
    VerificationFailed,
    root_from_proof,
    row_leaf,
)
from gpu_market.challenge_messages import (
    MAX_GPUS,
    answer_message,
    gpu_challenge,
    row_message,
    verify_digest,
)
from gpu_market.challenge_verdict import BoundsTable, GpuBounds, UnknownGpuModel, judge

CODES = ("no_answer", "malformed", "wrong_worker_key", "bad_signature", "gpu_count",
         "unknown_model", "wrong_challenge", "wrong_indices", "bad_proof", "wrong_row",
         "wrong_chunk", "no_memory_answer", "too_slow", "implausible_timing", "uuid_shared")


@dataclass(frozen=True)
class Declared:
    """What the provider's account declares, as a challenge checks it."""

    provider: bytes
    worker_key: bytes
    gpu_model: str
    gpu_count: int
    vram_mib: int

    def same(self, other: Declared) -> bool:
        """Whether a verdict about ``other`` is about this spec and worker key."""
        return (self.worker_key, self.gpu_model, self.gpu_count, self.vram_mib) == (
            other.worker_key, other.gpu_model, other.gpu_count, other.vram_mib)


@dataclass(frozen=True)
class WrongAnswer:
    """A row the worker opened whose signed path misses the root it signed: the fields of
    ``slash_wrong_answer`` (``challenge.rs::WrongAnswerEvidence``) and both signatures."""

    provider: bytes
    worker_key: bytes
    gpu_index: int
    challenge_digest: bytes
    """The GPU's challenge (``gpu_challenge``), as the worker signed it."""
    challenged_at: int
    root: bytes
    leaf_count: int
    row_index: int
    leaf_hash: bytes
    siblings: tuple[bytes, ...]
    row: bytes
    answer_signature: bytes
    row_signature: bytes


@dataclass(frozen=True)
class HardwareVerdict:
    """One challenge's verdict on one provider (``reasons`` empty iff ``passed``)."""

    provider: bytes
    challenge: bytes
    """The digest of the challenge the validator sent."""
    challenged_at: int
    declared: Declared
    passed: bool
    reasons: tuple[str, ...]
    detail: dict[str, Any]
    recorded_at: float
    attestations: dict[str, str] = field(default_factory=dict)
    """Validator authority (base58) -> its signature (base64) over this verdict's
    ``hardware_message``: this node's and those peers gave (``hardware_quorum``)."""

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.split(":", 1)[0] for r in self.reasons))

    def to_json(self, b58: Any) -> dict[str, Any]:
        """The public form (``GET /v1/providers/<provider>/hardware``); ``b58`` spells keys."""
        d = self.declared
        return {"provider": b58(self.provider), "passed": self.passed,
                "codes": list(self.codes), "reasons": list(self.reasons),
                "challenge": self.challenge.hex(), "challenged_at": self.challenged_at,
                "recorded_at": self.recorded_at, "worker_key": b58(d.worker_key),
                "gpu_model": d.gpu_model, "gpu_count": d.gpu_count, "vram_mib": d.vram_mib,
                **self.detail, "attestations": len(self.attestations)}


@dataclass(frozen=True)
class Judged:
    passed: bool
    reasons: tuple[str, ...]
    detail: dict[str, Any]
    evidence: tuple[WrongAnswer, ...] = ()
    uuids: tuple[str, ...] = ()


def missing(reason: str, detail: dict[str, Any] | None = None) -> Judged:
    """No usable answer: the challenge fails as ``no_answer``."""
    return Judged(False, (f"no_answer: {reason}",), detail or {})


class _Malformed(Exception):
    pass


def _obj(v: Any, what: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _Malformed(f"{what} must be an object")
    return v


def _sig(v: Any) -> bytes | None:
    if not isinstance(v, str) or len(v) > 100:
        return None
    try:
        raw = base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 64 else None


def judge_hardware(challenge: Challenge, declared: Declared, answer_doc: Any,
                   openings_doc: Any, nonce: bytes, *, program_id: bytes, market: bytes,
                   table: BoundsTable, answer_elapsed_s: float,
                   open_elapsed_s: float | None,
                   claims: Mapping[str, Iterable[bytes]] | None = None,
                   known_nvml: frozenset[str] | None = None, b58: Any = bytes.hex) -> Judged:
    """The verdict on the worker's answer (``answer_doc``, the JSON of
    ``POST /v1/challenges``) and openings (``openings_doc``, of ``.../open``; None when none
    came) to ``challenge``, sent to the provider ``declared``; ``claims``: for UUIDs, the
    providers this validator saw claim them (see the module docstring)."""
    try:
        return _judge(challenge, declared, answer_doc, openings_doc, nonce, program_id, market,
                      table, answer_elapsed_s, open_elapsed_s, claims or {}, known_nvml, b58)
    except _Malformed as e:
        return Judged(False, (f"malformed: {e}",), {"answer_elapsed_s": answer_elapsed_s})


def _judge(ch: Challenge, declared: Declared, answer_doc: Any, openings_doc: Any,
           nonce: bytes, program_id: bytes, market: bytes, table: BoundsTable,
           answer_elapsed_s: float, open_elapsed_s: float | None,
           claims: Mapping[str, Iterable[bytes]], known_nvml: frozenset[str] | None,
           b58: Any) -> Judged:
    doc = _obj(answer_doc, "the answer")
    gpus_in = doc.get("gpus")
    if not isinstance(gpus_in, list) or not gpus_in or len(gpus_in) > MAX_GPUS:
        raise _Malformed(f"gpus must be a list of 1..{MAX_GPUS} answers")
    if doc.get("challenge") != ch.challenge_id.hex():
        raise _Malformed("the answer names another challenge")
    reasons: list[str] = []
    backend = doc.get("backend")
    backend = backend if isinstance(backend, str) else None
    if doc.get("worker_key") != b58(declared.worker_key):
        reasons.append(f"wrong_worker_key: answered as {str(doc.get('worker_key'))[:64]}, "
                       f"the provider's worker key is {b58(declared.worker_key)}")
    gpu: GpuBounds | None = None
    try:
        gpu = table.for_model(declared.gpu_model)
    except UnknownGpuModel as e:
        reasons.append(f"unknown_model: {e}")
    entries: dict[int, dict[str, Any]] = {}
    uuids: list[str] = []
    for g in gpus_in:
        g = _obj(g, "a GPU's answer")
        i, uuid = g.get("gpu_index"), g.get("uuid")
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < MAX_GPUS \
                or i in entries:
            raise _Malformed("each GPU answers once, with gpu_index 0..255")
        if not isinstance(uuid, str) or not 1 <= len(uuid) <= 128:
            raise _Malformed("each GPU names its UUID")
        entries[i] = g
        uuids.append(uuid)
    if len(entries) != declared.gpu_count or len(set(uuids)) != len(uuids):
        reasons.append(f"gpu_count: answered for {len(set(uuids))} distinct GPU(s), the "
                       f"provider declares {declared.gpu_count}")
    opened = _openings_by_gpu(openings_doc)
    evidence: list[WrongAnswer] = []
    per_gpu = []
    for i, g in sorted(entries.items()):
        gch = gpu_challenge(ch, i)
        try:
            answer = Answer.from_dict(g.get("answer"))
        except ChallengeError as e:
            raise _Malformed(f"GPU {i}: {e}") from None
        answer_sig = _sig(g.get("signature"))
        if answer_sig is None or not verify_digest(declared.worker_key, answer_sig, answer_message(
                program_id, market, declared.provider, gch.challenge_id, ch.issued_at,
                answer.root)):
            reasons.append(f"bad_signature: GPU {i}'s answer is not signed by the worker key")
            answer_sig = None
        openings, row_sigs = None, []
        if opened is not None:
            o = opened.get(i)
            if o is None:
                reasons.append(f"no_answer: GPU {i} opened nothing")
            else:
                try:
                    openings = Openings.from_dict(o.get("openings"), gch)
                except ChallengeError as e:
                    raise _Malformed(f"GPU {i}'s openings: {e}") from None
                row_sigs = o.get("row_signatures")
                if not isinstance(row_sigs, list) or len(row_sigs) != len(openings.rows):
                    raise _Malformed(f"GPU {i}: one row signature per opened row")
                for row, s in zip(openings.rows, row_sigs):
                    ok, wrong = _row(declared, program_id, market, gch, answer, row, _sig(s))
                    if not ok:
                        reasons.append(f"bad_signature: GPU {i}'s row {row.index} is not "
                                       "signed by the worker key")
                    elif wrong is not None and answer_sig is not None:
                        evidence.append(WrongAnswer(
                            declared.provider, declared.worker_key, i, gch.challenge_id,
                            gch.issued_at, answer.root, gch.n, row.index, wrong,
                            tuple(row.proof), row.row, answer_sig, _sig(s) or b""))
        info: dict[str, Any] = {"gpu_index": i, "uuid": g["uuid"],
                                "name": str(g.get("name"))[:128], "root": answer.root.hex(),
                                "device": answer.device, "reported": vars(answer.timings)}
        if gpu is not None:
            v = judge(gch, answer, openings, nonce=nonce, table=table, gpu=gpu,
                      answer_elapsed_s=answer_elapsed_s, open_elapsed_s=open_elapsed_s)
            reasons += [f"{f.code}: GPU {i}: {f.message}" for f in v.failures]
            info.update(rows_checked=v.rows_checked, chunks_checked=v.chunks_checked,
                        verify_s=round(v.verify_s, 6), max_response_s=v.max_response_s)
        per_gpu.append(info)
    for uuid in uuids:
        others = sorted(b58(p) for p in claims.get(uuid, ()) if p != declared.provider)
        if others:
            reasons.append(f"uuid_shared: also claimed by provider {', '.join(others)} "
                           f"(GPU {uuid})")
    signals = _signals(doc.get("signals"), known_nvml, gpu, per_gpu)
    detail = {"backend": backend, "answer_elapsed_s": round(answer_elapsed_s, 6),
              "open_elapsed_s": None if open_elapsed_s is None else round(open_elapsed_s, 6),
              "gpus": per_gpu, "signals": signals,
              "challenge_params": {"n": ch.n, "rounds": ch.rounds, "rows": ch.rows_to_open,
                                   "memory_mib": ch.memory_mib}}
    return Judged(not reasons, tuple(dict.fromkeys(reasons)), detail, tuple(evidence),
                  tuple(uuids))


def _openings_by_gpu(doc: Any) -> dict[int, dict[str, Any]] | None:
    if doc is None:
        return None
    gpus = _obj(doc, "the openings").get("gpus")
    if not isinstance(gpus, list) or len(gpus) > MAX_GPUS:
        raise _Malformed("the openings' gpus must be a list")
    out: dict[int, dict[str, Any]] = {}
    for g in gpus:
        g = _obj(g, "a GPU's openings")
        i = g.get("gpu_index")
        if isinstance(i, bool) or not isinstance(i, int) or i in out:
            raise _Malformed("each GPU opens once, by gpu_index")
        out[i] = g
    return out


def _row(declared: Declared, program_id: bytes, market: bytes, gch: Challenge, answer: Answer,
         row: RowOpening, sig: bytes | None) -> tuple[bool, bytes | None]:
    """(the row signature verifies, the leaf hash when its path misses the signed root)."""
    leaf = row_leaf(row.index, row.row)
    if sig is None or not verify_digest(declared.worker_key, sig, row_message(
            program_id, market, declared.provider, gch.challenge_id, answer.root, gch.n,
            row.index, leaf, row.proof)):
        return False, None
    try:
        got = root_from_proof(leaf, row.index, gch.n, row.proof)
    except VerificationFailed:  # a malformed path: no evidence the chain takes
        return True, None
    return True, (None if hmac.compare_digest(got, answer.root) else leaf)


def _signals(raw: Any, known_nvml: frozenset[str] | None, gpu: GpuBounds | None,
             per_gpu: list[dict[str, Any]]) -> dict[str, Any]:
    """The worker's reported signals, trimmed, and the notes they raise (nothing fails)."""
    s = raw if isinstance(raw, dict) else {}
    nvml = s.get("nvml") if isinstance(s.get("nvml"), dict) else {}
    digest = nvml.get("sha256")
    out: dict[str, Any] = {
        "nvml_path": str(nvml.get("path"))[:256] if nvml.get("path") is not None else None,
        "nvml_sha256": str(digest)[:80] if digest is not None else None,
        "ld_preload": str(s.get("ld_preload") or "")[:1024],
        "ld_so_preload": str(s.get("ld_so_preload") or "")[:1024]}
    notes = []
    if known_nvml is not None and digest != "simulated" and digest not in known_nvml:
        notes.append(f"nvml_unknown: the NVML library's sha256 {out['nvml_sha256']} is not "
                     "one of the known driver builds")
    if out["ld_preload"].strip() or out["ld_so_preload"].strip():
        notes.append("preload: libraries are preloaded into the worker "
                     f"({(out['ld_preload'] or out['ld_so_preload']).strip()[:200]})")
    if gpu is not None:
        for g in per_gpu:
            if not gpu.matches(g["name"]) and not gpu.matches(g["device"]):
                notes.append(f"device_name: GPU {g['gpu_index']} reports {g['name']!r}, not a "
                             f"name of {gpu.model}")
    out["notes"] = notes
    return out
