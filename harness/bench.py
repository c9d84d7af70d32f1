"""`python -m harness.bench`: measure the harness, not the model, side by side in one run.

1. Throughput: agent runs of the baseline on a scripted model with a fixed latency per call, at
   several concurrencies, through the real harness (Ray workers, gateway actor, writer), against
   the ideal bound (concurrency / latency) and against a plain sequential loop over the same tasks.
2. Gateway overhead per call: the gateway's own time (limits, ledger, cache lookup, record),
   measured against calling the same scripted provider through litellm directly, and the extra
   hop of reaching the gateway as a Ray actor.
3. Memory retrieval: top-k from a LanceDB table of 1k, 10k and 100k lessons (flat scan, and with
   an IVF-HNSW index at 100k) against a linear scan in Python over the same vectors.
4. Peak memory (RSS of the driver and every Ray process) during the 64-agent throughput run.
5. With the real local model: completion tokens per second through the harness against calling
   the same server directly with the same prompts.
Prints one table per measurement and the ratios; `--quick` runs smaller sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import HarnessConfig


def _settings(*overrides: str) -> HarnessConfig:
    from hydra import compose, initialize_config_dir

    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["progress=false", "cache.enabled=false",
                                                       "stream.tuning_size=0", *overrides])
    return HarnessConfig.from_dictconfig(cfg)


def _episode_span(run_dir: Path) -> tuple[int, float]:
    import polars as pl

    episodes = pl.read_parquet(run_dir / "episodes" / "*.parquet")
    span = (episodes["finished_at"].max() - episodes["started_at"].min()).total_seconds()
    return episodes.height, span


class PeakRss:
    """Samples the summed RSS of this process and every Ray process until stopped."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        while not self._stop.is_set():
            total = 0
            for process in psutil.process_iter(["cmdline", "memory_info", "pid"]):
                cmd = " ".join(process.info["cmdline"] or [])
                if process.info["pid"] == psutil.Process().pid or "ray" in cmd:
                    total += process.info["memory_info"].rss if process.info["memory_info"] else 0
            self.peak = max(self.peak, total)
            self._stop.wait(0.25)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def throughput(concurrencies: list[int], tasks_per_run: int, latency: float) -> list[dict[str, Any]]:
    from harness.run import run

    rows = []
    for concurrency in concurrencies:
        settings = _settings("model=scripted", f"model.scripted.latency_s={latency}",
                             f"seeds=[{','.join(str(s) for s in range(concurrency))}]",
                             f"stream.num_tasks={tasks_per_run}", "model.max_concurrency=1024")
        with tempfile.TemporaryDirectory() as directory, PeakRss() as rss:
            run(settings, Path(directory))
            episodes, span = _episode_span(Path(directory))
        rate = episodes / span
        ideal = concurrency / latency
        rows.append({"agent runs": concurrency, "episodes": episodes, "episodes/s": rate,
                     "ideal/s": ideal, "of ideal": rate / ideal, "vs sequential": rate * latency,
                     "peak RSS GiB": rss.peak / 2**30})
    return rows


def sequential_loop(tasks: int, latency: float) -> float:
    """Episodes per second of a plain loop: one model call per task, one after another."""
    import litellm

    from harness.scripted import ScriptedLLM

    litellm.custom_provider_map = [{"provider": "scripted",
                                    "custom_handler": ScriptedLLM(accuracy=0.5, latency_s=latency)}]

    async def loop() -> float:
        started = time.perf_counter()
        for i in range(tasks):
            await litellm.acompletion(model="scripted/loop", messages=[{"role": "user", "content": f"q{i}"}])
        return tasks / (time.perf_counter() - started)

    return asyncio.run(loop())


def gateway_overhead(calls: int) -> dict[str, float]:
    import litellm
    import ray

    from harness.actors import GatewayActor
    from harness.gateway import Gateway
    from harness.model_client import CallRequest

    settings = _settings("model=scripted")
    gateway = Gateway([settings.model, settings.embedder])

    def request(i: int) -> CallRequest:
        return CallRequest(model="scripted/oracle", purpose="act", run_id="bench", task_id=f"t{i}", attempt=1,
                           messages=[{"role": "user", "content": f"question {i}"}])

    async def direct() -> list[float]:
        times = []
        for i in range(calls):
            started = time.perf_counter()
            await litellm.acompletion(model="scripted/oracle", messages=request(i).messages, num_retries=0)
            times.append(time.perf_counter() - started)
        return times

    async def through_gateway() -> list[float]:
        times = []
        for i in range(calls):
            started = time.perf_counter()
            await gateway.call(request(i))
            times.append(time.perf_counter() - started)
        return times

    base, gated = asyncio.run(direct()), asyncio.run(through_gateway())
    actor = ray.remote(num_cpus=0)(GatewayActor).remote([settings.model, settings.embedder])
    ray.get(actor.call.remote(request(0)))
    remote = []
    for i in range(calls):
        started = time.perf_counter()
        ray.get(actor.call.remote(request(i)))
        remote.append(time.perf_counter() - started)
    ray.kill(actor)
    return {"litellm direct p50 ms": 1000 * statistics.median(base),
            "gateway in-process p50 ms": 1000 * statistics.median(gated),
            "gateway overhead p50 ms": 1000 * (statistics.median(gated) - statistics.median(base)),
            "gateway via Ray actor p50 ms": 1000 * statistics.median(remote),
            "Ray hop p50 ms": 1000 * (statistics.median(remote) - statistics.median(gated))}


