"""`python -m harness.bench load`: commands timed quiet and beside N busy processes, side by side.

Machines that run sweeps do other things too (a build, a neighbour's job, a CI runner's other
steps). Each command below is run as the user runs it, in a process session of its own
(harness/bench/commands.py `measure`), quiet and then at once beside `--busy` processes that each
take a CPU's worth (`sh -c 'while :; do :; done'`, ended by their ids after it), `--repeats` times
in turn, so that both of a pair meet the same machine:

- `harness (scripted)`: the command of issue 54, `python -m harness model=scripted embedder=hashing
  variant=best_of_k variant.k=8 budget.max_tokens=450 seeds=[0..5] stream.num_tasks=20
  cache.enabled=false progress=false` (48 calls at once on a zero-latency model);
- `harness` and `inspect_ai`: N agent runs (samples) of C calls against the bench's HTTP model, one
  `FakeChatServer` answering after a fixed latency, as `python -m harness.bench versus` runs them.

Each row gives the wall seconds, the harness's pool stage (manifest.json's startup_s: pool minus
ray), the first call, and from llm_calls the p50 of latency_s (the model's seconds) and of
harness_s (the harness's own, apart: harness/models/loop_clock.py); then a row of busy over quiet for
each tool. Fair shares would make a command beside N busy loops on C cores about (N + its own
processes) / C times slower at most; the figures in docs/bench.md (under load) say what it was.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from statistics import median
from typing import Any

from harness.bench.commands import Measured, measure
from harness.bench.common import table
from harness.bench.fake_chat import ServerProcess
from harness.bench.versus import harness_argv, http_model_options, inspect_argv, inspect_or_say, served_work

SCRIPTED = ["model=scripted", "embedder=hashing", "variant=best_of_k", "variant.k=8", "budget.max_tokens=450",
            "seeds=[0,1,2,3,4,5]", "stream.num_tasks=20", "cache.enabled=false", "progress=false"]
"""The command of issue 54 (with `hydra.run.dir` added): 6 agent runs of best-of-8 on the scripted model."""
BUSY_LOOP = ["sh", "-c", "while :; do :; done"]


@contextlib.contextmanager
def busy(count: int) -> Iterator[list[int]]:
    """`count` processes that each spin a CPU's worth, ended (by their ids) on exit."""
    loops = [subprocess.Popen(BUSY_LOOP, start_new_session=True) for _ in range(count)]
    try:
        yield [loop.pid for loop in loops]
    finally:
        for loop in loops:
            with contextlib.suppress(ProcessLookupError):
                os.kill(loop.pid, signal.SIGKILL)
            loop.wait()


def call_clocks(run_dir: Path) -> dict[str, float | None]:
    """p50 of latency_s and of harness_s over a run's model calls (None: no calls, or no such column)."""
    from harness.tables.reading import read_table

    calls = read_table(run_dir, "llm_calls")
    return {f"{name.removesuffix('_s')}_p50_s": float(calls[name].median()) if name in calls.columns else None
            for name in ("latency_s", "harness_s")}


def _row(tool: str, condition: str, measured: Measured, run_dir: Path | None) -> dict[str, Any]:
    stages: dict[str, float] = {}
    if run_dir is not None:
        from harness.bench.sweep import read_results

        with contextlib.suppress(Exception):
            stages = read_results(run_dir).startup_s
    pool = stages["pool"] - stages["ray"] if {"pool", "ray"} <= stages.keys() else None
    ok = measured.returncode == 0 and not measured.stopped
    return {"tool": tool, "condition": condition, "wall_s": measured.wall_s, "pool_stage_s": pool,
            "first_call_s": measured.first_call_s, "calls": measured.requests or None,
            **(call_clocks(run_dir) if run_dir is not None and run_dir.is_dir()
               else {"latency_p50_s": None, "harness_p50_s": None}),
            "load": measured.load, "ok": "yes" if ok else (measured.stopped or f"exit {measured.returncode}")}


