"""`python -m harness.bench` with no measurement named: the harness, not the model, measured side by
side in one run, one table per section (`--quick`: smaller sizes).

1. Throughput of agent runs through the real harness on a scripted model, against the ideal and a
   sequential loop, with the CPU every process spent per model call (harness/bench/throughput.py).
2. The gateway's overhead per call, against litellm direct (harness/bench/gateway_overhead.py).
3. Memory retrieval at 1k, 10k and 100k lessons: the memory's own recall against NumPy brute force
   and LanceDB (harness/bench/retrieval.py).
4. Peak memory (RSS of the driver and every Ray process) during each throughput run (section 1's
   last column).
5. With the real local model: completion tokens per second through the gateway against the same
   server called directly (harness/bench/local_model.py).
6. A memory grown write by write, as an agent grows it, against the same lessons written in one go
   (harness/bench/grown_memory.py).
7. Sweeps and one-job runs through the command line on an HTTP model at 200 ms per call: wall against
   the model-bound ideal, time to the first call, peak memory, CPU per call (harness/bench/sweep.py).
"""

from __future__ import annotations

import time

import ray

from harness.bench import sweep
from harness.bench.common import table
from harness.bench.gateway_overhead import gateway_overhead
from harness.bench.grown_memory import grown_memory
from harness.bench.local_model import local_model_tokens
from harness.bench.retrieval import retrieval
from harness.bench.throughput import sequential_loop, throughput

LATENCY_S = 0.2
"""The scripted model's seconds per call in section 1."""


def run(quick: bool, skip_local_model: bool) -> None:
    ray.init(include_dashboard=False, logging_level="warning")
    try:
        started = time.perf_counter()
        _throughput(quick)
        print("\n## 2. Gateway overhead per call (scripted model, no latency)\n")
        print(table([gateway_overhead(50 if quick else 300)]))
        print("\n## 3. Memory retrieval, top-5 of 384-dim lessons: the memory's and LanceDB's vs NumPy\n")
        print(table(retrieval([1000] if quick else [1000, 10_000, 100_000], 20 if quick else 100)))
        if not skip_local_model:
            print("\n## 5. Real local model: through the gateway vs the server directly, interleaved\n")
            print(table([local_model_tokens(3 if quick else 15)]))
        print("\n## 6. Memory grown write by write, as an agent grows it, vs written in one go\n")
        print(table(grown_memory([300] if quick else [1000, 10_000], 20 if quick else 100)))
        print("\n(grown: searched after each of the last tenth of its tasks, every point of its compaction"
              " cycle; one go: the same lessons\n written at once, with a fresh index where the grown one has"
              " one; before: an add per lesson and an update per recall,\n nothing compacted, as the memory"
              " wrote until it compacted its table, measured up to 1,000 lessons only)")
        print("\n## 7. Sweeps and one-job runs through the CLI, HTTP model at 200 ms per call\n")
        sweep.section(quick)
        print(f"\nbench took {time.perf_counter() - started:.0f} s")
    finally:
        ray.shutdown()


def _throughput(quick: bool) -> None:
    """Sections 1 and 4: by concurrency, then by gateway replicas."""
    sequential = sequential_loop(5 if quick else 20, LATENCY_S)
    print(f"\n## 1. Throughput, scripted model at {LATENCY_S * 1000:.0f} ms per call\n")
    print(f"plain sequential loop: {sequential:.2f} episodes/s\n")
    tasks_per_run = 3 if quick else 10
    print(table(throughput([1, 8] if quick else [1, 8, 64, 256], tasks_per_run, LATENCY_S)))
    replicas_at = 8 if quick else 64
    print(f"\n### Throughput vs gateway replicas (one per agent worker), {replicas_at} agent runs\n")
    print(table([row for workers in ([1, 2] if quick else [1, 2, 4])
                 for row in throughput([replicas_at], tasks_per_run, LATENCY_S,
                                       extra=(f"ray.num_workers={workers}",))]))
    print("\n(CPU per call: user + system seconds of the driver and all Ray processes over the run,"
          " start-up included, / the run's model calls;\n while running: the same from the first"
          " episode's start to the last one's end;\n 4. peak memory: the last column, RSS of the"
          " same processes during each run)")
