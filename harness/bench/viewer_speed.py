"""`python -m harness.bench viewer`: the viewer (python -m harness.view) at any size.

Writes a synthetic sweep with `--rows` transcripts rows (default 1,000,000) and as many llm_calls
rows, across `--jobs` job directories, laid out as the writer leaves a finished job (one compacted
file per table, row groups of 128k rows, zstd, the records' schemas), with an episode per
`--calls-per-episode` calls and a lesson stored and three recalled per episode. Starts the viewer on it
in a process of its own and measures, over HTTP:
- the first page (`/`, runs and jobs), cold (the first request) and warm;
- the first page of the episodes list;
- single episodes (every call joined with its transcript, and its memory events) at the start,
  middle and end of each job's stream;
- one agent run's learnt state (`/learnt`), and the comparison of every run (`/compare`);
- the viewer's peak resident memory (VmHWM) after all of them.
With `--live-parts N`, each job's growing tables are first split into N part files (a job still
writing, before its compaction). Prints one row per page and whether the targets hold (the first
page and any single episode within 1 s, the viewer under 1 GB). `measure(root)` is what a test can
call on a small sweep.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from harness.tables.records import COMPRESSION, TABLES
from harness.tables.writer import COMPACTED, ROW_GROUP_ROWS

LIVE_TABLES = ("episodes", "llm_calls", "transcripts", "memory_events")
"""The tables that grow with every episode: a running job's are many part files."""
TARGET_S = 1.0
TARGET_RSS_MB = 1024
PURPOSES = ("act", "distill", "embed", "safety", "validate")
FAMILIES = ("capital", "demonym", "currency", "language", "continent")
WORDS = np.array([
    "the", "a", "capital", "city", "country", "river", "answer", "lesson", "reply", "only", "name", "of",
    "is", "in", "on", "what", "which", "remember", "prefer", "check", "spelling", "official", "largest",
    "small",
])  # fmt: skip


def generate(
    root: Path, rows: int = 1_000_000, jobs: int = 4, calls_per_episode: int = 10, seed: int = 0
) -> dict[str, Any]:
    """A finished sweep under `root` with `rows` transcripts rows in all; what was written."""
    rng = np.random.default_rng(seed)
    per_job = rows // jobs
    episodes_per_job = per_job // calls_per_episode
    written = {"transcripts": 0, "llm_calls": 0, "episodes": 0, "memory_events": 0, "run_ids": []}
    for job in range(jobs):
        run_id = f"memory-countries-s{job}-o{job}-bench{job:03d}"
        directory = root / str(job)
        counts = write_job(directory, run_id, job, episodes_per_job, calls_per_episode, rng)
        for table, n in counts.items():
            written[table] += n
        written["run_ids"].append(run_id)
        (directory / "manifest.json").write_text(
            json.dumps(
                {
                    "status": "finished",
                    "model": "scripted/bench",
                    "agent_runs": [
                        {
                            "run_id": run_id,
                            "variant": "memory",
                            "seed": job,
                            "env": "countries",
                            "num_tasks": episodes_per_job,
                            "episodes": episodes_per_job,
                        }
                    ],
                }
            )
        )
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return written


@dataclass
class SyntheticJob:
    """One job's episodes and model calls, drawn once, that each of its tables is written from."""

    run_id: str
    job: int
    calls_per_episode: int
    start: dt.datetime
    positions: np.ndarray
    episode_ids: list[str]
    task_ids: list[str]
    questions: list[str]
    times: list[dt.datetime]
    success: np.ndarray
    prompt: np.ndarray
    """Prompt tokens per episode and call (episodes x calls_per_episode); completion likewise."""
    completion: np.ndarray
    call_episode: np.ndarray
    """The stream position of each call's episode, the calls of all episodes in one row."""
    call_ids: list[str]
    purposes: list[str]

    @property
    def episodes(self) -> int:
        return len(self.positions)

    @property
    def calls(self) -> int:
        return len(self.call_episode)


