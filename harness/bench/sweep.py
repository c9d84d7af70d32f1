"""`python -m harness.bench sweep`: what a sweep costs, through the CLI, against its model calls
(section 7 of `python -m harness.bench`).

The model is the bench's HTTP one (harness/bench/fake_chat.py): it answers every chat request after
a fixed latency, in a process of its own on 127.0.0.1. Every run is the real command line, `python -m
harness ...`, in a process session of its own, pointed at it with `model=litellm
model.name=openai/fake model.api_base=... cache.enabled=false embedder=hashing`
(harness/bench/commands.py); nothing of the harness runs here but that server, so this measures
whatever the sweep launcher does today. Rows:

- a sweep of N jobs, `python -m harness -m variant=baseline "seed=range(N)"` (one agent run each);
- one job of N agent runs, `python -m harness variant=baseline seeds=[0,...,N-1]`.

Each row gives the wall seconds of the command, the model-bound ideal and the wall as a percentage
of it, the same over the run window (first episode start to last episode end, from the episodes
tables), the seconds from the command to the first request the server saw, the peak RSS of the
command's process session and the peak rise of the machine's used memory, and the CPU seconds
(user + system) of the session per model call. `--quick` runs 1 and 4 jobs and 8 agent runs on
tiny streams.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from harness.bench.commands import (
    GIB,
    Measured,
    WarmPoolProcess,
    fake_model_overrides,
    measure,
    model_check_kept,
)
from harness.bench.common import table, unix
from harness.bench.fake_chat import MODEL, ServerProcess
from harness.driver.startup import STAGES
from harness.tables.reading import read_tables

# --- reading the results ----------------------------------------------------------------------


def job_dirs(directory: Path) -> list[Path]:
    """A sweep's job directories (`<sweep dir>/<n>/`), or the run directory itself."""
    if (directory / "episodes").is_dir() or (directory / "llm_calls").is_dir():
        return [directory]
    jobs = [d for d in directory.iterdir() if d.name.isdigit() and d.is_dir()]
    return sorted(jobs, key=lambda d: int(d.name))


@dataclass
class Results:
    """What a command's tables say: the chat model's calls (not cached: each reached the server),
    the longest chain of them in one agent run, episodes and their window."""

    jobs: int
    runs: int
    calls: int
    chain: int
    episodes: int
    window_s: float | None
    errors: int = 0
    per_run: dict[str, int] = field(default_factory=dict)
    startup_s: dict[str, float] = field(default_factory=dict)
    """Each stage of the command's start-up (manifest.json's startup_s), the earliest over its jobs."""


def read_results(directory: Path, model: str = MODEL) -> Results:
    """Read `llm_calls` and `episodes` of every job under `directory` (a sweep dir or a run dir)."""
    dirs = job_dirs(directory)
    calls = read_tables(dirs, "llm_calls")
    if calls.height:
        calls = calls.filter((pl.col("model") == model) & ~pl.col("cached").fill_null(False))
    per_run = ({row["run_id"]: row["len"] for row in calls.group_by("run_id").len().iter_rows(named=True)}
               if calls.height else {})
    episodes = read_tables(dirs, "episodes")
    window = (unix(episodes["finished_at"].max()) - unix(episodes["started_at"].min())
              if episodes.height else None)
    errors = calls.filter(pl.col("error").is_not_null()).height if calls.height else 0
    return Results(jobs=len(dirs), runs=len(per_run), calls=calls.height,
                   chain=max(per_run.values(), default=0), episodes=episodes.height, window_s=window,
                   errors=errors, per_run=per_run, startup_s=_startup(dirs))


def _startup(dirs: list[Path]) -> dict[str, float]:
    stages: dict[str, float] = {}
    for directory in dirs:
        with contextlib.suppress(OSError, ValueError, KeyError):
            for stage, seconds in json.loads((directory / "manifest.json").read_text())["startup_s"].items():
                stages[stage] = min(seconds, stages.get(stage, seconds))
    return stages


def ideal_s(results: Results, latency_s: float, max_concurrency: int) -> float:
    """The model-bound ideal: nothing but the model's latency, with every call sent as soon as it
    may be. Two things bound it, and the larger holds:

    - the chain: an agent run makes its calls one after another (the baseline makes one per task),
      so the run with the most calls needs at least `chain x latency`;
    - the cap: at most `max_concurrency` calls are in flight at once (model.max_concurrency, shared
      by every job of a sweep), so all of them need at least `calls / max_concurrency x latency`.

    ideal = max(chain, calls / max_concurrency) x latency.
    """
    return max(results.chain, results.calls / max_concurrency) * latency_s


# --- the rows ---------------------------------------------------------------------------------


