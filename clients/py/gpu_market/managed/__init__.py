"""Managed jobs: a job that survives its provider. A controller run by the user (their wallet
signs everything) watches the job's current attempt and, when it fails (its job Failed or its
provider jailed on chain, no window accepted by its committee for ``missed_windows`` windows,
GPUs unhealthy past a grace, the container exiting with a recover-on code), stops paying the
old provider, picks the next offer by the recovery policy, creates the successor job (same
committee where its members are healthy), delivers the spec with the secrets sealed to the new
worker, and closes the old job once its settlement grace is over.

Modules, pure first: :mod:`.policy` (the recovery policy), :mod:`.detect` (when an attempt has
failed), :mod:`.template` (the workload without secret values; attempt job ids), :mod:`.store`
(the durable state: SQLite), :mod:`.world` (the chain, workers and validators behind one
interface), :mod:`.controller` (the state machine, crash-safe step by step), :mod:`.launch`
(the Python API: :func:`launch`, :func:`attach`, :class:`ManagedJob`). The CLI is
``gpum run --managed``, ``gpum job watch --managed``, ``gpum job migrate``
(:mod:`gpu_market.cli.managed`). Nothing on chain knows a managed job: see the README,
"Managed jobs", for what an on-chain lineage would cost and protect.
"""

from __future__ import annotations

from .launch import LaunchError, ManagedJob, attach, describe, launch
from .policy import PolicyError, RecoveryPolicy, parse_exit_codes
from .store import ControllerBusy, ManagedStore, StoreError

__all__ = ["ControllerBusy", "LaunchError", "ManagedJob", "ManagedStore", "PolicyError",
           "RecoveryPolicy", "StoreError", "attach", "describe", "launch", "parse_exit_codes"]  # fmt: skip
