"""A model's limits hold across gateway replicas: every agent worker has its own gateway, and the
concurrency cap, requests per minute and 429 back-off of a model are still the model's, not each
replica's. Replicas here are real Ray actors around `SharedLimits`, as agent workers are."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import ray

from harness.models.limits import ModelLimits, SharedLimits
from tests import tiers


class Replica:
    def __init__(self, limits: str) -> None:
        self.limits = SharedLimits(ray.get_actor(limits), ray.get_runtime_context().get_actor_name())

    async def burst(self, key: str, capacity: int, calls: int, hold_s: float) -> list[tuple[float, float]]:
        async def one() -> tuple[float, float]:
            async with self.limits.permit(key, capacity):
                entered = time.time()
                await asyncio.sleep(hold_s)
                return entered, time.time()

        return list(await asyncio.gather(*(one() for _ in range(calls))))

    async def churn(self, key: str, capacity: int, callers: int, hold_s: float) -> list[tuple[float, float]]:
        """Callers that want a permit again as soon as they give one back, until `stop`."""
        self.stopped = asyncio.Event()
        intervals: list[tuple[float, float]] = []

        async def caller() -> None:
            while not self.stopped.is_set():
                async with self.limits.permit(key, capacity):
                    entered = time.time()
                    await asyncio.sleep(hold_s)
                    intervals.append((entered, time.time()))

        await asyncio.gather(*(caller() for _ in range(callers)))
        return intervals

    def stop(self) -> None:
        self.stopped.set()

    async def sends(self, key: str, requests_per_minute: int | None, calls: int) -> list[float]:
        async def one() -> float:
            await self.limits.pace(key, requests_per_minute)
            return time.time()

        return list(await asyncio.gather(*(one() for _ in range(calls))))

    def back_off(self, key: str, seconds: float) -> None:
        self.limits.back_off(key, seconds)

    def reclaim(self, key: str) -> None:
        self.limits.reclaim(key)

    def cool_down(self, key: str, seconds: float) -> None:
        self.limits.cool_down(key, seconds)


@pytest.fixture
@tiers.starts_processes
def cluster(ray_session):
    tag = uuid.uuid4().hex[:6]
    limits = ray.remote(num_cpus=0)(ModelLimits).options(name=f"limits {tag}").remote()
    replicas = [ray.remote(num_cpus=0)(Replica).options(name=f"replica {i} {tag}").remote(f"limits {tag}")
                for i in range(2)]
    ray.get([r.__ray_ready__.remote() for r in replicas])
    yield limits, replicas
    for actor in (limits, *replicas):
        ray.kill(actor)


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    level = peak = 0
    for _, change in events:
        level += change
        peak = max(peak, level)
    return peak


def test_the_concurrency_cap_holds_across_replicas(cluster):
    limits, replicas = cluster
    per_replica = ray.get([r.burst.remote("m", 3, 12, 0.05) for r in replicas])
    everything = [interval for calls in per_replica for interval in calls]
    assert len(everything) == 24
    assert most_at_once(everything) <= 3  # a model's cap, not 3 per replica
    assert ray.get(limits.in_use.remote("m")) <= 3


def test_a_busy_replica_hands_permits_to_one_that_waits(cluster):
    """A replica whose callers never stop wanting the model's every permit still gives some up: a
    wait ends because permits are handed over, not because the busy replica runs out of work."""
    limits, (busy, late) = cluster
    churning = busy.churn.remote("shared", 3, 6, 0.05)
    deadline = time.time() + 30
    while ray.get(limits.in_use.remote("shared")) < 3 and time.time() < deadline:
        time.sleep(0.01)
    short = ray.get(late.burst.remote("shared", 3, 3, 0.1), timeout=60)  # a timeout: never handed over
    ray.get(busy.stop.remote())
    long = ray.get(churning)
    assert len(short) == 3
    assert min(start for start, _ in long) < min(start for start, _ in short)
    assert most_at_once(short + long) <= 3


def test_a_lone_replica_passes_its_lease_from_call_to_call_without_asking(cluster):
    limits, replicas = cluster
    ray.get(replicas[0].burst.remote("solo", 4, 40, 0.0))
    asked = ray.get(limits.__ray_call__.remote(lambda self: self.acquisitions))
    assert asked < 10  # not one round trip per call


def test_with_a_single_permit_two_busy_replicas_both_finish(cluster):
    """The local model serves one request at a time: two workers must take turns, never wait forever."""
    _, replicas = cluster
    per_replica = ray.get([r.burst.remote("one-at-a-time", 1, 10, 0.02) for r in replicas], timeout=120)
    assert [len(calls) for calls in per_replica] == [10, 10]
    assert most_at_once([interval for calls in per_replica for interval in calls]) == 1


def test_requests_per_minute_pace_the_model_not_each_replica(cluster):
    _, replicas = cluster
    started = time.time()
    sends = sorted(t for times in ray.get([r.sends.remote("paced", 600, 4) for r in replicas]) for t in times)
    assert len(sends) == 8
    assert sends[-1] - started >= 0.7  # one slot every 0.1 s for the model: 0.7 s, not 0.3 per replica


def test_a_rate_limit_met_by_one_replica_makes_the_other_wait_too(cluster):
    _, replicas = cluster
    ray.get([r.burst.remote("busy", 2, 1, 0.0) for r in replicas])  # both use the model
    ray.get(replicas[0].back_off.remote("busy", 3.0))
    remaining = 0.0
    deadline = time.time() + 10
    while remaining == 0.0 and time.time() < deadline:  # the broadcast travels
        remaining = ray.get(replicas[1].__ray_call__.remote(lambda self: self.limits.local.gate("busy", None)
                                                             .cooldown()))
    assert remaining > 0, "the other replica never heard of the back-off"
    started = time.time()
    [sent] = ray.get(replicas[1].sends.remote("busy", None, 1))
    assert sent - started >= remaining - 0.1


def test_a_restarted_replica_gets_back_what_its_dead_process_held(cluster):
    limits, replicas = cluster
    ray.get(replicas[0].burst.remote("scarce", 2, 2, 0.01))  # keeps both permits leased
    assert ray.get(limits.in_use.remote("scarce")) == 2
    name = ray.get(replicas[0].__ray_call__.remote(lambda self: self.limits.replica))
    ray.get(limits.register.remote(name))  # what a restarted worker does first
    assert ray.get(limits.in_use.remote("scarce")) == 0


def test_a_back_off_before_the_first_send_does_not_lose_the_models_pace():
    from harness.models.limits import LocalLimits

    limits = LocalLimits()
    limits.back_off("m", 0.0)  # knows no rate yet

    async def three_sends() -> float:
        started = time.monotonic()
        for _ in range(3):
            await limits.pace("m", 600)
        return time.monotonic() - started

    assert asyncio.run(three_sends()) >= 0.2  # one slot every 0.1 s still holds