def _row(kind: str, n: int, measured: Measured, results: Results, latency_s: float,
         max_concurrency: int) -> dict[str, Any]:
    ideal = ideal_s(results, latency_s, max_concurrency)

    def percent(seconds: float | None) -> float | None:
        return 100 * seconds / ideal if seconds is not None and ideal else None

    return {"what": kind, "n": n, "agent runs": results.runs, "model calls": results.calls,
            "server requests": measured.requests, "peak in flight": measured.peak_in_flight,
            "wall s": measured.wall_s, "ideal s": ideal, "wall/ideal %": percent(measured.wall_s),
            "run window s": results.window_s, "window/ideal %": percent(results.window_s),
            **{f"{stage} s": results.startup_s.get(stage) for stage in STAGES},
            "first call s": measured.first_call_s, "exit s": measured.exit_s,
            "peak RSS GiB": measured.peak_rss / GIB,
            "used +GiB": measured.used_rise / GIB,
            "CPU ms/call": 1000 * measured.cpu_s / results.calls if results.calls else None,
            "CPU s": measured.cpu_s, "machine load": measured.load,
            "status": measured.stopped or ("ok" if measured.returncode == 0
                                           else f"exit {measured.returncode}")}


def sweep_section(jobs: list[int], tasks: int = 50, latency_s: float = 0.2, max_concurrency: int = 256,
                  server: ServerProcess | None = None, directory: Path | None = None,
                  used_limit_gib: float | None = 16.0, timeout_s: float = 3600,
                  echo: bool = True, warm: WarmPoolProcess | None = None) -> list[dict[str, Any]]:
    """One row per N in `jobs`: the sweep `python -m harness -m variant=baseline "seed=range(N)"`, N
    jobs of one agent run of `tasks` tasks each (the baseline: one model call per task), on the HTTP
    model at `latency_s`, into `<directory>/sweep-N` (a temporary directory when None).

    Columns: wall s (the command, start to exit); ideal s (`ideal_s`: max(longest chain of calls in
    one agent run, calls / max_concurrency) x latency, from the llm_calls tables); wall/ideal %;
    run window s (first episode start to last episode end, all jobs) and window/ideal %; composed,
    ray, pool and checked s (the start-up, stage by stage: manifest.json's startup_s); first
    call s (command start to the first request the server logged); peak RSS GiB (the command's
    process session, summed, sampled every 0.2 s) and used +GiB (peak rise of the machine's used
    memory, which counts shared memory once but also whatever else the machine runs); CPU ms/call
    (user + system of the whole session / model calls); server requests and peak in flight (what
    the server saw); machine load (mean 1-minute load average during the command: on a shared
    machine, others' work slows every column). A run that pushes the machine's used memory past
    `used_limit_gib` is stopped (status says so). `max_concurrency` (model.max_concurrency, shared
    by the jobs of a sweep) defaults above the agent runs measured, so that the chain bounds the
    ideal and what is left is the harness's own overhead; the harness's default is 8. With `warm`,
    each command runs on that warm pool (`ray.address=warm`), started and ready before it: its rows
    say "(warm)", and count the pool's processes in RSS and CPU."""
    return _section([("sweep", n) for n in jobs], tasks, latency_s, max_concurrency, server, directory,
                    used_limit_gib, timeout_s, echo, warm)


def runs_section(runs: list[int], tasks: int = 50, latency_s: float = 0.2, max_concurrency: int = 256,
                 server: ServerProcess | None = None, directory: Path | None = None,
                 used_limit_gib: float | None = 16.0, timeout_s: float = 3600,
                 echo: bool = True, warm: WarmPoolProcess | None = None) -> list[dict[str, Any]]:
    """One row per N in `runs`: one job of N agent runs, `python -m harness variant=baseline
    seeds=[0,...,N-1]`; the same columns as `sweep_section` (and `warm` as there)."""
    return _section([("one job", n) for n in runs], tasks, latency_s, max_concurrency, server, directory,
                    used_limit_gib, timeout_s, echo, warm)


def _section(plan: list[tuple[str, int]], tasks: int, latency_s: float, max_concurrency: int,
             server: ServerProcess | None, directory: Path | None, used_limit_gib: float | None,
             timeout_s: float, echo: bool, warm: WarmPoolProcess | None = None) -> list[dict[str, Any]]:
    with contextlib.ExitStack() as stack:
        if server is None:
            server = stack.enter_context(ServerProcess(latency_s))
        elif server.latency_s != latency_s:
            raise ValueError(f"the server answers after {server.latency_s} s, not {latency_s} s")
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-sweep-")))
        rows = []
        model_checks = directory / "model_checks"
        for kind, n in plan:
            overrides = [*fake_model_overrides(server, tasks, max_concurrency, model_checks),
                         *(warm.overrides() if warm else [])]
            kept = None if warm else model_check_kept(model_checks)  # on a warm pool its worker checks
            out = directory / f"{'sweep' if kind == 'sweep' else 'runs'}-{n}{'-warm' if warm else ''}"
            if warm is not None:
                warm.wait_ready()
            if kind == "sweep":
                argv = [sys.executable, "-m", "harness", "-m", *overrides, f"seed=range({n})",
                        f"hydra.sweep.dir={out}"]
            else:
                argv = [sys.executable, "-m", "harness", *overrides,
                        f"seeds=[{','.join(str(s) for s in range(n))}]", f"hydra.run.dir={out}"]
            measured = measure(argv, server, directory / f"{out.name}.log", timeout_s,
                               int(used_limit_gib * GIB) if used_limit_gib else None,
                               also=(warm.pid,) if warm else ())
            results = (read_results(out) if out.is_dir()
                       else Results(jobs=0, runs=0, calls=0, chain=0, episodes=0, window_s=None))
            row = _row(f"{kind} (warm)" if warm else kind, n, measured, results, latency_s, max_concurrency)
            row["model check kept"] = kept
            rows.append(row)
            if echo:
                print(table([row]), flush=True)
                if row["status"] != "ok":
                    print(f"({kind} {n}: {row['status']}; the command's last output:)\n"
                          f"{measured.output[-2000:]}", flush=True)
        return rows



