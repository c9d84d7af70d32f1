"""A call's latency_s is the model's; the harness's own seconds in the send (its code, its task waiting
for a busy event loop) are harness_s: on a busy worker a zero-latency model stays at zero."""

import asyncio
import time

from harness.models.loop_clock import harness_seconds, watch
from tests.models.test_gateway import gateway, request

BLOCK_S = 0.02
"""How long a busy neighbour holds the event loop at each of its steps."""


async def neighbour(steps: int) -> None:
    """Another agent on the same worker, holding the loop with CPU work."""
    for _ in range(steps):
        time.sleep(BLOCK_S)
        await asyncio.sleep(0)


async def calls_beside_neighbours(model_latency_s: float, calls: int = 24, neighbours: int = 5):
    gw = gateway("model.scripted.accuracy=1", f"model.scripted.latency_s={model_latency_s}")
    await gw.call(request())  # litellm's provider registered before the timing starts
    busy = [asyncio.ensure_future(neighbour(20)) for _ in range(neighbours)]
    started = time.perf_counter()
    results = await asyncio.gather(*[gw.call(request(content=f"question {i}")) for i in range(calls)])
    wall = time.perf_counter() - started
    await asyncio.gather(*busy)
    return [r.record for r in results], wall


def test_a_zero_latency_models_calls_on_a_busy_loop_record_the_wait_as_the_harnesss():
    records, wall = asyncio.run(calls_beside_neighbours(0.0))
    assert all(r.error is None for r in records)
    assert max(r.latency_s for r in records) < 0.01
    # Each call waited for the neighbours' blocks (5 x 20 ms a turn) at least once.
    assert min(r.harness_s for r in records) >= BLOCK_S
    assert max(r.harness_s for r in records) <= wall


def test_a_models_own_latency_is_kept_whole_when_the_loop_is_busy():
    records, _ = asyncio.run(calls_beside_neighbours(0.2))
    assert [round(r.latency_s, 2) for r in records] == [0.2] * len(records)
    assert min(r.harness_s for r in records) >= BLOCK_S


def test_without_neighbours_latency_is_the_models_and_the_rest_of_the_call_the_harnesss():
    records, wall = asyncio.run(calls_beside_neighbours(0.1, calls=4, neighbours=0))
    assert [round(r.latency_s, 2) for r in records] == [0.1] * len(records)
    assert all(r.latency_s + r.harness_s <= wall for r in records)


def test_a_tasks_own_seconds_count_its_running_and_its_late_timer_not_its_sleep():
    async def task() -> tuple[float, float]:
        watch(asyncio.get_running_loop())
        await asyncio.sleep(0)  # from here on this task's steps are timed
        started, before = time.perf_counter(), harness_seconds()
        time.sleep(0.03)  # this task's own work
        asyncio.get_running_loop().call_soon(time.sleep, 0.1)  # a neighbour holds the loop 0.1 s
        await asyncio.sleep(0.05)  # "the model": due after 0.05 s, taken up 0.05 s late at the earliest
        return harness_seconds() - before, time.perf_counter() - started

    own, wall = asyncio.run(task())
    # Not its own: the 0.05 s until the timer was due.
    assert 0.03 + 0.05 - 0.005 <= own <= wall - 0.05 + 0.005
