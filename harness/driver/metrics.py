"""The Ray metrics of every run and sweep, defined in one place: names, descriptions, tag keys.

One actor per pool exports them (a single run is a sweep of one, harness/driver/pool.py): the writer hub
(harness/driver/hub.py), which receives every row of every job anyway. It tallies each batch into
plain sums as it arrives and hands the sums to `ray.util.metrics` at most every
`EXPORT_INTERVAL_S` and when a job closes, so a row costs a few dictionary additions, never a
metrics call. Ray's metrics agent on the hub's node serves them on the node's metrics export port
as `ray_<name>_total` (counters) and `ray_<name>` (the gauge), which Prometheus scrapes and the
dashboard's Metrics page (with Grafana) shows; docs/sweeps.md says how to see them.

What the counters count: the rows the hub received in this session. A resumed job's counters
start again from zero (Prometheus' `rate` and `increase` allow for resets); an episode cut short by
a dead worker is run again, so its calls are counted twice, as they were sent twice (the table
keeps the first ones in `interrupted_calls`). A counter that has never been incremented is absent
from the export rather than 0 (Ray's counters only take positive increments).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from harness.tables.records import Episode, GateEventRow, LLMCall, SafetyEventRow

EXPORT_INTERVAL_S = 1.0
"""Sums go to Ray at most this often (Ray's own agent reports every 10 s by default:
`RAY_metrics_report_interval_ms`)."""

RUN_TAGS = ("sweep", "sweep_job", "variant", "seed", "model")
"""Every metric's tags: the pool's name (the sweep, or `harness <variant>-<env>-<tag>` for a single run,
as on the dashboard's Actors page), the job's number in it (0 for a single run; not `job`, which
Prometheus sets to its scrape job's name), and the agent run's variant, seed and model. Agent runs
that share all five (e.g. `stream.order_seeds=[0,1]`) are summed."""
CALL_TAGS = (*RUN_TAGS, "purpose")
"""A model call's tags: the model called (the embedder's calls are under the embedder) and why."""
EDIT_TAGS = (*RUN_TAGS, "check", "kind")
"""A self-edit decision's tags: who decided (`sealed_gate`, `safety`) and what the edit was (lesson,
bullet, skill, tool, prompt)."""


@dataclass(frozen=True)
class Metric:
    """One metric as Ray is given it; Prometheus sees `ray_<name>`, and `ray_<name>_total` for a counter."""

    name: str
    description: str
    tag_keys: tuple[str, ...]
    kind: Literal["counter", "gauge"] = "counter"


EPISODES = Metric("harness_episodes", "Episodes written: every row of the episodes table (stream tasks, "
                  "replay probes, and tasks a spent budget left undone)", RUN_TAGS)
EPISODES_SCORED = Metric("harness_episodes_scored", "Stream episodes attempted, replay probes aside: the "
                         "denominator of the success rate", RUN_TAGS)
SUCCESSES = Metric("harness_successes", "Stream episodes attempted that succeeded (probes aside)", RUN_TAGS)
EPISODE_ERRORS = Metric("harness_episode_errors", "Episodes that ended with an error", RUN_TAGS)
EPISODES_PLANNED = Metric("harness_episodes_planned", "Episodes the job writes in this session (a resumed "
                          "job's: those left)", RUN_TAGS, kind="gauge")
MODEL_CALLS = Metric("harness_model_calls", "Model calls of every purpose (rows of llm_calls)", CALL_TAGS)
MODEL_CALL_ERRORS = Metric("harness_model_call_errors", "Model calls that failed, budget refusals included",
                           CALL_TAGS)
TOKENS = Metric("harness_tokens", "Prompt plus completion tokens of the model calls", CALL_TAGS)
COST_USD = Metric("harness_cost_usd", "Dollars of the model calls whose cost is known; the others are "
                  "counted in harness_calls_unknown_cost, never as 0", CALL_TAGS)
CALLS_UNKNOWN_COST = Metric("harness_calls_unknown_cost", "Model calls whose cost is unknown (no price): "
                            "while any is, harness_cost_usd understates the spend", CALL_TAGS)
QUEUED_SECONDS = Metric("harness_queued_seconds", "Seconds model calls waited at the model's limits "
                        "(concurrency, requests per minute, 429 back-off) before being sent", CALL_TAGS)
SELF_EDITS_ACCEPTED = Metric("harness_self_edits_accepted", "Self-edits let through: accepted by the sealed "
                             "gate, or allowed or flagged by the safety check as written", EDIT_TAGS)
SELF_EDITS_REJECTED = Metric("harness_self_edits_rejected", "Self-edits refused: rejected by the sealed "
                             "gate, or blocked by the safety check as they were written", EDIT_TAGS)

METRICS = (EPISODES, EPISODES_SCORED, SUCCESSES, EPISODE_ERRORS, EPISODES_PLANNED, MODEL_CALLS,
           MODEL_CALL_ERRORS, TOKENS, COST_USD, CALLS_UNKNOWN_COST, QUEUED_SECONDS, SELF_EDITS_ACCEPTED,
           SELF_EDITS_REJECTED)


@dataclass(frozen=True)
class JobLabels:
    """What a job's rows are tagged with, sent to the hub when the job opens its writer: the rows of
    calls and self-edits name only their agent run."""

    sweep: str
    sweep_job: str
    runs: dict[str, tuple[str, str, str]]
    """run_id -> (variant, seed, model)."""
    planned: dict[str, int]
    """run_id -> episodes it writes in this session."""

    def run_tags(self, run_id: str) -> tuple[str, ...]:
        variant, seed, model = self.runs.get(run_id, ("unknown", "unknown", "unknown"))
        return (self.sweep, self.sweep_job, variant, seed, model)


Key = tuple[Metric, tuple[str, ...]]
"""A metric and its tag values, in its tag keys' order."""


