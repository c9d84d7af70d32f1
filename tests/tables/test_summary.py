"""The summary: one row per variant and every setting that varies, with cached calls and probes
counted apart, read back from the tables of one or more run directories."""

import datetime as dt
import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from harness.agent_run.plan import build_plan
from harness.tables.reading import read_tables
from harness.tables.records import RunRow
from harness.tables.summary import (
    episode_counts,
    format_summary,
    summarize,
    summarize_dirs,
    varying_settings,
)
from harness.tables.writer import TableWriter
from tests.conftest import run_variant, scripted_settings

TODAY = ["variant", "seed", "model", "episodes", "probes", "not_attempted", "success_rate",
         "total_tokens", "cost_usd", "train_tokens", "train_share", "grade_tokens", "grade_cost_usd",
         "llm_calls", "cached_share",
         "cache_read_share", "reasoning_tokens", "p50_latency_s", "errors"]


def write_job(job_dir: Path, *overrides: str, job: int | None = 0, cached: bool | None = None) -> dict:
    """A job directory as the harness writes it (no Ray): the rows of one in-process scripted agent
    run, its `runs` row (as harness/driver/execute.py makes it) and a manifest."""
    run = run_variant(*overrides)
    settings = scripted_settings(*overrides)
    spec = build_plan(settings, job_dir)[0]
    assert spec.run_id == run.rows["episodes"][0]["run_id"]
    writer = TableWriter(job_dir, flush_interval_s=0)
    for table, rows in run.rows.items():
        if table == "llm_calls" and cached is not None:
            rows = [{**row, "cached": cached} for row in rows]
        writer.append(table, rows)
    writer.append(RunRow.table, [RunRow(
        run_id=spec.run_id, variant=spec.variant, env=spec.env, seed=spec.seed, order_seed=spec.order_seed,
        scenario=spec.scenario, model=spec.model, job=job, overrides=" ".join(overrides),
        model_params=json.dumps(settings.model.requested_params, sort_keys=True),
        settings=json.dumps(spec.settings, sort_keys=True), started_at=dt.datetime.now(dt.UTC)).model_dump()])
    writer.close()
    (job_dir / "manifest.json").write_text(json.dumps(
        {"status": "finished", "agent_runs": [{"run_id": spec.run_id, "num_tasks": len(spec.tasks)}]}))
    return run.rows


def sweep(root: Path, *jobs: tuple[str, ...]) -> list[Path]:
    """One job directory per tuple of overrides, as `-m` lays them out."""
    dirs = []
    for job, overrides in enumerate(jobs):
        write_job(root / str(job), *overrides, job=job)
        dirs.append(root / str(job))
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return dirs


def test_a_swept_variant_option_gives_each_value_its_own_row(tmp_path):
    dirs = sweep(tmp_path, ("variant=reflexion", "variant.max_attempts=1"),
                 ("variant=reflexion", "variant.max_attempts=3"))
    summary = summarize_dirs(dirs)
    assert summary["settings"].to_list() == ["variant.max_attempts=1", "variant.max_attempts=3"]
    assert summary["variant"].to_list() == ["reflexion"] * 2 and summary["episodes"].to_list() == [6, 6]
    assert "variant.max_attempts=3" in format_summary(summary)


def test_a_swept_model_setting_gives_each_value_its_own_row(tmp_path):
    dirs = sweep(tmp_path, ("model.scripted.accuracy=0.2",), ("model.scripted.accuracy=0.9",))
    summary = summarize_dirs(dirs)
    assert summary["settings"].to_list() == ["model.scripted.accuracy=0.2", "model.scripted.accuracy=0.9"]
    low, high = summary["success_rate"].to_list()
    assert low < high


def test_variants_alone_look_as_before(tmp_path):
    dirs = sweep(tmp_path, ("variant=baseline",), ("variant=reflexion",))
    summary = summarize_dirs(dirs)
    assert summary.columns == TODAY and summary["variant"].to_list() == ["baseline", "reflexion"]


def test_seeds_are_replicates_not_settings(tmp_path):
    dirs = sweep(tmp_path, ("seed=0",), ("seed=1",))
    summary = summarize_dirs(dirs)
    assert summary.columns == TODAY and summary["seed"].to_list() == [0, 1]


