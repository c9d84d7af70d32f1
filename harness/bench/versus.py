"""`python -m harness.bench versus`: the harness and inspect_ai against the same local HTTP model.

Both run as the user would run them, as whole commands in process sessions of their own (every
process they start is measured: a local Ray's too), against one `FakeChatServer`
(harness/bench/fake_chat.py) that answers every chat request after a fixed latency:

- the harness: `python -m harness variant=baseline seeds=[0..N-1] stream.num_tasks=C` (N agent runs
  of C tasks, one model call each), on `model=litellm model.name=openai/fake model.api_base=...`,
  no response cache, the hashing embedder;
- inspect_ai: `inspect eval` of a task of N samples whose solver calls `generate` C times, each on
  a fresh one-message conversation, `--max-samples N --max-connections <cap>` against
  `openai/fake` at the same base URL (`-M responses_api=false`: the server speaks chat completions).

For N = 1, 64 and 256 each row gives the wall seconds, the harness's start-up stage by stage
(composed, ray, pool, checked: manifest.json's startup_s), the seconds from the command to the first
request the server saw and from its last reply to the command's exit, and the CPU seconds (user +
system) of all the command's processes per call the server received, those spent before the first
call (the start-up), and per call those spent after it; then the harness's figures over
inspect_ai's. inspect_ai is an optional extra: without it the section says how to install it and
measures the harness alone.

Before them, `harness (model check not kept)`: a user's first command, whose model check (litellm's
mapping of the model's parameters, harness/driver/preflight.py) is not kept yet and imports litellm;
every later harness row recalls it, as a user's later commands with the same model do (its
`model_check_kept` says which).

The first row, `ray floor`, is what any tool that runs its agents in Ray actors pays before its first
model call, measured the same way: a script that starts a fresh local Ray as the harness does (no
dashboard, the harness's Ray settings), creates one actor and sends one request from it
(`RAY_FLOOR`). A harness row's first call minus the floor's is the harness's own start-up; the floor
minus inspect_ai's is Ray's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.bench.commands import Measured, WarmPoolProcess, fake_model_overrides, measure, model_check_kept
from harness.bench.common import table
from harness.bench.fake_chat import MODEL, ServerProcess
from harness.bench.sweep import read_results
from harness.driver.startup import LOCAL_RAY_SYSTEM_CONFIG, STAGES
from harness.extras import EXTRAS

INSTALL = "pip install inspect-ai  (or: pip install -e '.[inspect]')"

INSPECT_TASK = textwrap.dedent('''
    """N samples, each calling the model C times on a fresh conversation (harness.bench.versus)."""

    from inspect_ai import Task, task
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageUser
    from inspect_ai.scorer import includes
    from inspect_ai.solver import Generate, TaskState, solver


    @solver
    def ask_again(calls: int):
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            for _ in range(calls):
                state.messages = [ChatMessageUser(content=state.input_text)]
                state = await generate(state)
            return state

        return solve


    @task
    def versus(runs: int = 1, calls: int = 50) -> Task:
        samples = [Sample(input=f"What is the capital of country number {i}?", target="Paris")
                   for i in range(runs)]
        return Task(dataset=samples, solver=ask_again(calls), scorer=includes())
''')


RAY_FLOOR = textwrap.dedent('''
    """The least a tool that runs its agents in Ray actors waits for before its first model call: Python,
    a fresh local Ray as the bench's harness starts it (no dashboard), one actor, one request."""

    import json
    import logging
    import sys
    import urllib.request

    import ray


    @ray.remote(num_cpus=0)
    class Caller:
        def call(self, api_base: str) -> int:
            body = {"model": "fake", "messages": [{"role": "user", "content": "Capital of France?"}]}
            request = urllib.request.Request(f"{api_base}/chat/completions", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as reply:
                return reply.status


    ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING,
             _system_config=json.loads(sys.argv[2]))  # the harness's (harness/driver/startup.py)
    print(ray.get(Caller.remote().call.remote(sys.argv[1])))
    ray.shutdown()