class RowTally:
    """Sums of the metrics over the rows received since the last `take`, per tag values. Each table's
    rows are grouped by their tags first and each group's sums added once: about a microsecond a row
    (measured on this 2-core machine with 64 agent runs: llm_calls, the busiest table, 1.3 us; episodes
    1.1 us)."""

    def __init__(self) -> None:
        self._sums: defaultdict[Key, float] = defaultdict(float)

    def add(self, labels: JobLabels, table: str, rows: list[dict[str, Any]]) -> None:
        tally = _TALLIES.get(table)
        if tally is not None and rows:
            tally(self._sums, labels, rows)

    def take(self) -> dict[Key, float]:
        sums, self._sums = self._sums, defaultdict(float)
        return {key: value for key, value in sums.items() if value > 0}


def _tally_episodes(sums: defaultdict[Key, float], labels: JobLabels, rows: list[dict[str, Any]]) -> None:
    groups: dict[tuple[str, int, str], list[int]] = {}
    for row in rows:
        group = groups.get((row["variant"], row["seed"], row["model"]))
        if group is None:
            group = groups[row["variant"], row["seed"], row["model"]] = [0, 0, 0, 0]
        group[0] += 1
        if row["attempted"] and not row["probe"]:
            group[1] += 1
            group[2] += bool(row["success"])
        group[3] += row["error"] is not None
    for (variant, seed, model), group in groups.items():
        tags = (labels.sweep, labels.sweep_job, variant, str(seed), model)
        for metric, value in zip((EPISODES, EPISODES_SCORED, SUCCESSES, EPISODE_ERRORS), group, strict=True):
            sums[metric, tags] += value


def _tally_calls(sums: defaultdict[Key, float], labels: JobLabels, rows: list[dict[str, Any]]) -> None:
    groups: dict[tuple[str, str, str], list[float]] = {}
    for row in rows:
        group = groups.get((row["run_id"], row["model"], row["purpose"]))
        if group is None:
            group = groups[row["run_id"], row["model"], row["purpose"]] = [0, 0, 0, 0.0, 0, 0.0]
        group[0] += 1
        group[1] += row["error"] is not None
        group[2] += row["total_tokens"]
        if row["cost_usd"] is None:
            group[4] += 1
        else:
            group[3] += row["cost_usd"]
        group[5] += row["queued_s"]
    for (run_id, model, purpose), group in groups.items():
        sweep, job, variant, seed, _ = labels.run_tags(run_id)
        tags = (sweep, job, variant, seed, model, purpose)
        for metric, value in zip((MODEL_CALLS, MODEL_CALL_ERRORS, TOKENS, COST_USD, CALLS_UNKNOWN_COST,
                                  QUEUED_SECONDS), group, strict=True):
            sums[metric, tags] += value


