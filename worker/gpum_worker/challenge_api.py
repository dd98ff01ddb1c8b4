"""Hardware challenges on the worker API: a validator asks, the worker's GPUs answer
(docs/gpu-challenge.md; the messages are ``gpu_market.challenge_messages``).

Endpoints (JSON; every error is ``{"error": <code>, "message": <what to do>}``)::

    POST /v1/challenges                   {"challenge": base64 of the 78 canonical bytes,
                                           "validator": base58 authority, "timestamp": unix s,
                                           "signature": base64}
        200 {"challenge", "worker_key", "backend", "gpus": [{"gpu_index", "uuid", "name",
             "device_index", "answer", "signature"}], "signals", "elapsed_s"}
    POST /v1/challenges/<digest hex>/open {"validator", "nonce": hex, "timestamp", "signature"}
        200 {"challenge", "gpus": [{"gpu_index", "openings", "row_signatures"}]}

Who may ask. The request is signed by a validator authority over
``challenge_messages.request_message`` (this program, market and provider, the challenge's
digest, the timestamp), the open over ``open_message`` (the same and the nonce). The worker
checks, cheapest first: the signature (401), the timestamp within ``REQUEST_MAX_SKEW_S`` of its
clock (401) and the challenge's ``issued_at`` too (400), that the signature was not served
before (``exec.ReplayGuard``: a replay is 401), that the signer is a validator Active in the
worker's market (its Validator account, read through the worker's RPC client and cached
``VALIDATOR_TTL_S``; 403 otherwise, 503 when the chain cannot be read), at most one accepted
challenge per validator per ``min_interval_s`` (429), one challenge at a time on this worker
(503 ``challenge_running``). Only the validator that asked may open, once (403, 409).

Renters first. A challenge runs only when no GPU of this worker is assigned to a job (open,
running or finishing: the agent's assignments in the outbox database); otherwise the answer
is 409 ``{"error": "busy"}`` and the validator asks again later. The idle budget, the renter
GPU time a challenge may take, is therefore 0 s. A job the agent assigns while a challenge
runs shares its GPU for at most the rest of that challenge (its compute and commit, seconds
for the standard challenge on a GPU).

What runs. GPU ``i`` computes ``challenge_messages.gpu_challenge(challenge, i)`` with the
``backend`` (``challenge_compute``): ``numpy`` for ``--simulate`` (and, named as such in the
answer, on a machine with GPUs where CuPy does not import: its timings then fail a GPU model's
bounds, which is the truth), ``cupy`` on NVIDIA GPUs. Each GPU's ``Answer`` is signed with the
worker key over ``answer_message``; every opened row over ``row_message`` (which binds its
Merkle path, so a path that misses the signed root slashes this worker). The results stay in
memory ``result_ttl_s`` (the int32 result, n^2 x 4 bytes per GPU, and any filled memory),
then are dropped unopened. A simulated worker refuses more than ``max_simulated_flop``
operations per GPU (400): the CPU would be busy for minutes.

Signals, the worker's word, reported with every answer: the NVML library the worker loaded
or would load (path and sha256; "simulated" in simulate mode), ``LD_PRELOAD`` of the worker's
environment and ``/etc/ld.so.preload``, and each GPU's UUID.

Nothing here fakes an answer: hostile variants for tests live in ``worker/tests``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import math
import os
import re
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_market.challenge import Challenge, ChallengeError, row_leaf
from gpu_market.challenge_messages import (
    answer_message,
    gpu_challenge,
    open_message,
    request_message,
    row_message,
    sign_digest,
    verify_digest,
)
from gpu_market.workload import REQUEST_MAX_SKEW_S

from .challenge_compute import (
    ChallengeBackend,
    ChallengeComputeError,
    ChallengeRun,
    CupyBackend,
    NumpyBackend,
    run_challenge,
)
from .exec import ReplayGuard
from .gpu import GpuInfo
from .keys import WorkerKey, b58encode, decode_pubkey

log = logging.getLogger("gpum_worker.challenges")

RESULT_TTL_S = 120.0
"""How long a computed challenge waits for its open."""
MIN_INTERVAL_S = 60.0
"""Accepted challenges of one validator are at least this far apart."""
VALIDATOR_TTL_S = 60.0
"""How long a validator's status read from chain is trusted."""
VALIDATOR_READS_PER_MINUTE = 60
"""Chain reads of validator accounts the endpoint may cause per minute (signers not cached)."""
MAX_SIMULATED_FLOP = 2 * 10**12
"""The most matmul work (``Challenge.flop``) a simulated GPU takes on: tens of CPU seconds."""
MAX_SIMULATED_MEMORY_MIB = 1024
"""The most memory a simulated GPU fills (host RAM)."""
MAX_PENDING = 8
PRELOAD_FILE = Path("/etc/ld.so.preload")
MAX_SIGNAL_BYTES = 4096
MAX_NVML_BYTES = 256 << 20


