"""The public API of gpum_validator is exactly __all__."""

import gpum_validator


def test_public_api_is_pinned():
    assert sorted(gpum_validator.__all__) == sorted([
        "Authenticated", "ChainUnavailable", "ConfigError", "DowntimeReporter", "Equivocation",
        "EquivocationReporter", "HealthThresholds", "Intake", "JobRules", "JobState", "Member",
        "PrevProof", "Rejection", "SQLiteStore", "SettlePolicy", "SettlementLoop", "Settler",
        "Store", "StoreError", "StoreLimits", "ValidatorEquivocationReporter",
        "ValidatorError", "Verdict", "VerifyConfig", "authenticate", "check_assignment",
        "check_committee", "check_window", "check_worker_key", "due_reason", "health_bound",
        "job_rules", "leader_of", "quorum_value", "settle_bound"])
    for name in gpum_validator.__all__:
        assert hasattr(gpum_validator, name)
