"""gpu-market validator node: verifies worker window proofs and settles them on chain.

Public API (pinned by tests/test_api.py): the intake, settler, store and pure checks.
"""

from .config import HealthThresholds, SettlePolicy, VerifyConfig
from .errors import (
    ChainUnavailable,
    ConfigError,
    Equivocation,
    Rejection,
    StoreError,
    ValidatorError,
)
from .service import Intake
from .settlement import SettlementLoop, Settler, due_reason
from .store import SQLiteStore, Store, StoreLimits
from .verify import (
    Authenticated,
    JobRules,
    JobState,
    Verdict,
    authenticate,
    check_assignment,
    check_window,
    check_worker_key,
    health_bound,
    job_rules,
)

__all__ = [
    "Authenticated",
    "ChainUnavailable",
    "ConfigError",
    "Equivocation",
    "HealthThresholds",
    "Intake",
    "JobRules",
    "JobState",
    "Rejection",
    "SQLiteStore",
    "SettlePolicy",
    "SettlementLoop",
    "Settler",
    "Store",
    "StoreError",
    "StoreLimits",
    "ValidatorError",
    "Verdict",
    "VerifyConfig",
    "authenticate",
    "check_assignment",
    "check_window",
    "check_worker_key",
    "due_reason",
    "health_bound",
    "job_rules",
]
