"""`python -m harness.bench`: measure the harness, not the model, side by side in one run.

1. Throughput: agent runs of the baseline on a scripted model with a fixed latency per call, at
   several concurrencies, through the real harness (Ray agent workers, each with its gateway
   replica, the model limits actor, the writer), against
   the ideal bound (concurrency / latency) and against an ideal sequential loop (one call after
   another: `vs sequential` is episodes/s x latency; the measured plain loop is printed beside it),
   with the CPU time the driver and every Ray process spent per model call.
2. Gateway overhead per call: the gateway's own time (limits, cache lookup, record), measured
   against calling the same scripted provider through litellm directly, and what holding the
   limits through the ModelLimits actor that every replica shares adds.
3. Memory retrieval at 1k, 10k and 100k lessons: the memory's own recall (agents/memory_store.py:
   exact, over its in-process mirror of the vectors) with its recall@5 against NumPy brute force
   (matrix @ query, argpartition) over the same float32 matrix, and LanceDB's flat scan (and at
   100k an IVF-HNSW index) on the same lessons.
4. Peak memory (RSS of the driver and every Ray process) during each throughput run.
5. With the real local model: completion tokens per second through the harness's gateway against
   calling the same server directly, the same prompts interleaved call by call on warm connections.
6. A memory grown write by write, as an agent grows it (agents/memory_store.py: a recall and a
   stored lesson per task, a scripted model, no model calls): search p50 and bytes on disk per
   lesson against the same lessons written in one go, and against the writes as they were before
   the memory compacted its table (an add per lesson, an update per recall, nothing compacted).
7. Sweeps through the command line (harness/bench/sweep.py) on an HTTP model at 200 ms per call:
   1, 16 and 64 jobs on the sweep's one agent pool, and one job of 64 and 256 agent runs: wall
   against the model-bound ideal, time to the first call, peak memory, CPU per call.
Prints one table per measurement and the ratios; `--quick` runs smaller sizes. `python -m harness.bench
endpoint` measures the run's OpenAI-compatible endpoint alone (harness/bench/endpoint.py): an outside
agent's call through it against a native call, in CPU per call. `python -m harness.bench versus`
runs the harness and inspect_ai against the same local HTTP model at 1, 64 and 256 concurrent agent
runs (harness/bench/versus.py): CPU per call and time to the first call, side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib
import statistics
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.config import HarnessConfig

if TYPE_CHECKING:  # imports litellm (seconds): loaded only by the measurement that needs it
    from harness.models.gateway import Gateway


def _settings(*overrides: str) -> HarnessConfig:
    from hydra import compose, initialize_config_dir

    conf = Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["progress=false", "cache.enabled=false",
                                                       "stream.tuning_size=0", *overrides])
    return HarnessConfig.from_dictconfig(cfg)


def _episode_span(run_dir: Path) -> tuple[int, float, float]:
    """The run's episodes, and when the first started and the last finished (Unix seconds)."""
    from harness.tables.reading import read_table

    episodes = read_table(run_dir, "episodes")
    first, last = episodes["started_at"].min(), episodes["finished_at"].max()
    return episodes.height, _unix(first), _unix(last)


def _unix(moment: dt.datetime) -> float:
    return (moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)).timestamp()


def _ray_session_roots() -> set[int]:
    """Pids of this Ray session's own processes (gcs_server, raylet, dashboard, log monitor), found
    by the session directory their command lines name: needed when Ray was attached to a cluster
    started elsewhere on this machine, whose processes are not this process's descendants."""
    import psutil
    import ray

    try:
        if not ray.is_initialized():
            return set()
        session = ray._private.worker._global_node.get_session_dir_path()
    except Exception:  # a private API: without it, the descendants are all there is
        return set()
    roots = set()
    for process in psutil.process_iter(["cmdline"]):
        if session in " ".join(process.info["cmdline"] or []):
            roots.add(process.pid)
    return roots


