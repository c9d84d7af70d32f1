"""Snapshots of learnt state, evaluated frozen on held-out views, and runs that start from one."""

import json
import shutil
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from harness.config import ConfigError
from harness.driver.run import run
from harness.evaluate import main as evaluate
from harness.tables.writer import TableWriter
from tests import tiers
from tests.conftest import run_variant, scripted_settings


def written(run, directory: Path) -> Path:
    """Put an in-process run's rows and snapshots on disk, as a job would."""
    shutil.copytree(run.workdir / "snapshot_data", directory / "snapshot_data")
    writer = TableWriter(directory, flush_interval_s=0)
    for table, rows in run.rows.items():
        writer.append(table, rows)
    first = run.rows["episodes"][0]
    writer.append("runs", [{"run_id": first["run_id"], "variant": first["variant"], "env": "countries",
                            "seed": 0, "order_seed": 0, "repeat": 0, "scenario": "sequential",
                            "feedback": "outcome", "model": "scripted/oracle",
                            "job": None, "overrides": "", "model_params": "{}", "settings": "{}",
                            "started_at": first["started_at"]}])
    writer.close()
    return directory


def test_a_run_saves_its_learnt_state_every_n_tasks_and_at_the_end():
    run = run_variant("variant=memory", "stream.num_tasks=7", "stream.snapshot_every=3")
    rows = run.rows["snapshots"]
    assert [(r["position"], r["final"]) for r in rows] == [(3, False), (6, False), (7, True)]
    for row in rows:
        directory = run.workdir / row["path"]
        state = json.loads((directory / "state.json").read_text())
        assert state["system_prompt"] == row["system_prompt"]
        assert pq.read_table(directory / "memory.parquet").num_rows == row["memory_items"] == row["position"]
    versions = [r["memory_version"] for r in rows]
    assert versions == sorted(versions) and len(set(versions)) == 3
    episode_of = {e["episode_id"]: e["stream_position"] for e in run.rows["episodes"]}
    assert [episode_of[r["episode_id"]] + 1 for r in rows] == [3, 6, 7]


def test_a_run_started_from_a_snapshot_begins_with_what_the_source_had_learnt(tmp_path):
    source = written(run_variant("variant=memory", "stream.num_tasks=4"), tmp_path / "source")
    follow = run_variant("variant=memory", "stream.num_tasks=3", f"variant.start_from={source}@final")
    first = min(follow.rows["episodes"], key=lambda e: e["stream_position"])
    assert first["memory_size"] == 5  # 4 items from the source, 1 learnt from this task
    assert first["snapshot_of"] == source_run_id(source) and first["snapshot_position"] == 4
    events = follow.rows["memory_events"]
    recalled = [e for e in events if e["event"] == "retrieve" and e["stream_position"] == 0]
    assert recalled  # the very first task already recalls the source's lessons


def test_an_opro_snapshot_keeps_its_tuned_prompt_and_is_not_tuned_again(tmp_path):
    opro = ("variant=opro", "stream.num_tasks=2", "stream.tuning_size=5", "variant.tuning_limit=3",
            "variant.steps=1")
    tuned = run_variant(*opro)
    source = written(tuned, tmp_path / "opro")
    prompt = tuned.rows["snapshots"][-1]["system_prompt"]
    follow = run_variant(*opro, f"variant.start_from={source}@2")
    assert follow.requests("optimize") == []
    assert all(r.messages[0]["content"] == prompt for r in follow.requests("act"))


def test_start_from_names_what_is_missing_in_one_line(tmp_path):
    source = written(run_variant("variant=memory", "stream.num_tasks=2"), tmp_path / "source")
    with pytest.raises(ConfigError, match=r"has no snapshot at 5 for seed 0, order seed 0 \(it has: \[2\]\)"):
        run_variant("variant=memory", f"variant.start_from={source}@5")
    with pytest.raises(ConfigError, match="should be <run dir>@<position>"):
        run_variant("variant=memory", f"variant.start_from={source}")