def write_job(
    directory: Path, run_id: str, job: int, episodes: int, calls_per_episode: int, rng: np.random.Generator
) -> dict[str, int]:
    """One job's tables, as the writer leaves a finished job; the rows written per table."""
    drawn = draw_job(run_id, job, episodes, calls_per_episode, rng)
    # One fixed order of draws from the generator (episodes, calls, lessons): a seed writes the same
    # sweep in every version, so that the bench's figures stay comparable.
    write_table(directory, "episodes", episode_columns(drawn, rng))
    write_table(directory, "llm_calls", call_columns(drawn, rng))
    lessons = [" ".join(WORDS[rng.integers(0, len(WORDS), 30)]) for _ in range(997)]
    write_table(directory, "transcripts", transcript_columns(drawn, lessons))
    events = memory_event_columns(drawn, lessons)
    write_table(directory, "memory_events", events)
    write_table(directory, "runs", runs_columns(drawn))
    for table in TABLES:  # every table exists, as the writer leaves a finished job
        if not (directory / table).exists():
            write_table(directory, table, {})
    n = drawn.calls
    return {"episodes": episodes, "llm_calls": n, "transcripts": n, "memory_events": len(events["event"])}


def draw_job(
    run_id: str, job: int, episodes: int, calls_per_episode: int, rng: np.random.Generator
) -> SyntheticJob:
    start = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    positions = np.arange(episodes)
    episode_ids = [f"{run_id}/{p}" for p in positions]
    task_ids = [f"{FAMILIES[p % 5]}:T{p:06d}" for p in positions]
    questions = [
        f"What is the {FAMILIES[p % 5]} of country {p}? Reply with the name only." for p in positions
    ]
    success = rng.random(episodes) < 0.6
    prompt = rng.integers(200, 900, (episodes, calls_per_episode))
    completion = rng.integers(1, 40, (episodes, calls_per_episode))
    n = episodes * calls_per_episode
    return SyntheticJob(
        run_id=run_id,
        job=job,
        calls_per_episode=calls_per_episode,
        start=start,
        positions=positions,
        episode_ids=episode_ids,
        task_ids=task_ids,
        questions=questions,
        times=[start + dt.timedelta(seconds=int(p)) for p in positions],
        success=success,
        prompt=prompt,
        completion=completion,
        call_episode=np.repeat(positions, calls_per_episode),
        call_ids=[f"{job:02x}{i:030x}" for i in range(n)],
        purposes=[PURPOSES[min(i % calls_per_episode, len(PURPOSES) - 1)] for i in range(n)],
    )


def episode_columns(drawn: SyntheticJob, rng: np.random.Generator) -> dict[str, Any]:
    episodes, positions, success = drawn.episodes, drawn.positions, drawn.success
    prompt, completion = drawn.prompt, drawn.completion
    calls_total = (prompt + completion).sum(axis=1)
    act_tokens = prompt[:, 0] + completion[:, 0]
    return {
        "episode_id": drawn.episode_ids,
        "run_id": [drawn.run_id] * episodes,
        "variant": ["memory"] * episodes,
        "seed": [drawn.job] * episodes,
        "env": ["countries"] * episodes,
        "family": [FAMILIES[p % 5] for p in positions],
        "scenario": ["sequential"] * episodes,
        "order_seed": [drawn.job] * episodes,
        "stream_position": positions,
        "probe": [False] * episodes,
        "attempted": [True] * episodes,
        "task_id": drawn.task_ids,
        "question": drawn.questions,
        "reference": [f"Answer {p}" for p in positions],
        "response": [
            f"Answer {p}" if s else "I am not sure." for p, s in zip(positions, success, strict=True)
        ],
        "success": success,
        "score": success.astype(float),
        "reward": success.astype(float),
        "attempts": [1] * episodes,
        "model": ["scripted/bench"] * episodes,
        "n_calls": [drawn.calls_per_episode] * episodes,
        "prompt_tokens": prompt.sum(axis=1),
        "completion_tokens": completion.sum(axis=1),
        "total_tokens": calls_total,
        "cost_usd": calls_total * 1e-7,
        "cache_read_tokens": [0] * episodes,
        "cache_write_tokens": [0] * episodes,
        "reasoning_tokens": [0] * episodes,
        "act_tokens": act_tokens,
        "act_cost_usd": act_tokens * 1e-7,
        "overhead_tokens": calls_total - act_tokens,
        "overhead_cost_usd": (calls_total - act_tokens) * 1e-7,
        "memory_size": positions + 1,
        "protocol": ["online"] * episodes,
        "latency_s": rng.random(episodes) * 2,
        "started_at": drawn.times,
        "finished_at": drawn.times,
    }