def _tally_gate(sums: defaultdict[Key, float], labels: JobLabels, rows: list[dict[str, Any]]) -> None:
    for row in rows:
        decision = SELF_EDITS_ACCEPTED if row["accepted"] else SELF_EDITS_REJECTED
        sums[decision, (*labels.run_tags(row["run_id"]), "sealed_gate", row["kind"])] += 1


def _tally_safety(sums: defaultdict[Key, float], labels: JobLabels, rows: list[dict[str, Any]]) -> None:
    for row in rows:
        if row["stage"] != "write":  # a check before a stored item is used decides no edit
            continue
        decision = SELF_EDITS_REJECTED if row["decision"] == "blocked" else SELF_EDITS_ACCEPTED
        sums[decision, (*labels.run_tags(row["run_id"]), "safety", row["kind"])] += 1


_TALLIES: dict[str, Callable[[defaultdict[Key, float], JobLabels, list[dict[str, Any]]], None]] = {
    Episode.table: _tally_episodes, LLMCall.table: _tally_calls, GateEventRow.table: _tally_gate,
    SafetyEventRow.table: _tally_safety}


class MetricsExporter:
    """The pool's metrics, in its writer hub: jobs open with their labels, their rows are tallied,
    the sums exported now and then. Exporting is a convenience: where Ray's metrics cannot be made,
    nothing is exported and the rows are written all the same."""

    def __init__(self, interval_s: float = EXPORT_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._jobs: dict[str, JobLabels] = {}
        self._tally = RowTally()
        self._last_export = time.monotonic()
        self._instruments = _ray_instruments()

    def open_job(self, job: str, labels: JobLabels) -> None:
        self._jobs[job] = labels
        planned: defaultdict[tuple[str, ...], int] = defaultdict(int)
        for run_id, episodes in labels.planned.items():
            planned[labels.run_tags(run_id)] += episodes
        for tags, episodes in planned.items():
            self._record(EPISODES_PLANNED, tags, episodes)

    def count(self, job: str, batch: dict[str, list[dict[str, Any]]]) -> None:
        """Tally rows the job's writer has taken (those of a job opened without labels are not)."""
        labels = self._jobs.get(job)
        if labels is not None:
            for table, rows in batch.items():
                self._tally.add(labels, table, rows)

    def export_if_due(self) -> None:
        if time.monotonic() - self._last_export >= self.interval_s:
            self.export()

    def export(self) -> None:
        self._last_export = time.monotonic()
        for (metric, tags), value in self._tally.take().items():
            self._record(metric, tags, value)

    def close_job(self, job: str) -> None:
        self.export()
        self._jobs.pop(job, None)

    def _record(self, metric: Metric, tags: tuple[str, ...], value: float) -> None:
        instrument = self._instruments.get(metric.name)
        if instrument is None:
            return
        tag_values = dict(zip(metric.tag_keys, tags, strict=True))
        if metric.kind == "gauge":
            instrument.set(value, tags=tag_values)
        elif value > 0:
            instrument.inc(value, tags=tag_values)


def _ray_instruments() -> dict[str, Any]:
    """Ray's counter or gauge for each metric; none where they cannot be made (no Ray metrics here)."""
    try:
        from ray.util.metrics import Counter, Gauge

        kinds = {"counter": Counter, "gauge": Gauge}
        return {m.name: kinds[m.kind](m.name, description=m.description, tag_keys=m.tag_keys)
                for m in METRICS}
    except Exception:
        return {}


def metrics_endpoint() -> str | None:
    """Where this node's Ray serves its metrics to Prometheus (the writer hub, and so the harness's
    metrics, runs on the driver's node); None when Ray says no port."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == here and node.get("MetricsExportPort"):
            return f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
    return None
