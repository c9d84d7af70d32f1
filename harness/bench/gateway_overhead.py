"""Section 2 of `python -m harness.bench`: the gateway's own time per call (limits, cache lookup,
record), against calling the same scripted provider through litellm directly
(`harness.models.gateway.direct_completion`), and what holding the limits through the ModelLimits actor
that every replica shares adds.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import ray

from harness.bench.common import bench_settings
from harness.models.gateway import Gateway, direct_completion
from harness.models.limits import ModelLimits, SharedLimits
from harness.models.model_client import CallRequest


def gateway_overhead(calls: int) -> dict[str, float]:
    """p50 ms per call of each way, `calls` calls one after another (Ray must be initialised: the
    shared limits are an actor)."""
    settings = bench_settings("model=scripted")
    gateway = Gateway([settings.model, settings.embedder])
    base, gated = asyncio.run(_direct(calls)), asyncio.run(_through(gateway, calls))
    limits = ray.remote(num_cpus=0)(ModelLimits).remote()
    try:
        replica = Gateway([settings.model, settings.embedder], limits=SharedLimits(limits, "bench replica"))
        shared = asyncio.run(_through(replica, calls))
    finally:
        ray.kill(limits)
    return {"litellm direct p50 ms": 1000 * statistics.median(base),
            "gateway in-process p50 ms": 1000 * statistics.median(gated),
            "gateway overhead p50 ms": 1000 * (statistics.median(gated) - statistics.median(base)),
            "gateway, shared limits p50 ms": 1000 * statistics.median(shared),
            "shared limits cost p50 ms": 1000 * (statistics.median(shared) - statistics.median(gated))}


def _request(i: int) -> CallRequest:
    return CallRequest(model="scripted/oracle", purpose="act", run_id="bench", task_id=f"t{i}", attempt=1,
                       messages=[{"role": "user", "content": f"question {i}"}])


async def _direct(calls: int) -> list[float]:
    times = []
    for i in range(calls):
        started = time.perf_counter()
        await direct_completion("scripted/oracle", _request(i).messages, num_retries=0)
        times.append(time.perf_counter() - started)
    return times


async def _through(gateway: Gateway, calls: int) -> list[float]:
    await gateway.call(_request(-1))  # warm: a shared-limits replica leases its permit here
    times = []
    for i in range(calls):
        started = time.perf_counter()
        await gateway.call(_request(i))
        times.append(time.perf_counter() - started)
    return times