def call_identity(drawn: SyntheticJob) -> dict[str, Any]:
    """The columns llm_calls and transcripts share: which call of which episode, and why."""
    n = drawn.calls
    return {
        "call_id": drawn.call_ids,
        "run_id": [drawn.run_id] * n,
        "episode_id": [drawn.episode_ids[e] for e in drawn.call_episode],
        "task_id": [drawn.task_ids[e] for e in drawn.call_episode],
        "attempt": [1] * n,
        "purpose": drawn.purposes,
    }


def call_columns(drawn: SyntheticJob, rng: np.random.Generator) -> dict[str, Any]:
    n, per_episode = drawn.calls, drawn.calls_per_episode
    flat_prompt, flat_completion = drawn.prompt.reshape(-1), drawn.completion.reshape(-1)
    return {
        **call_identity(drawn),
        "model": ["scripted/bench"] * n,
        "prompt_tokens": flat_prompt,
        "completion_tokens": flat_completion,
        "total_tokens": flat_prompt + flat_completion,
        "cache_read_tokens": [0] * n,
        "cache_write_tokens": [0] * n,
        "reasoning_tokens": [0] * n,
        "usage_source": ["provider"] * n,
        "cost_usd": (flat_prompt + flat_completion) * 1e-7,
        "latency_s": rng.random(n),
        "queued_s": [0.0] * n,
        "retries": [0] * n,
        "cached": [False] * n,
        "run_in_flight": [1] * n,
        "started_at": [
            drawn.times[e] + dt.timedelta(milliseconds=i % per_episode * 10)
            for i, e in enumerate(drawn.call_episode)
        ],
    }


def transcript_columns(drawn: SyntheticJob, lessons: list[str]) -> dict[str, Any]:
    """Transcripts of about 1 KB each (a system prompt, three recalled lessons, the question), in words
    drawn at random so that they compress as text does, not as a repeated string would."""
    messages = [
        json.dumps(
            [
                {
                    "role": "system",
                    "content": "You are a concise assistant. Answer with the answer only. Lessons: "
                    + " | ".join(lessons[(i + k * 331) % 997] for k in range(3)),
                },
                {"role": "user", "content": drawn.questions[e]},
            ]
        )
        for i, e in enumerate(drawn.call_episode)
    ]
    return {
        **call_identity(drawn),
        "messages": messages,
        "reply": [
            None if p == "embed" else f"Answer {e}"
            for p, e in zip(drawn.purposes, drawn.call_episode, strict=True)
        ],
    }


def memory_event_columns(drawn: SyntheticJob, lessons: list[str]) -> dict[str, Any]:
    """A lesson stored per episode, and the (up to) three stored just before it recalled."""
    positions, task_ids = drawn.positions, drawn.task_ids
    memory_ids = [f"{drawn.job:02x}{p:010x}" for p in positions]
    recalled = [(p, max(0, p - k - 1)) for p in positions[1:] for k in range(min(3, p))]
    events = [(p, "insert", p) for p in positions] + [(p, "retrieve", source) for p, source in recalled]
    events.sort(key=lambda e: (e[0], e[1] == "insert"))
    return {
        "run_id": [drawn.run_id] * len(events),
        "episode_id": [drawn.episode_ids[p] for p, _, _ in events],
        "task_id": [task_ids[p] for p, _, _ in events],
        "stream_position": [p for p, _, _ in events],
        "event": [kind for _, kind, _ in events],
        "memory_id": [memory_ids[s] for _, _, s in events],
        "kind": ["lessons"] * len(events),
        "text": [lessons[s % 997] for _, _, s in events],
        "source_task_id": [task_ids[s] for _, _, s in events],
        "similarity": [None if kind == "insert" else 0.9 for _, kind, _ in events],
        "importance": [1.0] * len(events),
        "verified": [True] * len(events),
    }