class ProcessMeter:
    """Samples the processes of this harness: this process and its descendants (a local Ray's
    gcs_server, raylet, dashboard and every worker the raylet starts), plus the Ray session's own
    processes and theirs when Ray runs elsewhere on the machine. Not by a pattern such as "ray" in
    the command line: on a shared machine that takes in other runs' Ray processes (and any command
    line that merely names ray).

    `peak_rss`: the largest summed RSS seen. `cpu_s`: CPU seconds (user + system) all of them spent
    between entering and leaving, counting processes that started and exited in between (each up to
    its last sample, at most `interval_s` before it exited), less the sampler's own CPU. Ray reaps
    its workers without adding their time to its own children's, so the time must be sampled live.
    `cpu_between(start, end)`: the same, between two moments (Unix seconds) of the sampled span.
    """

    def __init__(self, interval_s: float = 0.1) -> None:
        import psutil

        self.interval_s = interval_s
        self.peak_rss = 0
        self.cpu_s = 0.0
        self._me = psutil.Process()
        self._roots: set[int] = set()
        self._first: dict[tuple[int, float], float] = {}
        self._last: dict[tuple[int, float], float] = {}
        self._own_cpu_s = 0.0
        self._timeline: list[tuple[float, float]] = []
        """(Unix seconds, CPU seconds since entering) at each sample."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def processes(self) -> list[Any]:
        import psutil

        children: dict[int, list[psutil.Process]] = {}
        for process in psutil.process_iter(["ppid"]):
            children.setdefault(process.info["ppid"], []).append(process)
        found = {self._me.pid: self._me}
        stack = [self._me.pid, *self._roots]
        while stack:
            pid = stack.pop()
            for child in children.get(pid, []):
                if child.pid not in found:
                    found[child.pid] = child
                    stack.append(child.pid)
        for pid in self._roots - found.keys():
            with contextlib.suppress(psutil.Error):
                found[pid] = psutil.Process(pid)
        return list(found.values())

    def _read(self) -> dict[tuple[int, float], float]:
        """CPU seconds so far of each live process (by pid and start time); updates the RSS peak."""
        import psutil

        cpu, rss = {}, 0
        for process in self.processes():
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    rss += process.memory_info().rss
                    cpu[(process.pid, process.create_time())] = times.user + times.system
            except psutil.Error:  # exited meanwhile
                continue
        self.peak_rss = max(self.peak_rss, rss)
        return cpu

    def sample(self) -> None:
        self._last.update(self._read())
        spent = sum(last - self._first.get(key, 0.0) for key, last in self._last.items())
        self._timeline.append((time.time(), spent - self._own_cpu_s))

    def _run(self) -> None:
        started = time.thread_time()
        while not self._stop.wait(self.interval_s):
            self._own_cpu_s = time.thread_time() - started
            self.sample()
        self._own_cpu_s = time.thread_time() - started

    def cpu_between(self, start: float, end: float) -> float:
        moments, spent = zip(*self._timeline, strict=True)
        return float(np.interp(end, moments, spent) - np.interp(start, moments, spent))

    def __enter__(self) -> ProcessMeter:
        self._roots = _ray_session_roots()
        self._first = self._read()
        self._last = dict(self._first)
        self._timeline = [(time.time(), 0.0)]
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
        self.cpu_s = self._timeline[-1][1]


def _llm_calls(run_dir: Path) -> int:
    from harness.tables.reading import count_rows

    return count_rows(run_dir, "llm_calls")


def throughput(concurrencies: list[int], tasks_per_run: int, latency: float,
               extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One harness run per concurrency; `extra`: Hydra overrides appended to each run's (and shown
    in a "setting" column). CPU per call: the CPU of the driver and every Ray process over the whole
    run (its start-up included: actor processes importing litellm and the rest cost seconds) divided
    by the run's model calls; "while running": the same, only from the first episode's start to the last one's
    end, which leaves start-up and shutdown out."""
    from harness.driver.run import run

    rows: list[dict[str, Any]] = []
    for concurrency in concurrencies:
        settings = _settings("model=scripted", f"model.scripted.latency_s={latency}",
                             f"seeds=[{','.join(str(s) for s in range(concurrency))}]",
                             f"stream.num_tasks={tasks_per_run}", "model.max_concurrency=1024", *extra)
        with tempfile.TemporaryDirectory() as directory:
            with ProcessMeter() as meter:
                run(settings, Path(directory))
            episodes, first, last = _episode_span(Path(directory))
            calls = _llm_calls(Path(directory))
        rate = episodes / (last - first)
        ideal = concurrency / latency
        rows.append({**({"setting": " ".join(extra)} if extra else {}),
                     "agent runs": concurrency, "episodes": episodes, "episodes/s": rate,
                     "ideal/s": ideal, "of ideal": rate / ideal, "vs sequential": rate * latency,
                     "model calls": calls, "harness CPU ms per call": 1000 * meter.cpu_s / calls,
                     "CPU ms per call while running": 1000 * meter.cpu_between(first, last) / calls,
                     "peak RSS GiB": meter.peak_rss / 2**30})
    return rows


def sequential_loop(tasks: int, latency: float) -> float:
    """Episodes per second of a plain loop: one model call per task, one after another."""
    from harness.models.gateway import direct_completion
    from harness.models.scripted import ScriptedLLM

    provider = ("scripted", ScriptedLLM(accuracy=0.5, latency_s=latency))

    async def loop() -> float:
        started = time.perf_counter()
        for i in range(tasks):
            await direct_completion("scripted/loop", [{"role": "user", "content": f"q{i}"}], provider)
        return tasks / (time.perf_counter() - started)

    return asyncio.run(loop())


