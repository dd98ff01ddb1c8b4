"""Co-signing hardware verdicts: the quorum ``attest_hardware`` needs (I/O).

Member side, ``POST /v1/hardware/sign`` ``{"provider", "worker_key", "gpu_model",
"gpu_count", "vram_mib", "passed", "challenged_at", "challenge"}`` -> ``{"authority",
"signature"}``: this validator's signature over ``challenge_messages.hardware_message`` of
exactly that verdict. It signs only a verdict it agrees with: its own latest verdict on the
provider (``store.latest_hardware_verdict``) is about the same worker key, GPU model, count
and VRAM and has the same ``passed``, and both its own challenge and the asked one were
issued at most ``max_age`` ago (the market's ``hardware_attestation_max_age_seconds``, or
``ChallengeConfig.max_age_seconds`` on a chain without it) and not in the future. Otherwise
409 with why (``no_verdict``, ``disagree``, ``stale``). It signs nothing for a provider it
never challenged, so a stranger gains no signature by asking.

Leader side, ``gather``: after the challenger records a verdict, this node signs it itself
and asks the market's other Active validators (their endpoints from chain, ``peers.Peers``,
in parallel, each within the peer deadline) until ``hardware_quorum - 1`` signatures that
verify are in; every signature is stored with the verdict (``attestations``). With
``hardware_quorum`` of them it sends ``attest_hardware`` itself (``submit``), passed or
failed; the transaction, or why the chain refused it, is kept with the verdict. Too few is
no error: the verdict stands here, unattested on chain.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from gpu_market import hardware as H
from gpu_market.challenge_messages import (
    GPU_MODEL_LEN,
    HardwareVerdictArgs,
    sign_digest,
    verify_digest,
)
from solders.pubkey import Pubkey

from .chain import chain_error_name
from .config import ChallengeConfig, VerifyConfig
from .errors import Rejection
from .hardware import HardwareVerdict
from .schema import b58_pubkey

log = logging.getLogger("gpum_validator.hardware_quorum")

FIELDS = ("provider", "worker_key", "gpu_model", "gpu_count", "vram_mib", "passed",
          "challenged_at", "challenge")
MAX_FUTURE_S = 300


def args_of(v: HardwareVerdict) -> HardwareVerdictArgs:
    d = v.declared
    return HardwareVerdictArgs(d.worker_key, d.gpu_model, d.gpu_count, d.vram_mib, v.passed,
                               v.challenged_at, v.challenge)


def request_body(v: HardwareVerdict) -> dict[str, Any]:
    d = v.declared
    return {"provider": str(Pubkey.from_bytes(v.provider)),
            "worker_key": str(Pubkey.from_bytes(d.worker_key)), "gpu_model": d.gpu_model,
            "gpu_count": d.gpu_count, "vram_mib": d.vram_mib, "passed": v.passed,
            "challenged_at": v.challenged_at, "challenge": v.challenge.hex()}


class HardwareQuorum:
    """Both sides (module docstring). ``authority``: this validator's Keypair; ``peers``:
    ``peers.Peers`` (None: no one else is asked)."""

    def __init__(self, client: Any, authority: Any, store: Any, cfg: VerifyConfig,
                 ccfg: ChallengeConfig, peers: Any = None,
                 clock: Callable[[], float] = time.time, params_ttl_s: float = 60.0) -> None:
        self.client = client
        self.authority = authority
        self.me = bytes(authority.pubkey())
        self.store = store
        self.cfg = cfg
        self.ccfg = ccfg
        self.peers = peers
        self.clock = clock
        self.params_ttl_s = params_ttl_s
        self._params: tuple[float, Any] | None = None

    def _market_params(self) -> Any:
        now = time.monotonic()
        if self._params is None or now - self._params[0] > self.params_ttl_s:
            try:
                m = self.client.fetch_market(Pubkey.from_bytes(self.cfg.market))
                self._params = (now, None if m is None else m.params)
            except Exception as e:  # noqa: BLE001 - the chain: the last value, or none
                log.warning("cannot read the market's parameters: %s", e)
                return None if self._params is None else self._params[1]
        return self._params[1]

    def max_age(self) -> float:
        got = getattr(self._market_params(), "hardware_attestation_max_age_seconds", None)
        return float(got) if got else self.ccfg.max_age_seconds

    def quorum(self) -> int:
        """Signatures a verdict needs on chain (``hardware_quorum``; 1 on a chain without)."""
        got = getattr(self._market_params(), "hardware_quorum", None)
        return int(got) if got else 1

    # ------------------------------------------------------------------ leader

    def gather(self, v: HardwareVerdict) -> HardwareVerdict:
        """``v`` with its attestations: this node's and up to ``quorum - 1`` peers'."""
        message = args_of(v).message(self.cfg.program_id, self.cfg.market, v.provider)
        sigs = {str(Pubkey.from_bytes(self.me)):
                base64.b64encode(sign_digest(self.authority, message)).decode()}
        need = self.quorum() - 1
        if need > 0 and self.peers is not None:
            try:
                members = [bytes(m.authority) for m in self.client.list_validators(
                    Pubkey.from_bytes(self.cfg.market), {"active"})]
            except Exception as e:  # noqa: BLE001 - the chain: no co-signers this time
                log.warning("cannot list the market's validators: %s", e)
                members = []
            others = [m for m in members if m != self.me]
            body = request_body(v)
            if others:
                with ThreadPoolExecutor(min(8, len(others))) as pool:
                    answers = list(pool.map(
                        lambda m: (m, self.peers.post(m, "/v1/hardware/sign", body)), others))
                for member, a in answers:
                    if len(sigs) > need:
                        break
                    sig = _signature(a)
                    if sig is not None and verify_digest(member, sig, message):
                        sigs[str(Pubkey.from_bytes(member))] = base64.b64encode(sig).decode()
                    elif a is not None:
                        log.info("validator %s did not co-sign the verdict on %s: %s",
                                 Pubkey.from_bytes(member), Pubkey.from_bytes(v.provider),
                                 a.body.get("error"))
        self.store.set_hardware_attestations(v.provider, v.challenge, sigs)
        v = replace(v, attestations=sigs)
        if len(sigs) < need + 1:
            log.info("verdict on %s: %d of %d signatures; not attested on chain",
                     Pubkey.from_bytes(v.provider), len(sigs), need + 1)
            return v
        return self.submit(v)

    def submit(self, v: HardwareVerdict) -> HardwareVerdict:
        """``attest_hardware`` of ``v`` with its attestations, sent by this validator; the
        transaction's signature, or why it failed, is kept with the verdict
        (``attested_tx`` / ``attest_error``). Never raises for the chain."""
        d = v.declared
        args = H.HardwareVerdictArgs(Pubkey.from_bytes(d.worker_key), d.gpu_model, d.gpu_count,
                                     d.vram_mib, v.passed, v.challenged_at, v.challenge)
        sigs = [(Pubkey.from_string(a), base64.b64decode(s)) for a, s in v.attestations.items()]
        try:
            tx = str(self.client.attest_hardware(self.authority, Pubkey.from_bytes(v.provider),
                                                 args, sigs))
        except Exception as e:  # noqa: BLE001 - the chain refused or did not answer: kept
            why = f"{chain_error_name(e) or type(e).__name__}: {e}"[:500]
            log.warning("attest_hardware of the verdict on %s failed: %s",
                        Pubkey.from_bytes(v.provider), why)
            self.store.set_hardware_submission(v.provider, v.challenge, None, why)
            return replace(v, detail={**v.detail, "attest_error": why})
        log.info("attested the hardware verdict on %s (%s) on chain: %s",
                 Pubkey.from_bytes(v.provider), "passed" if v.passed else "failed", tx)
        self.store.set_hardware_submission(v.provider, v.challenge, tx, None)
        return replace(v, detail={**v.detail, "attested_tx": tx})

    # ------------------------------------------------------------------ member

    def sign(self, obj: object, source: str = "") -> tuple[int, dict[str, Any]]:
        """``POST /v1/hardware/sign`` (module docstring)."""
        try:
            return 200, self._sign(obj)
        except Rejection as r:
            return r.http_status, r.body()

    def _sign(self, obj: object) -> dict[str, Any]:
        if not isinstance(obj, dict) or set(obj) != set(FIELDS):
            raise Rejection("bad_request", f"send exactly {', '.join(FIELDS)}", 400)
        provider = b58_pubkey(obj["provider"], "provider")
        worker_key = b58_pubkey(obj["worker_key"], "worker_key")
        model, passed = obj["gpu_model"], obj["passed"]
        ints = [obj[k] for k in ("gpu_count", "vram_mib", "challenged_at")]
        if (not isinstance(model, str) or len(model.encode()) > GPU_MODEL_LEN
                or not isinstance(passed, bool)
                or any(isinstance(i, bool) or not isinstance(i, int) for i in ints)):
            raise Rejection("bad_request", "gpu_model is text of at most 32 bytes, passed a "
                            "bool, gpu_count, vram_mib and challenged_at integers", 400)
        try:
            challenge = bytes.fromhex(str(obj["challenge"]))
            if len(challenge) != 32:
                raise ValueError
            args = HardwareVerdictArgs(worker_key, model, *ints[:2], passed, ints[2], challenge)
            message = args.message(self.cfg.program_id, self.cfg.market, provider)
        except ValueError:
            raise Rejection("bad_request", "the verdict's fields are out of range (challenge: "
                            "64 hex digits)", 400) from None
        own = self.store.latest_hardware_verdict(provider)
        if own is None:
            raise Rejection("no_verdict", "this validator has not challenged the provider; it "
                            "signs only verdicts it reached itself", 409)
        mine = args_of(own)
        if (mine.worker_key, mine.gpu_model, mine.gpu_count, mine.vram_mib, mine.passed) != (
                args.worker_key, args.gpu_model, args.gpu_count, args.vram_mib, args.passed):
            raise Rejection("disagree", f"this validator's latest verdict on the provider "
                            f"({'passed' if own.passed else 'failed'} for {own.declared.gpu_model}"
                            f" x {own.declared.gpu_count}, {own.declared.vram_mib} MiB) is "
                            "another", 409)
        now, age = self.clock(), self.max_age()
        for at, whose in ((own.challenged_at, "its own"), (args.challenged_at, "the asked")):
            if not now - age <= at <= now + MAX_FUTURE_S:
                raise Rejection("stale", f"{whose} challenge was issued at {at}, not within "
                                f"the last {age:g} s", 409)
        if self.me in (provider, worker_key):
            raise Rejection("bad_request", "a provider's own keys attest nothing", 400)
        sig = sign_digest(self.authority, message)
        log.info("co-signed the hardware verdict on %s (%s)", obj["provider"],
                 "passed" if passed else "failed")
        return {"authority": str(Pubkey.from_bytes(self.me)),
                "signature": base64.b64encode(sig).decode()}


def _signature(a: Any) -> bytes | None:
    if a is None or a.status != 200:
        return None
    try:
        sig = base64.b64decode(a.body["signature"], validate=True)
    except (KeyError, TypeError, ValueError):
        return None
    return sig if len(sig) == 64 else None

