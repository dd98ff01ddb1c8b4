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
        self.member_requests: Counter[tuple[str, str]] = Counter()
        self.rounds: Counter[str] = Counter()
        self.attestations: Counter[str] = Counter()
        self.downtime_reports: Counter[str] = Counter()
        self.validator_equivocation_reports: Counter[str] = Counter()

    def proof(self, result: str, reason: str = "", n: int = 1) -> None:
        """``n`` proofs of result accepted | duplicate | rejected (final) | retry (retryable
        rejection) | unavailable (chain or database)."""
        with self._lock:
            self.proofs[(result, reason)] += n

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

    def member_request(self, endpoint: str, result: str) -> None:
        """A request another member made: endpoint query | sign | downtime_sign; result ok or
        the error reason."""
        with self._lock:
            self.member_requests[(endpoint, result)] += 1

    def round(self, outcome: str) -> None:
        """A due settle round: led (an intent was written) | not_leader | waiting (too few
        members answered or signed) | deferred (this leader's own total is below the quorum
        value, or nothing can be settled with the receipt) | not_member."""
        with self._lock:
            self.rounds[outcome] += 1

    def attestation(self, result: str) -> None:
        """An attestation this validator asked for as a leader: received | refused |
        invalid (a signature that does not verify) | unreachable."""
        with self._lock:
            self.attestations[result] += 1

    def downtime_report(self, outcome: str) -> None:
        """A slash_downtime attempt: slashed | job_gone | retry | failed | waiting."""
        with self._lock:
            self.downtime_reports[outcome] += 1

    def validator_equivocation_report(self, outcome: str) -> None:
        """A slash_validator_equivocation attempt: slashed | already_slashed | job_gone |
        retry | failed."""
        with self._lock:
            self.validator_equivocation_reports[outcome] += 1

    def render(self, gauges: dict[str, tuple[str, Callable[[], float]]]) -> str:
        with self._lock:
            proofs = sorted(self.proofs.items())
            settlements = sorted(self.settlements.items())
            reports = dict(self.equivocation_reports)
            unstored = dict(self.unstored)
            member_requests = sorted(self.member_requests.items())
            rounds = dict(self.rounds)
            attestations = dict(self.attestations)
            downtime = dict(self.downtime_reports)
            vreports = dict(self.validator_equivocation_reports)
        out: list[str] = []

        def counter(name: str, help_: str) -> None:
            out.extend([f"# HELP {name} {help_}", f"# TYPE {name} counter"])

        def fixed(name: str, help_: str, key: str, values: dict[str, int],
                  labels: tuple[str, ...]) -> None:
            """A counter with one label of known values, each shown (0 when never counted)."""
            counter(name, help_)
            out.extend(f'{name}{{{key}="{label}"}} {values.get(label, 0)}' for label in labels)

        counter("gpum_validator_proofs_total", "Proofs received, by result and reason.")
        for (result, reason), n in proofs:
            out.append(f'gpum_validator_proofs_total{{result="{_esc(result)}",'
                       f'reason="{_esc(reason)}"}} {n}')
        fixed("gpum_validator_settlements_total", "Receipts by settlement outcome.", "status",
              dict(settlements), ("sent", "confirmed", "failed"))
        fixed("gpum_validator_equivocation_reports_total",
              "slash_equivocation submissions, by outcome.", "outcome", reports,
              ("slashed", "already_slashed", "job_gone", "retry", "failed"))
        fixed("gpum_validator_rejections_unstored_total",
              "Rejected proofs answered but not stored, by why.", "why", unstored,
              ("ahead", "job_cap", "total_cap"))
        counter("gpum_validator_member_requests_total",
                "Requests of other committee members, by endpoint and result.")
        for (endpoint, result), n in member_requests:
            out.append(f'gpum_validator_member_requests_total{{endpoint="{_esc(endpoint)}",'
                       f'result="{_esc(result)}"}} {n}')
        fixed("gpum_validator_settle_rounds_total", "Due settle rounds, by outcome.", "outcome",
              rounds, ("led", "not_leader", "waiting", "deferred", "not_member"))
        fixed("gpum_validator_attestations_requested_total",
              "Attestations asked of other members as a leader, by result.", "outcome",
              attestations, ("received", "refused", "invalid", "unreachable"))
        fixed("gpum_validator_downtime_reports_total", "slash_downtime attempts, by outcome.",
              "outcome", downtime, ("slashed", "job_gone", "retry", "failed", "waiting",
                                    "not_observed", "proof_elsewhere", "not_active"))
        fixed("gpum_validator_validator_equivocation_reports_total",
              "slash_validator_equivocation submissions, by outcome.", "outcome", vreports,
              ("slashed", "already_slashed", "job_gone", "retry", "failed"))
        for name, (help_, fn) in gauges.items():
            out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name} {fn():g}"]
        return "\n".join(out) + "\n"
