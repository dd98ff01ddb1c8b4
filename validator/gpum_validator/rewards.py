"""What this validator earns: its Validator account, read now and then, kept in the store.

``RewardsProbe.refresh`` (a task of the settlement loop) reads
``client.fetch_validator_by_authority(market, authority)`` at most every ``interval`` seconds
and stores ``{"earned", "unclaimed", "bond", "slashes", "status", "read_at"}`` under the
``rewards`` meta key: ``/metrics`` serves ``gpum_validator_rewards_earned`` from it and
``gpum-validator status`` prints it, neither touching the chain.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from solders.pubkey import Pubkey

from .records import Store
from .verify import field_of

log = logging.getLogger("gpum_validator.rewards")


def stored_rewards(store: Store) -> dict[str, Any] | None:
    """The last stored reading, or None."""
    raw = store.get_meta("rewards")
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class RewardsProbe:
    def __init__(self, client: Any, market: bytes, authority: bytes, store: Store,
                 interval: float = 60.0, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.market = Pubkey.from_bytes(bytes(market))
        self.authority = Pubkey.from_bytes(bytes(authority))
        self.store = store
        self.interval = interval
        self.clock = clock
        self._at = -1e18

    def refresh(self, force: bool = False) -> dict[str, Any] | None:
        """Read the Validator account if ``interval`` passed (or ``force``); store it."""
        now = self.clock()
        if not force and now - self._at < self.interval:
            return None
        self._at = now
        try:
            v = self.client.fetch_validator_by_authority(self.market, self.authority)
        except Exception as e:  # noqa: BLE001 - advisory: retried next interval
            log.warning("cannot read this validator's account: %s", e)
            return None
        if v is None:
            log.warning("%s has no Validator account in market %s", self.authority,
                        self.market)
            return None
        reading = {"earned": int(field_of(v, "rewards_earned")),
                   "unclaimed": int(field_of(v, "rewards_unclaimed")),
                   "bond": int(field_of(v, "bond")), "slashes": int(field_of(v, "slashes")),
                   "status": str(field_of(v, "status")).lower(), "read_at": now}
        self.store.set_meta("rewards", json.dumps(reading))
        return reading