def test_run_directories_without_a_runs_table_are_grouped_by_variant(tmp_path):
    dirs = sweep(tmp_path, ("variant=reflexion", "variant.max_attempts=1"),
                 ("variant=reflexion", "variant.max_attempts=3"))
    for directory in dirs:
        shutil.rmtree(directory / "runs")  # written before the runs table existed
    summary = summarize_dirs(dirs)
    assert summary.columns == TODAY and summary["episodes"].to_list() == [12]


@pytest.mark.parametrize("cached,share", [(True, 1.0), (False, 0.0)])
def test_the_share_of_cached_calls_is_shown(tmp_path, cached, share):
    rows = write_job(tmp_path, cached=cached)
    summary = summarize_dirs([tmp_path])
    assert summary["llm_calls"][0] == len(rows["llm_calls"]) and summary["cached_share"][0] == share


def test_probes_are_counted_apart_and_the_counts_say_so(tmp_path):
    rows = write_job(tmp_path, "stream.num_tasks=10", "stream.probe_every=5", "stream.probe_size=2")
    episodes = pl.DataFrame(rows["episodes"])
    summary = summarize_dirs([tmp_path])
    assert (summary["episodes"][0], summary["probes"][0]) == (10, 4)
    assert summary["total_tokens"][0] == episodes.filter(~pl.col("probe"))["total_tokens"].sum()
    assert episode_counts(episodes) == "10 episodes (+ 4 replay probes)"


def test_grading_is_shown_apart_from_the_agents_spend(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps({"id": f"q{i}", "question": f"Capital of {c}?", "answer": a})
                              for i, (c, a) in enumerate([("Peru", "Lima"), ("Chile", "Santiago")])) + "\n")
    rows = write_job(tmp_path / "job", "env=jsonl", f"env.path={path}", "env.scorer=judge",
                     "stream.num_tasks=2", "stream.tuning_size=0", cached=True)
    calls = pl.DataFrame(rows["llm_calls"])
    agent, grading = calls.filter(pl.col("purpose") != "grade"), calls.filter(pl.col("purpose") == "grade")
    summary = summarize_dirs([tmp_path / "job"])
    assert summary["llm_calls"][0] == agent.height == 2 and summary["cached_share"][0] == 1.0
    assert summary["total_tokens"][0] == agent["total_tokens"].sum()
    assert summary["grade_tokens"][0] == grading["total_tokens"].sum() > 0
    assert summary["grade_cost_usd"][0] == grading["cost_usd"].sum()
    assert "grade_tokens" in format_summary(summary)
    write_job(tmp_path / "plain")  # a scorer that calls no model: no grading columns printed
    assert "grade_tokens" not in format_summary(summarize_dirs([tmp_path / "plain"]))


def test_summarize_on_episodes_alone_still_works(tmp_path):
    write_job(tmp_path)
    summary = summarize(read_tables([tmp_path], "episodes"))
    assert summary["episodes"][0] == 6 and summary["cached_share"][0] is None


def runs(*settings: dict) -> pl.DataFrame:
    return pl.DataFrame([{"run_id": f"r{i}", "settings": json.dumps(s)} for i, s in enumerate(settings)])


def test_a_variants_own_options_count_only_between_runs_of_that_variant():
    baseline = {"variant.name": "baseline", "variant._target_": "a.B", "budget.max_tokens": None}
    reflexion = {"variant.name": "reflexion", "variant._target_": "a.R", "variant.max_attempts": 3,
                 "budget.max_tokens": None}
    assert varying_settings(runs(baseline, reflexion)) == {}
    assert varying_settings(runs(baseline, reflexion, {**reflexion, "variant.max_attempts": 1})) == {
        "variant.max_attempts": {"reflexion"}}
    assert varying_settings(runs(baseline, {**baseline, "budget.max_tokens": 1000})) == {
        "budget.max_tokens": None}


def test_columns_of_their_own_and_replicates_are_never_settings():
    one = {"model.name": "a", "env.name": "x", "stream.scenario": "sequential", "stream.order_seeds": None}
    other = {"model.name": "b", "env.name": "y", "stream.scenario": "isolated", "stream.order_seeds": [0, 1]}
    assert varying_settings(runs(one, other)) == {}