def runs_columns(drawn: SyntheticJob) -> dict[str, Any]:
    job = drawn.job
    return {
        "run_id": [drawn.run_id],
        "variant": ["memory"],
        "env": ["countries"],
        "seed": [job],
        "order_seed": [job],
        "scenario": ["sequential"],
        "model": ["scripted/bench"],
        "job": [job],
        "overrides": [f"seed={job}"],
        "model_params": ["{}"],
        "settings": [json.dumps({"variant.name": "memory"})],
        "started_at": [drawn.start],
    }


def write_table(directory: Path, table: str, columns: dict[str, Any]) -> None:
    """One compacted file in row groups of ROW_GROUP_ROWS; a column not given is null, or, where the
    schema allows no null (a column added since this bench was written), its type's zero."""
    schema = TABLES[table].arrow_schema()
    length = len(next(iter(columns.values()))) if columns else 0
    arrays = [
        pa.array(columns[f.name], f.type) if f.name in columns else missing_column(f, length) for f in schema
    ]
    (directory / table).mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.Table.from_arrays(arrays, schema=schema),
        directory / table / f"part-bench-000000{COMPACTED}",
        compression=COMPRESSION,
        row_group_size=ROW_GROUP_ROWS,
    )


def missing_column(field: pa.Field, length: int) -> pa.Array:
    if field.nullable:
        return pa.nulls(length, field.type)
    zero = pa.scalar(
        dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
        if pa.types.is_timestamp(field.type)
        else False
        if pa.types.is_boolean(field.type)
        else ""
        if pa.types.is_string(field.type)
        else 0
    )
    return pa.array([zero.as_py()] * length, field.type)


