"""Every run exports its figures as Ray metrics (harness/driver/metrics.py): counted from the rows the
writer hub receives, tagged by sweep, job, variant, seed and model, served by the node's Prometheus
endpoint with the values the tables hold."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable

import polars as pl
import pytest
from prometheus_client.parser import text_string_to_metric_families  # ships with ray[default]

from harness.driver import metrics
from harness.driver.metrics import JobLabels, RowTally
from harness.driver.run import run
from harness.models.model_server import free_port
from harness.tables.reading import read_table
from tests import tiers
from tests.conftest import scripted_settings
from tests.processes import QUIET, run_cli, short_temp_dir, stop_session

LABELS = JobLabels(sweep="harness-sweep-test", sweep_job="3", runs={"r0": ("memory", "0", "m")},
                   planned={"r0": 4})
RUN = ("harness-sweep-test", "3", "memory", "0", "m")


def episode(**update):
    row = {"variant": "memory", "seed": 0, "model": "m", "attempted": True, "probe": False, "success": True,
           "error": None}
    return {**row, **update}


def call(**update):
    row = {"run_id": "r0", "model": "m", "purpose": "act", "error": None, "total_tokens": 10, "cost_usd": 0.5,
           "queued_s": 0.25}
    return {**row, **update}


def test_episodes_count_every_row_and_successes_only_scored_stream_episodes():
    tally = RowTally()
    tally.add(LABELS, "episodes", [episode(), episode(success=False, error="boom"), episode(probe=True),
                                   episode(attempted=False, success=False)])
    sums = tally.take()
    assert sums[metrics.EPISODES, RUN] == 4 and sums[metrics.EPISODES_SCORED, RUN] == 2
    assert sums[metrics.SUCCESSES, RUN] == 1 and sums[metrics.EPISODE_ERRORS, RUN] == 1
    assert tally.take() == {}  # taken once


def test_a_call_of_unknown_cost_is_counted_apart_never_as_zero_dollars():
    tally = RowTally()
    tally.add(LABELS, "llm_calls", [call(), call(cost_usd=None), call(purpose="embed", model="e")])
    sums = tally.take()
    act = (*RUN, "act")
    assert sums[metrics.MODEL_CALLS, act] == 2 and sums[metrics.TOKENS, act] == 20
    assert sums[metrics.QUEUED_SECONDS, act] == 0.5
    assert sums[metrics.COST_USD, act] == 0.5 and sums[metrics.CALLS_UNKNOWN_COST, act] == 1
    embed = ("harness-sweep-test", "3", "memory", "0", "e", "embed")  # the model called, the run's variant
    assert sums[metrics.MODEL_CALLS, embed] == 1 and (metrics.CALLS_UNKNOWN_COST, embed) not in sums


def test_self_edits_are_the_gates_decisions_and_the_safety_checks_at_write():
    tally = RowTally()
    tally.add(LABELS, "gate_events", [{"run_id": "r0", "kind": "lesson", "accepted": True},
                                      {"run_id": "r0", "kind": "lesson", "accepted": False}])
    tally.add(LABELS, "safety_events", [
        {"run_id": "r0", "stage": "write", "kind": "skill", "decision": "blocked"},
        {"run_id": "r0", "stage": "write", "kind": "skill", "decision": "flagged"},
        {"run_id": "r0", "stage": "retrieve", "kind": "skill", "decision": "blocked"}])
    assert tally.take() == {(metrics.SELF_EDITS_ACCEPTED, (*RUN, "sealed_gate", "lesson")): 1,
                            (metrics.SELF_EDITS_REJECTED, (*RUN, "sealed_gate", "lesson")): 1,
                            (metrics.SELF_EDITS_REJECTED, (*RUN, "safety", "skill")): 1,
                            (metrics.SELF_EDITS_ACCEPTED, (*RUN, "safety", "skill")): 1}


def test_tables_without_metrics_cost_nothing():
    tally = RowTally()
    tally.add(LABELS, "transcripts", [{"run_id": "r0"}] * 3)
    assert tally.take() == {}


@pytest.fixture(scope="module")
@tiers.starts_processes
def metrics_port():
    """A Ray whose metrics export port this test chose, reporting every half second (Ray's default is
    10 s); inside the suite's shared Ray (tests/conftest.py), that Ray's port, as Ray reports it."""
    import ray

    if ray.is_initialized():
        yield int(ray.nodes()[0]["MetricsExportPort"])
        return
    port = free_port()
    # address="local": a Ray of this test's own, whatever other cluster runs on the machine.
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="warning",
             _metrics_export_port=port, _system_config={"metrics_report_interval_ms": 500})
    yield port
    ray.shutdown()


@pytest.fixture(scope="module")
@tiers.starts_processes
def gated_run(metrics_port, tmp_path_factory):
    """Two seeds of a memory agent under the sealed gate and the safety check, at a price; the
    sweeps whose metrics the node exported before it (the suite's other runs on a shared Ray); and the
    planned-episodes gauge as scraped while the run was live (Ray's agent drops a gauge that its
    process stopped reporting after two report intervals, so after the run it may be gone)."""
    settings = scripted_settings(
        "variant=memory", "variant.gate=sealed", "variant.probe_size=4", "stream.tuning_size=8",
        "variant.safety={policy: block}", "seeds=[0,1]", "stream.num_tasks=4", "ray.num_workers=1",
        "model.price.input_per_token=0.000001", "model.price.output_per_token=0.000002",
        "model.scripted.rules=[{purpose: safety, contains: Paris, reply: UNSAFE},"
        " {purpose: safety, reply: SAFE}]")
    earlier = {dict(tags)["sweep"] for series in scrape(metrics_port).values() for tags in series}
    planned: dict[tuple[tuple[str, str], ...], float] = {}
    running = threading.Event()

    def watch_the_gauge() -> None:
        while not running.wait(0.2):
            with contextlib.suppress(OSError):  # a scrape that failed: the next one tells
                planned.update(scrape(metrics_port, earlier).get("ray_harness_episodes_planned", {}))

    watcher = threading.Thread(target=watch_the_gauge, daemon=True)
    watcher.start()
    try:
        result = run(settings, tmp_path_factory.mktemp("run") / "run")
    finally:
        running.set()
        watcher.join()
    return result, earlier, planned


Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]
"""Sample name (`ray_harness_..._total` for a counter) -> {its harness tags: value}."""


def scrape(port: int, leave_out: frozenset[str] | set[str] = frozenset()) -> Samples:
    """The harness's samples on the node's endpoint, less those of the sweeps in `leave_out`."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples: Samples = defaultdict(dict)
    ours = {key for metric in metrics.METRICS for key in metric.tag_keys}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("ray_harness_") and sample.labels.get("sweep") not in leave_out:
                tags = tuple(sorted((k, v) for k, v in sample.labels.items() if k in ours))
                samples[sample.name][tags] = sample.value
    return samples


def scraped_when(port: int, leave_out: set[str], done: Callable[[Samples], bool], timeout: float = 40
                 ) -> Samples:
    """Scrape until `done(samples)`: Ray's agent exports what the hub recorded a few seconds later
    (every 10 s by default)."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(port, leave_out)
        if done(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.5)


def by(samples: dict[tuple[tuple[str, str], ...], float], *keys: str) -> dict[tuple[str, ...], float]:
    """Values summed over every tag but `keys`."""
    sums: dict[tuple[str, ...], float] = defaultdict(float)
    for tags, value in samples.items():
        sums[tuple(dict(tags)[key] for key in keys)] += value
    return dict(sums)


def test_a_runs_metrics_reach_the_nodes_prometheus_endpoint_with_the_tables_values(gated_run, metrics_port):
    result, earlier, planned_while_live = gated_run
    run_dir = result.run_dir
    episodes, calls = read_table(run_dir, "episodes"), read_table(run_dir, "llm_calls")
    gate, safety = read_table(run_dir, "gate_events"), read_table(run_dir, "safety_events")
    seeds = episodes.group_by("seed").len()
    expected = {(str(seed),): float(n) for seed, n in seeds.iter_rows()}

    def complete(samples):
        return by(samples.get("ray_harness_episodes_total", {}), "seed") == expected

    samples = scraped_when(metrics_port, earlier, complete)
    assert by(samples["ray_harness_episodes_total"], "seed") == expected
    [(sweep, job, variant, model)] = by(samples["ray_harness_episodes_total"],
                                        "sweep", "sweep_job", "variant", "model")
    assert sweep.startswith("harness memory-countries-") and job == "0" and variant == "memory"
    assert model == "scripted/oracle"
    assert by(planned_while_live, "seed") == expected  # every planned episode was written

    scored = episodes.filter(pl.col("attempted") & ~pl.col("probe"))
    assert by(samples["ray_harness_episodes_scored_total"], "seed") == {
        (str(s),): float(n) for s, n in scored.group_by("seed").len().iter_rows()}
    successes = scored.filter(pl.col("success")).group_by("seed").len()
    assert by(samples.get("ray_harness_successes_total", {}), "seed") == {
        (str(s),): float(n) for s, n in successes.iter_rows()}

    # Calls: by model and purpose; the embedder's under its own model.
    per_purpose = calls.group_by("model", "purpose").agg(pl.len(), pl.col("total_tokens").sum(),
                                                         pl.col("cost_usd").sum(), pl.col("queued_s").sum())
    assert calls["cost_usd"].null_count() == 0 and "ray_harness_calls_unknown_cost_total" not in samples
    assert by(samples["ray_harness_model_calls_total"], "model", "purpose") == {
        (m, p): float(n) for m, p, n, *_ in per_purpose.iter_rows()}
    assert by(samples["ray_harness_tokens_total"], "model", "purpose") == {
        (m, p): float(t) for m, p, _, t, *_ in per_purpose.iter_rows() if t}
    dollars = by(samples["ray_harness_cost_usd_total"], "model", "purpose")
    assert dollars.keys() == {(m, p) for m, p, _, _, usd, _ in per_purpose.iter_rows() if usd}
    for m, p, _, _, usd, _ in per_purpose.iter_rows():
        assert dollars.get((m, p), 0.0) == pytest.approx(usd, rel=1e-6)
    queued = by(samples.get("ray_harness_queued_seconds_total", {}), "purpose")
    assert sum(queued.values()) == pytest.approx(calls["queued_s"].sum(), abs=1e-6)

    # Self-edits: the sealed gate's decisions and the safety check's at write.
    assert gate.height > 0 and safety.height > 0
    accepted = by(samples.get("ray_harness_self_edits_accepted_total", {}), "check")
    rejected = by(samples.get("ray_harness_self_edits_rejected_total", {}), "check")
    assert accepted.get(("sealed_gate",), 0) == gate["accepted"].sum()
    assert rejected.get(("sealed_gate",), 0) == (~gate["accepted"]).sum()
    written = safety.filter(pl.col("stage") == "write")
    assert accepted.get(("safety",), 0) == (written["decision"] != "blocked").sum()
    assert rejected.get(("safety",), 0) == (written["decision"] == "blocked").sum()


@pytest.fixture(scope="module")
@tiers.starts_processes
def cluster_with_metrics_port():
    """`ray start --head --metrics-export-port=<port>`, as a user would start a cluster for Prometheus
    (its workers report every half second), stopped by its session afterwards; (address, port)."""
    port, metrics_port = free_port(), free_port()
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", f"--port={port}",
               "--node-ip-address=127.0.0.1", "--num-cpus=1", "--include-dashboard=false", "--block",
               f"--metrics-export-port={metrics_port}", "--disable-usage-stats",
               # Ports of its own: the defaults (8265, 52365) may belong to another run on this machine.
               f"--dashboard-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
               f"--temp-dir={short_temp_dir()}"]
    head = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True,
                            env={**os.environ, "RAY_AUTH_MODE": "disabled",
                                 "RAY_metrics_report_interval_ms": "500"})
    assert head.stdout is not None
    for line in head.stdout:
        if "Ray runtime started" in line or "ray start --address" in line:
            break
    yield f"127.0.0.1:{port}", metrics_port
    stop_session(head)  # every process `ray start` started is in the session it was given


def test_a_sweep_on_a_cluster_exports_each_jobs_metrics_on_the_port_the_cluster_was_given(
        cluster_with_metrics_port, tmp_path):
    address, port = cluster_with_metrics_port
    result = run_cli("-m", "seed=0,1", "model=scripted", "embedder=hashing", "stream.num_tasks=3",
                     "cache.enabled=false", *QUIET, f"ray.address={address}", f"hydra.sweep.dir={tmp_path}",
                     timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    said = [line for line in result.stdout.splitlines() if "Launching 2 jobs at once" in line]
    assert len(said) == 1 and said[0].endswith(f":{port}/metrics")  # the launcher says where to scrape
    expected = {(job, str(seed)): float(read_table(tmp_path / job, "episodes").height)
                for job, seed in (("0", 0), ("1", 1))}
    samples = scraped_when(port, set(), lambda s: by(s.get("ray_harness_episodes_total", {}),
                                                     "sweep_job", "seed") == expected)
    assert by(samples["ray_harness_episodes_total"], "sweep_job", "seed") == expected == {
        ("0", "0"): 3.0, ("1", "1"): 3.0}
    [sweep] = by(samples["ray_harness_episodes_total"], "sweep")
    assert sweep[0].startswith("harness-sweep-")
    tokens = {(job,): float(read_table(tmp_path / job, "llm_calls")["total_tokens"].sum())
              for job in ("0", "1")}
    assert by(samples["ray_harness_tokens_total"], "sweep_job") == tokens