def _ratio(tool: str, rows: list[dict[str, Any]], loops: int) -> dict[str, Any]:
    """Busy over quiet, each the median of its repeats."""

    def over(key: str) -> float | None:
        quiet = [r[key] for r in rows if r["condition"] == "quiet" and r[key] is not None]
        loaded = [r[key] for r in rows if r["condition"] != "quiet" and r[key] is not None]
        return median(loaded) / median(quiet) if quiet and loaded and median(quiet) else None

    return {"tool": tool, "condition": f"busy {loops} / quiet", "wall_s": over("wall_s"),
            "pool_stage_s": over("pool_stage_s"), "first_call_s": over("first_call_s"), "calls": None,
            "latency_p50_s": None, "harness_p50_s": None, "load": None, "ok": ""}


def load_section(loops: int = 3, repeats: int = 1, runs: int = 8, calls: int = 20, latency_s: float = 0.2,
                 cap: int = 256, timeout_s: float = 1800, keep: Path | None = None,
                 scripted: bool = True, http: bool = True) -> list[dict[str, Any]]:
    """Rows of each command quiet and beside `loops` busy processes, `repeats` pairs back to back,
    then busy over quiet per tool; outputs in `keep` (or a temporary directory)."""
    with_inspect = inspect_or_say(http)
    by_tool: dict[str, list[dict[str, Any]]] = {}
    with served_work(latency_s, keep, "harness-load-") as (server, work, task_file):
        commands = _commands(server, work, task_file, runs, calls, cap, scripted, http, with_inspect)
        for repeat in range(repeats):
            for tool, slug, argv_for, env in commands:
                for condition, count in (("quiet", 0), (f"busy {loops}", loops)):
                    out = work / f"{slug}-{'busy' if count else 'quiet'}-{repeat}"
                    print(f"{tool}, {condition} ({repeat + 1}/{repeats}) ...", flush=True)
                    log = work / f"{out.name}.log"
                    with busy(count):
                        measured = measure(argv_for(out), server, log, timeout_s, env=env)
                    ours = out if slug != "inspect_ai" else None  # a directory of the harness's tables
                    by_tool.setdefault(tool, []).append(_row(tool, condition, measured, ours))
    rows: list[dict[str, Any]] = []
    for tool, measured_rows in by_tool.items():
        rows += [*measured_rows, _ratio(tool, measured_rows, loops)]
    return rows


def _commands(server: ServerProcess, work: Path, task_file: Path, runs: int, calls: int, cap: int,
              scripted: bool, http: bool, with_inspect: bool) -> list[tuple[str, str, Any, dict[str, str]]]:
    """(tool, its outputs' name, its argv given its output directory, its environment) of each command."""
    commands: list[tuple[str, str, Any, dict[str, str]]] = []
    if scripted:
        commands.append(("harness (scripted)", "scripted", lambda out: [
            sys.executable, "-m", "harness", *SCRIPTED, f"hydra.run.dir={out}"], {}))
    if http:
        commands.append((f"harness ({runs} x {calls} HTTP)", "harness", lambda out: harness_argv(
            server, runs, calls, cap, out, work / "model_checks"), {}))
    if with_inspect:  # its OpenAI client insists on a key
        commands.append((f"inspect_ai ({runs} x {calls} HTTP)", "inspect_ai", lambda out: inspect_argv(
            server, runs, calls, cap, task_file, out), {"OPENAI_API_KEY": "no-key-needed"}))
    return commands


def parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(prog="python -m harness.bench load",
                                      description=__doc__.split("\n")[0].replace("`", ""))
    options.add_argument("--busy", type=int, default=3,
                         help="busy processes beside the loaded run, a CPU's worth each (default: 3)")
    options.add_argument("--repeats", type=int, default=1,
                         help="quiet/busy pairs of each command (default: 1)")
    options.add_argument("--runs", type=int, default=8,
                         help="agent runs (inspect_ai samples) of the HTTP commands (default: 8)")
    options.add_argument("--calls", type=int, default=20, help="model calls per agent run (default: 20)")
    http_model_options(options)
    options.add_argument("--only", choices=["scripted", "http"],
                         help="only the scripted command, or only the HTTP commands (default: both)")
    return options


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    rows = load_section(args.busy, args.repeats, args.runs, args.calls, args.latency, args.max_concurrency,
                        args.timeout, args.keep, scripted=args.only != "http", http=args.only != "scripted")
    print(table(rows))