def split_into_parts(root: Path, parts: int, tables: tuple[str, ...] = LIVE_TABLES) -> None:
    """Each job's `tables` as `parts` part files, its manifest `running`: a job as the viewer sees it
    while it writes (one part per flush), before its compaction."""
    for manifest in root.glob("*/manifest.json"):
        directory = manifest.parent
        for table in tables:
            (merged,) = (directory / table).glob("*.parquet")
            rows = pq.read_table(merged)
            size = max(1, -(-rows.num_rows // parts))
            for start in range(0, rows.num_rows, size):
                pq.write_table(
                    rows.slice(start, size),
                    directory / table / f"part-live-{start:09d}.parquet",
                    compression=COMPRESSION,
                )
            merged.unlink()
        manifest.write_text(manifest.read_text().replace('"finished"', '"running"'))


@contextmanager
def viewer(root: Path) -> Iterator[tuple[str, int]]:
    """The viewer in a process of its own (its memory is its own): its URL and pid."""
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.view", str(root), "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        line = process.stdout.readline() if process.stdout else ""
        if "http://" not in line:
            raise RuntimeError(f"the viewer did not start: {line!r}")
        yield line.split()[2], process.pid
    finally:
        process.terminate()
        process.wait(timeout=10)


def timed_get(url: str) -> tuple[float, int]:
    """Seconds to the whole reply, and its HTTP status."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=300) as reply:
            reply.read()
            status = reply.status
    except urllib.error.HTTPError as error:  # e.g. 413: a comparison too large for the viewer's memory
        error.read()
        status = error.code
    return time.perf_counter() - started, status


def memory_mb(pid: int) -> dict[str, float]:
    """The process's resident set now (VmRSS) and at its peak so far (VmHWM), in MB."""
    figures = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            figures[line[:5]] = int(line.split()[1]) / 1024
    return {"rss_mb": figures["VmRSS"], "peak_mb": figures["VmHWM"]}


def measure(
    root: Path, run_ids: list[str], episodes_per_job: int, repeats: int = 3, compare: bool = True
) -> list[dict[str, Any]]:
    """Per page: seconds to the first request and the median of `repeats` more, its status, and the
    viewer's memory after it (now and at its peak so far). `compare=False` leaves out the comparison
    (seconds of importing the report's statistics and plotly, on a small sweep)."""
    pages = [
        ("first page (/)", ""),
        ("episodes list, page 1", "episodes"),
        ("episodes list, text filter", "episodes?text=country+7"),
    ]
    for job, run_id in enumerate(run_ids):
        for position in (0, episodes_per_job // 2, episodes_per_job - 1):
            query = urllib.parse.urlencode({"dir": str(job), "id": f"{run_id}/{position}"})
            pages.append((f"episode {run_id}/{position}", f"episode?{query}"))
    learnt = urllib.parse.urlencode({"dir": "0", "run": run_ids[0]})
    pages.append((f"learnt {run_ids[0]}", f"learnt?{learnt}"))
    if compare:
        pages.append(("compare (all runs)", "compare"))
    results = []
    with viewer(root) as (url, pid):
        results.append({"page": "viewer started", **memory_mb(pid)})
        for name, path in pages:
            first, status = timed_get(url + path)
            again = statistics.median(timed_get(url + path)[0] for _ in range(repeats))
            results.append(
                {"page": name, "first_s": first, "warm_s": again, "status": status, **memory_mb(pid)}
            )
    return results


def parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(prog="python -m harness.bench viewer",
                                      description=__doc__.splitlines()[0].replace("`", ""))
    options.add_argument("--rows", type=int, default=1_000_000, help="transcripts rows in all (default 1M)")
    options.add_argument("--jobs", type=int, default=4, help="job directories of the sweep (default 4)")
    options.add_argument("--calls-per-episode", type=int, default=10,
                        help="llm_calls (and transcripts) rows written per episode (default 10)")
    options.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where to write the sweep (default: a temporary directory, removed after)",
    )
    options.add_argument(
        "--live-parts",
        type=int,
        default=0,
        help="split each job's growing tables into this "
        "many part files, as a job still writing leaves them (default 0: finished jobs)",
    )
    return options


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-view-"))
    try:
        started = time.perf_counter()
        written = generate(root, args.rows, args.jobs, args.calls_per_episode)
        size = sum(f.stat().st_size for f in root.rglob("*.parquet")) / 2**20
        print(
            f"wrote {written['transcripts']:,} transcripts rows, {written['llm_calls']:,} llm_calls rows, "
            f"{written['episodes']:,} episodes, {written['memory_events']:,} memory events in "
            f"{args.jobs} jobs "
            f"({size:.0f} MB of Parquet) in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        if args.live_parts:
            split_into_parts(root, args.live_parts)
            print(f"split {', '.join(LIVE_TABLES)} of each job into {args.live_parts} part files", flush=True)
        results = measure(root, written["run_ids"], written["episodes"] // args.jobs)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\n{'page':<52} {'status':>6} {'first ms':>9} {'warm ms':>8} {'RSS MB':>7} {'peak MB':>8}")
    for row in results:
        timing = (
            f"{row['status']:>6} {row['first_s'] * 1000:>9.0f} {row['warm_s'] * 1000:>8.0f}"
            if "first_s" in row
            else " " * 25
        )
        print(f"{row['page'][:52]:<52} {timing} {row['rss_mb']:>7.0f} {row['peak_mb']:>8.0f}")
    first_page = results[1]["first_s"]
    episode = max(r["first_s"] for r in results if r["page"].startswith("episode "))
    peak = max(r["peak_mb"] for r in results)
    print(
        f"\nfirst page {first_page * 1000:.0f} ms, slowest single episode {episode * 1000:.0f} ms (target "
        f"{TARGET_S * 1000:.0f} ms); viewer peak RSS {peak:.0f} MB (target {TARGET_RSS_MB} MB): "
        + ("both hold" if max(first_page, episode) <= TARGET_S and peak < TARGET_RSS_MB else "MISSED")
    )