def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness.bench sweep", description=" ".join(
        __doc__.split("\n\n")[0].replace("`", "").split()))
    parser.add_argument("--quick", action="store_true", help="jobs 1 and 4, 8 agent runs, 5 tasks each")
    parser.add_argument("--jobs", type=int, nargs="*", help="sweep sizes (default 1 16 64)")
    parser.add_argument("--runs", type=int, nargs="*", help="agent runs in one job (default 64 256)")
    parser.add_argument("--tasks", type=int, help="tasks (model calls) per agent run (default 50)")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per model call")
    parser.add_argument("--max-concurrency", type=int, default=256, help="model.max_concurrency")
    parser.add_argument("--used-limit-gib", type=float, default=16.0,
                        help="stop a run when the machine's used memory passes this")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per command")
    parser.add_argument("--keep", type=Path, help="write the runs here and keep them (default: a temp dir)")
    parser.add_argument("--warm", action="store_true",
                        help="then every row again on a warm pool (python -m harness.warm start), "
                             "started before the first and ready before each")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    jobs = args.jobs if args.jobs is not None else ([1, 4] if args.quick else [1, 16, 64])
    runs = args.runs if args.runs is not None else ([8] if args.quick else [64, 256])
    tasks = args.tasks or (5 if args.quick else 50)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(f"\n## Sweeps and one-job runs through the CLI, HTTP model at {args.latency * 1000:.0f} ms"
          f" per call, {tasks} tasks per agent run, model.max_concurrency={args.max_concurrency}\n",
          flush=True)
    options = {"tasks": tasks, "latency_s": args.latency, "max_concurrency": args.max_concurrency,
               "used_limit_gib": args.used_limit_gib, "timeout_s": args.timeout}
    with ServerProcess(args.latency) as server, contextlib.ExitStack() as stack:
        directory = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-sweep-")))
        print("each row as it is measured:\n", flush=True)
        rows = sweep_section(jobs, server=server, directory=directory, **options) if jobs else []
        rows += runs_section(runs, server=server, directory=directory, **options) if runs else []
        if args.warm:
            with WarmPoolProcess(directory) as warm:
                options.update(server=server, directory=directory, warm=warm)
                rows += sweep_section(jobs, **options) if jobs else []
                rows += runs_section(runs, **options) if runs else []
        print("\nall rows:\n")
        print(table(rows), flush=True)
        for row in rows:
            if row["status"] != "ok":
                print(f"\n{row['what']} {row['n']}: {row['status']} (logs: {directory})")
    print("\n(ideal: max(most calls in one agent run, calls / max concurrency) x latency; window: first"
          " episode start to last end;\n composed, ray, pool, checked: seconds from the command's start"
          " to each stage of its start-up (manifest.json's startup_s;\n a sweep marks no pool stage: its"
          " jobs' checks wait for the workers); first call: command start to the server's first request;"
          " exit: the server's last reply to the command's exit;\n peak RSS: the command's process session;"
          " used +GiB: peak rise of the machine's used memory;"
          " CPU: user + system of the session / model calls;\n machine load: mean 1-minute load average"
          f" during the command, on {os.cpu_count()} cores)")
    print(f"\nbench took {time.perf_counter() - started:.0f} s")




def section(quick: bool) -> None:
    """Section 7 of `python -m harness.bench`: sweeps of 1, 16 and 64 jobs at the models' default
    concurrency cap (8), as users run them, and one job of 64 and 256 agent runs with the cap above
    the agent runs (what is left is the harness's own overhead); 50 calls per agent run."""
    tasks = 5 if quick else 50
    with ServerProcess(0.2) as server, tempfile.TemporaryDirectory(prefix="bench-sweep-") as directory:
        rows = sweep_section([1, 4] if quick else [1, 16, 64], tasks=tasks, max_concurrency=8,
                             server=server, directory=Path(directory), echo=False)
        rows += runs_section([8] if quick else [64, 256], tasks=tasks, max_concurrency=256, server=server,
                             directory=Path(directory), echo=False)
    print(table(rows))
    print("\n(ideal: max(most calls in one agent run, calls / model.max_concurrency) x latency; window: first"
          " episode start to last end;\n first call: command start to the server's first request; peak RSS:"
          " the command's process session, summed;\n CPU: user + system of the session / model calls;"
          " machine load: mean 1-minute load average during the command)")
