"""Chaos: a sweep whose processes are killed at random moments ends with the tables of a sweep that
never was (issue 33, item 3).

During a 4-job sweep on the scripted model (baseline and memory, two seeds; memory embeds with the
local MiniLM), a seeded schedule kill -9s one of the pool's agent workers, the writer hub, the
model limits actor and the MiniLM service, in a drawn order at drawn numbers of finished episodes,
and ends with a SIGTERM to the command. Whenever the command stops (the writer or the limits actor
died: exit 1; the SIGTERM: exit 143) the test runs the resume command it printed, as a user would.
Then every table equals the uninterrupted sweep's (ids, clocks and embedding floats aside), every
episode's tokens are the sum of its calls' rows, and no process of any command is left.

`HARNESS_CHAOS_SEED=<n>` replays another schedule (the failure message names the one that failed).
"""

from __future__ import annotations

import os
import random
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest

from harness.tables.reading import read_table
from harness.tables.records import TABLES
from tests.processes import (
    QUIET,
    ROOT,
    finished_so_far,
    kill_9,
    session_processes,
    start_cli,
    stop_session,
    wait_for,
)

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("HARNESS_CHAOS_SEED", "0"))
JOBS = ("0", "1", "2", "3")
TASKS = 10
SWEEP = ["-m", "variant=baseline,memory", "seed=0,1", "model=scripted", "embedder=minilm",
         "model.scripted.latency_s=0.05", "cache.enabled=false", "output.flush_interval_s=0.2",
         f"stream.num_tasks={TASKS}", *QUIET]
VICTIMS = {"an agent worker": "ray::AgentWorker", "the writer hub": "ray::WriterHub",
           "the limits actor": "ray::ModelLimits", "the MiniLM service": "ray::MiniLMService"}
VARYING = {"call_id", "memory_id", "tool_id", "run_in_flight", "similarity", "path"}
"""Columns that differ between any two sweeps (with every `*_s` and `*_at` column: clocks): ids, in-flight
counts, similarities (MiniLM's floats vary in the last bits with what it batches together), paths."""
RAY_FORWARDED = re.compile(r"\x1b\[\d+m\(")
"""The start of a line Ray forwards to the driver from another process."""
SKIPPED = {"interrupted_calls"}
"""The calls of episodes a kill cut short: a resumed sweep has them, an uninterrupted one does not."""


@dataclass(frozen=True)
class Event:
    after: int
    """Finished episodes of the whole sweep before it happens."""
    victim: str
    """A key of VICTIMS, or "SIGTERM" (to the command)."""


def schedule(seed: int) -> list[Event]:
    """A kill of each kind of victim, in a drawn order, and a closing SIGTERM, at drawn moments of
    the sweep's 40 episodes."""
    draw = random.Random(seed)
    moments = sorted(draw.sample(range(3, len(JOBS) * TASKS - 6), len(VICTIMS) + 1))
    victims = [*draw.sample(sorted(VICTIMS), len(VICTIMS)), "SIGTERM"]
    return [Event(moment, victim) for moment, victim in zip(moments, victims, strict=True)]


def finished(sweep: Path) -> int:
    return sum(finished_so_far(sweep / job) for job in JOBS)


def resume_command(output: str) -> list[str]:
    # The command's own last line. Lines Ray forwards from its processes are passed over: they are not
    # the command's, and where they fall against its own is Ray's (an actor's stderr as the session
    # ends, the raylet's word of a killed worker: each seen after the last line under pytest-xdist).
    said = [line for line in output.strip().splitlines() if not RAY_FORWARDED.match(line)]
    last = said[-1] if said else ""
    assert "resume with: " in last, output[-3000:]
    command = shlex.split(last.split("resume with: ", 1)[1])
    assert command[:4] == ["python", "-m", "harness", "-m"], last
    return command[3:]


def table(sweep: Path, job: str, name: str) -> pl.DataFrame:
    frame = read_table(sweep / job, name)
    frame = frame.drop([c for c in frame.columns if c in VARYING or c.endswith(("_s", "_at"))])
    return frame.sort(frame.columns) if frame.columns else frame


def run_with_events(command: list[str], sweep: Path, pending: list[Event], log: list[str],
                    replay: str) -> tuple[int, str]:
    """Run the command, making the pending events happen as the sweep reaches them; its exit code
    and output once it has ended (and every process it started with it)."""
    process = start_cli(*command)

    def stopped() -> bool:
        return process.poll() is not None

    try:
        while pending and not stopped():
            event = pending[0]
            wait_for(lambda event=event: finished(sweep) >= event.after or stopped(), 300,
                     f"{event.after} finished episodes ({replay})")
            if stopped():
                break
            if event.victim == "SIGTERM":
                process.send_signal(signal.SIGTERM)
            elif victims := session_processes(process.pid, VICTIMS[event.victim]):
                kill_9([random.Random(SEED + event.after).choice(victims)])
            else:  # not (yet, or again) there: on to the next event
                pending.pop(0)
                continue
            log.append(f"{event.victim} at {finished(sweep)} episodes")
            pending.pop(0)
        output, _ = process.communicate(timeout=300)
    finally:
        stop_session(process)
    wait_for(lambda: not session_processes(process.pid, ""), 15, f"nothing left running ({replay})")
    return process.returncode, output


def test_random_kills_and_a_sigterm_leave_the_tables_of_an_uninterrupted_sweep(tmp_path):
    events = schedule(SEED)
    replay = f"HARNESS_CHAOS_SEED={SEED}: {events}"
    reference = tmp_path / "reference"
    clean = subprocess.run([sys.executable, "-m", "harness", *SWEEP, f"hydra.sweep.dir={reference}"],
                           cwd=ROOT, capture_output=True, text=True, timeout=600, start_new_session=True)
    assert clean.returncode == 0, clean.stdout[-2000:] + clean.stderr[-2000:]

    sweep, log, pending = tmp_path / "chaos", [], list(events)
    command = [*SWEEP, f"hydra.sweep.dir={sweep}"]
    for _ in range(len(events) + 2):
        code, output = run_with_events(command, sweep, pending, log, replay)
        if code == 0:
            break
        assert code in (1, 143), f"{replay}; {log}\n{output[-3000:]}"
        command = resume_command(output)
    else:
        raise AssertionError(f"the sweep does not end ({replay}; {log})")

    assert log, f"no event happened ({replay})"
    print(f"chaos {replay}; happened: {log}")  # shown with -s
    for job in JOBS:
        episodes = read_table(sweep / job, "episodes")
        assert episodes.height == TASKS and episodes["episode_id"].is_unique().all(), (job, replay, log)
        calls = read_table(sweep / job, "llm_calls")
        per_episode = calls.group_by("episode_id").agg(pl.col("total_tokens").sum().alias("calls"))
        joined = episodes.join(per_episode, on="episode_id", how="left")
        assert (joined["total_tokens"] == joined["calls"]).all(), (job, "episode tokens != its calls", replay)
        for name in sorted(set(TABLES) - SKIPPED):
            expected, got = table(reference, job, name), table(sweep, job, name)
            assert got.equals(expected), (job, name, replay, log, got.height, expected.height)
