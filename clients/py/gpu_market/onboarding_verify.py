"""Onboarding a GPU provider, the last step (I/O): waiting until the validators' hardware
verdict is attested on the Provider account (``gpum provider init``'s ``verified``).

Validators challenge a provider as soon as they see it registered (``gpum_validator.
challenger``: its first challenge, then one at random times); with the market's
``hardware_quorum`` of them agreeing, the verdict lands on chain (``attest_hardware``). This
module polls the Provider account every ``poll_s`` until ``hardware.verified``, and reports
meanwhile what the market's Active validators (the 8 largest bonds) say at ``GET
{endpoint}/v1/providers/<provider>/hardware`` (3 s, 64 KiB each). A failed verdict on chain
for this declaration, attested since the registration, ends the wait with its reasons.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .onboarding import OnboardingError
from .units import format_span

__all__ = ["validator_verdicts", "wait_verified"]

VERDICT_DEADLINE_S = 3.0
VERDICT_MAX_BYTES = 64 * 1024
MAX_VALIDATORS_ASKED = 8
"""The largest-bonded Active validators asked for their verdict (one at a time, 3 s each)."""


def validator_verdicts(validators: list[Any], provider: Any, http: Any) -> list[str]:
    """One phrase per validator: what its latest verdict on ``provider`` says."""
    from .net import NetError

    out = []
    for v in validators:
        who = str(v.authority)[:8]
        if not v.endpoint:
            out.append(f"validator {who}: no endpoint")
            continue
        url = f"{v.endpoint.rstrip('/')}/v1/providers/{provider}/hardware"
        try:
            r = http.get(url, deadline=VERDICT_DEADLINE_S, max_bytes=VERDICT_MAX_BYTES)
        except NetError as e:
            out.append(f"validator {who}: no answer ({e})")
            continue
        doc = r.json_object() or {}
        if r.status == 404:
            out.append(f"validator {who}: not challenged yet")
        elif r.status != 200:
            out.append(f"validator {who}: HTTP {r.status}")
        elif doc.get("passed"):
            out.append(f"validator {who}: passed ({doc.get('attestations', 0)} signature(s))")
        else:
            reasons = "; ".join(str(x)[:160] for x in (doc.get("reasons") or [])[:2])
            out.append(f"validator {who}: FAILED: {reasons}")
    return out


def wait_verified(client: Any, market: Any, provider: Any, gpus: Any, since: int,
                  timeout: float, say: Callable[[str], None], *, poll_s: float = 2.0,
                  progress_s: float = 15.0,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> tuple[str, dict, dict, str]:
    """Wait until the Provider account ``provider`` shows verified hardware: the step's
    (status, inputs, outcome, text). OnboardingError when a failed verdict for this
    declaration (``gpus``: model, count, VRAM) of a challenge issued after ``since`` (Unix
    seconds, when the declaration was made: an earlier verdict, e.g. one that found no
    endpoint, is about something else) is on chain, or after ``timeout`` seconds, with what
    the validators say."""
    from .net import BoundedClient

    start = clock()
    validators = client.list_validators(market, ["active"])[:MAX_VALIDATORS_ASKED]
    last_report = start
    with BoundedClient() as http:
        while True:
            view = client.fetch_provider(provider)
            hw = view.hardware if view is not None else None
            if hw is not None and hw.verified:
                waited = clock() - start
                return "done", {}, {"waited_s": round(waited, 3), "attesters": hw.attesters,
                                    "challenged_at": hw.challenged_at,
                                    "attested_at": hw.attested_at}, \
                    (f"hardware verified by {hw.attesters} validator(s) after "
                     f"{format_span(int(waited))} of waiting")
            if hw is not None and hw.status == "failed" and hw.challenged_at > since \
                    and (hw.gpu_model, hw.gpu_count, hw.vram_mib) == (
                        gpus.model, gpus.count, gpus.vram_mib):
                said = "; ".join(validator_verdicts(validators, provider, http))
                raise OnboardingError(
                    f"the validators' hardware challenge failed ({said or 'no reasons served'})"
                    ": fix the machine (the benchmark step warned why), then change the "
                    "declaration or wait for their next random challenge")
            now = clock()
            if now - start >= timeout:
                said = "; ".join(validator_verdicts(validators, provider, http))
                raise OnboardingError(
                    f"the hardware is not verified after {format_span(int(timeout))} "
                    f"({said or f'market {market} has no Active validator'}); run `gpum "
                    "provider init` again to keep waiting (nothing is redone)")
            if now - last_report >= progress_s:
                last_report = now
                said = "; ".join(validator_verdicts(validators, provider, http))
                say(f"      waiting for the validators' verdict "
                    f"({format_span(int(now - start))}; they find a new provider within about "
                    f"a minute): {said or 'no Active validator'}")
            sleep(poll_s)
