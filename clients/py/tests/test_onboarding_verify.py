"""``gpum provider init``'s last step (``gpu_market.onboarding_verify.wait_verified``): done
once the Provider account shows verified hardware; a failed verdict on this declaration
attested since it was made ends the wait with what the validators say (served by a real HTTP
server); an older failed verdict does not; the wait is bounded and reports progress. The chain
is answered locally, the clock is the test's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from gpu_market.accounts import HardwareVerdict
from gpu_market.onboarding import OnboardingError
from gpu_market.onboarding_verify import validator_verdicts, wait_verified
from gpu_market.processes import JsonServer, free_port
from solders.pubkey import Pubkey

PROVIDER = Pubkey.new_unique()
GPUS = SimpleNamespace(model="simulated", count=2, vram_mib=81_559)
SINCE = 1_800_000_000


class Chain:
    """The Provider account's ``hardware`` over time: ``verdicts[i]`` at the i-th read."""

    def __init__(self, verdicts, validators) -> None:
        self.verdicts, self.validators, self.reads = verdicts, validators, 0

    def list_validators(self, market, statuses):
        assert statuses == ["active"]
        return self.validators

    def fetch_provider(self, address):
        assert address == PROVIDER
        hw = self.verdicts[min(self.reads, len(self.verdicts) - 1)]
        self.reads += 1
        return SimpleNamespace(hardware=hw)


def failed(at: int, **spec) -> HardwareVerdict:
    d = {"gpu_model": "simulated", "gpu_count": 2, "vram_mib": 81_559, **spec}
    return HardwareVerdict(verified=False, passed=False, challenged_at=at, **d)


@pytest.fixture
def validator():
    """A validator serving a failed verdict on PROVIDER."""
    reason = "too_slow: answered in 40.00s; a simulated must answer within 10.27s"
    verdict = {"passed": False, "reasons": [reason], "attestations": 2}
    server = JsonServer(lambda p, b: (404, {}), lambda p: (200, verdict)
                        if p == f"/v1/providers/{PROVIDER}/hardware" else (404, {}))
    yield SimpleNamespace(authority=Pubkey.new_unique(), endpoint=server.url + "/")
    server.server.shutdown()
    server.server.server_close()


def run(chain, timeout=60.0):
    clock, said = [0.0], []

    def sleep(s):
        clock[0] += s

    out = wait_verified(chain, "M", PROVIDER, GPUS, SINCE, timeout, said.append,
                        clock=lambda: clock[0], sleep=sleep)
    return out, said


def test_done_once_the_chain_shows_the_hardware_verified(validator):
    ok = HardwareVerdict(verified=True, passed=True, challenged_at=SINCE + 5, attesters=2)
    (status, _inputs, outcome, text), said = run(Chain([HardwareVerdict()] * 20 + [ok],
                                                       [validator]))
    assert status == "done" and outcome["attesters"] == 2 and outcome["waited_s"] == 40
    assert "verified by 2 validator(s) after 40 s of waiting" in text
    assert len(said) == 2 and "they find a new provider within about a minute" in said[0]
    assert "FAILED: too_slow" in said[0]


def test_a_failed_verdict_on_this_declaration_ends_the_wait_with_the_reasons(validator):
    with pytest.raises(OnboardingError) as e:
        run(Chain([HardwareVerdict(), failed(SINCE + 30)], [validator]))
    assert "the validators' hardware challenge failed" in str(e.value)
    assert "FAILED: too_slow: answered in 40.00s" in str(e.value)


def test_an_older_failed_verdict_or_one_on_another_declaration_is_waited_past(validator):
    for stale in (failed(SINCE - 600), failed(SINCE), failed(SINCE + 30, gpu_count=1)):
        with pytest.raises(OnboardingError, match="not verified after 1 min"):
            run(Chain([stale], [validator]))


def test_the_timeout_says_what_each_validator_said():
    silent = SimpleNamespace(authority=Pubkey.new_unique(),
                             endpoint=f"http://127.0.0.1:{free_port()}")
    bare = SimpleNamespace(authority=Pubkey.new_unique(), endpoint="")
    with pytest.raises(OnboardingError) as e:
        run(Chain([HardwareVerdict()], [silent, bare]), timeout=10)
    msg = str(e.value)
    assert f"validator {str(silent.authority)[:8]}: no answer" in msg
    assert f"validator {str(bare.authority)[:8]}: no endpoint" in msg
    assert "run `gpum provider init` again to keep waiting" in msg
    with pytest.raises(OnboardingError, match="has no Active validator"):
        run(Chain([HardwareVerdict()], []), timeout=1)


def test_a_validator_that_has_not_judged_yet_says_so():
    server = JsonServer(lambda p, b: (404, {}), lambda p: (404, {"error": "not_judged"}))
    try:
        v = SimpleNamespace(authority=Pubkey.new_unique(), endpoint=server.url)
        from gpu_market.net import BoundedClient

        with BoundedClient() as http:
            assert validator_verdicts([v], PROVIDER, http) == [
                f"validator {str(v.authority)[:8]}: not challenged yet"]
    finally:
        server.server.shutdown()
        server.server.server_close()
