"""Hardware challenges, the validator's side (I/O): whom to challenge when, the two requests
to the provider's worker, the verdict kept and served (docs/gpu-challenge.md; the judging is
``hardware``, pure).

When. Every ``pass_seconds`` the challenger reads the market's Provider accounts (cached a
minute) and challenges each Active one that is due: never judged here (registration), its
declared GPU model, count, VRAM or worker key differing from its latest verdict's (a spec
change), its endpoint published after a verdict that found none (a provider registered
before its worker answered), or its random time come: after each verdict the next one is
drawn from an exponential distribution of mean ``interval_seconds``, clipped to
[mean / 10, 3 x mean], with a seeded generator in tests (``ChallengeConfig.seed``).
Providers are challenged one at a time, registrations and spec changes first, at most
``MAX_PER_PASS`` per pass.

How. The challenge (a fresh seed from the OS, the configured ``n``, ``rounds``, ``rows``,
and a memory part of ``memory_fraction`` of the declared VRAM per GPU, at most
``max_memory_mib``) goes to ``POST {endpoint}/v1/challenges`` of the provider's worker
endpoint (its Provider account), signed by this validator's authority; once the answer is
here, a fresh 32-byte nonce goes to ``.../open``. Both requests share one total deadline
(``deadline_seconds``) and size caps (``answer_cap`` / ``open_cap``); a reply after the
deadline, a refusal or no reply fails the challenge as ``no_answer``. The validator's own
clock times both (``judge``'s bounds).

Not a failure, asked again after ``retry_seconds``: 409 ``busy`` (its GPUs run a job: a
challenge never takes a renter's GPU time) while the chain shows GPUs in use, for as long as
that lasts. Asked again too, but at most ``MAX_DEFERRALS`` times in a row before the
challenge fails as ``no_answer``: ``busy`` while its Provider account shows no GPU in use,
429 and 503 (another validator's challenge, rate limits, the worker starting). A 503
``compute_failed`` (the worker could not compute it) fails at once.

What is kept. Every verdict (``hardware.HardwareVerdict``, ``store_hardware``), served at
``GET /v1/providers/<provider>/hardware`` and on the dashboard; the GPU UUIDs it answered
for (``gpu_claims``, with those of accepted window proofs, scanned from the store each
pass); every wrong answer (``hardware.WrongAnswer``), which the challenger reports itself
with ``slash_wrong_answer`` (``report_wrong_answers``: one per provider and GPU challenge, the
chain's record key). With a ``HardwareQuorum``, the verdict then collects its co-signatures
and, with a quorum, is attested on chain (``hardware_quorum``).

Failure contract: a pass never raises for a worker, the chain or a peer; what went wrong is
in the verdict or the log, and the provider is asked again later.
"""

from __future__ import annotations

import base64
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from gpu_market import hardware as H
from gpu_market.challenge import Challenge
from gpu_market.challenge_messages import open_message, request_message, sign_digest
from gpu_market.challenge_verdict import BoundsTable, load_bounds
from gpu_market.net import BoundedClient, NetError
from gpu_market.proof import decode_proof
from solders.pubkey import Pubkey

from .chain import chain_error_name
from .config import ChallengeConfig, VerifyConfig
from .errors import Rejection, error_body
from .hardware import Declared, HardwareVerdict, Judged, WrongAnswer, judge_hardware, missing
from .schema import b58_pubkey

log = logging.getLogger("gpum_validator.challenger")

MAX_PER_PASS = 4
MAX_DEFERRALS = 4
MAX_REPORT_ATTEMPTS = 5
PROVIDERS_TTL_S = 60.0
"""The market's provider list is read again after at most this long, and after two passes
when passes are shorter: a provider that just registered is challenged within two passes
(a minute at the default 30 s pass)."""
CLAIMS_SCAN_LIMIT = 500
CLAIMS_META = "hardware_claims_scanned"


def b58(raw: bytes) -> str:
    return str(Pubkey.from_bytes(bytes(raw)))