def retrieval(sizes: list[int], queries: int, dim: int = 384, top_k: int = 5) -> list[dict[str, Any]]:
    import lancedb
    from lancedb.index import IvfHnswSq

    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        db = lancedb.connect(directory)
        for size in sizes:
            vectors = rng.standard_normal((size, dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            table = db.create_table(f"lessons_{size}", data=[
                {"memory_id": str(i), "importance": 1.0, "vector": v} for i, v in enumerate(vectors)])
            probes = vectors[rng.integers(0, size, queries)] + 0.01
            indexed = [False] + ([True] if size >= 100_000 else [])
            python_vectors = vectors.tolist()
            scan_times = []
            for q in probes[: max(3, queries // 10)]:
                started = time.perf_counter()
                query = q.tolist()
                scores = [sum(a * b for a, b in zip(query, v, strict=True)) for v in python_vectors]
                sorted(range(size), key=scores.__getitem__, reverse=True)[:top_k]
                scan_times.append(time.perf_counter() - started)
            for with_index in indexed:
                if with_index:
                    table.create_index("vector", config=IvfHnswSq(distance_type="cosine"))
                times = []
                for q in probes:
                    started = time.perf_counter()
                    table.search(q).distance_type("cosine").limit(top_k).to_list()
                    times.append(time.perf_counter() - started)
                rows.append({"lessons": size, "search": "IVF-HNSW index" if with_index else "flat",
                             "lancedb p50 ms": 1000 * statistics.median(times),
                             "python scan p50 ms": 1000 * statistics.median(scan_times),
                             "speed-up": statistics.median(scan_times) / statistics.median(times)})
    return rows


def local_model_tokens(tasks: int) -> dict[str, float]:
    import http.client
    import json

    import polars as pl

    from harness.model_server import LocalModelServer
    from harness.run import run

    settings = _settings(f"stream.num_tasks={tasks}")
    with tempfile.TemporaryDirectory() as directory:
        run(settings, Path(directory))
        calls = pl.read_parquet(Path(directory) / "llm_calls" / "*.parquet")
        episodes = pl.read_parquet(Path(directory) / "episodes" / "*.parquet")
    harness_rate = calls["completion_tokens"].sum() / calls["latency_s"].sum()
    assert settings.model.local_server is not None
    system = settings.variant.kwargs()["system_prompt"]
    with tempfile.TemporaryDirectory() as directory, \
            LocalModelServer(settings.model.local_server, Path(directory) / "server.log") as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)  # kept alive

        def ask(question: str) -> int:
            messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
            body = {"model": settings.model.local_server.alias, **settings.model.params, "messages": messages}
            connection.request("POST", "/v1/chat/completions", json.dumps(body),
                               {"Content-Type": "application/json"})
            return int(json.loads(connection.getresponse().read())["usage"]["completion_tokens"])

        ask("Hello")  # the harness's server was warm after its first call too
        tokens, seconds = 0, 0.0
        for question in episodes.sort("stream_position")["question"]:
            started = time.perf_counter()
            tokens += ask(question)
            seconds += time.perf_counter() - started
    direct_rate = tokens / seconds
    return {"harness completion tok/s": harness_rate, "direct completion tok/s": direct_rate,
            "harness / direct": harness_rate / direct_rate}


def table(rows: list[dict[str, Any]]) -> str:
    import polars as pl

    from harness.report import markdown

    return markdown(pl.DataFrame(rows))


def main(argv: list[str] | None = None) -> None:
    import ray

    import harness  # noqa: F401  (environment for Ray workers)

    parser = argparse.ArgumentParser(prog="python -m harness.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke test)")
    parser.add_argument("--skip-local-model", action="store_true")
    args = parser.parse_args(argv)
    latency = 0.2
    concurrencies = [1, 8] if args.quick else [1, 8, 64, 256]
    ray.init(include_dashboard=False, logging_level="warning")
    try:
        started = time.perf_counter()
        sequential = sequential_loop(5 if args.quick else 20, latency)
        print(f"\n## 1. Throughput, scripted model at {latency * 1000:.0f} ms per call\n")
        print(f"plain sequential loop: {sequential:.2f} episodes/s\n")
        print(table(throughput(concurrencies, 3 if args.quick else 5, latency)))
        print("\n(4. peak memory: the last column, RSS of the driver and all Ray processes during each run)")
        print("\n## 2. Gateway overhead per call (scripted model, no latency)\n")
        print(table([gateway_overhead(50 if args.quick else 300)]))
        print("\n## 3. Memory retrieval, top-5 of 384-dim lessons\n")
        sizes = [1000] if args.quick else [1000, 10_000, 100_000]
        print(table(retrieval(sizes, 20 if args.quick else 100)))
        if not args.skip_local_model:
            print("\n## 5. Real local model: through the harness vs direct\n")
            print(table([local_model_tokens(5 if args.quick else 30)]))
        print(f"\nbench took {time.perf_counter() - started:.0f} s")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
