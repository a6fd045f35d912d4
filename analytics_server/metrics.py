"""In-process counters rendered in the Prometheus text format at `/metrics`.

Every series carries a `process` label (`FA_PROCESS_NAME`, default HOST:PID): each server process reports its
own counters, and a scraper sums them over the processes behind the balancer.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from sqlalchemy import event

from queries.envelope import REFUSAL_REASONS

PHASE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Metrics:
    def __init__(self, process: str = "") -> None:
        self.process = process
        self.db_statements = 0
        self.checkins = 0
        self.early_closes = 0
        self.proofs_refused = 0
        self.cheating_detected = 0
        self.devices_named = 0
        self.cohorts: Counter[str] = Counter()
        self.refusals: Counter[str] = Counter()
        """Assignments devices refused under their own policy, by reason (`queries.envelope.REFUSAL_REASONS`)."""
        self.http_responses: Counter[tuple[str, int]] = Counter()
        self.checkin_keys: Counter[bool] = Counter()
        """Assignments answered to check-ins that carried secagg keys, by whether the keys were taken."""
        self._phase_buckets: dict[str, list[int]] = {}
        self._phase_sum: defaultdict[str, float] = defaultdict(float)
        self._phase_count: Counter[str] = Counter()

    def observe_phase(self, phase: str, seconds: float) -> None:
        buckets = self._phase_buckets.setdefault(phase, [0] * len(PHASE_BUCKETS))
        for i, edge in enumerate(PHASE_BUCKETS):
            if seconds <= edge:
                buckets[i] += 1
        self._phase_sum[phase] += seconds
        self._phase_count[phase] += 1

    def render(self, queries_by_status: dict[str, int]) -> str:
        lines = ["# HELP fa_queries Queries by status.", "# TYPE fa_queries gauge"]
        for query_status in ("pending", "running", "succeeded", "failed", "cancelled"):
            lines.append(f'fa_queries{{status="{query_status}"}} {queries_by_status.get(query_status, 0)}')
        lines += ["# HELP fa_cohorts_total Cohorts by outcome.", "# TYPE fa_cohorts_total counter"]
        for outcome in ("finished", "aborted"):
            lines.append(f'fa_cohorts_total{{outcome="{outcome}"}} {self.cohorts[outcome]}')
        lines += [
            "# HELP fa_device_checkins_total Device check-ins.",
            "# TYPE fa_device_checkins_total counter",
            f"fa_device_checkins_total {self.checkins}",
            "# HELP fa_device_refusals_total Assignments devices refused under their own policy, by reason.",
            "# TYPE fa_device_refusals_total counter",
            *(f'fa_device_refusals_total{{reason="{r}"}} {self.refusals[r]}' for r in REFUSAL_REASONS),
            "# HELP fa_checkin_keys_total Assignments answered to check-ins carrying secagg keys, by whether the keys "
            "were taken as the party's advertise-keys message.",
            "# TYPE fa_checkin_keys_total counter",
            f'fa_checkin_keys_total{{taken="true"}} {self.checkin_keys[True]}',
            f'fa_checkin_keys_total{{taken="false"}} {self.checkin_keys[False]}',
            "# HELP fa_phases_closed_early_total Phases closed before their deadline because arrivals stalled.",
            "# TYPE fa_phases_closed_early_total counter",
            f"fa_phases_closed_early_total {self.early_closes}",
            "# HELP fa_validity_proofs_refused_total Masked inputs dropped because their validity proof failed.",
            "# TYPE fa_validity_proofs_refused_total counter",
            f"fa_validity_proofs_refused_total {self.proofs_refused}",
            "# HELP fa_sums_refused_total Unmasked sums refused (opening check failed or implausible): cohorts aborted.",
            "# TYPE fa_sums_refused_total counter",
            f"fa_sums_refused_total {self.cheating_detected}",
            "# HELP fa_devices_named_total Devices left out of a query by the failed openings' group test.",
            "# TYPE fa_devices_named_total counter",
            f"fa_devices_named_total {self.devices_named}",
            "# HELP fa_phase_duration_seconds Secure-aggregation phase durations (formation to close).",
            "# TYPE fa_phase_duration_seconds histogram",
        ]
        for phase in sorted(self._phase_buckets):
            for edge, n in zip(PHASE_BUCKETS, self._phase_buckets[phase]):
                lines.append(f'fa_phase_duration_seconds_bucket{{phase="{phase}",le="{edge}"}} {n}')
            lines.append(f'fa_phase_duration_seconds_bucket{{phase="{phase}",le="+Inf"}} {self._phase_count[phase]}')
            lines.append(f'fa_phase_duration_seconds_sum{{phase="{phase}"}} {self._phase_sum[phase]:.6f}')
            lines.append(f'fa_phase_duration_seconds_count{{phase="{phase}"}} {self._phase_count[phase]}')
        lines += ["# HELP fa_http_responses_total HTTP responses by route class and status.", "# TYPE fa_http_responses_total counter"]
        for (route, status), n in sorted(self.http_responses.items()):
            lines.append(f'fa_http_responses_total{{route="{route}",status="{status}"}} {n}')
        lines += [
            "# HELP fa_db_statements_total SQL statements this process sent to the database.",
            "# TYPE fa_db_statements_total counter",
            f"fa_db_statements_total {self.db_statements}",
        ]
        return "\n".join(_label(line, self.process) for line in lines) + "\n"


def _label(line: str, process: str) -> str:
    """Add `process="…"` to a sample line (comments unchanged)."""
    if line.startswith("#") or not process:
        return line
    name, _, rest = line.partition(" ")
    value = process.replace("\\", "\\\\").replace('"', '\\"')
    if name.endswith("}"):
        return f'{name[:-1]},process="{value}"}} {rest}'
    return f'{name}{{process="{value}"}} {rest}'


def count_statements(engine: Any, metrics: Metrics) -> None:
    """Count every statement the engine executes into `metrics.db_statements`."""

    def before(*_args: Any) -> None:
        metrics.db_statements += 1

    event.listen(engine.sync_engine, "before_cursor_execute", before)