def declared_of(view: Any) -> Declared:
    """What a Provider account declares (``ProviderView``)."""
    return Declared(bytes(view.address), bytes(view.worker_key), str(view.spec.gpu_model),
                    int(view.spec.gpu_count), int(view.spec.vram_mib))


def answer_cap(gpus: int) -> int:
    """The most bytes an answer for ``gpus`` GPUs takes (about 1 KiB each)."""
    return 16384 + 4096 * gpus


def open_cap(ch: Challenge, gpus: int) -> int:
    """The most bytes the openings of ``gpus`` GPUs take: base64 rows, hex proofs, chunks."""
    proof = (max(1, ch.n).bit_length() + 1) * 70
    per_gpu = (ch.rows_to_open * (ch.n * 4 * 4 // 3 + proof + 200)
               + ch.chunks_to_open * (max(1, ch.memory_mib).bit_length() * 70 + 200) + 1024)
    return 16384 + per_gpu * gpus


class Challenger:
    """Challenges the market's providers (see the module docstring). ``authority``: this
    validator's Keypair; ``client``: the SDK client (``list_providers`` reads through its
    ``_program_accounts``); ``quorum``: gathers co-signatures of each verdict (None: none)."""

    def __init__(self, client: Any, authority: Any, store: Any, cfg: VerifyConfig,
                 ccfg: ChallengeConfig, *, table: BoundsTable | None = None,
                 http: BoundedClient | None = None, quorum: Any = None,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.authority = authority
        self.me = bytes(authority.pubkey())
        self.store = store
        self.cfg = cfg
        self.ccfg = ccfg
        self.table = table or load_bounds()
        self.http = http or BoundedClient(ccfg.deadline_seconds)
        self.quorum = quorum
        self.clock = clock
        self.monotonic = monotonic
        self.rng: random.Random = (random.Random(ccfg.seed) if ccfg.seed is not None
                                   else random.SystemRandom())
        self._providers: tuple[float, list[Any]] | None = None
        self._latest: dict[bytes, HardwareVerdict] | None = None
        self._next: dict[bytes, float] = {}
        self._retry: dict[bytes, float] = {}
        self._deferred: dict[bytes, int] = {}
        """Provider -> challenges it put off in a row (not counting busy with a job)."""
        self._scanned: float | None = None
        self._report_tries: dict[tuple[bytes, bytes], int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the loop

    def start(self) -> Challenger:
        self._thread = threading.Thread(target=self._loop, name="challenger", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.ccfg.deadline_seconds + 5)
        self.http.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.ccfg.pass_seconds):
            try:
                self.run_pass()
            except Exception:  # a bug or the store: logged, the next pass tries again
                log.exception("hardware challenge pass failed")

    def run_pass(self) -> list[HardwareVerdict]:
        """One pass: the claims of new proofs, the wrong answers not reported yet, then the
        providers that are due."""
        self.scan_claims()
        self.report_wrong_answers()
        out = []
        for view, why in self.due(self.providers())[:MAX_PER_PASS]:
            if self._stop.is_set():
                break
            v = self.challenge(view, why)
            if v is not None:
                out.append(v)
        return out

    # ------------------------------------------------------------------ who is due

    def providers(self) -> list[Any]:
        """The market's Active Provider accounts (cached ``min(PROVIDERS_TTL_S, 2 passes)``;
        the last list when the chain cannot be read)."""
        now = self.monotonic()
        ttl = min(PROVIDERS_TTL_S, 2 * self.ccfg.pass_seconds)
        if self._providers is not None and now - self._providers[0] < ttl:
            return self._providers[1]
        from gpu_market.offers import list_providers

        try:
            views = [p for p in list_providers(self.client, Pubkey.from_bytes(self.cfg.market))
                     if str(p.status).lower() == "active"]
        except Exception as e:  # noqa: BLE001 - the chain: keep the last list
            log.warning("cannot list the market's providers: %s", e)
            return [] if self._providers is None else self._providers[1]
        self._providers = (now, views)
        return views

    def forget_providers(self) -> None:
        """Read the Provider accounts again at the next pass."""
        self._providers = None

    def latest(self) -> dict[bytes, HardwareVerdict]:
        if self._latest is None:
            self._latest = self.store.latest_hardware_verdicts()
        return self._latest

    def draw(self) -> float:
        """Seconds to the next random challenge (module docstring)."""
        mean = self.ccfg.interval_seconds
        return min(3 * mean, max(mean / 10, self.rng.expovariate(1 / mean)))

    def due(self, providers: list[Any]) -> list[tuple[Any, str]]:
        """(provider, why) for each due one, registrations and spec changes first."""
        now = self.clock()
        latest = self.latest()
        first, later = [], []
        for view in providers:
            key = bytes(view.address)
            if self._retry.get(key, 0) > now:
                continue
            last = latest.get(key)
            if last is None:
                first.append((view, "registration"))
            elif not declared_of(view).same(last.declared):
                first.append((view, "spec_change"))
            elif last.detail.get("no_endpoint") and getattr(view, "endpoint", ""):
                first.append((view, "endpoint_published"))
            else:
                at = self._next.setdefault(key, last.recorded_at + self.draw())
                if now >= at:
                    later.append((view, "random"))
        return first + later

    # ------------------------------------------------------------------ one challenge

    def challenge(self, view: Any, why: str) -> HardwareVerdict | None:
        """Challenge one provider; its verdict (recorded), or None when the worker asked to
        be asked later (busy, rate limits)."""
        declared = declared_of(view)
        ccfg = self.ccfg
        memory = (min(ccfg.max_memory_mib, int(declared.vram_mib * ccfg.memory_fraction))
                  if declared.vram_mib else 0)
        ch = Challenge(seed=os.urandom(32), n=ccfg.n, rounds=ccfg.rounds, rows_to_open=ccfg.rows,
                       memory_mib=memory, chunks_to_open=min(ccfg.chunks, memory),
                       issued_at=int(self.clock()))
        endpoint = str(getattr(view, "endpoint", "") or "").rstrip("/")
        if not endpoint.startswith(("http://", "https://")):
            return self._record(view, ch, why, missing("the provider publishes no worker "
                                                       "endpoint to challenge",
                                                       {"no_endpoint": True}))
        judged = self._ask(view, declared, endpoint, ch)
        if judged is None:
            return None
        return self._record(view, ch, why, judged)

    def _ask(self, view: Any, declared: Declared, endpoint: str,
             ch: Challenge) -> Judged | None:
        cid = ch.challenge_id
        keys = (self.cfg.program_id, self.cfg.market, declared.provider)
        start = self.monotonic()
        end = start + self.ccfg.deadline_seconds
        ts = int(self.clock())
        body = {"challenge": base64.b64encode(ch.encode()).decode(), "validator": b58(self.me),
                "timestamp": ts, "signature": base64.b64encode(sign_digest(
                    self.authority, request_message(*keys, cid, ts))).decode()}
        try:
            r = self.http.request("POST", endpoint + "/v1/challenges", json=body,
                                  deadline=self.ccfg.deadline_seconds,
                                  max_bytes=answer_cap(declared.gpu_count))
        except NetError as e:
            return missing(f"the challenge got no answer within the deadline "
                           f"({self.ccfg.deadline_seconds:g} s): {e}")
        answer_elapsed = self.monotonic() - start
        doc = r.json_object()
        if r.status != 200:
            return self._refused(view, r.status, doc or {})
        self._deferred.pop(declared.provider, None)
        nonce = os.urandom(32)
        ts = int(self.clock())
        body = {"validator": b58(self.me), "nonce": nonce.hex(), "timestamp": ts,
                "signature": base64.b64encode(sign_digest(self.authority, open_message(
                    *keys, cid, nonce, ts))).decode()}
        opened: dict[str, Any] | None = None
        open_elapsed: float | None = None
        t0 = self.monotonic()
        try:
            r2 = self.http.request("POST", f"{endpoint}/v1/challenges/{cid.hex()}/open",
                                   json=body, deadline=max(0.001, end - t0),
                                   max_bytes=open_cap(ch, declared.gpu_count))
            open_elapsed = self.monotonic() - t0
            if r2.status == 200:
                opened = r2.json_object()
            else:
                log.info("provider %s refused to open: %s %s", b58(declared.provider),
                         r2.status, r2.body[:200])
        except NetError as e:
            log.info("provider %s: no openings within the deadline: %s",
                     b58(declared.provider), e)
        uuids = [g.get("uuid") for g in (doc or {}).get("gpus", []) if isinstance(g, dict)]
        claims = self.store.gpu_claimants([u for u in uuids if isinstance(u, str)])
        return judge_hardware(ch, declared, doc, opened, nonce, program_id=self.cfg.program_id,
                              market=self.cfg.market, table=self.table,
                              answer_elapsed_s=answer_elapsed, open_elapsed_s=open_elapsed,
                              claims=claims, known_nvml=self.ccfg.known_nvml_sha256, b58=b58)

    def _refused(self, view: Any, status: int, doc: dict[str, Any]) -> Judged | None:
        """A non-200 answer: None (ask later) or the failure."""
        key = bytes(view.address)
        error = str(doc.get("error") or "")
        message = str(doc.get("message") or error)[:300]
        if status == 409 and error == "busy" and int(getattr(view, "gpus_in_use", 0) or 0):
            self._deferred.pop(key, None)
            return self._later(key, f"busy with a job ({message})")
        if (status == 409 and error == "busy") or (status in (429, 503)
                                                   and error != "compute_failed"):
            n = self._deferred[key] = self._deferred.get(key, 0) + 1
            if n < MAX_DEFERRALS:
                self.forget_providers()  # its gpus_in_use may be newer on chain
                return self._later(key, f"{status} {error} ({n} of {MAX_DEFERRALS}): "
                                   f"{message}")
            self._deferred.pop(key, None)
            return missing(f"the worker put the challenge off {MAX_DEFERRALS} times in a row "
                           f"(last: {status} {error}: {message}); its Provider account "
                           "showed no GPU in use")
        return missing(f"the worker refused the challenge: {status} {error}: {message}")

    def _later(self, key: bytes, why: str) -> None:
        self._retry[key] = self.clock() + self.ccfg.retry_seconds
        log.info("provider %s not challenged now (%s); again in %.0f s", b58(key), why,
                 self.ccfg.retry_seconds)

    def _record(self, view: Any, ch: Challenge, why: str, j: Judged) -> HardwareVerdict:
        declared = declared_of(view)
        now = self.clock()
        v = HardwareVerdict(declared.provider, ch.challenge_id, ch.issued_at, declared,
                            j.passed, j.reasons, {"why": why, **j.detail}, now)
        self.store.record_hardware_verdict(v)
        if j.uuids:
            self.store.record_gpu_claims(declared.provider, j.uuids, "verdict", now)
        for e in j.evidence:
            if self.store.record_wrong_answer(e, now):
                log.critical("WRONG ANSWER by provider %s: GPU %d row %d of challenge %s "
                             "leads to another root than the one its worker key signed; "
                             "evidence stored", b58(e.provider), e.gpu_index, e.row_index,
                             e.challenge_digest.hex()[:16])
        if j.evidence:
            self.report_wrong_answers()
        self.latest()[declared.provider] = v
        self._next[declared.provider] = now + self.draw()
        self._retry.pop(declared.provider, None)
        level = logging.INFO if v.passed else logging.WARNING
        log.log(level, "hardware verdict on provider %s (%s, %s x %d): %s%s",
                b58(declared.provider), why, declared.gpu_model, declared.gpu_count,
                "passed" if v.passed else "FAILED", "" if v.passed else
                " - " + "; ".join(r[:160] for r in v.reasons[:4]))
        if self.quorum is not None:
            try:
                v = self.quorum.gather(v)
            except Exception:  # a bug in gathering never loses the verdict
                log.exception("co-signing the verdict on %s failed", b58(declared.provider))
        return v

    # ------------------------------------------------------------------ wrong answers

    def report_wrong_answers(self) -> list[str]:
        """``slash_wrong_answer`` for each GPU challenge with unreported evidence (the chain
        keeps one record per provider and challenge, so one row each); the transactions sent.
        A refusal that no retry changes (the SDK's or the program's checks, a record that
        exists) ends the report; a transport error is retried next pass, up to
        ``MAX_REPORT_ATTEMPTS`` times."""
        sent: list[str] = []
        groups: dict[tuple[bytes, bytes], list[WrongAnswer]] = {}
        for e in self.store.wrong_answers(unreported=True):
            groups.setdefault((e.provider, e.challenge_digest), []).append(e)
        for key, rows in groups.items():
            e = rows[0]
            evidence = H.WrongAnswerEvidence(e.challenge_digest, e.challenged_at, e.root,
                                             e.leaf_count, e.row_index, e.leaf_hash,
                                             e.siblings)
            worker = Pubkey.from_bytes(e.worker_key)
            now = self.clock()
            try:
                tx = str(self.client.slash_wrong_answer(
                    self.authority, Pubkey.from_bytes(e.provider), evidence,
                    (worker, e.answer_signature), (worker, e.row_signature)))
            except Exception as exc:  # noqa: BLE001 - classified below
                name = chain_error_name(exc)
                why = f"{name or type(exc).__name__}: {exc}"[:500]
                tries = self._report_tries[key] = self._report_tries.get(key, 0) + 1
                final = (isinstance(exc, ValueError) or name is not None
                         or "already in use" in str(exc) or tries >= MAX_REPORT_ATTEMPTS)
                for r in rows:
                    self.store.mark_wrong_answer(r, "failed" if final else "retry", now,
                                                 error=why)
                log.warning("slash_wrong_answer of provider %s %s: %s", b58(e.provider),
                            "not possible" if final else "failed, retried next pass", why)
                continue
            for r in rows:
                self.store.mark_wrong_answer(r, "done", now, signature=tx)
            log.critical("SLASHED provider %s for a wrong answer to challenge %s: %s",
                         b58(e.provider), e.challenge_digest.hex()[:16], tx)
            sent.append(tx)
        return sent

    # ------------------------------------------------------------------ claims of proofs

    def scan_claims(self) -> int:
        """Record the GPU UUIDs of the newest accepted proof of every job whose row changed
        since the last scan (at most ``CLAIMS_SCAN_LIMIT`` jobs a pass); the jobs read."""
        if self._scanned is None:
            self._scanned = float(self.store.get_meta(CLAIMS_META) or 0)
        rows = self.store.jobs_updated_since(self._scanned, CLAIMS_SCAN_LIMIT)
        now = self.clock()
        for job, updated in rows:
            sp = self.store.newest_accepted(job)
            if sp is not None:
                try:
                    proof = decode_proof(sp.proof)
                except Exception as e:  # noqa: BLE001 - stored bytes were verified once
                    log.warning("stored proof of job %s does not decode: %s", b58(job), e)
                else:
                    self.store.record_gpu_claims(proof.provider, [g.uuid for g in proof.gpus],
                                                 "proof", now)
            self._scanned = updated
        if rows:
            self.store.set_meta(CLAIMS_META, repr(self._scanned))
        return len(rows)


def hardware_answer(store: Any, provider_b58: str) -> tuple[int, dict[str, Any]]:
    """The latest verdict on a provider: 200 with ``HardwareVerdict.to_json``; 404
    ``not_judged``; 400 for a bad address."""
    try:
        key = b58_pubkey(provider_b58, "the provider address")
    except Rejection as r:
        return r.http_status, r.body()
    v = store.latest_hardware_verdict(key)
    if v is None:
        return 404, error_body("not_judged", f"this validator has not challenged provider "
                               f"{provider_b58} yet")
    return 200, v.to_json(b58)