''')


def inspect_available() -> bool:
    return EXTRAS["inspect"].installed and shutil.which("inspect") is not None


def inspect_or_say(wanted: bool = True) -> bool:
    """Whether inspect_ai's commands run: `wanted` and installed. Where wanted but missing it says so, with
    how to install it, so that a table of the harness alone is not read as the comparison (versus, load)."""
    with_inspect = wanted and inspect_available()
    if wanted and not with_inspect:
        print(f"inspect_ai is not installed: measuring the harness alone ({INSTALL})", flush=True)
    return with_inspect


@contextlib.contextmanager
def served_work(latency_s: float, keep: Path | None,
                prefix: str) -> Iterator[tuple[ServerProcess, Path, Path]]:
    """The HTTP model both tools call, answering after `latency_s`; the directory the commands write into
    (`keep`, or a temporary one named `prefix`..., removed after); and inspect_ai's task file in it. One
    for the versus and load sections, so that their commands meet the same model and task."""
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(ServerProcess(latency_s))
        work = keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
        work.mkdir(parents=True, exist_ok=True)
        task_file = work / "versus_task.py"
        task_file.write_text(INSPECT_TASK)
        yield server, work, task_file


def harness_argv(server: ServerProcess, runs: int, calls: int, cap: int, out: Path,
                 model_checks: Path) -> list[str]:
    return [sys.executable, "-m", "harness", *fake_model_overrides(server, calls, cap, model_checks),
            f"seeds=[{','.join(str(seed) for seed in range(runs))}]", f"hydra.run.dir={out}"]


def inspect_argv(server: ServerProcess, runs: int, calls: int, cap: int, task_file: Path,
                 out: Path) -> list[str]:
    return ["inspect", "eval", f"{task_file}@versus", "--model", MODEL, "--model-base-url", server.api_base,
            "-M", "responses_api=false", "-T", f"runs={runs}", "-T", f"calls={calls}",
            "--max-samples", str(runs), "--max-connections", str(cap), "--log-dir", str(out),
            "--display", "none", "--no-log-realtime"]


def _row(tool: str, runs: int, calls: int, measured: Measured,
         startup_s: dict[str, float] | None = None, check_kept: str | None = None) -> dict[str, Any]:
    ok = measured.returncode == 0 and not measured.stopped
    stages = {f"{stage}_s": (startup_s or {}).get(stage) for stage in STAGES}
    started, calls_made = measured.startup_cpu_s, measured.requests
    after = 1000 * (measured.cpu_s - started) / calls_made if calls_made and started is not None else None
    return {"tool": tool, "runs": runs, "calls": measured.requests, "expected": runs * calls,
            "wall_s": measured.wall_s, **stages, "first_call_s": measured.first_call_s,
            "exit_s": measured.exit_s,
            "cpu_ms_per_call": 1000 * measured.cpu_s / measured.requests if measured.requests else None,
            "startup_cpu_s": started, "cpu_ms_per_call_after_start": after,
            "model_check_kept": check_kept, "load": measured.load,
            "ok": "yes" if ok else (measured.stopped or f"exit {measured.returncode}")}


def versus_section(runs: list[int], calls: int = 50, latency_s: float = 0.2, cap: int = 256,
                   timeout_s: float = 1800, keep: Path | None = None,
                   warm: bool = False) -> list[dict[str, Any]]:
    """A harness row and an inspect_ai row for each number of concurrent agent runs, then their
    ratios; the commands' output stays in the work directory (`keep`, or a temporary one). With
    `warm`, also a row of the harness on a warm pool (`ray.address=warm`; the pool's processes
    counted from the command's start) and its ratios."""
    with_inspect = inspect_or_say()
    rows: list[dict[str, Any]] = []
    with (served_work(latency_s, keep, "harness-versus-") as (server, work, task_file),
          WarmPoolProcess(work) if warm else contextlib.nullcontext() as pool):
        floor = work / "ray_floor.py"
        floor.write_text(RAY_FLOOR)
        print("Ray's floor: a fresh Ray, one actor, one call ...", flush=True)
        floor_argv = [sys.executable, str(floor), server.api_base, json.dumps(LOCAL_RAY_SYSTEM_CONFIG)]
        rows.append(_row("ray floor", 1, 1, measure(floor_argv, server, work / "ray_floor.log", timeout_s)))
        # A user's first command checks its model in full (importing litellm: seconds); later ones with
        # the same model recall it (harness/driver/preflight.py). The rows below recall it.
        rows.append(_harness_row(server, 1, calls, cap, work, timeout_s, None, first_command=True))
        for n in runs:
            ours = [_harness_row(server, n, calls, cap, work, timeout_s, None)]
            ours += [_harness_row(server, n, calls, cap, work, timeout_s, pool)] if pool else []
            rows += ours
            if not with_inspect:
                continue
            print(f"inspect_ai: {n} samples x {calls} calls ...", flush=True)
            theirs = measure(inspect_argv(server, n, calls, cap, task_file, work / f"inspect-{n}"), server,
                             work / f"inspect-{n}.log", timeout_s,
                             env={"OPENAI_API_KEY": "no-key-needed"})  # its OpenAI client insists on one
            rows.append(_row("inspect_ai", n, calls, theirs))
            rows += [_ratio(n, row, rows[-1]) for row in ours]
    return rows


def _harness_row(server: ServerProcess, n: int, calls: int, cap: int, work: Path, timeout_s: float,
                 warm: WarmPoolProcess | None, first_command: bool = False) -> dict[str, Any]:
    tool = ("harness (model check not kept)" if first_command else "harness (warm)" if warm else "harness")
    print(f"{tool}: {n} agent runs x {calls} calls ...", flush=True)
    out = work / f"harness-{n}{'-warm' if warm else ''}{'-first' if first_command else ''}"
    model_checks = work / "model_checks"
    kept = None if warm else model_check_kept(model_checks)  # on a warm pool, its worker checks
    argv = harness_argv(server, n, calls, cap, out, model_checks) + (warm.overrides() if warm else [])
    if warm:
        warm.wait_ready()
    measured = measure(argv, server, work / f"{out.name}.log", timeout_s, also=(warm.pid,) if warm else ())
    return _row(tool, n, calls, measured, read_results(out).startup_s if out.is_dir() else None, kept)


def _ratio(runs: int, ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    def over(key: str) -> float | None:
        a, b = ours.get(key), theirs.get(key)
        return a / b if a is not None and b else None

    return {"tool": f"{ours['tool']} / inspect_ai", "runs": runs, "calls": None, "expected": None,
            "wall_s": over("wall_s"), "first_call_s": over("first_call_s"), "exit_s": over("exit_s"),
            "cpu_ms_per_call": over("cpu_ms_per_call"), "startup_cpu_s": over("startup_cpu_s"),
            "cpu_ms_per_call_after_start": over("cpu_ms_per_call_after_start"), "load": None, "ok": ""}


def http_model_options(options: argparse.ArgumentParser) -> None:
    """The flags of the local HTTP model both tools call, and of the commands' runs (shared by `load`)."""
    options.add_argument("--latency", type=float, default=0.2,
                         help="seconds the model takes per call (default: 0.2)")
    options.add_argument("--max-concurrency", type=int, default=256,
                         help="calls in flight at most, for both tools (default: 256)")
    options.add_argument("--timeout", type=float, default=1800, help="seconds per command (default: 1800)")
    options.add_argument("--keep", type=Path, help="keep the commands' outputs and logs here")


def parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(prog="python -m harness.bench versus",
                                      description=__doc__.split("\n")[0].replace("`", ""))
    options.add_argument("--runs", type=int, nargs="*", default=[1, 64, 256],
                         help="concurrent agent runs (inspect_ai samples), one row each (default: 1 64 256)")
    options.add_argument("--calls", type=int, default=50, help="model calls per agent run (default: 50)")
    http_model_options(options)
    options.add_argument("--warm", action="store_true",
                         help="also measure the harness on a warm pool (python -m harness.warm start)")
    return options


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    rows = versus_section(args.runs, args.calls, args.latency, args.max_concurrency, args.timeout, args.keep,
                          args.warm)
    print(table(rows))