class ChallengeRefused(Exception):
    def __init__(self, status: int, code: str, message: str,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.retry_after = retry_after


# ------------------------------------------------------------------------------ validators


class ValidatorDirectory:
    """``directory(authority)``: True when the validator is Active in ``market``, False when
    it is not (or has no account), None when that cannot be known now (the chain did not
    answer, or the read budget of ``reads_per_minute`` is spent). Answers are cached
    ``ttl_s``; a failed read is not."""

    def __init__(self, client: Any, market: bytes, ttl_s: float = VALIDATOR_TTL_S,
                 reads_per_minute: int = VALIDATOR_READS_PER_MINUTE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.market = market
        self.ttl_s = ttl_s
        self.reads_per_minute = reads_per_minute
        self.clock = clock
        self._cache: dict[bytes, tuple[float, bool]] = {}
        self._reads: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, authority: bytes) -> bool | None:
        from solders.pubkey import Pubkey

        now = self.clock()
        with self._lock:
            hit = self._cache.get(authority)
            if hit is not None and now - hit[0] < self.ttl_s:
                return hit[1]
            self._reads = [t for t in self._reads if now - t < 60]
            if len(self._reads) >= self.reads_per_minute:
                return None
            self._reads.append(now)
        try:
            view = self.client.fetch_validator_by_authority(Pubkey.from_bytes(self.market),
                                                            Pubkey.from_bytes(authority))
        except Exception as e:  # noqa: BLE001 - a read failure: unknown, not cached
            log.warning("cannot read the Validator account of %s: %s", b58encode(authority), e)
            return None
        status = getattr(view, "status", None)
        active = view is not None and str(getattr(status, "name", status)).lower() == "active"
        with self._lock:
            self._cache[authority] = (now, active)
            if len(self._cache) > 4096:
                self._cache.pop(next(iter(self._cache)))
        return active


def connect_directory(rpc_url: str, program_id: bytes, market: bytes,
                      deadline_s: float = 10.0) -> ValidatorDirectory:
    """A directory over an SDK client whose JSON-RPC calls each end within ``deadline_s``
    and read at most 1 MiB (``jobs.BoundedRpcSession``)."""
    from gpu_market.client import GpuMarketClient
    from solana.rpc.api import Client
    from solana.rpc.commitment import Commitment
    from solders.pubkey import Pubkey

    from .jobs import BoundedRpcSession

    rpc = Client(rpc_url, commitment=Commitment("confirmed"), timeout=deadline_s)
    rpc._provider.session.close()  # solana-py offers no hook for its HTTP session
    rpc._provider.session = BoundedRpcSession(deadline_s, 1 << 20)
    client = GpuMarketClient(rpc_url, program_id=Pubkey.from_bytes(program_id), rpc=rpc)
    return ValidatorDirectory(client, market)


def assigned_gpus(outbox_db: Path) -> set[str]:
    """GPU UUIDs the agent assigned to jobs (the outbox database's ``assignments``), read
    with a connection of its own; every UUID counts as busy when the database cannot be
    read (``{"*"}``)."""
    try:
        db = sqlite3.connect(f"file:{outbox_db}?mode=ro", uri=True, timeout=5.0)
        try:
            return {r[0] for r in db.execute("SELECT gpu_uuid FROM assignments")}
        finally:
            db.close()
    except sqlite3.Error as e:
        log.warning("cannot read the GPU assignments (%s): treating every GPU as busy", e)
        return {"*"}


# ------------------------------------------------------------------------------ signals


def _nvml_path() -> str | None:
    """The NVML library this process mapped (pynvml loaded it), else the one the dynamic
    linker would load (``ldconfig -p``)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libnvidia-ml.so" in line:
                    return line.split(None, 5)[-1].strip()
    except OSError:
        pass
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=5,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        m = re.match(r"\s*libnvidia-ml\.so(\.1)?\s.*=>\s*(\S+)", line)
        if m:
            return m.group(2)
    return None


def nvml_library(simulated: bool) -> dict[str, Any]:
    """``{"path", "sha256"}`` of the NVML library; ``"simulated"`` for both in simulate
    mode; nulls and ``error`` when none is found or it cannot be read."""
    if simulated:
        return {"path": "simulated", "sha256": "simulated"}
    path = _nvml_path()
    if path is None:
        return {"path": None, "sha256": None, "error": "no libnvidia-ml.so found"}
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            read = 0
            while chunk := f.read(1 << 20):
                read += len(chunk)
                if read > MAX_NVML_BYTES:
                    return {"path": path, "sha256": None, "error": "larger than 256 MiB"}
                h.update(chunk)
    except OSError as e:
        return {"path": path, "sha256": None, "error": str(e)}
    return {"path": path, "sha256": h.hexdigest()}


def preload_signals() -> dict[str, str]:
    """``LD_PRELOAD`` of this process and ``/etc/ld.so.preload`` (each at most 4 KiB)."""
    try:
        with open(PRELOAD_FILE, "rb") as f:
            file = f.read(MAX_SIGNAL_BYTES).decode("utf-8", "replace")
    except OSError:
        file = ""
    return {"ld_preload": os.environ.get("LD_PRELOAD", "")[:MAX_SIGNAL_BYTES],
            "ld_so_preload": file}


# ------------------------------------------------------------------------------ service


def choose_backend(simulated: bool) -> ChallengeBackend:
    """``NumpyBackend`` in simulate mode; ``CupyBackend`` on GPUs, or numpy (named so in every
    answer) when CuPy does not import."""
    if simulated:
        return NumpyBackend()
    try:
        return CupyBackend()
    except ChallengeComputeError as e:
        log.warning("hardware challenges will run on the CPU (numpy), and fail any GPU "
                    "model's timing: %s", e)
        return NumpyBackend()


@dataclass
class _Pending:
    validator: bytes
    challenge: Challenge
    runs: list[tuple[GpuInfo, Challenge, ChallengeRun]]
    created: float

    def release(self) -> None:
        for _g, _c, run in self.runs:
            run.release()
        self.runs = []


@dataclass
class ChallengeService:
    """The two endpoints (module docstring). ``gpus``: this worker's GPUs (the agent's);
    ``busy``: the UUIDs assigned to jobs now; ``validators``: ``ValidatorDirectory``;
    ``signals``: the NVML library's ``nvml_library`` (read once by the caller)."""

    key: WorkerKey
    program_id: bytes
    market: bytes
    provider: bytes
    gpus: Callable[[], Sequence[GpuInfo]]
    busy: Callable[[], set[str]]
    validators: Callable[[bytes], bool | None]
    backend: ChallengeBackend
    nvml: dict[str, Any]
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    result_ttl_s: float = RESULT_TTL_S
    min_interval_s: float = MIN_INTERVAL_S
    max_simulated_flop: int = MAX_SIMULATED_FLOP
    replay: ReplayGuard = field(default_factory=ReplayGuard)
    _pending: dict[bytes, _Pending] = field(default_factory=dict)
    _opened: dict[bytes, float] = field(default_factory=dict)
    """Digests opened in the last ``result_ttl_s`` (a second open is 409)."""
    _last: dict[bytes, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _running: threading.Lock = field(default_factory=threading.Lock)

    # -- HTTP

    def route(self, method: str, segs: Sequence[str], body: bytes
              ) -> tuple[int, dict[str, Any], int | None]:
        """``segs``: the path split on ``/`` (``["", "v1", "challenges", ...]``) ->
        (status, JSON body, Retry-After seconds or None)."""
        try:
            if len(segs) == 3:
                if method != "POST":
                    raise ChallengeRefused(405, "method", "use POST /v1/challenges")
                return 200, self.challenge(_json(body)), None
            if len(segs) == 5 and segs[4] == "open":
                if method != "POST":
                    raise ChallengeRefused(405, "method", "use POST")
                return 200, self.open(segs[3], _json(body)), None
            raise ChallengeRefused(404, "not_found", "no such endpoint under /v1/challenges")
        except ChallengeRefused as e:
            return e.status, {"error": e.code, "message": str(e)}, e.retry_after

    # -- the two requests

    def challenge(self, doc: dict[str, Any]) -> dict[str, Any]:
        _fields(doc, ("challenge", "validator", "timestamp", "signature"))
        try:
            ch = Challenge.decode(_b64(doc["challenge"], 128, "challenge"))
        except ChallengeError as e:
            raise ChallengeRefused(400, "bad_challenge", str(e)) from None
        validator, ts, sig = self._signed(doc, request_message(
            self.program_id, self.market, self.provider,
            ch.challenge_id, _ts(doc["timestamp"])))
        now = self.clock()
        if abs(ch.issued_at - now) > REQUEST_MAX_SKEW_S:
            raise ChallengeRefused(400, "stale_challenge", f"the challenge was issued "
                                   f"{ch.issued_at - int(now):+d} s from this worker's clock")
        self._admit(validator, sig, ts)
        self._allowed(validator)
        gpus = list(self.gpus())
        flop_cap = self.max_simulated_flop if self.backend.kind == "numpy" else None
        if flop_cap is not None and (ch.flop > flop_cap
                                     or ch.memory_mib > MAX_SIMULATED_MEMORY_MIB):
            raise ChallengeRefused(400, "too_large", f"this worker computes on the CPU "
                                   f"(numpy) and takes at most {flop_cap:.1e} operations and "
                                   f"{MAX_SIMULATED_MEMORY_MIB} MiB per GPU")
        with self._lock:
            last = self._last.get(validator)
            if last is not None and self.monotonic() - last < self.min_interval_s:
                wait = math.ceil(self.min_interval_s - (self.monotonic() - last))
                raise ChallengeRefused(429, "rate_limited", f"one challenge per validator "
                                       f"every {self.min_interval_s:g} s", wait)
        if not self._running.acquire(blocking=False):
            raise ChallengeRefused(503, "challenge_running", "another challenge is running "
                                   "on this worker; retry later", 30)
        try:
            return self._run(validator, ch, gpus)
        finally:
            self._running.release()

    def _run(self, validator: bytes, ch: Challenge, gpus: list[GpuInfo]) -> dict[str, Any]:
        cid = ch.challenge_id
        self._purge()
        with self._lock:
            if cid in self._pending or cid in self._opened:
                raise ChallengeRefused(409, "already_answered", "this challenge was answered; "
                                       "open it or send a new one")
        busy = self.busy()
        taken = [g.uuid for g in gpus if g.uuid in busy or "*" in busy]
        if taken:
            raise ChallengeRefused(409, "busy", f"GPU(s) {', '.join(taken)} are assigned to a "
                                   "job; challenges run only on GPUs with no job (the renter "
                                   "GPU time a challenge may take is 0 s); retry later", 300)
        with self._lock:
            self._last[validator] = self.monotonic()
        t0 = self.monotonic()
        runs = self._compute(ch, gpus)
        elapsed = self.monotonic() - t0
        pending = _Pending(validator, ch, runs, self.monotonic())
        with self._lock:
            self._pending[cid] = pending
        log.info("challenge %s from validator %s answered on %d GPU(s) with %s in %.2fs",
                 cid.hex()[:16], b58encode(validator), len(runs), self.backend.kind, elapsed)
        out = []
        for g, gch, run in runs:
            msg = answer_message(self.program_id, self.market, self.provider,
                                 gch.challenge_id, gch.issued_at, run.answer.root)
            out.append({"gpu_index": g.index, "uuid": g.uuid, "name": g.name,
                        "device_index": run.answer.gpu_index, "answer": run.answer.to_dict(),
                        "signature": base64.b64encode(sign_digest(self.key.seed, msg)).decode()})
        return {"challenge": cid.hex(), "worker_key": self.key.pubkey_b58,
                "backend": self.backend.kind, "gpus": out,
                "signals": {"nvml": self.nvml, **preload_signals(),
                            "gpu_uuids": [g.uuid for g in gpus]},
                "elapsed_s": round(elapsed, 6)}

    def _compute(self, ch: Challenge, gpus: list[GpuInfo]
                 ) -> list[tuple[GpuInfo, Challenge, ChallengeRun]]:
        jobs = [(g, gpu_challenge(ch, g.index), device_index(self.backend, g)) for g in gpus]

        def one(item: tuple[GpuInfo, Challenge, int]) -> tuple[GpuInfo, Challenge, ChallengeRun]:
            g, gch, dev = item
            return g, gch, run_challenge(gch, self.backend, dev)

        done: list[tuple[GpuInfo, Challenge, ChallengeRun]] = []
        try:
            if self.backend.kind == "numpy" or len(jobs) == 1:
                for item in jobs:  # numpy already uses every core
                    done.append(one(item))
            else:
                with ThreadPoolExecutor(len(jobs)) as pool:
                    futures = [pool.submit(one, item) for item in jobs]
                    for f in futures:
                        done.append(f.result())
        except ChallengeComputeError as e:
            for _g, _c, run in done:
                run.release()
            raise ChallengeRefused(503, "compute_failed", f"this worker could not compute "
                                   f"the challenge: {e}") from None
        return done

    def open(self, digest_hex: str, doc: dict[str, Any]) -> dict[str, Any]:
        _fields(doc, ("validator", "nonce", "timestamp", "signature"))
        try:
            cid = bytes.fromhex(digest_hex)
            nonce = bytes.fromhex(str(doc["nonce"]))
        except ValueError:
            raise ChallengeRefused(400, "bad_request", "the digest and the nonce are 64 hex "
                                   "digits") from None
        if len(cid) != 32 or len(nonce) != 32:
            raise ChallengeRefused(400, "bad_request", "the digest and the nonce are 32 bytes")
        validator, ts, sig = self._signed(doc, open_message(
            self.program_id, self.market, self.provider, cid, nonce, _ts(doc["timestamp"])))
        self._admit(validator, sig, ts)
        self._purge()
        with self._lock:
            if cid in self._opened:
                raise ChallengeRefused(409, "already_opened", "this challenge was opened "
                                       "already; a challenge opens once")
            pending = self._pending.get(cid)
            if pending is None:
                raise ChallengeRefused(404, "unknown_challenge", "no answered challenge with "
                                       f"this digest is held (they are kept "
                                       f"{self.result_ttl_s:g} s)")
            if pending.validator != validator:
                raise ChallengeRefused(403, "not_yours", "only the validator that sent the "
                                       "challenge opens it")
            del self._pending[cid]  # from here on only this request holds its memory
            self._opened[cid] = self.monotonic()
        try:
            gpus = []
            for g, gch, run in pending.runs:
                try:
                    openings = run.open(nonce)
                except ChallengeComputeError as e:
                    raise ChallengeRefused(503, "compute_failed", str(e)) from None
                sigs = [base64.b64encode(sign_digest(self.key.seed, row_message(
                    self.program_id, self.market, self.provider, gch.challenge_id,
                    run.answer.root, gch.n, o.index, row_leaf(o.index, o.row), o.proof))
                ).decode() for o in openings.rows]
                gpus.append({"gpu_index": g.index, "openings": openings.to_dict(),
                             "row_signatures": sigs})
        finally:
            pending.release()
        return {"challenge": cid.hex(), "gpus": gpus}

    # -- checks

    def _signed(self, doc: dict[str, Any], message: bytes) -> tuple[bytes, int, str]:
        """(validator, timestamp, signature text) once the signature verifies and the
        timestamp is within the skew; 401 otherwise."""
        try:
            validator = decode_pubkey(str(doc["validator"]), "validator")
        except ValueError as e:
            raise ChallengeRefused(400, "bad_request", str(e)) from None
        sig_text = doc["signature"]
        sig = _b64(sig_text, 64, "signature")
        if not verify_digest(validator, sig, message):
            raise ChallengeRefused(401, "bad_signature", "the signature does not verify for "
                                   "this program, market, provider and request")
        ts = _ts(doc["timestamp"])
        skew = ts - int(self.clock())
        if abs(skew) > REQUEST_MAX_SKEW_S:
            raise ChallengeRefused(401, "stale_request", f"the timestamp is {skew:+d} s from "
                                   f"this worker's clock; at most ±{REQUEST_MAX_SKEW_S} s")
        return validator, ts, sig_text

    def _admit(self, validator: bytes, sig: str, ts: int) -> None:
        first = self.replay.admit(b58encode(validator), sig, ts)
        if first is False:
            raise ChallengeRefused(401, "replay", "this signed request was already served")
        if first is None:
            raise ChallengeRefused(429, "rate_limited", "too many signed requests; retry "
                                   "later", 60)

    def _allowed(self, validator: bytes) -> None:
        active = self.validators(validator)
        if active is None:
            raise ChallengeRefused(503, "chain_unavailable", "this worker cannot read the "
                                   "validator's account now; retry later", 30)
        if not active:
            raise ChallengeRefused(403, "not_a_validator", f"{b58encode(validator)} is not an "
                                   "Active validator of this worker's market")

    def _purge(self) -> None:
        now = self.monotonic()
        with self._lock:
            for k in [k for k, t in self._opened.items() if now - t > self.result_ttl_s]:
                del self._opened[k]
            old = [k for k, p in self._pending.items() if now - p.created > self.result_ttl_s]
            while len(self._pending) - len(old) > MAX_PENDING:
                oldest = min((k for k in self._pending if k not in old),
                             key=lambda k: self._pending[k].created)
                old.append(oldest)
            dropped = [self._pending.pop(k) for k in old]
        for p in dropped:
            p.release()


def device_index(backend: ChallengeBackend, gpu: GpuInfo) -> int:
    """The backend's device for ``gpu``: CUDA's index of the device with the same UUID when
    CuPy reports UUIDs, else the NVML index (the same order under ``CUDA_DEVICE_ORDER=
    PCI_BUS_ID``)."""
    if backend.kind != "cupy":
        return gpu.index
    try:
        import cupy

        want = gpu.uuid.removeprefix("GPU-").replace("-", "").lower()
        for i in range(cupy.cuda.runtime.getDeviceCount()):
            raw = cupy.cuda.runtime.getDeviceProperties(i).get("uuid")
            if isinstance(raw, (bytes, bytearray)) and raw.hex() == want:
                return i
    except Exception as e:  # noqa: BLE001 - fall back to the NVML index
        log.debug("CUDA device UUIDs unreadable (%s); GPU %d is CUDA device %d", e,
                  gpu.index, gpu.index)
    return gpu.index


def _json(body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ChallengeRefused(400, "bad_request", "the body is not JSON") from None
    if not isinstance(doc, dict):
        raise ChallengeRefused(400, "bad_request", "the body is a JSON object")
    return doc


def _fields(doc: dict[str, Any], names: tuple[str, ...]) -> None:
    if set(doc) != set(names):
        raise ChallengeRefused(400, "bad_request", f"send exactly {', '.join(names)}")


def _b64(v: Any, max_len: int, what: str) -> bytes:
    if not isinstance(v, str) or len(v) > 4 * max_len // 3 + 4:
        raise ChallengeRefused(400, "bad_request", f"{what} is base64 of at most {max_len} "
                               "bytes")
    try:
        return base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        raise ChallengeRefused(400, "bad_request", f"{what} is not base64") from None


def _ts(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not -(2**63) <= v < 2**63:
        raise ChallengeRefused(400, "bad_request", "timestamp is unix seconds (an integer)")
    return v


def challenge_service(cfg: Any, key: WorkerKey, gpus: Callable[[], Sequence[GpuInfo]],
                      simulated: bool) -> ChallengeService:
    """The service of ``gpum-worker run`` (a chain job source: ``cfg`` has the RPC URL,
    program, market and provider): validators read from chain, busy GPUs from the outbox."""
    return ChallengeService(
        key=key, program_id=cfg.program_id, market=cfg.market, provider=cfg.provider,
        gpus=gpus, busy=lambda: assigned_gpus(cfg.db),
        validators=connect_directory(cfg.rpc_url, cfg.program_id, cfg.market),
        backend=choose_backend(simulated), nvml=nvml_library(simulated),
        min_interval_s=cfg.challenge_min_interval_seconds)
