"""Prometheus counters of the validator (text exposition format 0.0.4)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    """Thread-safe counters; gauges are read from callbacks at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.proofs: Counter[tuple[str, str]] = Counter()
        self.settlements: Counter[str] = Counter()
        self.equivocation_reports: Counter[str] = Counter()
        self.unstored: Counter[str] = Counter()

    def proof(self, result: str, reason: str = "") -> None:
        """result: accepted | duplicate | rejected (final) | retry (retryable rejection) |
        unavailable (chain or database)."""
        with self._lock:
            self.proofs[(result, reason)] += 1

    def rejection_unstored(self, why: str) -> None:
        """A rejected, authenticated proof that was answered but not stored: ``ahead`` (seq
        beyond the job's stored sequence), ``job_cap`` or ``total_cap`` (StoreLimits)."""
        with self._lock:
            self.unstored[why] += 1

    def settlement(self, status: str, n: int = 1) -> None:
        """status: sent | confirmed | failed (per receipt, not per transaction)."""
        with self._lock:
            self.settlements[status] += n

    def equivocation_report(self, outcome: str) -> None:
        """outcome of one slash_equivocation attempt: slashed | already_slashed | job_gone |
        retry | failed."""
        with self._lock:
            self.equivocation_reports[outcome] += 1

    def render(self, gauges: dict[str, tuple[str, Callable[[], float]]]) -> str:
        with self._lock:
            proofs = sorted(self.proofs.items())
            settlements = sorted(self.settlements.items())
            reports = dict(self.equivocation_reports)
            unstored = dict(self.unstored)
        out = ["# HELP gpum_validator_proofs_total Proofs received, by result and reason.",
               "# TYPE gpum_validator_proofs_total counter"]
        for (result, reason), n in proofs:
            out.append(f'gpum_validator_proofs_total{{result="{_esc(result)}",'
                       f'reason="{_esc(reason)}"}} {n}')
        out += ["# HELP gpum_validator_settlements_total Receipts by settlement outcome.",
                "# TYPE gpum_validator_settlements_total counter"]
        for status in ("sent", "confirmed", "failed"):
            out.append(f'gpum_validator_settlements_total{{status="{status}"}} '
                       f'{dict(settlements).get(status, 0)}')
        out += [("# HELP gpum_validator_equivocation_reports_total slash_equivocation "
                 "submissions, by outcome."),
                "# TYPE gpum_validator_equivocation_reports_total counter"]
        for outcome in ("slashed", "already_slashed", "job_gone", "retry", "failed"):
            out.append(f'gpum_validator_equivocation_reports_total{{outcome="{outcome}"}} '
                       f'{reports.get(outcome, 0)}')
        out += [("# HELP gpum_validator_rejections_unstored_total Rejected proofs answered "
                 "but not stored, by why."),
                "# TYPE gpum_validator_rejections_unstored_total counter"]
        for why in ("ahead", "job_cap", "total_cap"):
            out.append(f'gpum_validator_rejections_unstored_total{{why="{why}"}} '
                       f'{unstored.get(why, 0)}')
        for name, (help_, fn) in gauges.items():
            out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name} {fn():g}"]
        return "\n".join(out) + "\n"
