"""gpu-market validator node: verifies worker window proofs and settles them on chain.

Public API (pinned by tests/test_api.py): the intake, the committee member endpoints, the
settler and reporters, the store and the pure checks and round rules.
"""

from .attest import leader_of, quorum_value, settle_bound
from .config import HealthThresholds, SettlePolicy, VerifyConfig
from .downtime import DowntimeReporter
from .errors import (
    ChainUnavailable,
    ConfigError,
    Equivocation,
    Rejection,
    StoreError,
    ValidatorError,
)
from .intake import Intake
from .members import Member
from .records import Store, StoreLimits
from .settle_policy import due_reason
from .settlement import SettlementLoop, Settler
from .slashing import EquivocationReporter, ValidatorEquivocationReporter
from .store_sqlite import SQLiteStore
from .verify import (
    Authenticated,
    JobRules,
    JobState,
    PrevProof,
    Verdict,
    authenticate,
    check_assignment,
    check_committee,
    check_window,
    check_worker_key,
    health_bound,
    job_rules,
)

__all__ = [
    "Authenticated",
    "ChainUnavailable",
    "ConfigError",
    "DowntimeReporter",
    "Equivocation",
    "EquivocationReporter",
    "HealthThresholds",
    "Intake",
    "JobRules",
    "JobState",
    "Member",
    "PrevProof",
    "Rejection",
    "SQLiteStore",
    "SettlePolicy",
    "SettlementLoop",
    "Settler",
    "Store",
    "StoreError",
    "StoreLimits",
    "ValidatorEquivocationReporter",
    "ValidatorError",
    "Verdict",
    "VerifyConfig",
    "authenticate",
    "check_assignment",
    "check_committee",
    "check_window",
    "check_worker_key",
    "due_reason",
    "health_bound",
    "job_rules",
    "leader_of",
    "quorum_value",
    "settle_bound",
]