def source_run_id(directory: Path) -> str:
    return ds.dataset(directory / "snapshots").to_table()["run_id"][0].as_py()


@pytest.fixture(scope="module")
@tiers.starts_processes
def evaluated(ray_session, tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    for job, variant in enumerate(("baseline", "memory")):
        settings = scripted_settings(f"variant={variant}", "stream.num_tasks=6", "stream.snapshot_every=3",
                                     "stream.tuning_size=10")
        run(settings, root / str(job))
    manifest = root / "0" / "manifest.json"  # as a sweep's job writes it: the sweep's limits actor, gone now
    written_by_a_sweep = json.loads(manifest.read_text())
    written_by_a_sweep["config"]["ray"]["limits"] = "harness-model-limits-of-a-finished-sweep"
    manifest.write_text(json.dumps(written_by_a_sweep))
    out = root / "evaluations" / "e1"
    code = evaluate([str(root), "--views", "id,replay,ood", "--snapshots", "all", "--tasks", "4",
                     "--ood", "env.families=[demonym]", "--out", str(out), "--set", "progress=false",
                     "--set", "ray.num_workers=1"])
    assert code == 0
    return root, out


def test_evaluation_runs_every_snapshot_frozen_on_each_view(evaluated):
    root, out = evaluated
    episodes = ds.dataset(out / "episodes").to_table().to_pylist()
    # 2 variants x 2 snapshots (positions 3 and 6) x 3 views x 4 tasks (replay at 3: the 3 tasks learnt)
    assert len(episodes) == 2 * (4 + 4 + 3 + 4 + 4 + 4)
    assert {(e["variant"], e["snapshot_position"], e["view"]) for e in episodes} == {
        (v, p, view) for v in ("baseline", "memory") for p in (3, 6) for view in ("id", "replay", "ood")}
    calls = ds.dataset(out / "llm_calls").to_table().to_pylist()
    assert {c["purpose"] for c in calls} <= {"act", "embed"}  # frozen: no distilling, no tuning
    memory = [e for e in episodes if e["variant"] == "memory"]
    assert all(e["memory_size"] == e["snapshot_position"] for e in memory)
    stream = ds.dataset(root / "1" / "episodes").to_table().to_pylist()
    by_position = {e["stream_position"]: e["task_id"] for e in stream}
    for e in memory:
        if e["view"] == "id":
            assert e["task_id"] not in by_position.values() and e["family"] == "capital"
        elif e["view"] == "replay":
            assert e["task_id"] in [by_position[p] for p in range(e["snapshot_position"])]
        else:
            assert e["family"] == "demonym"
    same_tasks = {v: sorted(e["task_id"] for e in episodes if e["variant"] == v and e["view"] == "id")
                  for v in ("baseline", "memory")}
    assert same_tasks["baseline"] == same_tasks["memory"]  # variants sharing a seed share held-out tasks


def test_the_report_shows_snapshot_views_and_pairs_within_each_view(evaluated):
    from harness.report.build import main as report

    root, _ = evaluated
    assert report([str(root)]) == 0
    text = (root / "report.md").read_text()
    views = text[text.index("## Snapshots on held-out views"):]
    assert "| memory | id | 6 |" in views and "| baseline | ood | 3 |" in views
    paired = text[text.index("## Paired differences"):text.index("## Self-evolution metrics")]
    assert "memory / id / 6 | baseline / id / 6 | 1 | 1 | 4.000 |" in paired  # one seed, one run, 4 tasks
    page = (root / "report.html").read_text()
    assert page.count("Plotly.newPlot") == 3 and '"memory on ood"' in page


def test_evaluating_a_directory_without_snapshots_is_refused(tmp_path, capsys):
    assert evaluate([str(tmp_path)]) == 2
    assert "holds no snapshots" in capsys.readouterr().err