def gateway_overhead(calls: int) -> dict[str, float]:
    import ray

    from harness.models.gateway import Gateway, direct_completion
    from harness.models.limits import ModelLimits, SharedLimits
    from harness.models.model_client import CallRequest

    settings = _settings("model=scripted")

    def request(i: int) -> CallRequest:
        return CallRequest(model="scripted/oracle", purpose="act", run_id="bench", task_id=f"t{i}", attempt=1,
                           messages=[{"role": "user", "content": f"question {i}"}])

    async def direct() -> list[float]:
        times = []
        for i in range(calls):
            started = time.perf_counter()
            await direct_completion("scripted/oracle", request(i).messages, num_retries=0)
            times.append(time.perf_counter() - started)
        return times

    async def through(gateway: Gateway) -> list[float]:
        await gateway.call(request(-1))  # warm: a shared-limits replica leases its permit here
        times = []
        for i in range(calls):
            started = time.perf_counter()
            await gateway.call(request(i))
            times.append(time.perf_counter() - started)
        return times

    gateway = Gateway([settings.model, settings.embedder])
    base, gated = asyncio.run(direct()), asyncio.run(through(gateway))
    limits = ray.remote(num_cpus=0)(ModelLimits).remote()
    try:
        replica = Gateway([settings.model, settings.embedder], limits=SharedLimits(limits, "bench replica"))
        shared = asyncio.run(through(replica))
    finally:
        ray.kill(limits)
    return {"litellm direct p50 ms": 1000 * statistics.median(base),
            "gateway in-process p50 ms": 1000 * statistics.median(gated),
            "gateway overhead p50 ms": 1000 * (statistics.median(gated) - statistics.median(base)),
            "gateway, shared limits p50 ms": 1000 * statistics.median(shared),
            "shared limits cost p50 ms": 1000 * (statistics.median(shared) - statistics.median(gated))}


def numpy_top_k(matrix: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    """Row indices of the k rows of `matrix` (unit vectors) most cosine-similar to `query`, best first:
    the brute-force alternative to a vector database."""
    scores = matrix @ (query / np.linalg.norm(query))
    top = np.argpartition(scores, -k)[-k:]
    return top[np.argsort(scores[top])[::-1]]


def retrieval(sizes: list[int], queries: int, dim: int = 384, top_k: int = 5) -> list[dict[str, Any]]:
    """Per size, the memory's own search (EpisodicMemory.recall, top-`top_k`, over the lessons loaded
    as from a snapshot) and LanceDB's over the same rows (flat, and at 100k with the IVF-HNSW index
    the memory built until it searched in process), each against NumPy brute force (numpy_top_k)
    over the same float32 matrix, probe by probe (which of NumPy and the memory goes first
    alternates): p50, and recall@k, the share of NumPy's top k each finds, and how often LanceDB's
    top-1 is NumPy's."""
    return asyncio.run(_retrieval(sizes, queries, dim, top_k))


class _ProbeModel:
    """The memory's embed call for a probe question `probe <i>`: the i-th probe vector."""

    function_calling = False

    def __init__(self, probes: np.ndarray) -> None:
        self.probes = probes

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.probes[int(text.split()[-1])].tolist() for text in texts]


def _lessons(vectors: np.ndarray) -> Any:
    """Lessons with these vectors as a memory's snapshot has them (its table's Arrow schema)."""
    import pyarrow as pa

    size, dim = vectors.shape
    columns = {"memory_id": [str(i) for i in range(size)], "kind": ["lessons"] * size,
               "text": [f"Lesson {i}." for i in range(size)],
               "question": [f"Question {i}?" for i in range(size)],
               "source_task_id": [f"t{i}" for i in range(size)], "source_position": range(size),
               "reward": [1.0] * size, "verified": [True] * size, "importance": [1.0] * size,
               "access_count": [0] * size}
    schema = _memory_store().item_model(dim).to_arrow_schema()
    arrays = [pa.array(columns[field.name], field.type) for field in schema if field.name != "vector"]
    vector = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), pa.float32()), dim)
    return pa.Table.from_arrays([*arrays, vector], schema=schema)


