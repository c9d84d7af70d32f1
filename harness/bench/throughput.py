"""Sections 1 and 4 of `python -m harness.bench`: agent runs of the baseline on a scripted model with a
fixed latency per call, at several concurrencies, through the real harness in this process (Ray agent
workers, each with its gateway replica, the model limits actor, the writer), against the ideal bound
(concurrency / latency) and against an ideal sequential loop (one call after another: `vs sequential`
is episodes/s x latency; the measured plain loop, `sequential_loop`, is printed beside it), with the
CPU time and the peak memory (RSS) of the driver and every Ray process per model call.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.bench.common import bench_settings, unix
from harness.bench.meter import ProcessMeter
from harness.driver.run import run
from harness.models.gateway import direct_completion
from harness.models.scripted import ScriptedLLM
from harness.tables.reading import count_rows, read_table


def throughput(concurrencies: list[int], tasks_per_run: int, latency: float,
               extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One harness run per concurrency; `extra`: Hydra overrides appended to each run's (and shown
    in a "setting" column). CPU per call: the CPU of the driver and every Ray process over the whole
    run (its start-up included: actor processes importing litellm and the rest cost seconds) divided
    by the run's model calls; "while running": the same, only from the first episode's start to the last one's
    end, which leaves start-up and shutdown out."""
    rows: list[dict[str, Any]] = []
    for concurrency in concurrencies:
        settings = bench_settings("model=scripted", f"model.scripted.latency_s={latency}",
                                  f"seeds=[{','.join(str(s) for s in range(concurrency))}]",
                                  f"stream.num_tasks={tasks_per_run}", "model.max_concurrency=1024", *extra)
        with tempfile.TemporaryDirectory() as directory:
            with ProcessMeter() as meter:
                run(settings, Path(directory))
            episodes, first, last = _episode_span(Path(directory))
            calls = count_rows(Path(directory), "llm_calls")
        rate = episodes / (last - first)
        ideal = concurrency / latency
        rows.append({**({"setting": " ".join(extra)} if extra else {}),
                     "agent runs": concurrency, "episodes": episodes, "episodes/s": rate,
                     "ideal/s": ideal, "of ideal": rate / ideal, "vs sequential": rate * latency,
                     "model calls": calls, "harness CPU ms per call": 1000 * meter.cpu_s / calls,
                     "CPU ms per call while running": 1000 * meter.cpu_between(first, last) / calls,
                     "peak RSS GiB": meter.peak_rss / 2**30})
    return rows


def _episode_span(run_dir: Path) -> tuple[int, float, float]:
    """The run's episodes, and when the first started and the last finished (Unix seconds)."""
    episodes = read_table(run_dir, "episodes")
    first, last = episodes["started_at"].min(), episodes["finished_at"].max()
    return episodes.height, unix(first), unix(last)


def sequential_loop(tasks: int, latency: float) -> float:
    """Episodes per second of a plain loop: one model call per task, one after another."""
    provider = ("scripted", ScriptedLLM(accuracy=0.5, latency_s=latency))

    async def loop() -> float:
        started = time.perf_counter()
        for i in range(tasks):
            await direct_completion("scripted/loop", [{"role": "user", "content": f"q{i}"}], provider)
        return tasks / (time.perf_counter() - started)

    return asyncio.run(loop())
