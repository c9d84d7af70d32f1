"""Outside agents through the command line (issue 29): in a sweep beside native variants, compared
by the report at matched spend; their snapshots evaluated on held-out tasks and started from; an
interrupted run resumed to the tables of an uninterrupted one."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from harness.tables.reading import read_table
from harness.tables.records import TABLES
from tests.processes import (
    QUIET,
    ROOT,
    finish_logged,
    finished_so_far,
    kill_9,
    run_cli,
    session_processes,
    start_cli,
    start_cli_logged,
    stop_session,
    wait_for,
)

pytestmark = pytest.mark.slow

EXAMPLES = "hydra.searchpath=[file://examples/outside_agents/conf]"
SCRIPTED = ["model=scripted", "embedder=hashing", "cache.enabled=false", *QUIET]
VARYING = {"call_id", "run_in_flight", "path"}


def test_outside_and_native_agents_in_one_sweep_are_compared_at_matched_spend(tmp_path):
    sweep = tmp_path / "sweep"
    done = run_cli("-m", "variant=baseline,lessons,lessons_process", EXAMPLES, *SCRIPTED,
                   "stream.num_tasks=6", f"hydra.sweep.dir={sweep}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    runs = {read_table(sweep / job, "episodes")["variant"][0]: sweep / job for job in ("0", "1", "2")}
    assert set(runs) == {"baseline", "lessons", "lessons_process"}
    purposes = {variant: sorted(set(read_table(path, "llm_calls")["purpose"]))
                for variant, path in runs.items()}
    assert purposes == {"baseline": ["act"], "lessons": ["act", "reflect"],
                        "lessons_process": ["act", "reflect"]}
    for path in runs.values():
        assert read_table(path, "episodes")["error"].is_null().all()
    report = subprocess.run([sys.executable, "-m", "harness.report", str(sweep)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    text = (sweep / "report.md").read_text()
    matched = text.split("## Accuracy at matched spend", 1)[1].split("\n## ", 1)[0]
    assert all(f"| {variant} |" in matched for variant in runs)


def test_an_outside_agents_snapshot_is_evaluated_on_held_out_tasks_and_started_from(tmp_path):
    source = tmp_path / "source"
    done = run_cli("variant=lessons", EXAMPLES, *SCRIPTED, "stream.num_tasks=6", f"hydra.run.dir={source}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [final] = read_table(source, "snapshots").filter(pl.col("final")).to_dicts()
    lessons = json.loads((source / final["path"] / "files" / "lessons.json").read_text())
    assert len(lessons) == (~read_table(source, "episodes")["success"]).sum() > 0

    # The evaluation and the run started from the snapshot only read the source: they run at once.
    evaluation, carried, log = tmp_path / "evaluation", tmp_path / "carried", tmp_path / "evaluation.log"
    evaluating = start_cli_logged(log, str(source), "--views", "id", "--snapshots", "final", "--tasks", "3",
                                  "--out", str(evaluation), module="harness.evaluate")
    try:
        done = run_cli("variant=lessons", EXAMPLES, *SCRIPTED, "stream.num_tasks=2",
                       f"variant.start_from={source}@final", f"hydra.run.dir={carried}")
        evaluated = finish_logged(evaluating, log)
    finally:
        stop_session(evaluating)
    assert evaluating.returncode == 0, evaluated[-3000:]
    assert lessons_in_every_act_prompt(evaluation, lessons[-1])
    assert set(read_table(evaluation, "llm_calls")["purpose"]) == {"act"}  # frozen: nothing learnt

    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert lessons_in_every_act_prompt(carried, lessons[-1])


def lessons_in_every_act_prompt(run_dir: Path, lesson: str) -> bool:
    transcripts = read_table(run_dir, "transcripts").filter(pl.col("purpose") == "act")
    systems = [json.loads(messages)[0]["content"] for messages in transcripts["messages"]]
    return transcripts.height > 0 and all(lesson in system for system in systems)


def test_an_interrupted_outside_agent_run_resumes_to_the_tables_of_an_uninterrupted_one(tmp_path):
    """A worker killed mid-run (the pool starts the job again from what was written), then a SIGTERM
    and the printed resume command: every table as an uninterrupted run's, ids and clocks aside."""
    run = [*SCRIPTED, "variant=lessons_process", EXAMPLES, "stream.num_tasks=10",
           "model.scripted.latency_s=0.1", "output.flush_interval_s=0.2"]
    reference, interrupted = tmp_path / "reference", tmp_path / "interrupted"
    log = tmp_path / "reference.log"
    uninterrupted = start_cli_logged(log, *run, f"hydra.run.dir={reference}")  # alongside, in its own session
    try:
        interrupt_and_resume(run, interrupted)
        output = finish_logged(uninterrupted, log)
    finally:
        stop_session(uninterrupted)
    assert uninterrupted.returncode == 0, output[-2000:]
    for name in TABLES:
        assert table(interrupted, name).equals(table(reference, name)), name


def interrupt_and_resume(run: list[str], interrupted: Path) -> None:
    """The run into `interrupted`: an agent worker killed after 3 episodes, a SIGTERM after 6, then the
    printed resume command (unless it had finished); nothing of it left running."""
    process = start_cli(*run, f"hydra.run.dir={interrupted}")
    try:
        wait_for(lambda: finished_so_far(interrupted) >= 3, 240, "3 episodes")
        kill_9(session_processes(process.pid, "ray::AgentWorker")[:1])
        wait_for(lambda: finished_so_far(interrupted) >= 6 or process.poll() is not None, 240, "6 episodes")
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
    if process.returncode != 0:  # it may have finished before the SIGTERM landed
        assert process.returncode == 143, output[-3000:]
        last = output.strip().splitlines()[-1]
        resume = shlex.split(last.split("resume with: ", 1)[1])
        done = run_cli(*resume[3:])
        assert done.returncode == 0, done.stdout[-2000:]
    wait_for(lambda: not session_processes(process.pid, ""), 30, "nothing of the run left")


def table(run_dir: Path, name: str) -> pl.DataFrame:
    frame = read_table(run_dir, name)
    if name == "interrupted_calls":
        return frame.head(0)  # calls of the episodes the kill cut short: only the interrupted run has them
    frame = frame.drop([c for c in frame.columns if c in VARYING or c.endswith(("_s", "_at"))])
    return frame.sort(frame.columns) if frame.columns else frame