async def _retrieval(sizes: list[int], queries: int, dim: int, top_k: int) -> list[dict[str, Any]]:
    import lancedb
    from lancedb.index import IvfHnswSq

    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        db = await lancedb.connect_async(directory)
        for size in sizes:
            vectors = rng.standard_normal((size, dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            items = _lessons(vectors)
            table = await db.create_table(f"lessons_{size}", data=items)
            probes = vectors[rng.integers(0, size, queries)] + np.float32(0.01)
            numpy_ms, numpy_top, memory_ms, memory_found = await _memory_against_numpy(
                Path(directory) / "memory", size, items, vectors, probes, top_k)
            for with_index in [False] + ([True] if size >= 100_000 else []):
                if with_index:
                    await table.create_index("vector", config=IvfHnswSq(distance_type="cosine"))
                lancedb_ms, agree, lancedb_found = await _lancedb_search(table, probes, numpy_top, top_k)
                ours = not with_index  # the memory's figures, once per size
                rows.append({"lessons": size,
                             f"memory recall@{top_k}": memory_found / (top_k * len(probes)) if ours else None,
                             "memory p50 ms": memory_ms if ours else None,
                             "numpy top-k p50 ms": numpy_ms,
                             "memory / numpy": memory_ms / numpy_ms if ours else None,
                             "search": "IVF-HNSW index" if with_index else "flat",
                             f"lancedb recall@{top_k}": lancedb_found / (top_k * len(probes)),
                             "lancedb p50 ms": lancedb_ms, "lancedb / numpy": lancedb_ms / numpy_ms,
                             "top-1 agrees with numpy": agree / len(probes)})
    return rows


async def _memory_against_numpy(directory: Path, size: int, items: Any, vectors: np.ndarray,
                                probes: np.ndarray, top_k: int) -> tuple[float, list[list[int]], float, int]:
    """The memory's own recall and NumPy's exact top-k on the same probes, taking turns going first:
    NumPy's p50 ms and top-k per probe, the memory's p50 ms and how many of NumPy's top-k it found."""
    from envs.base import TaskView
    from harness.agent_api import Recorder

    recorder = Recorder()
    memory = _memory_store().EpisodicMemory(_ProbeModel(probes), recorder, directory, f"memory_{size}",
                                            top_k=top_k, capacity=size)
    await memory.load(items)
    numpy_times, numpy_top, memory_times, memory_found = [], [], [], 0
    for i, q in enumerate(probes):
        for side in ("numpy", "memory") if i % 2 == 0 else ("memory", "numpy"):
            started = time.perf_counter()
            if side == "numpy":
                numpy_top.append(numpy_top_k(vectors, q, top_k).tolist())
                numpy_times.append(time.perf_counter() - started)
            else:
                probe = TaskView(task_id=f"p{i}", family="bench", question=f"probe {i}")
                recalled = await memory.recall(probe)
                memory_times.append(time.perf_counter() - started)
                found = [int(r.memory_id) for r in recalled]
        recorder.take()
        memory_found += len(set(found) & set(numpy_top[-1]))
    return (1000 * statistics.median(numpy_times), numpy_top, 1000 * statistics.median(memory_times),
            memory_found)


async def _lancedb_search(table: Any, probes: np.ndarray, expected_top: list[list[int]],
                          top_k: int) -> tuple[float, int, int]:
    """LanceDB's top-k on the same probes: p50 ms, top-1 agreements with NumPy, NumPy's top-k found."""
    times, agree, found = [], 0, 0
    for q, expected in zip(probes, expected_top, strict=True):
        started = time.perf_counter()
        hits = await table.vector_search(q.tolist()).distance_type("cosine").limit(top_k).to_list()
        times.append(time.perf_counter() - started)
        ids = [int(hit["memory_id"]) for hit in hits]
        agree += bool(ids) and ids[0] == expected[0]
        found += len(set(ids) & set(expected))
    return 1000 * statistics.median(times), agree, found


class _ScriptedMemoryModel:
    """The two calls a memory makes, answered at once: a lesson for each distil call, and a random unit
    vector for each question (the same one whenever it is asked)."""

    function_calling = False

    def __init__(self, dim: int, seed: int = 0) -> None:
        self.dim = dim
        self.rng = np.random.default_rng(seed)
        self.vectors: dict[str, list[float]] = {}
        self.calls = 0

    async def complete(self, messages: list[dict[str, Any]], purpose: str = "act", **params: Any) -> Any:
        from harness.agent_api import Completion
        from harness.tables.records import Usage

        self.calls += 1
        return Completion(text=f"Lesson {self.calls}: check the units and the sign before answering a "
                                "question like this one.", usage=Usage(), call_id=f"bench-{self.calls}")

    async def embed(self, texts: list[str]) -> list[list[float]]:
        for text in texts:
            if text not in self.vectors:
                vector = self.rng.standard_normal(self.dim).astype(np.float32)
                self.vectors[text] = (vector / np.linalg.norm(vector)).tolist()
        return [self.vectors[text] for text in texts]


def _bytes_on_disk(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


async def _search_ms(table: Any, probes: np.ndarray, limit: int) -> float:
    """p50 of a top-`limit` cosine search, as the memory's recall makes it."""
    times = []
    for probe in probes:
        started = time.perf_counter()
        await table.vector_search(probe.tolist()).distance_type("cosine").limit(limit).to_list()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


@dataclass
class _Grown:
    memory: Any
    recalls: list[float]
    """Seconds of each of the memory's recalls."""
    searches: list[float]
    """Seconds of a probe's search after each of the last tenth of the tasks."""
    sizes: list[int]
    """Bytes on disk after each of the last tenth of the tasks."""


MEMORY_STORE = "agents.memory_store"
"""The memory the bench grows, loaded by name as the harness loads every agent piece (by
`_target_`): harness/ never imports agents/."""


def _memory_store() -> ModuleType:
    return importlib.import_module(MEMORY_STORE)


async def _grow(directory: Path, lessons: int, dim: int, compact_every: int, probes: np.ndarray,
                limit: int) -> _Grown:
    """An EpisodicMemory grown as an agent grows it: per task a recall, then a distilled lesson stored
    (every third task unrewarded). Over the last tenth of the tasks (at least `compact_every` of them:
    a whole compaction cycle), a probe's search and the bytes on disk after each task."""
    from envs.base import TaskView
    from harness.agent_api import AttemptResult, Feedback, Recorder

    recorder = Recorder()
    memory = _memory_store().EpisodicMemory(_ScriptedMemoryModel(dim), recorder, directory, "grown",
                                            capacity=lessons, compact_every=compact_every)
    grown = _Grown(memory, [], [], [])
    for position in range(lessons):
        task = TaskView(task_id=f"t{position}", family="bench", question=f"Question {position}?")
        started = time.perf_counter()
        await memory.recall(task)
        grown.recalls.append(time.perf_counter() - started)
        reward = float(position % 3 != 0)
        final = AttemptResult(number=1, response="42", steps=1, success=bool(reward), score=reward,
                              judge_score=None, reward=reward)
        await memory.remember(Feedback(task=task, attempts=[final]), position)
        recorder.take()  # the harness takes an episode's rows after it
        if lessons - position <= max(compact_every, lessons // 10):
            probe = probes[position % len(probes)].tolist()
            started = time.perf_counter()
            await memory._table.vector_search(probe).distance_type("cosine").limit(limit).to_list()
            grown.searches.append(time.perf_counter() - started)
            grown.sizes.append(_bytes_on_disk(directory))
    return grown


async def _grow_uncompacted(directory: Path, lessons: int, dim: int, top_k: int = 3) -> Any:
    """The writes as they were before the memory compacted its table: per task an update of the
    access counts of `top_k` recalled lessons, then an add of the new lesson; nothing compacted."""
    import lancedb

    rng = np.random.default_rng(1)
    db = await lancedb.connect_async(directory)
    table = await db.create_table("today", schema=_memory_store().item_model(dim))
    for position in range(lessons):
        if position:
            recalled = rng.choice(position, size=min(top_k, position), replace=False)
            ids = ", ".join(f"'{i}'" for i in recalled)
            await table.update(where=f"memory_id IN ({ids})",
                               updates_sql={"access_count": "access_count + 1"})
        vector = rng.standard_normal(dim).astype(np.float32)
        await table.add([{"memory_id": str(position), "kind": "lessons",
                          "text": f"Lesson {position}: check the units and the sign before answering a "
                                  "question like this one.",
                          "question": f"Question {position}?", "source_task_id": f"t{position}",
                          "source_position": position, "reward": 1.0, "verified": True, "importance": 1.0,
                          "access_count": 0, "vector": (vector / np.linalg.norm(vector)).tolist()}])
    return table


def grown_memory(sizes: list[int], queries: int, uncompacted_up_to: int = 1000, dim: int = 384,
                 compact_every: int | None = None) -> list[dict[str, Any]]:
    """Per size: a memory grown write by write through EpisodicMemory (its own compaction), the same
    rows written in one go into a fresh table, and, up to `uncompacted_up_to` lessons, the writes
    as they were before the memory compacted ("before"). Search: a flat top-12 (what a top-3 recall
    asks for) on the LanceDB table, over the same probes: the health of the table as it grows
    (the memory's own recall reads its in-process mirror, section 3); while growing, one after each
    of the last tenth of the tasks, so that every point of the compaction cycle counts ("recalls
    while growing": the memory's own recalls then; "peak": the most bytes on disk after any of
    those tasks)."""
    every = compact_every or _memory_store().COMPACT_EVERY

    async def measure(size: int, directory: Path) -> dict[str, Any]:
        probes = np.random.default_rng(2).standard_normal((queries, dim)).astype(np.float32)
        limit = 3 * 4  # a top-3 recall's search (agents/memory_store.py, EpisodicMemory._ranked)
        started = time.perf_counter()
        grown = await _grow(directory / "grown", size, dim, every, probes, limit)
        grow_s = time.perf_counter() - started
        memory = grown.memory
        items, _ = await memory.export()
        once = await _one_go(directory / "once", items)
        grown_ms = 1000 * statistics.median(grown.searches)
        once_ms = await _search_ms(once, probes, limit)
        row: dict[str, Any] = {
            "lessons": size,
            "grown p50 ms": grown_ms, "one go p50 ms": once_ms, "grown / one go": grown_ms / once_ms,
            "recalls while growing p50 ms": 1000 * statistics.median(grown.recalls[-len(grown.searches):]),
            "grown bytes/lesson": _bytes_on_disk(directory / "grown") / size,
            "grown peak bytes/lesson": max(grown.sizes) / size,
            "one go bytes/lesson": _bytes_on_disk(directory / "once") / size,
            "versions kept": len(await memory._table.list_versions()), "grow s": grow_s}
        if size <= uncompacted_up_to:
            started = time.perf_counter()
            today = await _grow_uncompacted(directory / "today", size, dim)
            row["before p50 ms"] = await _search_ms(today, probes, limit)
            row["before / one go"] = row["before p50 ms"] / once_ms
            row["before bytes/lesson"] = _bytes_on_disk(directory / "today") / size
            row["before grow s"] = time.perf_counter() - started
        return row

    rows = []
    for size in sizes:
        with tempfile.TemporaryDirectory() as directory:
            rows.append(asyncio.run(measure(size, Path(directory))))
    return rows


async def _one_go(directory: Path, items: Any) -> Any:
    import lancedb

    db = await lancedb.connect_async(directory)
    return await db.create_table("once", data=items)


Timed = tuple[int, float, float]
"""One call as the bench timed it: completion tokens, wall seconds, this process's CPU seconds."""


def local_model_tokens(prompts: int, rounds: int = 2, model: str = "smollm2") -> dict[str, Any]:
    """The real local model through the harness's gateway (in-process: litellm, endpoint settings,
    limits, record) against the same server called directly (http.client on one kept-alive
    connection), with the same prompts and the model's configured parameters, call by call.

    Each side is warmed up first; then each prompt goes to both sides back to back, the harness first
    in half the pairs and the server directly first in the other half (each prompt both ways when
    `rounds` is even), so neither side always gets the server's prompt cache. Both rates are
    completion tokens over the seconds the bench timed around each call; the overhead is the median
    over prompts of harness minus direct, averaged over the prompt's rounds; its CPU is the median
    of harness minus direct in this process's CPU time per call: the client's own work, which waiting
    for a busy machine's cores does not stretch as it does the wall time (it takes in whatever else
    this process runs meanwhile: litellm's logging after a reply, a Ray driver's threads)."""
    from harness.models.gateway import Gateway
    from harness.models.model_server import LocalModelServer

    settings = _settings(f"model={model}", f"stream.num_tasks={prompts}")
    endpoint = settings.model
    server_settings = endpoint.local_server
    assert endpoint.serves_locally and server_settings is not None, f"model={model} is not served locally"
    conversations = _bench_conversations(settings)
    with tempfile.TemporaryDirectory() as directory, contextlib.ExitStack() as stack:
        with warnings.catch_warnings():  # started by fork (a pre-exec hook) and exec'd at once: no risk
            warnings.filterwarnings("ignore", "lancedb fork support", RuntimeWarning)
            server = stack.enter_context(LocalModelServer(server_settings, Path(directory) / "server.log"))
        gateway = Gateway([endpoint], local_servers={endpoint.name: server.api_base})
        direct = stack.enter_context(contextlib.closing(_DirectClient(
            server.port, server_settings.alias, dict(endpoint.params), endpoint.timeout_s)))
        pairs = asyncio.run(_paired_calls(_GatewayClient(gateway, settings), direct, conversations, rounds))
    return _token_rates(pairs, len(conversations), rounds)


def _bench_conversations(settings: HarnessConfig) -> list[list[dict[str, str]]]:
    """The variant's system prompt and each planned task's first observation."""
    from harness.agent_run.plan import build_environment, build_plan

    system = settings.variant.kwargs()["system_prompt"]
    spec = build_plan(settings, Path(tempfile.gettempdir()))[0]
    env = build_environment(spec.env_cfg)
    return [[{"role": "system", "content": system},
             {"role": "user", "content": env.reset(task).observation}] for task in spec.tasks]


class _DirectClient:
    """The local model server called directly: http.client on one kept-alive connection."""

    def __init__(self, port: int, alias: str, params: dict[str, Any], timeout_s: float) -> None:
        import http.client

        self.alias, self.params = alias, params
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)

    async def complete(self, messages: list[dict[str, str]]) -> int:
        """Completion tokens of one chat completion (blocking: the comparison runs one call at a time)."""
        import http.client
        import json

        body = json.dumps({"model": self.alias, **self.params, "messages": messages})
        for attempt in range(2):
            try:
                self.connection.request("POST", "/v1/chat/completions", body,
                                        {"Content-Type": "application/json"})
                reply = self.connection.getresponse()
                answer = json.loads(reply.read())
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # The server closed the kept-alive connection (idle past its keep-alive timeout,
                # e.g. on a loaded machine): reconnect once, as a pooling client (litellm's) does.
                self.connection.close()
                if attempt:
                    raise
        if reply.status != 200:
            raise RuntimeError(f"local model server answered {reply.status}: {answer}")
        return int(answer["usage"]["completion_tokens"])

    def close(self) -> None:
        self.connection.close()


class _GatewayClient:
    """The same server through the harness's gateway, with the model's configured parameters."""

    def __init__(self, gateway: Gateway, settings: HarnessConfig) -> None:
        self.gateway, self.endpoint = gateway, settings.model

    async def complete(self, messages: list[dict[str, str]]) -> int:
        from harness.config import endpoint_key
        from harness.models.model_client import CallRequest

        result = await self.gateway.call(CallRequest(
            model=self.endpoint.name, endpoint=endpoint_key(self.endpoint), messages=messages, purpose="act",
            run_id="bench", task_id=None, attempt=1, params=dict(self.endpoint.params)))
        if result.record.error is not None:
            raise RuntimeError(f"gateway call failed: {result.record.error}")
        return result.record.completion_tokens


async def _paired_calls(harness: _GatewayClient, direct: _DirectClient,
                        conversations: list[list[dict[str, str]]], rounds: int
                        ) -> list[tuple[int, dict[str, Timed]]]:
    """Each conversation to both sides back to back, `rounds` times, alternating which goes first."""
    sides = {"harness": harness, "direct": direct}

    async def timed(side: str, messages: list[dict[str, str]]) -> Timed:
        started, cpu = time.perf_counter(), time.process_time()
        tokens = await sides[side].complete(messages)
        return tokens, time.perf_counter() - started, time.process_time() - cpu

    warm_up = [{"role": "user", "content": "Hello"}]
    await timed("harness", warm_up)  # connections opened, litellm's first-call imports paid
    await timed("direct", warm_up)
    pairs = []
    for round_ in range(rounds):
        for i, messages in enumerate(conversations):
            order = ["harness", "direct"] if (round_ + i) % 2 == 0 else ["direct", "harness"]
            pairs.append((i, {side: await timed(side, messages) for side in order}))
    return pairs


def _token_rates(pairs: list[tuple[int, dict[str, Timed]]], prompts: int, rounds: int) -> dict[str, Any]:
    def rate(side: str) -> float:
        return sum(p[side][0] for _, p in pairs) / sum(p[side][1] for _, p in pairs)

    overheads: dict[int, list[float]] = {}
    for i, pair in pairs:
        overheads.setdefault(i, []).append(pair["harness"][1] - pair["direct"][1])
    overhead_s = statistics.median([statistics.fmean(d) for d in overheads.values()])
    extra_cpu_s = statistics.median([pair["harness"][2] - pair["direct"][2] for _, pair in pairs])
    same = sum(pair["harness"][0] == pair["direct"][0] for _, pair in pairs)
    return {"prompts": prompts, "rounds": rounds,
            "harness tok/s": rate("harness"), "direct tok/s": rate("direct"),
            "harness / direct": rate("harness") / rate("direct"),
            "overhead per call p50 ms": 1000 * overhead_s, "client CPU overhead p50 ms": 1000 * extra_cpu_s,
            "same completion tokens": f"{same}/{len(pairs)}"}


def table(rows: list[dict[str, Any]]) -> str:
    import polars as pl

    from harness.report.parts import markdown

    return markdown(pl.DataFrame(rows))


def sweeps(quick: bool) -> None:
    """Section 7 (harness/bench/sweep.py): sweeps of 1, 16 and 64 jobs at the models' default
    concurrency cap (8), as users run them, and one job of 64 and 256 agent runs with the cap above
    the agent runs (what is left is the harness's own overhead); 50 calls per agent run."""
    from harness.bench.sweep import ServerProcess, runs_section, sweep_section
    from harness.bench.sweep import table as sweep_table

    tasks = 5 if quick else 50
    with ServerProcess(0.2) as server, tempfile.TemporaryDirectory(prefix="bench-sweep-") as directory:
        rows = sweep_section([1, 4] if quick else [1, 16, 64], tasks=tasks, max_concurrency=8,
                             server=server, directory=Path(directory), echo=False)
        rows += runs_section([8] if quick else [64, 256], tasks=tasks, max_concurrency=256, server=server,
                             directory=Path(directory), echo=False)
    print(sweep_table(rows))
    print("\n(ideal: max(most calls in one agent run, calls / model.max_concurrency) x latency; window: first"
          " episode start to last end;\n first call: command start to the server's first request; peak RSS:"
          " the command's process session, summed;\n CPU: user + system of the session / model calls;"
          " machine load: mean 1-minute load average during the command)")


def _parser() -> argparse.ArgumentParser:
    from harness.bench import calibration, endpoint, versus

    parser = argparse.ArgumentParser(prog="python -m harness.bench", description=" ".join(
        __doc__.split("\n\n")[0].split()),  # the docstring's first paragraph: a whole sentence
        epilog="python -m harness.bench endpoint: the run's endpoint alone, an outside agent's call against"
        " a native call; python -m harness.bench versus: the harness and inspect_ai against the same HTTP"
        " model; python -m harness.bench calibration: the report's verdicts against an agent with a known"
        " truth (each --help says more).")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke test)")
    parser.add_argument("--skip-local-model", action="store_true", help="leave out section 5, which "
                        "starts the real local model (SmolLM2 on llama-cpp-python)")
    usage = (p.format_usage().removeprefix("usage: ").strip()
             for p in (parser, endpoint.parser(), versus.parser(), calibration.parser()))
    parser.usage = "\n       ".join(usage)  # every form, so that each one's flags are known
    return parser


def main(argv: list[str] | None = None) -> None:
    import sys

    from harness.bench import calibration, endpoint, versus

    given = sys.argv[1:] if argv is None else argv
    sections = {"endpoint": endpoint.main, "versus": versus.main, "calibration": calibration.main}
    if given[:1] and given[0] in sections:
        return sections[given[0]](given[1:])
    import ray

    import harness  # noqa: F401  (environment for Ray workers)

    args = _parser().parse_args(given)
    latency = 0.2
    concurrencies = [1, 8] if args.quick else [1, 8, 64, 256]
    ray.init(include_dashboard=False, logging_level="warning")
    try:
        started = time.perf_counter()
        sequential = sequential_loop(5 if args.quick else 20, latency)
        print(f"\n## 1. Throughput, scripted model at {latency * 1000:.0f} ms per call\n")
        print(f"plain sequential loop: {sequential:.2f} episodes/s\n")
        tasks_per_run = 3 if args.quick else 10
        print(table(throughput(concurrencies, tasks_per_run, latency)))
        replicas_at = 8 if args.quick else 64
        print(f"\n### Throughput vs gateway replicas (one per agent worker), {replicas_at} agent runs\n")
        print(table([row for workers in ([1, 2] if args.quick else [1, 2, 4])
                     for row in throughput([replicas_at], tasks_per_run, latency,
                                           extra=(f"ray.num_workers={workers}",))]))
        print("\n(CPU per call: user + system seconds of the driver and all Ray processes over the run,"
              " start-up included, / the run's model calls;\n while running: the same from the first"
              " episode's start to the last one's end;\n 4. peak memory: the last column, RSS of the"
              " same processes during each run)")
        print("\n## 2. Gateway overhead per call (scripted model, no latency)\n")
        print(table([gateway_overhead(50 if args.quick else 300)]))
        print("\n## 3. Memory retrieval, top-5 of 384-dim lessons: the memory's and LanceDB's vs NumPy\n")
        sizes = [1000] if args.quick else [1000, 10_000, 100_000]
        print(table(retrieval(sizes, 20 if args.quick else 100)))
        if not args.skip_local_model:
            print("\n## 5. Real local model: through the gateway vs the server directly, interleaved\n")
            print(table([local_model_tokens(3 if args.quick else 15)]))
        print("\n## 6. Memory grown write by write, as an agent grows it, vs written in one go\n")
        print(table(grown_memory([300] if args.quick else [1000, 10_000], 20 if args.quick else 100)))
        print("\n(grown: searched after each of the last tenth of its tasks, every point of its compaction"
              " cycle; one go: the same lessons\n written at once, with a fresh index where the grown one has"
              " one; before: an add per lesson and an update per recall,\n nothing compacted, as the memory"
              " wrote until it compacted its table, measured up to 1,000 lessons only)")
        print("\n## 7. Sweeps and one-job runs through the CLI, HTTP model at 200 ms per call\n")
        sweeps(args.quick)
        print(f"\nbench took {time.perf_counter() - started:.0f} s")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
