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
call on a small sweep (written by synthetic_sweep.py's `generate`, its rows drawn by synthetic_rows.py).
"""

from __future__ import annotations

import argparse
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
from pathlib import Path
from typing import Any

from harness.bench.synthetic_sweep import LIVE_TABLES, generate, split_into_parts

TARGET_S = 1.0
TARGET_RSS_MB = 1024


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

